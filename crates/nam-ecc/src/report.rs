//! Machine-readable and printable forms of simulation results.

use crate::access::CodeKind;
use crate::fault::{FaultCombination, FaultModel};
use crate::rs::LocationCheck;
use crate::seed::{self, SeedCell};
use crate::sim::{SimConfig, SimResult, Tally};

/// One code under one fault combination, as written by `nam ecc-sim --json` (one JSON object
/// per line).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ResultRecord {
    /// Code name (`rs36_32`, `rs18_16`, `rs19_16`).
    pub code: CodeKind,
    /// Fault combination (`bit`, `pin+chip`, ...).
    pub faults: String,
    /// Trials run.
    pub trials: u64,
    /// Detected and corrected trials.
    pub dce: u64,
    /// Detected uncorrectable trials.
    pub due: u64,
    /// Silently corrupted trials.
    pub sdc: u64,
    /// DCE in percent.
    pub dce_pct: f64,
    /// DUE in percent.
    pub due_pct: f64,
    /// SDC in percent.
    pub sdc_pct: f64,
    /// Random seed of the run.
    pub seed: u64,
    /// Fault placement (`coincident`, `independent`).
    pub placement: String,
    /// Error-value model (`random`, `invert`).
    pub values: String,
    /// Decoder correction radius.
    pub correct_up_to: usize,
    /// Decoder position check (`shortened`, `full_length`).
    pub location_check: String,
    /// Abeyratne 2017's Table 4.4 cell, where the table has one.
    pub seed_table_4_4: Option<SeedCell>,
}

impl ResultRecord {
    /// The record of `result` from a run of `config`.
    pub fn new(config: &SimConfig, result: &SimResult) -> ResultRecord {
        let t = result.tally;
        ResultRecord {
            code: result.code.kind,
            faults: result.combination.to_string(),
            trials: t.trials,
            dce: t.dce,
            due: t.due,
            sdc: t.sdc,
            dce_pct: t.dce_pct(),
            due_pct: t.due_pct(),
            sdc_pct: t.sdc_pct(),
            seed: config.seed,
            placement: config.model.placement.to_string(),
            values: config.model.values.to_string(),
            correct_up_to: result.code.policy.correct_up_to,
            location_check: match result.code.policy.location_check {
                LocationCheck::Shortened => "shortened".into(),
                LocationCheck::FullLength => "full_length".into(),
            },
            seed_table_4_4: seed::table_4_4(result.code.kind, &result.combination),
        }
    }

    /// One line of JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// A percentage as Abeyratne 2017 prints it: `100%`, `0%`, or up to 5 decimals without trailing zeros
/// (never rounding a non-zero count to `0%` or a non-full count to `100%`).
pub fn format_pct(count: u64, trials: u64) -> String {
    if count == 0 || trials == 0 {
        return "0%".into();
    }
    if count == trials {
        return "100%".into();
    }
    let pct = 100.0 * count as f64 / trials as f64;
    let mut s = format!("{pct:.5}");
    while s.ends_with('0') {
        s.pop();
    }
    if s.ends_with('.') {
        s.pop();
    }
    if s == "0" || s == "100" {
        s = format!("{pct:.7}");
    }
    format!("{s}%")
}

/// `DCE: x% DUE: y% SDC: z%`, Abeyratne 2017's cell format.
pub fn format_cell(t: &Tally) -> String {
    format!(
        "DCE: {} DUE: {} SDC: {}",
        format_pct(t.dce, t.trials),
        format_pct(t.due, t.trials),
        format_pct(t.sdc, t.trials)
    )
}

/// Abeyratne 2017's cell in the same format.
pub fn format_seed_cell(c: &SeedCell) -> String {
    let f = |v: f64| {
        let mut s = format!("{v:.4}");
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
        format!("{s}%")
    };
    format!("DCE: {} DUE: {} SDC: {}", f(c.dce_pct), f(c.due_pct), f(c.sdc_pct))
}

/// Whether a rerun agrees with Abeyratne 2017's cell: equal where Abeyratne 2017 says 0 % or 100 %, and
/// otherwise SDC within `sdc_tolerance_pct` percentage points.
pub fn agrees_with_seed(t: &Tally, c: &SeedCell, sdc_tolerance_pct: f64) -> bool {
    let exact = |count: u64, pct: f64| {
        if pct == 0.0 {
            count == 0
        } else if pct == 100.0 {
            count == t.trials
        } else {
            true
        }
    };
    exact(t.dce, c.dce_pct)
        && exact(t.due, c.due_pct)
        && exact(t.sdc, c.sdc_pct)
        && (t.sdc_pct() - c.sdc_pct).abs() <= sdc_tolerance_pct
}

/// Rows of a Table-4.4-shaped markdown table: one row per combination, one column per code,
/// Abeyratne 2017's cell below ours where they differ (marked with `≠`).
pub fn markdown_table(config: &SimConfig, results: &[SimResult]) -> String {
    let codes: Vec<CodeKind> = config.codes.iter().map(|c| c.kind).collect();
    let mut out = String::from("| Failure mode |");
    for c in &codes {
        out.push_str(&format!(" {} |", c.label()));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(codes.len()));
    out.push('\n');
    for combination in &config.combinations {
        out.push_str(&format!("| {} |", combination.seed_label()));
        for code in &codes {
            let cell = find(results, *code, combination);
            out.push_str(&format!(" {} |", cell_text(*code, combination, cell, "<br>")));
        }
        out.push('\n');
    }
    out
}

/// Our cell, followed (after `sep`) by Abeyratne 2017's cell when it differs from ours.
pub fn cell_text(code: CodeKind, combination: &FaultCombination, tally: Option<Tally>, sep: &str) -> String {
    let Some(t) = tally else {
        return String::from("-");
    };
    let ours = format_cell(&t);
    match seed::table_4_4(code, combination) {
        Some(s) if !agrees_with_seed(&t, &s, 0.0) => {
            format!("{ours}{sep}≠ Abeyratne 2017 {}", format_seed_cell(&s))
        }
        Some(_) => format!("{ours} (= Abeyratne 2017)"),
        None => format!("{ours} (not in Abeyratne 2017)"),
    }
}

/// The tally of `code` under `combination` in `results`.
pub fn find(results: &[SimResult], code: CodeKind, combination: &FaultCombination) -> Option<Tally> {
    results.iter().find(|r| r.code.kind == code && &r.combination == combination).map(|r| r.tally)
}

/// The same table as [`markdown_table`] as plain text for a terminal: a row per combination,
/// and below it a `published` row holding Abeyratne 2017's cells where they differ from ours.
pub fn text_table(config: &SimConfig, results: &[SimResult]) -> String {
    let codes: Vec<CodeKind> = config.codes.iter().map(|c| c.kind).collect();
    let width = 34;
    let mut out = format!("{:<16}", "Failure mode");
    for c in &codes {
        out.push_str(&format!(" | {:<width$}", c.label()));
    }
    out.push('\n');
    out.push_str(&"-".repeat(16 + codes.len() * (width + 3)));
    out.push('\n');
    for combination in &config.combinations {
        out.push_str(&format!("{:<16}", combination.seed_label()));
        let mut seed_line = format!("{:<16}", "  published (≠)");
        let mut differs = false;
        for code in &codes {
            let t = find(results, *code, combination).unwrap_or_default();
            out.push_str(&format!(" | {:<width$}", format_cell(&t)));
            let seed_text = match seed::table_4_4(*code, combination) {
                Some(s) if !agrees_with_seed(&t, &s, 0.0) => {
                    differs = true;
                    format_seed_cell(&s)
                }
                Some(_) => "=".to_string(),
                None => "(not in Abeyratne 2017)".to_string(),
            };
            seed_line.push_str(&format!(" | {seed_text:<width$}"));
        }
        out.push('\n');
        if differs || seed::table_4_4(CodeKind::Rs36_32, combination).is_none() {
            out.push_str(seed_line.trim_end());
            out.push('\n');
        }
    }
    out
}

/// Describe the fault model and decoders of a run in one line.
pub fn describe(config: &SimConfig) -> String {
    let FaultModel { placement, values } = config.model;
    let policies: Vec<String> = config
        .codes
        .iter()
        .map(|c| {
            let check = match c.policy.location_check {
                LocationCheck::Shortened => "",
                LocationCheck::FullLength => ", no range check",
            };
            format!("{} t={}{}", c.kind.label(), c.policy.correct_up_to, check)
        })
        .collect();
    format!(
        "{} trials per cell, seed {}, placement {placement}, values {values}, decoders: {}",
        config.trials,
        config.seed,
        policies.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_never_round_to_the_extremes() {
        assert_eq!(format_pct(0, 10), "0%");
        assert_eq!(format_pct(10, 10), "100%");
        assert_eq!(format_pct(31, 1_000_000), "0.0031%");
        assert_eq!(format_pct(999_969, 1_000_000), "99.9969%");
        assert_ne!(format_pct(1, 10_000_000_000), "0%");
        assert_ne!(format_pct(9_999_999_999, 10_000_000_000), "100%");
    }
}
