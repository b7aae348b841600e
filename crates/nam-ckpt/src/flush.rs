//! L3: asynchronous flush of checkpoint files to a parallel file system.
//!
//! A background thread copies each queued version's file and marker to
//! `<flush dir>/<name>/v<version>/`, under a temporary name renamed when complete, then
//! applies the flush retention. The application never waits for it while it checkpoints;
//! [`Flusher::wait`] (called by finalize) waits with a deadline. A failed flush (e.g. the
//! target filled up) removes its partial file, keeps older flushed versions, and is reported
//! by [`Flusher::take_errors`]; the L1 copy stays until a later flush or retention.
//!
//! The thread runs at the lowest CPU and I/O priority and copies in chunks, pausing while the
//! application writes a checkpoint ([`Flusher::pause`]): on a node whose cores the ranks
//! fill, a flush copying at the same time as a checkpoint took memory bandwidth and CPU from
//! it (whole-file `std::fs::copy` could not be paused).

use crate::error::{CkptError, Result};
use crate::level::{Level, LevelKind};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// One version of one rank to flush.
#[derive(Debug, Clone)]
pub struct FlushJob {
    /// Checkpoint name.
    pub name: String,
    /// Version.
    pub version: u64,
    /// Rank.
    pub rank: usize,
    /// The L1 file.
    pub source: PathBuf,
}

#[derive(Default)]
struct State {
    pending: BTreeSet<(String, u64)>,
    errors: Vec<String>,
    flushed_bytes: u64,
}

/// The flush thread and what it shares with the application thread.
pub struct Flusher {
    tx: Option<Sender<FlushJob>>,
    /// Checkpoints being written now (the thread pauses while this is not zero).
    writing: Arc<AtomicUsize>,
    state: Arc<(Mutex<State>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flusher {
    /// Starts the thread flushing to `target` (a [`LevelKind::Pfs`] level).
    pub fn start(target: Level) -> Flusher {
        assert_eq!(target.kind, LevelKind::Pfs);
        let (tx, rx) = channel::<FlushJob>();
        let state: Arc<(Mutex<State>, Condvar)> = Arc::default();
        let shared = state.clone();
        let writing = Arc::new(AtomicUsize::new(0));
        let paused = writing.clone();
        let thread = std::thread::Builder::new()
            .name("nam-ckpt-flush".into())
            .spawn(move || {
                lower_priority();
                for job in rx {
                    let result = copy(&target, &job, &paused);
                    let (lock, cv) = &*shared;
                    let mut s = lock.lock().expect("flush state");
                    match result {
                        Ok(bytes) => s.flushed_bytes += bytes,
                        Err(e) => s.errors.push(format!("version {} of {}: {e}", job.version, job.name)),
                    }
                    s.pending.remove(&(job.name.clone(), job.version));
                    cv.notify_all();
                }
            })
            .expect("spawn flush thread");
        Flusher { tx: Some(tx), writing, state, thread: Some(thread) }
    }

    /// Queues a job (returns at once).
    pub fn submit(&self, job: FlushJob) {
        self.state.0.lock().expect("flush state").pending.insert((job.name.clone(), job.version));
        self.tx.as_ref().expect("running").send(job).expect("flush thread alive");
    }

    /// Pauses the flush while the returned guard lives (a checkpoint is being written): the
    /// thread finishes its current chunk and waits, at most [`PAUSE_LIMIT`] per chunk.
    pub fn pause(&self) -> FlushPause {
        self.writing.fetch_add(1, Ordering::SeqCst);
        FlushPause(self.writing.clone())
    }

    /// Versions of `name` queued or being flushed (L1 retention keeps them).
    pub fn pinned(&self, name: &str) -> Vec<u64> {
        let s = self.state.0.lock().expect("flush state");
        s.pending.iter().filter(|(n, _)| n == name).map(|(_, v)| *v).collect()
    }

    /// Waits until every queued job is done, at most `deadline`.
    pub fn wait(&self, deadline: Duration) -> Result<()> {
        let start = Instant::now();
        let (lock, cv) = &*self.state;
        let mut s = lock.lock().expect("flush state");
        while !s.pending.is_empty() {
            let left = deadline.checked_sub(start.elapsed()).ok_or_else(|| CkptError::Flush {
                path: PathBuf::new(),
                reason: format!("{} flush(es) still running after {deadline:?}", s.pending.len()),
            })?;
            s = cv.wait_timeout(s, left).expect("flush state").0;
        }
        Ok(())
    }

    /// Errors of finished flushes since the last call.
    pub fn take_errors(&self) -> Vec<String> {
        std::mem::take(&mut self.state.0.lock().expect("flush state").errors)
    }

    /// Bytes flushed so far.
    pub fn flushed_bytes(&self) -> u64 {
        self.state.0.lock().expect("flush state").flushed_bytes
    }
}

/// While it lives the flush thread pauses between chunks ([`Flusher::pause`]).
#[derive(Debug)]
pub struct FlushPause(Arc<AtomicUsize>);

impl Drop for FlushPause {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

use crate::constants::FLUSH_CHUNK as CHUNK;
/// Longest the flush waits for checkpoints before its next chunk ([`crate::constants`]).
pub use crate::constants::FLUSH_PAUSE_LIMIT as PAUSE_LIMIT;

/// Waits while `writing` is non-zero, at most [`PAUSE_LIMIT`].
fn wait_for_checkpoints(writing: &AtomicUsize) {
    let start = Instant::now();
    while writing.load(Ordering::SeqCst) > 0 && start.elapsed() < PAUSE_LIMIT {
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Copies `source` to `dest` a chunk at a time, pausing for checkpoints, and syncs it.
fn copy_pausing(source: &Path, dest: &Path, writing: &AtomicUsize) -> std::io::Result<u64> {
    let mut from = std::fs::File::open(source)?;
    let mut to = std::fs::File::create(dest)?;
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        wait_for_checkpoints(writing);
        let n = from.read(&mut buf)?;
        if n == 0 {
            break;
        }
        to.write_all(&buf[..n])?;
        total += n as u64;
    }
    to.sync_all()?;
    Ok(total)
}

impl Drop for Flusher {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs this thread at the lowest CPU priority and in the idle I/O class, so the flush takes
/// what the application leaves (best effort: failures leave the defaults).
fn lower_priority() {
    // SAFETY: plain syscalls on this thread's id; no memory is passed.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 19);
        const IOPRIO_WHO_PROCESS: libc::c_long = 1;
        const IOPRIO_CLASS_IDLE: libc::c_long = 3;
        libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid as libc::c_long, IOPRIO_CLASS_IDLE << 13);
    }
}

fn copy(target: &Level, job: &FlushJob, writing: &AtomicUsize) -> Result<u64> {
    let dir = target.version_dir(&job.name, job.version);
    let dest = target.file(&job.name, job.version, job.rank);
    let tmp = dest.with_extension("tmp");
    let fail = |reason: String| CkptError::Flush { path: dest.clone(), reason };
    std::fs::create_dir_all(&dir).map_err(|e| fail(format!("create {}: {e}", dir.display())))?;
    let copied = copy_pausing(&job.source, &tmp, writing).and_then(|n| std::fs::rename(&tmp, &dest).map(|_| n));
    let bytes = match copied {
        Ok(n) => n,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(fail(e.to_string()));
        }
    };
    let marker = target.marker(&job.name, job.version, job.rank);
    std::fs::write(&marker, b"").map_err(|e| fail(format!("marker: {e}")))?;
    target.retain(&job.name, job.rank, &[])?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::{FlushJob, Flusher};
    use crate::level::{Level, LevelKind};
    use std::time::Duration;

    #[test]
    fn a_paused_flush_waits_for_the_checkpoint_then_copies_every_byte() {
        let root = std::env::temp_dir().join(format!("nam-flush-pause-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let source = root.join("l1.ckpt");
        let data: Vec<u8> = (0..(9u32 << 20)).map(|i| (i % 253) as u8).collect();
        std::fs::write(&source, &data).unwrap();
        let target = Level { kind: LevelKind::Pfs, dir: root.join("pfs"), keep: 2 };
        let flusher = Flusher::start(target.clone());
        let pause = flusher.pause();
        flusher.submit(FlushJob { name: "job".into(), version: 1, rank: 0, source });
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(flusher.pinned("job"), vec![1], "nothing flushed while a checkpoint is written");
        assert!(!target.file("job", 1, 0).exists());
        drop(pause);
        flusher.wait(Duration::from_secs(20)).unwrap();
        assert!(flusher.take_errors().is_empty());
        assert_eq!(std::fs::read(target.file("job", 1, 0)).unwrap(), data);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
