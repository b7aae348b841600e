//! SAXPY through the explicit API, computed in place in the cache: `y.zip_chunks_mut(x)`
//! hands the loop a slice of x and of y for each line (no per-element lookup, no copy out
//! of the cache). y's lines are allocated and stay dirty; x is read-only, so once the sets
//! are full of dirty y lines its misses are served from a staging copy without evicting
//! them (`FarMemory::for_each_piece`). The local baseline is the paged workload's `Saxpy`
//! loop over a `Vec`, run before each repetition.
//!
//! The timed part is what the local loop does: the passes and the checksum. The flush that
//! then writes y back to the servers is timed on its own and reported beside the slowdown
//! (`flush_ms`, `slowdown_with_flush`), not in it, for three reasons: the paged rows do not
//! time the write-back of the dirty pages their region holds at the end either; a program
//! needs the flush only to hand y to another process (its own reads see the cached lines);
//! and Mao 2020's SAXPY (§7.5) times the kernel over a write-back cache, whose dirty lines
//! stay in it.

use super::explicit_paired::{paired, FarRun};
use super::{workloads::Saxpy, Run, Transport, WorkloadKind};
use anyhow::{ensure, Result};
use nam_client::Client;
use nam_farmem::{DestMode, FarArray, FarConfig, FarMemory, PrefetchConfig};
use std::sync::Arc;
use std::time::Instant;

/// Settings of one explicit row.
pub struct Setting {
    /// Local memory as a fraction of the footprint.
    pub fraction: f64,
    /// Prefetcher on.
    pub prefetch: bool,
    /// Paired repetitions (the row reports medians).
    pub repeats: usize,
    /// Cache line size (None: the default).
    pub line_bytes: Option<u64>,
}

impl Setting {
    /// The cache configuration for a footprint of `bytes`.
    pub fn config(&self, bytes: u64) -> FarConfig {
        let mut config = FarConfig::new(bytes, ((bytes as f64 * self.fraction) as u64).max(1 << 20));
        config.prefetch = PrefetchConfig { enabled: self.prefetch, ..PrefetchConfig::default() };
        if let Some(line) = self.line_bytes {
            config.line_bytes = line;
        }
        config
    }
}

/// Writes SAXPY's initial x and y (the values `Saxpy::init` writes) into far memory.
fn init(far: &mut FarMemory, x: &FarArray<f32>, y: &FarArray<f32>) -> Result<()> {
    const CHUNK: usize = 4096;
    let mut buf = vec![0f32; CHUNK];
    for start in (0..x.len()).step_by(CHUNK) {
        let len = CHUNK.min(x.len() - start);
        for (i, v) in buf[..len].iter_mut().enumerate() {
            *v = ((start + i) % 1000) as f32 * 0.001;
        }
        x.write(far, start, &buf[..len])?;
        buf[..len].fill(1.0);
        y.write(far, start, &buf[..len])?;
    }
    far.invalidate()?;
    Ok(())
}

/// The passes and the checksum `Saxpy::run` computes (y's lines stay dirty in the cache).
fn run(far: &mut FarMemory, x: &FarArray<f32>, y: &FarArray<f32>, passes: usize) -> Result<u64> {
    let phases = std::env::var_os("NAM_SAXPY_PHASES").is_some();
    if phases {
        eprintln!("start {}", thread_usage());
    }
    let t = Instant::now();
    for _ in 0..passes {
        y.zip_chunks_mut(far, x, 0..x.len(), DestMode::Update, |_, xs, ys| {
            for (y, x) in ys.iter_mut().zip(xs) {
                *y += 0.5 * *x;
            }
        })?;
        if phases {
            eprintln!("pass {:.1} ms {}", t.elapsed().as_secs_f64() * 1e3, thread_usage());
        }
    }
    let sum = checksum(far, y)?;
    if phases {
        eprintln!("checksum {:.1} ms {}", t.elapsed().as_secs_f64() * 1e3, thread_usage());
    }
    Ok(sum)
}

/// The checksum `Saxpy::run` computes over y.
fn checksum(far: &mut FarMemory, y: &FarArray<f32>) -> Result<u64> {
    let mut sum = 0u64;
    y.for_each_chunk(far, 0..y.len(), |start, ys| {
        // Elements at multiples of 97, as the local checksum takes them.
        for i in (start.next_multiple_of(97)..start + ys.len()).step_by(97) {
            sum = sum.wrapping_mul(31).wrapping_add(ys[i - start].to_bits() as u64);
        }
    })?;
    Ok(sum)
}

fn far_once(client: &Arc<Client>, w: &Saxpy, setting: &Setting) -> Result<FarRun> {
    let mut far = FarMemory::new(client.clone(), setting.config((w.n * 8) as u64))?;
    let x = far.alloc_array::<f32>(w.n)?;
    let y = far.alloc_array::<f32>(w.n)?;
    init(&mut far, &x, &y)?;
    let before = far.stats();
    let t = Instant::now();
    let sum = run(&mut far, &x, &y, w.passes)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let after = far.stats();
    let t = Instant::now();
    far.flush()?;
    let flush_ms = t.elapsed().as_secs_f64() * 1e3;
    if std::env::var_os("NAM_SAXPY_PHASES").is_some() {
        eprintln!("flush {flush_ms:.1} ms {}", thread_usage());
    }
    // The flush must have put y on the servers: read it back through an emptied cache.
    far.invalidate()?;
    let written_back = checksum(&mut far, &y)?;
    ensure!(
        written_back == sum,
        "explicit SAXPY: y read back after the flush ({written_back:#x}) differs from y before it ({sum:#x})"
    );
    far.spans().release()?;
    Ok(FarRun { ms, sum, stats: super::fof_explicit::delta(before, after), flush_ms: Some(flush_ms) })
}

/// Measures SAXPY over the explicit API against the local `Saxpy` loop, every setting in
/// the same paired rounds; one row per setting.
pub fn measure(
    client: Arc<Client>,
    (transport, servers): (Transport, usize),
    w: &Saxpy,
    settings: &[Setting],
) -> Result<Vec<Run>> {
    let measured = paired(
        "explicit SAXPY",
        repeats(settings),
        settings.len(),
        || super::run_local(w),
        |i| far_once(&client, w, &settings[i]),
    )?;
    let items = (w.n * w.passes) as f64;
    Ok(rows(WorkloadKind::SaxpyExplicit, (transport, servers), settings, measured, items))
}

/// One row per setting of an explicit workload measured by [`paired`], with `items` per run.
pub fn rows(
    kind: WorkloadKind,
    (transport, servers): (Transport, usize),
    settings: &[Setting],
    measured: Vec<super::explicit_paired::Paired>,
    items: f64,
) -> Vec<Run> {
    settings
        .iter()
        .zip(measured)
        .map(|(s, m)| {
            let mut r = Run::basic(kind, s.fraction, s.prefetch, servers, transport, m.local_ms, m.far_ms, items);
            r.explicit(&m, s);
            r
        })
        .collect()
}

/// The repetitions of settings measured together (the same for all of them).
pub fn repeats(settings: &[Setting]) -> usize {
    settings.iter().map(|s| s.repeats).max().unwrap_or(1)
}

/// This thread's CPU time and minor page faults so far (for `NAM_SAXPY_PHASES`).
fn thread_usage() -> String {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    let cpu =
        (u.ru_utime.tv_sec + u.ru_stime.tv_sec) as f64 * 1e3 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) as f64 / 1e3;
    format!(
        "(thread cpu {cpu:.1} ms, sys {:.1} ms, minflt {})",
        u.ru_stime.tv_sec as f64 * 1e3 + u.ru_stime.tv_usec as f64 / 1e3,
        u.ru_minflt
    )
}
