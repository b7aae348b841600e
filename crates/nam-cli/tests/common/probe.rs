//! What a test can see of a server process from outside: its memory and its sockets.

/// Anonymous resident memory of process `pid`, in bytes (`RssAnon`: the heap, where queued
/// replies live; a shared-memory pool is not counted). `None` once the process is gone.
pub fn rss_anon(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status.lines().find_map(|l| l.strip_prefix("RssAnon:"))?.split_whitespace().next()?.parse().ok()?;
    Some(kib << 10)
}

/// Sockets process `pid` holds open (descriptors linked to `socket:[…]`).
pub fn sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.flatten()
                .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().starts_with("socket:")))
                .count()
        })
        .unwrap_or(0)
}
