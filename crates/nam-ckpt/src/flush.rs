//! L3: asynchronous flush of checkpoint files to a parallel file system.
//!
//! A background thread copies each queued version's file and marker to
//! `<flush dir>/<name>/v<version>/`, under a temporary name renamed when complete, then
//! applies the flush retention. The application never waits for it while it checkpoints;
//! [`Flusher::wait`] (called by finalize) waits with a deadline. A failed flush (e.g. the
//! target filled up) removes its partial file, keeps older flushed versions, and is reported
//! by [`Flusher::take_errors`]; the L1 copy stays until a later flush or retention.

use crate::error::{CkptError, Result};
use crate::level::{Level, LevelKind};
use std::collections::BTreeSet;
use std::path::PathBuf;
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
        let thread = std::thread::Builder::new()
            .name("nam-ckpt-flush".into())
            .spawn(move || {
                for job in rx {
                    let result = copy(&target, &job);
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
        Flusher { tx: Some(tx), state, thread: Some(thread) }
    }

    /// Queues a job (returns at once).
    pub fn submit(&self, job: FlushJob) {
        self.state.0.lock().expect("flush state").pending.insert((job.name.clone(), job.version));
        self.tx.as_ref().expect("running").send(job).expect("flush thread alive");
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

impl Drop for Flusher {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn copy(target: &Level, job: &FlushJob) -> Result<u64> {
    let dir = target.version_dir(&job.name, job.version);
    let dest = target.file(&job.name, job.version, job.rank);
    let tmp = dest.with_extension("tmp");
    let fail = |reason: String| CkptError::Flush { path: dest.clone(), reason };
    std::fs::create_dir_all(&dir).map_err(|e| fail(format!("create {}: {e}", dir.display())))?;
    let copied = std::fs::copy(&job.source, &tmp)
        .and_then(|n| std::fs::File::open(&tmp)?.sync_all().map(|_| n))
        .and_then(|n| std::fs::rename(&tmp, &dest).map(|_| n));
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
