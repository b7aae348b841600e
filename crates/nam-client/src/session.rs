//! The client's connections and the state every data path shares: the links to the
//! servers behind the client lock, the control endpoints readable without it, the traffic
//! counters and the deadline. The paths ([`crate::path`]) operate on a [`Session`]; the
//! [`crate::Client`] owns one and adds the public API. This module knows nothing of either,
//! so the layering is one-way: link → session → path → client.

use crate::allocation::Allocation;
use crate::constants::{HEALTH_CHECK_OPS, LIVENESS_INTERVAL_MAX};
use crate::error::{Error, Result};
use crate::link::{DataPath, Link, ReplyQueue};
use crate::lock::{FastLock, Guard};
use nam_proto::{Reply, Request, TrafficReport};
use nam_ucx::{Context, Endpoint, Posted, Worker};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The state behind the client lock (the UCX worker is single-threaded).
pub(crate) struct Inner {
    pub(crate) links: Vec<Link>,
    pub(crate) replies: ReplyQueue,
    pub(crate) next_request_id: u64,
    pub(crate) next_server: usize,
    /// Traffic of the RMA and message paths (the direct path counts without the lock).
    pub(crate) traffic: TrafficReport,
    /// The live flag of every allocation this client holds, by (server, handle): opening
    /// an allocation twice yields handles that become invalid together, as the server keeps
    /// one reference per client.
    pub(crate) held: HashMap<(usize, u64), Arc<AtomicBool>>,
    /// Operations that completed without progressing the worker since it last progressed.
    pub(crate) unprogressed_ops: u32,
    /// Message-path requests sent whose replies are collected later ([`crate::pending`]).
    pub(crate) unacked: crate::pending::Unacked,
    pub(crate) worker: Worker,
    pub(crate) context: Context,
}

/// One-sided traffic of the direct path, counted without the client lock.
#[derive(Default)]
pub(crate) struct DirectTraffic {
    puts: AtomicU64,
    gets: AtomicU64,
    atomics: AtomicU64,
    bytes_put: AtomicU64,
    bytes_got: AtomicU64,
}

impl DirectTraffic {
    /// `report` plus the direct path's counts.
    pub(crate) fn add_to(&self, mut report: TrafficReport) -> TrafficReport {
        report.puts += self.puts.load(Ordering::Relaxed);
        report.gets += self.gets.load(Ordering::Relaxed);
        report.atomics += self.atomics.load(Ordering::Relaxed);
        report.bytes_put += self.bytes_put.load(Ordering::Relaxed);
        report.bytes_got += self.bytes_got.load(Ordering::Relaxed);
        report
    }
}

/// The connections to the servers and what every path needs to use them.
pub(crate) struct Session {
    inner: Arc<FastLock<Inner>>,
    /// Progresses the worker while nothing else does (see [`Watchdog`]).
    watchdog: Option<Watchdog>,
    /// The control endpoints, readable without the lock (their failure flag is atomic).
    controls: Vec<Endpoint>,
    /// The servers' addresses, for errors raised without the lock.
    pub(crate) servers: Vec<SocketAddr>,
    /// Deadline of each operation.
    pub(crate) timeout: Duration,
    /// Traffic of the direct path.
    pub(crate) direct: DirectTraffic,
    /// Where direct-path waiters sleep, per server ([`crate::wake`]).
    pub(crate) wake: crate::wake::WakeTables,
    /// How long a wait spins before it sleeps ([`crate::ClientConfig::wait_spin`]).
    pub(crate) wait_spin: Duration,
}

impl Session {
    /// A session over `inner`'s links, with `timeout` for every operation.
    pub(crate) fn new(inner: Inner, servers: Vec<SocketAddr>, timeout: Duration) -> Session {
        let controls = inner.links.iter().map(|l| l.control.clone()).collect();
        let mapped = inner.links.iter().any(|l| l.path() == DataPath::SharedMemory);
        let inner = Arc::new(FastLock::new(inner));
        // Only a shared-memory data path completes operations without progressing the worker.
        let watchdog = mapped.then(|| Watchdog::start(&inner, (timeout / 4).min(LIVENESS_INTERVAL_MAX)));
        let wake = crate::wake::WakeTables::new(servers.len());
        let wait_spin = crate::constants::WAIT_SPIN_DEFAULT;
        Session { inner, watchdog, controls, servers, timeout, direct: Default::default(), wake, wait_spin }
    }

    #[inline]
    pub(crate) fn lock(&self) -> Guard<'_, Inner> {
        self.inner.lock()
    }

    /// What the current step of a call may wait: the rest of the call's deadline
    /// ([`crate::deadline`]), the whole timeout for a call of one step.
    #[inline]
    pub(crate) fn time_left(&self) -> Duration {
        crate::deadline::time_left(self.timeout)
    }

    /// Begins a call of several steps that share one deadline (the session's timeout).
    pub(crate) fn begin_call(&self) -> crate::deadline::CallDeadline {
        crate::deadline::CallDeadline::begin(self.timeout)
    }

    /// The state behind the lock, when the session is not shared (dropping the client).
    pub(crate) fn get_mut(&mut self) -> &mut Inner {
        drop(self.watchdog.take());
        Arc::get_mut(&mut self.inner).expect("the watchdog, the only other holder, has stopped").get_mut()
    }

    /// Fails with the transport error if server `server`'s control endpoint saw it die.
    #[inline]
    pub(crate) fn alive(&self, server: usize, what: &'static str) -> Result<()> {
        match self.controls[server].failure() {
            Some(source) => Err(Error::Transport { addr: self.servers[server], what, source }),
            None => Ok(()),
        }
    }

    /// One-sided traffic issued so far, every path.
    pub(crate) fn traffic(&self) -> TrafficReport {
        let locked = self.lock().traffic;
        self.direct.add_to(locked)
    }

    /// Counts a direct put of `len` bytes.
    #[inline]
    pub(crate) fn count_direct_put(&self, len: usize) {
        self.count(&self.direct.puts, &self.direct.bytes_put, len);
    }

    /// Counts a direct get of `len` bytes.
    #[inline]
    pub(crate) fn count_direct_get(&self, len: usize) {
        self.count(&self.direct.gets, &self.direct.bytes_got, len);
    }

    /// Counts a direct atomic.
    #[inline]
    pub(crate) fn count_direct_atomic(&self) {
        let ops = self.direct.atomics.fetch_add(1, Ordering::Relaxed);
        self.maybe_check_health(ops);
    }

    #[inline]
    fn count(&self, ops: &AtomicU64, bytes: &AtomicU64, len: usize) {
        let n = ops.fetch_add(1, Ordering::Relaxed);
        bytes.fetch_add(len as u64, Ordering::Relaxed);
        self.maybe_check_health(n);
    }

    /// Direct operations never reach UCX, and only progress delivers the control endpoint's
    /// news that a server died: progress once every [`HEALTH_CHECK_OPS`] of them.
    #[inline]
    fn maybe_check_health(&self, ops: u64) {
        if ops % HEALTH_CHECK_OPS as u64 == HEALTH_CHECK_OPS as u64 - 1 {
            self.lock().worker.progress();
        }
    }
}

/// A thread that progresses the worker every `interval` when the lock is free, so that a
/// client whose operations never progress it (loads and stores on a mapped pool, immediate
/// shared-memory completions) still hears from its control endpoints that a server died or
/// restarted, within a bounded time and not only after [`HEALTH_CHECK_OPS`] operations: the
/// next operation then fails with the transport error. The fast path pays nothing for it
/// beyond the one atomic load of the failure flag it already did.
struct Watchdog {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    fn start(inner: &Arc<FastLock<Inner>>, interval: Duration) -> Watchdog {
        let stop = Arc::new(AtomicBool::new(false));
        let (weak, stopped) = (Arc::downgrade(inner), stop.clone());
        let thread = std::thread::Builder::new()
            .name("nam-liveness".into())
            .spawn(move || {
                while !stopped.load(Ordering::Acquire) {
                    std::thread::park_timeout(interval);
                    let Some(inner) = weak.upgrade() else { return };
                    let guard = inner.try_lock();
                    if let Some(guard) = guard {
                        guard.worker.progress();
                    }
                }
            })
            .map_err(|e| {
                log::warn!("no liveness thread ({e}): a dead server is noticed every {HEALTH_CHECK_OPS} operations")
            })
            .ok();
        Watchdog { stop, thread }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

impl Inner {
    pub(crate) fn count_put(&mut self, bytes: usize) {
        self.traffic.puts += 1;
        self.traffic.bytes_put += bytes as u64;
    }

    pub(crate) fn count_get(&mut self, bytes: usize) {
        self.traffic.gets += 1;
        self.traffic.bytes_got += bytes as u64;
    }

    pub(crate) fn request_id(&mut self) -> u64 {
        let id = self.next_request_id;
        self.next_request_id += 1;
        id
    }

    /// Sends `request` to `server` and waits for its reply (spinning).
    pub(crate) fn call(
        &mut self,
        server: usize,
        request: &Request,
        what: &'static str,
        timeout: Duration,
    ) -> Result<Reply> {
        self.call_waiting(server, request, (what, timeout), false)
    }

    /// [`Inner::call`]; `patient` sleeps while the reply is late (see `Link::call`).
    pub(crate) fn call_waiting(
        &mut self,
        server: usize,
        request: &Request,
        (what, timeout): (&'static str, Duration),
        patient: bool,
    ) -> Result<Reply> {
        // The call clears the reply queue: collect the outstanding puts' replies first.
        self.settle(timeout)?;
        let id = self.request_id();
        self.clear_stale_replies();
        self.links[server].call_keeping(&self.replies, (id, request), what, timeout, patient)
    }

    /// Sends a request whose reply grants an allocation, and adopts it.
    pub(crate) fn grant(
        &mut self,
        server: usize,
        request: &Request,
        what: &'static str,
        timeout: Duration,
    ) -> Result<Allocation> {
        let reply = self.call(server, request, what, timeout)?;
        let Reply::Alloc(grant) = reply else { return Err(unexpected(self.links[server].addr, what, reply)) };
        self.adopt(server, grant)
    }

    /// Turns an allocation the server granted (in any reply) into an [`Allocation`].
    pub(crate) fn adopt(&mut self, server: usize, grant: nam_proto::AllocReply) -> Result<Allocation> {
        let link = &mut self.links[server];
        let key = link.remember_rkey(&grant.rkey)?;
        let live = self.held.entry((server, grant.handle)).or_insert_with(|| Arc::new(AtomicBool::new(true))).clone();
        let link = &self.links[server];
        let local = match link.path() {
            DataPath::SharedMemory => link.rkey(key).local_ptr(grant.remote_addr).map_or(0, |p| p as usize),
            _ => 0,
        };
        Ok(Allocation {
            server,
            handle: grant.handle,
            size: grant.size,
            remote_addr: grant.remote_addr,
            flags: grant.flags,
            live,
            local,
            key,
        })
    }

    /// Over shared memory, operations complete without progressing the worker, and only
    /// progress delivers the control endpoint's news that the server died. Progress every
    /// [`HEALTH_CHECK_OPS`] immediate completions so a dead server is noticed within a few
    /// operations instead of never (a put into an orphaned segment would be lost silently).
    #[inline]
    pub(crate) fn note_immediate_completion(&mut self) {
        self.unprogressed_ops += 1;
        if self.unprogressed_ops >= HEALTH_CHECK_OPS {
            self.unprogressed_ops = 0;
            self.worker.progress();
        }
    }

    /// Completes a posted data operation of `server`: at once if UCX finished it inline,
    /// else waiting at most `timeout`.
    #[inline]
    pub(crate) fn finish(
        &mut self,
        server: usize,
        posted: nam_ucx::Result<Posted>,
        what: &'static str,
        timeout: Duration,
    ) -> Result<()> {
        let link = &self.links[server];
        match posted.map_err(|source| Error::Transport { addr: link.addr, what, source })? {
            Posted::Done => {
                self.note_immediate_completion();
                Ok(())
            }
            posted => link.wait(posted, timeout, what),
        }
    }
}

/// The error for a reply of the wrong kind (logged: it means a protocol mismatch).
pub(crate) fn unexpected(addr: SocketAddr, what: &'static str, reply: Reply) -> Error {
    log::warn!("server {addr} answered {what} with {reply:?}");
    Error::UnexpectedReply { addr, what }
}
