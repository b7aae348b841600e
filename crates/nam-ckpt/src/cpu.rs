//! CPU time of this process, to report what redundancy costs the compute ranks.

/// CPU seconds this process has used so far (user + system, all threads).
pub fn process_cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec; the clock id is a constant of this OS.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Wall and CPU time since a start point.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch {
    wall: std::time::Instant,
    cpu: f64,
}

impl Stopwatch {
    /// Starts measuring now.
    pub fn start() -> Self {
        Stopwatch { wall: std::time::Instant::now(), cpu: process_cpu_seconds() }
    }

    /// Wall seconds since start.
    pub fn wall_seconds(&self) -> f64 {
        self.wall.elapsed().as_secs_f64()
    }

    /// CPU seconds since start.
    pub fn cpu_seconds(&self) -> f64 {
        (process_cpu_seconds() - self.cpu).max(0.0)
    }
}
