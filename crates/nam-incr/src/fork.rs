//! Fork/copy-on-write baseline: the child writes the image while the parent runs on; the
//! kernel duplicates every page the parent writes while the child lives, which is this
//! mode's extra memory (counted from the write faults the tracker sees meanwhile).

use crate::commit::{self, Chain};
use crate::engine::Inner;
use crate::error::IncrError;
use crate::pages::{CLEAN, DIRTY};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A checkpoint child in flight.
pub struct Child {
    pid: libc::pid_t,
    interval: u32,
    chain: Chain,
    previous: Chain,
}

/// Waits for the previous child, then forks the next one.
pub fn checkpoint(inner: &Arc<Inner>, meta: Vec<u8>) -> Result<u32, IncrError> {
    reap(inner, Instant::now() + inner.config.timeout)?;
    let regions = inner.regions.read().clone();
    let (interval, previous, mut retention) = {
        let mut shared = inner.shared.lock();
        shared.interval += 1;
        (shared.interval - 1, shared.chain.clone(), shared.retention.clone())
    };
    // Every page clean and protected: each write while the child lives is one duplicated page.
    for region in regions.iter().filter(|r| !r.is_removed()) {
        let Some(table) = region.table else { continue };
        for page in (0..table.pages).filter(|&p| !region.is_edge(p)) {
            table.transition(page, DIRTY, CLEAN);
            let _ = table.protect(page, 1);
        }
    }
    let chain = Chain { interval, generation: 0, objects: vec![format!("img-{interval:010}")], bytes: 0, meta };
    // SAFETY: fork duplicates the process; the child only writes the image through the
    // store and leaves with _exit, never returning into the parent's code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(IncrError::Fork(format!("fork failed: {}", std::io::Error::last_os_error())));
    }
    if pid == 0 {
        let written = AtomicU64::new(0);
        let ok = crate::image::write(&*inner.store, interval, &regions, &written)
            .and_then(|_| {
                commit::publish(&*inner.store, &chain, &regions, (&previous, false), &mut retention, &written)
            })
            .is_ok();
        // SAFETY: leaving the child without running the parent's destructors or atexit hooks.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    inner.shared.lock().fork = Some(Child { pid, interval, chain, previous });
    Ok(interval)
}

/// Waits (until `deadline`) for the child in flight, if any, and records its result.
pub fn reap(inner: &Inner, deadline: Instant) -> Result<(), IncrError> {
    let Some(child) = inner.shared.lock().fork.take() else { return Ok(()) };
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child; `status` is ours.
        let rc = unsafe { libc::waitpid(child.pid, &mut status, libc::WNOHANG) };
        if rc == child.pid {
            break;
        }
        if rc < 0 || Instant::now() > deadline {
            // SAFETY: kill our own child, then collect it.
            unsafe {
                libc::kill(child.pid, libc::SIGKILL);
                libc::waitpid(child.pid, &mut status, 0);
            }
            inner.shared.lock().need_full = true;
            return Err(IncrError::Fork(format!("checkpoint {} child did not finish in time", child.interval)));
        }
        std::thread::sleep(crate::constants::FORK_REAP_POLL);
    }
    let duplicated: u64 = inner
        .regions
        .read()
        .iter()
        .filter_map(|r| r.table.map(|t| (r, t)))
        .map(|(r, t)| {
            let written = |&p: &usize| !r.is_edge(p) && t.states[p].load(Ordering::Acquire) == DIRTY;
            (0..t.pages).filter(written).count() as u64
        })
        .sum();
    inner.extra_peak.fetch_max(duplicated * crate::geometry::PAGE_BYTES as u64, Ordering::Relaxed);
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        inner.written.fetch_add(image_bytes(inner), Ordering::Relaxed);
        let mut shared = inner.shared.lock();
        // The child removed the garbage; the parent only keeps the books.
        shared.retention.advance(&child.previous, false);
        shared.chain = child.chain;
        return Ok(());
    }
    Err(IncrError::Fork(format!("checkpoint {} child failed with status {status:#x}", child.interval)))
}

fn image_bytes(inner: &Inner) -> u64 {
    let regions = inner.regions.read();
    regions.iter().map(|r| r.geometry.len as u64 + 8).sum::<u64>() + 16
}
