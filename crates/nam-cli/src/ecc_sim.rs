//! `nam ecc-sim`: rerun the DRAM fault-injection study of Abeyratne 2017 (Table 4.4) with the codes
//! of `nam-ecc`. The benchmark of the codes is `nam-bench ecc`.

use anyhow::{bail, Context};
use nam_ecc::report::{self, ResultRecord};
use nam_ecc::{
    sim, CodeKind, CodeSetup, DataModel, DecodePolicy, ErrorValues, FaultCombination, FaultModel, LocationCheck,
    Placement, SimConfig,
};

/// Trials per combination of a plain run.
const TRIALS_DEFAULT: u64 = 1_000_000;

/// Monte-Carlo fault injection into an x4 rank protected by RS(36,32), RS(18,16) or RS(19,16).
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  nam ecc-sim --table --trials 10000000\n  nam ecc-sim --code rs19_16 --faults chip,chip+chip --trials 100000 --json"
)]
pub struct EccSimArgs {
    /// Codes to simulate, comma-separated: rs36_32, rs18_16, rs19_16 [default: all three].
    #[arg(long, value_delimiter = ',')]
    pub code: Vec<CodeKind>,

    /// Fault combinations, comma-separated; `+` puts faults in different chips
    /// (bit, column, pin, word, chip; e.g. `bit,chip,pin+chip`). `table` = the 14 rows of Abeyratne 2017 Table 4.4,
    /// `all` = every fault alone and every pair.
    #[arg(long, default_value = "table")]
    pub faults: String,

    /// Trials per fault combination [default: 1 000 000].
    #[arg(long)]
    pub trials: Option<u64>,

    /// Random seed; the same seed gives the same numbers.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Print one JSON object per code and fault combination, one per line.
    #[arg(long)]
    pub json: bool,

    /// Print the whole of Table 4.4's layout for all three codes, with Abeyratne 2017's cell under
    /// every cell that differs.
    #[arg(long)]
    pub table: bool,

    /// With --table: print markdown instead of plain text.
    #[arg(long)]
    pub markdown: bool,

    /// Worker threads [default: every core].
    #[arg(long)]
    pub threads: Option<usize>,

    /// Beats of beat-local faults (bit, column, word) in a multi-chip combination:
    /// `coincident` (same beat pair, the reading of Abeyratne 2017) or `independent`.
    #[arg(long, default_value = "coincident")]
    pub placement: Placement,

    /// Error values inside a fault's footprint: `random` (random non-zero per symbol) or
    /// `invert` (every bit flipped).
    #[arg(long, default_value = "random")]
    pub values: ErrorValues,

    /// Correction radius for every selected code [default: Abeyratne 2017's, 1 for RS(36,32) and
    /// RS(19,16), 0 (detect only) for RS(18,16)].
    #[arg(long)]
    pub correct: Option<usize>,

    /// Decoder accepts error positions beyond the shortened code length (models a decoder
    /// without a range check; for studying Abeyratne 2017's SDC numbers).
    #[arg(long)]
    pub no_range_check: bool,

    /// Write a random line per trial instead of the all-zero line (slower, same counts).
    #[arg(long)]
    pub random_data: bool,
}

/// Run `nam ecc-sim`.
pub fn run(args: EccSimArgs) -> anyhow::Result<()> {
    let config = build_config(&args)?;
    let results = sim::run(&config).context("ecc-sim")?;
    if args.json {
        for r in &results {
            println!("{}", ResultRecord::new(&config, r).to_json());
        }
    } else if args.table && args.markdown {
        println!("{}\n", report::describe(&config));
        print!("{}", report::markdown_table(&config, &results));
    } else if args.table {
        println!("{}\n", report::describe(&config));
        print!("{}", report::text_table(&config, &results));
    } else {
        print_rows(&config, &results);
    }
    Ok(())
}

fn build_config(args: &EccSimArgs) -> anyhow::Result<SimConfig> {
    let kinds = if args.table || args.code.is_empty() {
        if args.table && !args.code.is_empty() {
            bail!("--table shows all three codes; leave out --code");
        }
        CodeKind::ALL.to_vec()
    } else {
        let mut kinds = args.code.clone();
        kinds.dedup();
        kinds
    };
    let codes = kinds
        .iter()
        .map(|&kind| {
            let mut policy = match args.correct {
                Some(t) => DecodePolicy::correct(t),
                None => kind.seed_policy(),
            };
            if args.no_range_check {
                policy.location_check = LocationCheck::FullLength;
            }
            CodeSetup { kind, policy }
        })
        .collect();
    let combinations =
        FaultCombination::parse_list(&args.faults).with_context(|| format!("--faults {}", args.faults))?;
    Ok(SimConfig {
        codes,
        combinations,
        trials: args.trials.unwrap_or(TRIALS_DEFAULT),
        seed: args.seed,
        model: FaultModel { placement: args.placement, values: args.values },
        data: if args.random_data { DataModel::Random } else { DataModel::Zero },
        threads: args.threads,
    })
}

fn print_rows(config: &SimConfig, results: &[sim::SimResult]) {
    println!("{}\n", report::describe(config));
    println!(
        "{:<10} {:<14} {:>12} {:>10} {:>10} {:>10}  Abeyratne 2017 Table 4.4",
        "code", "faults", "trials", "DCE", "DUE", "SDC"
    );
    for r in results {
        let t = r.tally;
        let seed = nam_ecc::seed::table_4_4(r.code.kind, &r.combination)
            .map(|c| report::format_seed_cell(&c))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<10} {:<14} {:>12} {:>10} {:>10} {:>10}  {}",
            r.code.kind.name(),
            r.combination.to_string(),
            t.trials,
            report::format_pct(t.dce, t.trials),
            report::format_pct(t.due, t.trials),
            report::format_pct(t.sdc, t.trials),
            seed
        );
    }
}
