//! Tables, JSON, CSV, plots and the Markdown report of a benchmark run, and the targets.

use super::measure::{Op, Point};
use super::perftest::{test_name, Baseline};
use super::Transport;
use anyhow::Result;
use nam_proto::size::format_size;
use std::fmt::Write as _;
use std::path::Path;

/// One measured point and its baseline.
pub struct Row {
    /// nam's measurement.
    pub point: Point,
    /// ucx_perftest's, with --vs-ucx.
    pub baseline: Option<Baseline>,
    /// Transport name.
    pub transport: &'static str,
}

impl Row {
    fn latency_ratio(&self) -> Option<f64> {
        self.baseline.map(|b| self.point.latency_us_avg / b.latency_us_avg)
    }
    fn bandwidth_ratio(&self) -> Option<f64> {
        self.baseline.map(|b| self.point.bandwidth_mb_s / b.bandwidth_mb_s)
    }
    /// The `--json` object.
    pub fn json(&self) -> serde_json::Value {
        let p = &self.point;
        let mut v = serde_json::json!({
            "op": p.op, "size": p.size, "iters": p.iters, "transport": self.transport,
            "latency_us_avg": p.latency_us_avg, "latency_us_p50": p.latency_us_p50, "latency_us_p99": p.latency_us_p99,
            "bandwidth_mb_s": p.bandwidth_mb_s, "msg_rate": p.msg_rate,
        });
        if let Some(b) = &self.baseline {
            v["ucx_test"] = test_name(p.op).into();
            v["ucx_latency_us_avg"] = b.latency_us_avg.into();
            v["ucx_latency_us_p50"] = b.latency_us_p50.into();
            v["ucx_bandwidth_mb_s"] = b.bandwidth_mb_s.into();
            v["latency_ratio"] = self.latency_ratio().into();
            v["bandwidth_ratio"] = self.bandwidth_ratio().into();
        }
        v
    }
}

/// A target of issue 2 checked against this run.
pub struct Verdict {
    /// What is compared.
    pub what: String,
    /// nam / ucx_perftest.
    pub ratio: f64,
    /// The bound.
    pub limit: f64,
    /// Whether the ratio is on the right side of the bound.
    pub met: bool,
}

/// The targets that apply to the rows measured: 8-byte get latency ≤ 1.5× over shared
/// memory, fetch-add latency ≤ 1.25×, put/get bandwidth at ≥ 1 MiB ≥ 0.9×.
pub fn targets(rows: &[Row], transport: Transport) -> Vec<Verdict> {
    let mut verdicts = Vec::new();
    for row in rows {
        let p = &row.point;
        if p.op == Op::Get && p.size == 8 && transport == Transport::Shm {
            if let Some(ratio) = row.latency_ratio() {
                verdicts.push(Verdict { what: "8 B get latency".into(), ratio, limit: 1.5, met: ratio <= 1.5 });
            }
        }
        if p.op == Op::Fadd {
            if let Some(ratio) = row.latency_ratio() {
                verdicts.push(Verdict { what: "fetch-add latency".into(), ratio, limit: 1.25, met: ratio <= 1.25 });
            }
        }
        if matches!(p.op, Op::Put | Op::Get) && p.size >= 1 << 20 {
            if let Some(ratio) = row.bandwidth_ratio() {
                let what = format!("{} bandwidth at {}", p.op.name(), format_size(p.size));
                verdicts.push(Verdict { what, ratio, limit: 0.9, met: ratio >= 0.9 });
            }
        }
    }
    verdicts
}

fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    let with_ucx = rows.iter().any(|r| r.baseline.is_some());
    let _ = write!(s, "| op | size | iters | avg us | p50 us | p99 us | MB/s | Mmsg/s |");
    if with_ucx {
        let _ = write!(s, " ucx test | ucx avg us | ucx p50 us | ucx MB/s | latency ratio (avg) | bandwidth ratio |");
    }
    s.push('\n');
    s.push_str(if with_ucx {
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|\n"
    } else {
        "|---|---:|---:|---:|---:|---:|---:|---:|\n"
    });
    for r in rows {
        let p = &r.point;
        let _ = write!(
            s,
            "| {} | {} | {} | {:.4} | {:.3} | {:.3} | {:.1} | {:.3} |",
            p.op.name(),
            format_size(p.size),
            p.iters,
            p.latency_us_avg,
            p.latency_us_p50,
            p.latency_us_p99,
            p.bandwidth_mb_s,
            p.msg_rate / 1e6
        );
        if let Some(b) = &r.baseline {
            let _ = write!(
                s,
                " {} | {:.4} | {:.3} | {:.1} | {:.2} | {:.2} |",
                test_name(p.op),
                b.latency_us_avg,
                b.latency_us_p50,
                b.bandwidth_mb_s,
                r.latency_ratio().unwrap_or(0.0),
                r.bandwidth_ratio().unwrap_or(0.0)
            );
        }
        s.push('\n');
    }
    s
}

fn verdict_lines(verdicts: &[Verdict]) -> String {
    let mut s = String::new();
    for v in verdicts {
        let bound = if v.limit >= 1.0 { format!("<= {:.2}x", v.limit) } else { format!(">= {:.2}x", v.limit) };
        let _ = writeln!(
            s,
            "- {}: {:.2}x ucx_perftest (target {bound}): {}",
            v.what,
            v.ratio,
            if v.met { "met" } else { "MISSED" }
        );
    }
    s
}

/// Prints the table, the targets and the extra checks.
pub fn print_table(rows: &[Row], verdicts: &[Verdict], extras: &[String]) {
    print!("{}", table(rows));
    if !verdicts.is_empty() {
        println!("\ntargets:\n{}", verdict_lines(verdicts));
    }
    for e in extras {
        println!("{e}");
    }
}

/// Writes the points as CSV.
pub fn write_csv(path: &Path, rows: &[Row]) -> Result<()> {
    let mut s = String::from("op,size,iters,transport,latency_us_p50,latency_us_p99,bandwidth_mb_s,msg_rate,ucx_latency_us_p50,ucx_bandwidth_mb_s\n");
    for r in rows {
        let p = &r.point;
        let (bl, bb) = r
            .baseline
            .map_or((String::new(), String::new()), |b| (b.latency_us_p50.to_string(), b.bandwidth_mb_s.to_string()));
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{bl},{bb}",
            p.op.name(),
            p.size,
            p.iters,
            r.transport,
            p.latency_us_p50,
            p.latency_us_p99,
            p.bandwidth_mb_s,
            p.msg_rate
        );
    }
    std::fs::write(path, s)?;
    Ok(())
}

/// Plots latency (and bandwidth for put/get) against size, nam beside ucx_perftest.
pub fn plot(path: &Path, rows: &[Row], transport: Transport) -> Result<()> {
    use crate::harness::plot::{line_chart, Scales, Series};
    let mut latency: Vec<Series> = Vec::new();
    let mut bandwidth: Vec<Series> = Vec::new();
    for op in [Op::Put, Op::Get, Op::Fadd] {
        let of_op: Vec<&Row> = rows.iter().filter(|r| r.point.op == op).collect();
        if of_op.is_empty() {
            continue;
        }
        let series = |f: &dyn Fn(&Row) -> Option<f64>| {
            of_op.iter().filter_map(|r| Some((r.point.size as f64, f(r)?))).collect::<Vec<_>>()
        };
        latency.push((format!("nam {} p50", op.name()), series(&|r| Some(r.point.latency_us_p50))));
        bandwidth.push((format!("nam {}", op.name()), series(&|r| Some(r.point.bandwidth_mb_s))));
        if of_op.iter().any(|r| r.baseline.is_some()) {
            latency.push((format!("{} p50", test_name(op)), series(&|r| r.baseline.map(|b| b.latency_us_p50))));
            bandwidth.push((test_name(op).to_string(), series(&|r| r.baseline.map(|b| b.bandwidth_mb_s))));
        }
    }
    let log = Scales { log_x: true, log_y: true };
    let title = format!("nam vs ucx_perftest over {}", transport.ucx_tls());
    line_chart(path, &format!("latency, {title}"), "bytes per operation", "latency (us)", &latency, log)?;
    let bw_path =
        path.with_file_name(format!("{}-bandwidth.png", path.file_stem().unwrap_or_default().to_string_lossy()));
    line_chart(&bw_path, &format!("bandwidth, {title}"), "bytes per operation", "MB/s", &bandwidth, log)
}

/// Writes the Markdown section for docs/benchmarks.md.
pub fn write_markdown(
    path: &Path,
    rows: &[Row],
    verdicts: &[Verdict],
    extras: &[String],
    transport: Transport,
) -> Result<()> {
    let mut s = String::new();
    let _ = writeln!(s, "### Transport `{}` (UCX_TLS={})\n", super::Transport::name(transport), transport.ucx_tls());
    let _ = writeln!(s, "Command: `{}`\n", crate::harness::docs::command_line());
    s.push_str(&table(rows));
    if !verdicts.is_empty() {
        let _ = writeln!(s, "\nTargets:\n\n{}", verdict_lines(verdicts));
    }
    for e in extras {
        let _ = writeln!(s, "- {e}");
    }
    std::fs::write(path, s)?;
    Ok(())
}
