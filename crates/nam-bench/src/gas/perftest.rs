//! The baseline: `ucx_perftest` on the same transport, run in the same invocation.

use super::measure::Op;
use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What `ucx_perftest` reported on its `Final:` line.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Baseline {
    /// Mean latency per iteration, microseconds.
    pub latency_us_avg: f64,
    /// Median latency per iteration, microseconds.
    pub latency_us_p50: f64,
    /// Overall bandwidth, MB/s (MB = 2^20 bytes).
    pub bandwidth_mb_s: f64,
    /// Overall message rate.
    pub msg_rate: f64,
}

/// The perftest test that corresponds to `op`.
pub fn test_name(op: Op) -> &'static str {
    match op {
        Op::Put => "ucp_put_bw",
        Op::Get => "ucp_get",
        Op::Fadd => "ucp_fadd",
    }
}

use crate::limits::PERFTEST_RUN_TIMEOUT as RUN_TIMEOUT;

/// Waits for `child` until `deadline`; kills it and returns `false` if it is still running.
fn wait_until(child: &mut std::process::Child, deadline: Instant) -> bool {
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The `ucx_perftest` of the UCX nam is built against (the same release, so that the ratio
/// compares nam with its own transport), or the one on `PATH` if that UCX has none.
fn perftest() -> std::path::PathBuf {
    let beside = std::path::Path::new(nam_ucx::UCX_BIN_DIR).join("ucx_perftest");
    if beside.is_file() {
        beside
    } else {
        "ucx_perftest".into()
    }
}

/// Runs a `ucx_perftest` server and client with `UCX_TLS=transports` and parses the result.
pub fn run(op: Op, size: u64, iters: u64, transports: &str) -> Result<Baseline> {
    let port = free_port()?.to_string();
    let mut server = Command::new(perftest())
        .args(["-p", &port])
        .env("UCX_TLS", transports)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot run {} (scripts/setup.sh installs it with UCX)", perftest().display()))?;
    let size_arg = size.max(8).to_string();
    let iters_arg = iters.to_string();
    let warmup = (iters / 10).clamp(1, 1000).to_string();
    // Every run has a deadline: ucx_perftest itself can stall (seen over TCP with ucp_get).
    let deadline = Instant::now() + RUN_TIMEOUT;
    let result = loop {
        let mut client = Command::new(perftest())
            .args(["127.0.0.1", "-p", &port, "-t", test_name(op), "-s", &size_arg, "-n", &iters_arg, "-w", &warmup])
            .env("UCX_TLS", transports)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let finished = wait_until(&mut client, deadline);
        let mut stdout = Vec::new();
        if let Some(mut out) = client.stdout.take() {
            let _ = std::io::Read::read_to_end(&mut out, &mut stdout);
        }
        let parsed = parse_final(BufReader::new(&stdout[..]));
        if !finished {
            break Err(anyhow::anyhow!(
                "ucx_perftest {} at {size} B did not finish within {RUN_TIMEOUT:?}",
                test_name(op)
            ));
        }
        if parsed.is_ok() || Instant::now() > deadline {
            break parsed;
        }
        // The server may not be listening yet.
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = server.kill();
    let _ = server.wait();
    result
}

/// The median of each field over repeated runs.
pub fn median(runs: Vec<Baseline>) -> Baseline {
    let mid = |f: fn(&Baseline) -> f64| crate::harness::stats::middle_of(&runs, f);
    Baseline {
        latency_us_avg: mid(|b| b.latency_us_avg),
        latency_us_p50: mid(|b| b.latency_us_p50),
        bandwidth_mb_s: mid(|b| b.bandwidth_mb_s),
        msg_rate: mid(|b| b.msg_rate),
    }
}

/// Parses the `Final:` line: iterations, latency p50/avg/overall, bandwidth avg/overall,
/// message rate avg/overall.
fn parse_final(output: impl BufRead) -> Result<Baseline> {
    for line in output.lines() {
        let line = line?;
        let Some(rest) = line.trim().strip_prefix("Final:") else { continue };
        let numbers: Vec<f64> = rest.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        if numbers.len() < 8 {
            bail!("unexpected ucx_perftest output: {line}");
        }
        return Ok(Baseline {
            latency_us_p50: numbers[1],
            latency_us_avg: numbers[2],
            bandwidth_mb_s: numbers[5],
            msg_rate: numbers[7],
        });
    }
    bail!("ucx_perftest printed no Final line")
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_the_final_line() {
        let text = "junk\nFinal:                100000      0.040     0.038     0.038      198.22     198.22    25980575    25980575\n";
        let b = super::parse_final(text.as_bytes()).unwrap();
        assert_eq!(
            (b.latency_us_p50, b.latency_us_avg, b.bandwidth_mb_s, b.msg_rate),
            (0.040, 0.038, 198.22, 25980575.0)
        );
        assert!(super::parse_final("nothing".as_bytes()).is_err());
    }
}
