//! Output of `nam-bench farmem`: a table row or JSON object per run, the targets of issue 8
//! checked against the runs, a Markdown report and PNG plots.

use super::memcached::Lru;
use super::{FarmemBenchArgs, Run, Transport, WorkloadKind};
use anyhow::Result;
use std::fmt::Write as _;

const HEADER: &str = "| workload | local fraction | prefetch | servers | transport | local ms | far ms | slowdown | far ns/item | misses | prefetched | evictions | p50 us | p99 us |";

fn row(r: &Run) -> String {
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    format!(
        "| {:?}{}{} | {:.2} | {} | {} | {:?} | {:.1} | {:.1} | {:.2}x | {:.0} | {} | {} | {} | {} | {} |",
        r.workload,
        label(r),
        fault_mode_note(r).strip_prefix(", ").map_or(String::new(), |m| format!(" ({m})")),
        r.local_fraction,
        if r.prefetch { "on" } else { "off" },
        r.servers,
        r.transport,
        r.local_ms,
        r.far_ms,
        r.slowdown,
        r.far_ns_per_item,
        r.misses,
        r.prefetches,
        r.evictions,
        opt(r.p50_us),
        opt(r.p99_us)
    )
}

/// What follows the workload's name: line size, metadata cache, medians, bypassed reads,
/// reads in place, memcached's LRU when it is not the classic one.
fn label(r: &Run) -> String {
    let mut out = String::new();
    if r.reclaim == Some(false) {
        out += " without background reclaim";
    }
    if let Some(lru) = r.memcached_lru.filter(|l| *l != Lru::Classic.name()) {
        out += &format!(" with {lru} LRU");
    }
    if let Some(p) = r.page_bytes.filter(|&p| p != 4096) {
        out += &format!(", {} MiB pages", p >> 20);
    }
    if let Some(l) = r.line_bytes {
        out += &format!(" line {l} B");
    }
    if let Some(m) = r.metadata_cache {
        out += &format!(", meta cache {m}");
    }
    if let Some(n) = r.repeats {
        out += &format!(", median of {n}");
    }
    if let Some(b) = r.bypassed {
        out += &format!(", {b} bypassed");
    }
    if let Some(n) = r.in_place.filter(|&n| n > 0) {
        out += &format!(", {n} read in place");
    }
    if let (Some(ms), Some(with)) = (r.flush_ms, r.slowdown_with_flush) {
        out += &format!(", then a flush of {ms:.1} ms: {with:.2}x with it");
    }
    out + &cpu_latency_note(r)
}

/// `", thread faults"` for rows whose faults a handler thread served, else nothing (signal
/// mode is the default).
fn fault_mode_note(r: &Run) -> String {
    r.fault_mode.filter(|m| *m != "signal").map_or(String::new(), |m| format!(", {m} faults"))
}

/// `", CPU latency bound 0 us"` for rows run under `--cpu-latency-us`, else nothing.
fn cpu_latency_note(r: &Run) -> String {
    r.cpu_latency_us.map_or(String::new(), |us| format!(", CPU latency bound {us} us"))
}

/// Prints one run as it finishes.
pub fn progress(args: &FarmemBenchArgs, run: &Run) {
    if args.json {
        println!("{}", serde_json::to_string(run).expect("plain data serializes"));
    } else {
        use std::sync::Once;
        static HEAD: Once = Once::new();
        HEAD.call_once(|| {
            println!("{HEADER}");
            println!("{}", "|---".repeat(14) + "|");
        });
        println!("{}", row(run));
    }
}

/// The lowest and highest of a row's per-round values, for the target lines: `" (rounds
/// 1.52-1.83x)"`, or nothing for fewer than two rounds. On this shared machine a round can
/// move by tens of percent; the spread says whether a target missed by the median is also
/// missed by every round or only by the noise.
fn spread(values: impl IntoIterator<Item = f64>) -> String {
    let values: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
    if values.len() < 2 {
        return String::new();
    }
    let (lo, hi) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    format!(" (rounds {lo:.2}-{hi:.2}x)")
}

/// The targets of issue 8 checked against `runs` (only those the runs cover).
pub fn targets(runs: &[Run]) -> Vec<String> {
    let mut lines = slowdown_targets(runs);
    lines.extend(memcached_targets(runs));
    lines.extend(fault_latency_targets(runs));
    lines.extend(prefetch_targets(runs));
    lines
}

/// "met" or "MISSED".
fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

/// Slowdown against local memory at 50% local memory with the prefetcher on.
fn slowdown_targets(runs: &[Run]) -> Vec<String> {
    let mut lines = Vec::new();
    let at_half =
        |w: WorkloadKind| runs.iter().filter(move |r| r.workload == w && r.prefetch && r.local_fraction == 0.5);
    let targets = [
        (WorkloadKind::Saxpy, 1.25),
        (WorkloadKind::SaxpyExplicit, 1.25),
        (WorkloadKind::Fof, 1.6),
        (WorkloadKind::FofExplicit, 1.6),
        (WorkloadKind::FofHinted, 1.6),
    ];
    for (w, limit) in targets {
        for r in at_half(w) {
            lines.push(format!(
                "{w:?} ({} way in{}{}) at 50% local memory, prefetch on, {} server(s), {:?}: {:.2}x local time{} (target <= {limit}x: {})",
                r.way_in,
                label(r),
                fault_mode_note(r),
                r.servers,
                r.transport,
                r.slowdown,
                spread(r.round_slowdowns.iter().copied()),
                verdict(r.slowdown <= limit)
            ));
        }
    }
    lines
}

/// memcached's throughput against local memory (target at 50% local memory).
fn memcached_targets(runs: &[Run]) -> Vec<String> {
    let mut lines = Vec::new();
    for r in runs.iter().filter(|r| r.workload == WorkloadKind::Memcached && r.prefetch) {
        let (far, resident) = (r.far_bytes.unwrap_or(0), r.far_resident_bytes.unwrap_or(0));
        let target = if r.local_fraction == 0.5 {
            format!(" (target >= 0.6x: {})", verdict(r.throughput_ratio >= 0.6))
        } else {
            String::new()
        };
        lines.push(format!(
            "memcached ({} LRU) at {:.0}% local memory, prefetch on, {} server(s), {:?}: {:.2}x local throughput{}, {} values checked, {:.1} MiB in far memory of which {:.1} MiB ({:.0}%) resident locally at the end; {} misses, {} write-protect faults, {} read misses installed writable{target}",
            r.memcached_lru.unwrap_or(Lru::Classic.name()),
            r.local_fraction * 100.0,
            r.servers,
            r.transport,
            r.throughput_ratio,
            spread(r.round_slowdowns.iter().map(|s| 1.0 / s)),
            r.values_checked.unwrap_or(0),
            far as f64 / 1048576.0,
            resident as f64 / 1048576.0,
            100.0 * resident as f64 / far.max(1) as f64,
            r.misses,
            r.write_faults.unwrap_or(0),
            r.predicted_writes.unwrap_or(0),
        ));
    }
    lines
}

/// Remote page-fault latency, beside a bare get and the kernel's floor measured in the same run.
fn fault_latency_targets(runs: &[Run]) -> Vec<String> {
    let mut lines = Vec::new();
    for r in runs.iter().filter(|r| r.workload == WorkloadKind::FaultLatency) {
        let limit = if r.transport == Transport::Shm { 6.0 } else { 15.0 };
        let p50 = r.p50_us.unwrap_or(f64::NAN);
        let get = r.get_p50_us.unwrap_or(f64::NAN);
        let floor = r.kernel_floor_p50_us.unwrap_or(f64::NAN);
        lines.push(format!(
            "4 KiB remote page fault, {} faults{}, {} server(s), {:?}: median {:.2} us, p99 {:.2} us (target median <= {limit} us: {}); bare 4 KiB get in the same run: median {get:.2} us, p99 {:.2} us, so the fault adds {:.2} us; the kernel alone (an empty handler of the same mode installing a local page, same run): median {floor:.2} us, so a remote fault cannot cost less than {:.2} us here now, and the rest, nam's own work, is {:.2} us",
            r.fault_mode.unwrap_or("signal"),
            cpu_latency_note(r),
            r.servers,
            r.transport,
            p50,
            r.p99_us.unwrap_or(f64::NAN),
            verdict(p50 <= limit),
            r.get_p99_us.unwrap_or(f64::NAN),
            p50 - get,
            floor + get,
            p50 - floor - get,
        ));
        if r.local_fraction < 1.0 {
            let p99 = r.p99_us.unwrap_or(f64::NAN);
            lines.push(format!(
                "4 KiB remote page fault at {:.0}% local memory, {} faults, background reclaim {}, {} server(s), {:?}: p99 {p99:.2} us is {:.2}x the median {p50:.2} us (target p99 <= 3x median, issue 27: {}); of {} pages evicted meanwhile, {} by background reclaim and {} because a fault found the budget full",
                r.local_fraction * 100.0,
                r.fault_mode.unwrap_or("signal"),
                if r.reclaim == Some(false) { "off" } else { "on" },
                r.servers,
                r.transport,
                p99 / p50,
                verdict(p99 <= 3.0 * p50),
                r.evictions,
                r.reclaim_evictions.unwrap_or(0),
                r.full_evictions.unwrap_or(0),
            ));
        }
    }
    lines
}

/// The prefetcher's cost where it does not help: each row with it on against its row with it off.
fn prefetch_targets(runs: &[Run]) -> Vec<String> {
    let mut lines = Vec::new();
    for on in runs.iter().filter(|r| r.prefetch && r.workload != WorkloadKind::FaultLatency) {
        let off = runs.iter().find(|o| {
            !o.prefetch
                && o.workload == on.workload
                && o.local_fraction == on.local_fraction
                && o.servers == on.servers
                && o.transport == on.transport
                && o.line_bytes == on.line_bytes
                && o.fault_mode == on.fault_mode
                && o.page_bytes == on.page_bytes
                && o.memcached_lru == on.memcached_lru
        });
        if let Some(off) = off {
            let ratio = on_off_ratio(on, off);
            lines.push(format!(
                "prefetch on/off, {:?} ({} way in{}{}) at {:.0}% local, {} server(s), {:?}: {:.2}x the time without it{} (target <= 1.05x: {})",
                on.workload,
                on.way_in,
                label(on),
                fault_mode_note(on),
                on.local_fraction * 100.0,
                on.servers,
                on.transport,
                ratio,
                spread(round_on_off_ratios(on, off)),
                verdict(ratio <= 1.05)
            ));
        }
    }
    lines
}

/// How much longer a row with the prefetcher on took than its row with it off. Rows measured
/// in the same rounds (every paged and explicit pair, memcached's) are compared round by
/// round, the median of the rounds' ratios: the two far runs of a round ran one right after
/// the other, so load that comes and goes between rounds cancels, which the ratio of the two
/// rows' medians (each a different round's, maybe) does not do. Otherwise the ratio of their
/// slowdowns, each relative to the local baseline measured beside it.
fn on_off_ratio(on: &Run, off: &Run) -> f64 {
    let rounds = round_on_off_ratios(on, off);
    if rounds.is_empty() {
        return on.slowdown / off.slowdown;
    }
    super::paired::median(rounds)
}

/// The prefetch on/off ratio of each round both rows ran in (none if they were not measured
/// in the same rounds).
fn round_on_off_ratios(on: &Run, off: &Run) -> Vec<f64> {
    if on.round_slowdowns.len() != off.round_slowdowns.len() {
        return Vec::new();
    }
    on.round_slowdowns.iter().zip(&off.round_slowdowns).map(|(a, b)| a / b).collect()
}

/// Prints the targets, appends the Markdown report and draws the plots.
pub fn emit(args: &FarmemBenchArgs, runs: &[Run]) -> Result<()> {
    let checks = targets(runs);
    if !args.json {
        println!();
        for c in &checks {
            println!("{c}");
        }
    }
    if let Some(path) = &args.markdown {
        let mut md = String::new();
        writeln!(md, "\n### `{}`\n", crate::harness::docs::command_line())?;
        writeln!(md, "{HEADER}\n{}|", "|---".repeat(14))?;
        for r in runs {
            writeln!(md, "{}", row(r))?;
        }
        writeln!(md)?;
        for c in &checks {
            writeln!(md, "- {c}")?;
        }
        use std::io::Write;
        std::fs::OpenOptions::new().create(true).append(true).open(path)?.write_all(md.as_bytes())?;
    }
    if let Some(dir) = &args.plot_dir {
        plot(dir, runs)?;
    }
    Ok(())
}

fn plot(dir: &std::path::Path, runs: &[Run]) -> Result<()> {
    use crate::harness::plot::{line_chart, Scales, Series};
    std::fs::create_dir_all(dir)?;
    for w in [WorkloadKind::PointerChase, WorkloadKind::Saxpy, WorkloadKind::Fof, WorkloadKind::Memcached] {
        let mut series: Vec<Series> = Vec::new();
        for prefetch in [true, false] {
            for transport in [Transport::Shm, Transport::Tcp] {
                let mut points: Vec<(f64, f64)> = runs
                    .iter()
                    .filter(|r| r.workload == w && r.prefetch == prefetch && r.transport == transport && r.servers == 1)
                    .map(|r| (r.local_fraction * 100.0, r.slowdown))
                    .collect();
                if points.len() < 2 {
                    continue;
                }
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                series.push((format!("prefetch {}, {transport:?}", if prefetch { "on" } else { "off" }), points));
            }
        }
        if !series.is_empty() {
            let name = format!("{w:?}").to_lowercase();
            let path = dir.join(format!("farmem-{name}.png"));
            let title = format!("{w:?}: time relative to local memory");
            line_chart(
                &path,
                &title,
                "local memory (% of footprint)",
                "slowdown (x local)",
                &series,
                Scales::default(),
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::spread;

    #[test]
    fn spread_gives_the_lowest_and_highest_round_or_nothing_for_one() {
        assert_eq!(spread([1.61, 1.52, 1.83]), " (rounds 1.52-1.83x)");
        assert_eq!(spread([1.61]), "");
        assert_eq!(spread([1.2, f64::NAN]), "", "a missing round is not a spread");
    }
}
