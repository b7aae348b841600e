//! The machine a report was measured on, as the generated pages state it.

/// The CPU model from `/proc/cpuinfo` ("unknown CPU" when it cannot be read).
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// The Linux kernel release (empty when it cannot be read).
pub fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string()
}

/// Hardware threads this process may run on.
pub fn threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// "CPU model, N hardware threads, Linux release".
pub fn describe() -> String {
    format!("{}, {} hardware threads, Linux {}", cpu_model(), threads(), kernel())
}
