//! `nam-bench ecc`: Abeyratne 2017's Table 4.4 rerun on every core against one thread, and
//! RS(19,16) encode+decode throughput per core against a textbook bit-serial
//! implementation (both measured by `nam_ecc::bench` in the same run).

use crate::limits::ECC_TRIALS_DEFAULT;
use anyhow::Context;

/// Arguments of `nam-bench ecc`.
#[derive(clap::Args, Debug)]
pub struct EccBenchArgs {
    /// Trials per Table 4.4 row.
    #[arg(long, default_value_t = ECC_TRIALS_DEFAULT)]
    trials: u64,
    /// Random seed; the same seed gives the same numbers.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Worker threads [default: every core].
    #[arg(long)]
    threads: Option<usize>,
    /// Data bytes of the throughput buffer.
    #[arg(long, default_value_t = 64 << 20)]
    bench_bytes: usize,
    /// Print JSON instead of the report.
    #[arg(long)]
    json: bool,
    /// Print the report as markdown only (without the CPU line before it).
    #[arg(long)]
    markdown: bool,
}

/// Runs `nam-bench ecc`.
pub fn run(args: EccBenchArgs) -> anyhow::Result<()> {
    let report =
        nam_ecc::bench::run_bench(args.trials, args.bench_bytes, args.seed, args.threads).context("nam-bench ecc")?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        if !args.markdown {
            println!("CPU: {}\n", report.cpu);
        }
        print!("{}", report.to_markdown());
    }
    Ok(())
}
