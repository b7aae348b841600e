//! nam's side of the benchmark: latency of blocking operations and bandwidth of a window
//! of non-blocking ones, through the real client library.

use super::clock::Clock;
use crate::harness::stats::middle_of;
use anyhow::Result;
use nam_client::{Allocation, Client};

/// What is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// One-sided put.
    Put,
    /// One-sided get.
    Get,
    /// 64-bit fetch-and-add.
    Fadd,
}

impl Op {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Get => "get",
            Op::Fadd => "fadd",
        }
    }
}

/// One measured point.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Point {
    /// Operation.
    pub op: Op,
    /// Bytes per operation.
    pub size: u64,
    /// Timed iterations (after warm-up).
    pub iters: u64,
    /// Mean latency of one blocking operation (the clock on some machines ticks in 10 ns
    /// steps, so the mean is the precise figure for short operations).
    pub latency_us_avg: f64,
    /// Median latency of one blocking operation.
    pub latency_us_p50: f64,
    /// 99th percentile latency.
    pub latency_us_p99: f64,
    /// Bandwidth with `window` operations in flight, in MB/s (MB = 2^20 bytes, as
    /// `ucx_perftest` reports).
    pub bandwidth_mb_s: f64,
    /// Operations per second in the bandwidth phase (fadd: in the latency phase).
    pub msg_rate: f64,
}

/// Iterations that keep one size to a fraction of a second.
pub fn iterations_for(size: u64, requested: Option<u64>) -> u64 {
    requested.unwrap_or_else(|| (512 * 1024 * 1024 / size.max(1)).clamp(50, 100_000))
}

/// Measures `op` at `size` bytes.
pub fn measure(
    client: &Client,
    target: &Allocation,
    op: Op,
    size: u64,
    iters: u64,
    window: usize,
    clock: &Clock,
) -> Result<Point> {
    let mut buffer = vec![0xa5u8; size.max(8) as usize];
    let warmup = (iters / 10).clamp(1, 1000);
    let mut samples = Vec::with_capacity(iters as usize);
    // One clock read per operation, each timed from the end of the previous one: the way
    // ucx_perftest times its iterations, so both sides pay the same for the clock.
    let mut last = clock.ticks();
    for i in 0..warmup + iters {
        match op {
            Op::Put => client.put(target, 0, &buffer)?,
            Op::Get => client.get(target, 0, &mut buffer)?,
            Op::Fadd => {
                client.fetch_add(target, 0, 1)?;
            }
        }
        let now = clock.ticks();
        if i >= warmup {
            samples.push(now - last);
        }
        last = now;
    }
    client.flush()?;
    samples.sort_unstable();
    let pick = |q: f64| clock.micros(samples[((samples.len() - 1) as f64 * q).round() as usize]);
    let (p50, p99) = (pick(0.50), pick(0.99));
    let avg = clock.micros(samples.iter().sum::<u64>()) / samples.len() as f64;
    let (bandwidth, rate) = match op {
        Op::Fadd => {
            let total_us = clock.micros(samples.iter().sum());
            let rate = iters as f64 / (total_us / 1e6);
            (rate * 8.0 / (1 << 20) as f64, rate)
        }
        _ => bandwidth(client, target, op, &buffer, iters, window, clock)?,
    };
    Ok(Point {
        op,
        size,
        iters,
        latency_us_avg: avg,
        latency_us_p50: p50,
        latency_us_p99: p99,
        bandwidth_mb_s: bandwidth,
        msg_rate: rate,
    })
}

/// Streams `iters` operations keeping up to `window` in flight; returns (MB/s, ops/s).
/// Puts all read one source buffer (as `ucp_put_bw` does); gets need a slot each, and their
/// slots together stay within [`GET_SLOTS_BYTES_MAX`] so they fit in cache as perftest's one
/// buffer does (16 slots of 2 MiB measured a third of the bandwidth, memory-bound). Every slot
/// is touched before the clock starts, so page faults of fresh memory are not timed.
fn bandwidth(
    client: &Client,
    target: &Allocation,
    op: Op,
    buffer: &[u8],
    iters: u64,
    window: usize,
    clock: &Clock,
) -> Result<(f64, f64)> {
    let size = buffer.len();
    let window = if op == Op::Get { window.min(GET_SLOTS_BYTES_MAX / size).max(1) } else { window };
    let mut slots = if op == Op::Get { vec![0x5au8; size * window] } else { Vec::new() };
    let source = buffer;
    let t0 = clock.ticks();
    let mut done = 0u64;
    while done < iters {
        let batch = window.min((iters - done) as usize);
        let ops: Vec<_> = if op == Op::Put {
            (0..batch).map(|_| client.put_nb(target, 0, source)).collect::<Result<_, _>>()?
        } else {
            slots.chunks_mut(size).take(batch).map(|slot| client.get_nb(target, 0, slot)).collect::<Result<_, _>>()?
        };
        client.wait_all(ops)?;
        done += batch as u64;
    }
    if op == Op::Put {
        client.flush()?;
    }
    let seconds = clock.micros(clock.ticks() - t0) / 1e6;
    let rate = iters as f64 / seconds;
    Ok((rate * size as f64 / (1 << 20) as f64, rate))
}

use crate::limits::GET_SLOTS_BYTES_MAX;

/// The median of each field over repeated measurements of one point.
pub fn median(points: Vec<Point>) -> Point {
    let mid = |f: fn(&Point) -> f64| middle_of(&points, f);
    Point {
        latency_us_avg: mid(|p| p.latency_us_avg),
        latency_us_p50: mid(|p| p.latency_us_p50),
        latency_us_p99: mid(|p| p.latency_us_p99),
        bandwidth_mb_s: mid(|p| p.bandwidth_mb_s),
        msg_rate: mid(|p| p.msg_rate),
        ..points[0].clone()
    }
}
