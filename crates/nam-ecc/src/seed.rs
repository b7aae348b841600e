//! The published numbers of Abeyratne 2017 Table 4.4, for comparison with reruns.
//!
//! These are Abeyratne 2017's values as printed (10 million trials per cell), transcribed so that the
//! command-line tool and the tests can show and check the comparison. They are reference data,
//! never used to produce a result of this crate.

use crate::access::CodeKind;
use crate::fault::{FaultCombination, FaultKind};

/// One cell of Table 4.4, in percent.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SeedCell {
    /// Detected and corrected.
    pub dce_pct: f64,
    /// Detected uncorrectable.
    pub due_pct: f64,
    /// Silent data corruption.
    pub sdc_pct: f64,
}

const DCE: SeedCell = SeedCell { dce_pct: 100.0, due_pct: 0.0, sdc_pct: 0.0 };
const DUE: SeedCell = SeedCell { dce_pct: 0.0, due_pct: 100.0, sdc_pct: 0.0 };

/// Abeyratne 2017's cell for `code` under `combination`, if Table 4.4 has that row (it has no column
/// faults and no faults in more than two chips).
pub fn table_4_4(code: CodeKind, combination: &FaultCombination) -> Option<SeedCell> {
    use FaultKind::*;
    let kinds = combination.kinds();
    if kinds.contains(&Column) || kinds.is_empty() || kinds.len() > 2 {
        return None;
    }
    let single = kinds.len() == 1;
    Some(match code {
        CodeKind::Rs18_16 => DUE,
        CodeKind::Rs19_16 if single => DCE,
        CodeKind::Rs19_16 => DUE,
        CodeKind::Rs36_32 => match kinds {
            [Bit] | [Word] => DCE,
            [Pin, Pin] => SeedCell { dce_pct: 0.0, due_pct: 99.9999, sdc_pct: 0.0001 },
            [Pin, Chip] | [Chip, Chip] => SeedCell { dce_pct: 0.0, due_pct: 99.9969, sdc_pct: 0.0031 },
            _ => DUE,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_row_has_three_cells() {
        for row in FaultCombination::seed_table_rows() {
            for code in CodeKind::ALL {
                let cell = table_4_4(code, &row);
                let cell = cell.unwrap_or(SeedCell { dce_pct: -1.0, due_pct: 0.0, sdc_pct: 0.0 });
                let sum = cell.dce_pct + cell.due_pct + cell.sdc_pct;
                assert!((sum - 100.0).abs() < 1e-9, "{code} {row}");
            }
        }
        assert!(table_4_4(CodeKind::Rs36_32, &"column".parse().unwrap()).is_none());
    }
}
