//! What the generated benchmark pages say about how they were made: the command line.
//! (Design documents carry no generated results; each benchmark writes its own
//! `docs/benchmarks-*.md` page.)

/// This run's command as a report states it: `nam-bench` and the arguments it was given.
pub fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("nam-bench {}", args.join(" "))
}
