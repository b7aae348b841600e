//! A cheap per-operation clock. `ucx_perftest` times each iteration with the CPU's cycle
//! counter; timing ours with `clock_gettime` would add ~20 ns to sub-100 ns operations and
//! skew the ratio, so on x86-64 we read the TSC too, calibrated against `Instant`.

use std::time::{Duration, Instant};

/// Converts cycle-counter ticks to nanoseconds.
pub struct Clock {
    ns_per_tick: f64,
}

impl Clock {
    /// Calibrates over ~50 ms.
    pub fn calibrate() -> Clock {
        let (t0, c0) = (Instant::now(), now_ticks());
        std::thread::sleep(Duration::from_millis(50));
        let (t1, c1) = (Instant::now(), now_ticks());
        let ticks = (c1 - c0).max(1) as f64;
        Clock { ns_per_tick: (t1 - t0).as_nanos() as f64 / ticks }
    }

    /// Ticks now.
    #[inline(always)]
    pub fn ticks(&self) -> u64 {
        now_ticks()
    }

    /// Ticks to microseconds.
    pub fn micros(&self, ticks: u64) -> f64 {
        ticks as f64 * self.ns_per_tick / 1000.0
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn now_ticks() -> u64 {
    // SAFETY: RDTSC has no preconditions on x86-64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn now_ticks() -> u64 {
    use std::sync::OnceLock;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}
