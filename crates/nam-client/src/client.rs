//! The client: connections to memory servers, allocations, one-sided operations.

use crate::allocation::{AllocOptions, Allocation};
use crate::config::ClientConfig;
use crate::error::{Error, Result};
use crate::link::{choose_data_path, DataPath, Link, ReplyQueue};
use crate::lock::{FastLock, Guard};
use crate::op::Op;
use crate::signal::{Compare, Signal, SignalOp};
use nam_proto::{
    Alloc, AtomicKind, Hello, Reply, Request, StatusReply, TrafficReport, ALLOC_FLAG_PERSISTENT, ALLOC_FLAG_SHARED,
    AM_ID_REPLY,
};
use nam_ucx::{AtomicOp, Context, Features, Posted, Worker};
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Operations completed without progressing the worker (immediate UCX completions, or
/// direct loads and stores) between two health checks of the control endpoints. A check is
/// one worker progress (an epoll_wait, ~0.5 us): every 64 operations it cost ~8 ns each.
pub(crate) const HEALTH_CHECK_OPS: u32 = 1024;

pub(crate) struct Inner {
    pub(crate) links: Vec<Link>,
    pub(crate) replies: ReplyQueue,
    next_request_id: u64,
    next_server: usize,
    traffic: TrafficReport,
    /// The live flag of every allocation this client holds, by (server, handle): opening
    /// an allocation twice yields handles that become invalid together, as the server keeps
    /// one reference per client.
    held: std::collections::HashMap<(usize, u64), Arc<AtomicBool>>,
    /// Operations that completed without progressing the worker since it last progressed.
    unprogressed_ops: u32,
    pub(crate) worker: Worker,
    pub(crate) context: Context,
}

/// A connection to one or several memory servers. Share it between threads by reference
/// or `Arc`: operations serialize on one internal lock (the UCX worker is single-threaded).
///
/// Completion semantics: [`Client::put`] returns when the source buffer may be reused;
/// the data is visible at the server after [`Client::flush`] (or use [`Client::put_sync`]).
/// [`Client::get`] returns with the data. Atomics return when done at the server.
pub struct Client {
    inner: FastLock<Inner>,
    pub(crate) config: ClientConfig,
    /// The control endpoints, readable without the lock (their failure flag is atomic).
    pub(crate) controls: Vec<nam_ucx::Endpoint>,
    /// Traffic of the direct path.
    pub(crate) direct: crate::direct::DirectTraffic,
    /// Global-address state: server tags, domains, resolved allocations.
    pub(crate) global: crate::global::GlobalState,
    /// Per-server split between the direct path and RMA.
    pub(crate) paths: crate::path::PathChoice,
}

impl Client {
    /// Connects to every server in `config` and authenticates as its tenant.
    pub fn connect(config: ClientConfig) -> Result<Client> {
        if config.servers.is_empty() {
            return Err(Error::NoServers);
        }
        use nam_proto::limits::{TENANT_NAME_LEN_MAX, TOKEN_LEN_MAX};
        if config.tenant.is_empty() || config.tenant.len() > TENANT_NAME_LEN_MAX {
            return Err(Error::Config(format!("tenant name must be 1..={TENANT_NAME_LEN_MAX} bytes")));
        }
        if config.token.len() > TOKEN_LEN_MAX {
            return Err(Error::Config(format!("token longer than {TOKEN_LEN_MAX} bytes")));
        }
        let addr0 = config.servers[0];
        let transport = |source| Error::Connect { addr: addr0, source };
        let context = Context::with_transports(Features::CLIENT, config.transports.as_deref()).map_err(transport)?;
        let worker = Worker::new(&context).map_err(transport)?;
        let replies: ReplyQueue = Arc::default();
        let sink = replies.clone();
        worker
            .set_am_handler(AM_ID_REPLY, move |m| sink.lock().push(m.data.unwrap_or(&[]).to_vec()))
            .map_err(transport)?;
        let mut inner = Inner {
            links: Vec::new(),
            replies,
            next_request_id: 1,
            next_server: 0,
            traffic: TrafficReport::default(),
            held: std::collections::HashMap::new(),
            unprogressed_ops: 0,
            worker,
            context,
        };
        for &addr in &config.servers {
            let mut link = Link::connect(&inner.worker, addr)?;
            let hello = Request::Hello(Hello {
                tenant: config.tenant.clone(),
                token: config.token.clone(),
                client_name: nam_proto::truncate_utf8(&config.name, nam_proto::limits::CLIENT_NAME_LEN_MAX).to_string(),
                pid: std::process::id(),
            });
            let id = inner.request_id();
            match link.call(&inner.replies, (id, &hello), "hello", config.connect_timeout, false)? {
                Reply::Hello(h) => {
                    link.server_name = h.server_name;
                    let path =
                        config.data_path.unwrap_or_else(|| choose_data_path(&h.host_id, config.transports.as_deref()));
                    link.open_data_plane(&h.worker_address, path)?;
                }
                other => return Err(unexpected(addr, "hello", other)),
            }
            inner.links.push(link);
        }
        let controls = inner.links.iter().map(|l| l.control.clone()).collect();
        let mut client = Client {
            inner: FastLock::new(inner),
            config,
            controls,
            direct: Default::default(),
            global: Default::default(),
            paths: Default::default(),
        };
        client.choose_paths()?;
        Ok(client)
    }

    /// Connects with [`ClientConfig::from_env`].
    pub fn from_env() -> Result<Client> {
        Client::connect(ClientConfig::from_env()?)
    }

    /// The configuration in use.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// Number of connected servers.
    pub fn server_count(&self) -> usize {
        self.config.servers.len()
    }

    #[inline]
    pub(crate) fn lock(&self) -> Guard<'_, Inner> {
        self.inner.lock()
    }

    /// Allocates `size` bytes.
    pub fn alloc(&self, size: u64, options: &AllocOptions) -> Result<Allocation> {
        let mut inner = self.lock();
        let server = match options.server {
            Some(s) if s >= inner.links.len() => return Err(Error::InvalidArgument("server index out of range")),
            Some(s) => s,
            None => {
                inner.next_server = (inner.next_server + 1) % inner.links.len();
                inner.next_server
            }
        };
        let mut flags = 0;
        if options.shared {
            flags |= ALLOC_FLAG_SHARED;
        }
        if options.persistent {
            flags |= ALLOC_FLAG_PERSISTENT;
        }
        let name = options.name.clone().unwrap_or_default();
        if name.len() > nam_proto::limits::NAME_LEN_MAX {
            return Err(Error::InvalidArgument("allocation name longer than 255 bytes"));
        }
        let request = Request::Alloc(Alloc { size, align: options.align, flags, name });
        inner.grant(server, &request, "alloc", self.config.timeout)
    }

    /// Opens the shared allocation `name` of this client's tenant, searching the servers
    /// in order.
    pub fn open(&self, name: &str) -> Result<Allocation> {
        if name.len() > nam_proto::limits::NAME_LEN_MAX {
            return Err(Error::InvalidArgument("allocation name longer than 255 bytes"));
        }
        let mut inner = self.lock();
        let mut last = None;
        for server in 0..inner.links.len() {
            let request = Request::Open { name: name.to_string() };
            match inner.grant(server, &request, "open", self.config.timeout) {
                Err(e @ Error::Refused { status: nam_proto::Status::NameNotFound, .. }) => last = Some(e),
                other => return other,
            }
        }
        Err(last.expect("at least one server"))
    }

    /// Releases this client's reference; the allocation is unusable through any clone
    /// afterwards. Freeing twice gives [`Error::Freed`].
    pub fn free(&self, allocation: &Allocation) -> Result<()> {
        let mut inner = self.lock();
        if !allocation.live.swap(false, Ordering::AcqRel) {
            return Err(Error::Freed { handle: allocation.handle });
        }
        let request = Request::Free { handle: allocation.handle };
        let result = inner.call(allocation.server, &request, "free", self.config.timeout);
        match &result {
            // The server did not answer: the handle may still be live there.
            Err(Error::Timeout { .. } | Error::Transport { .. } | Error::Connect { .. }) => {
                allocation.live.store(true, Ordering::Release)
            }
            // It answered (freed, or refused because it was already gone): forget the handle.
            _ => {
                inner.held.remove(&(allocation.server, allocation.handle));
            }
        }
        result.map(drop)
    }

    /// Blocking put: returns when `data` may be reused (local completion). A failed put
    /// transfers nothing when it fails its checks, and the target is unchanged.
    #[inline]
    pub fn put(&self, allocation: &Allocation, offset: u64, data: &[u8]) -> Result<()> {
        let target = allocation.target(offset, data.len())?;
        if let Some(base) = self.direct_base_sized(allocation, data.len(), "put")? {
            self.direct_put(base, offset, data);
            return Ok(());
        }
        let mut inner = self.lock();
        if inner.links[allocation.server].uses_messages() {
            inner.put_messages(allocation, offset, data, self.config.timeout)?;
            inner.count_put(data.len());
            return Ok(());
        }
        let link = &inner.links[allocation.server];
        // SAFETY: `data` is borrowed until the wait below returns.
        let posted = unsafe { link.data("put")?.put_nbx(data.as_ptr(), data.len(), target, link.rkey()) };
        inner.finish(allocation.server, posted, "put", self.config.timeout)?;
        inner.traffic.puts += 1;
        inner.traffic.bytes_put += data.len() as u64;
        Ok(())
    }

    /// Put with remote completion: the data is visible at the server when this returns.
    pub fn put_sync(&self, allocation: &Allocation, offset: u64, data: &[u8]) -> Result<()> {
        self.put(allocation, offset, data)?;
        self.flush_server(allocation.server)
    }

    /// Blocking get.
    #[inline]
    pub fn get(&self, allocation: &Allocation, offset: u64, buffer: &mut [u8]) -> Result<()> {
        let target = allocation.target(offset, buffer.len())?;
        if let Some(base) = self.direct_base_sized(allocation, buffer.len(), "get")? {
            self.direct_get(base, offset, buffer);
            return Ok(());
        }
        let mut inner = self.lock();
        if inner.links[allocation.server].uses_messages() {
            inner.get_messages(allocation, offset, buffer, self.config.timeout)?;
            inner.count_get(buffer.len());
            return Ok(());
        }
        let link = &inner.links[allocation.server];
        // SAFETY: `buffer` is borrowed mutably until the wait below returns.
        let posted = unsafe { link.data("get")?.get_nbx(buffer.as_mut_ptr(), buffer.len(), target, link.rkey()) };
        inner.finish(allocation.server, posted, "get", self.config.timeout)?;
        inner.traffic.gets += 1;
        inner.traffic.bytes_got += buffer.len() as u64;
        Ok(())
    }

    /// Non-blocking put; complete it with [`Op::wait`], [`Op::test`] or [`Client::wait_all`].
    pub fn put_nb<'a>(&'a self, allocation: &Allocation, offset: u64, data: &'a [u8]) -> Result<Op<'a>> {
        let target = allocation.target(offset, data.len())?;
        if let Some(base) = self.direct_base_sized(allocation, data.len(), "put")? {
            self.direct_put(base, offset, data);
            return Ok(Op::completed(self, allocation.server, "put"));
        }
        let mut inner = self.lock();
        if inner.links[allocation.server].uses_messages() {
            // The message path pipelines chunks itself; the operation is complete on return.
            inner.put_messages(allocation, offset, data, self.config.timeout)?;
            inner.count_put(data.len());
            return Ok(Op::completed(self, allocation.server, "put"));
        }
        let link = &inner.links[allocation.server];
        // SAFETY: the returned Op borrows `data` and waits for completion before it is dropped.
        let posted = unsafe { link.data("put")?.put_nbx(data.as_ptr(), data.len(), target, link.rkey()) };
        let op = inner.op(self, allocation.server, posted, "put")?;
        inner.traffic.puts += 1;
        inner.traffic.bytes_put += data.len() as u64;
        Ok(op)
    }

    /// Non-blocking get into `buffer`; read it only after the [`Op`] completes.
    pub fn get_nb<'a>(&'a self, allocation: &Allocation, offset: u64, buffer: &'a mut [u8]) -> Result<Op<'a>> {
        let target = allocation.target(offset, buffer.len())?;
        if let Some(base) = self.direct_base_sized(allocation, buffer.len(), "get")? {
            self.direct_get(base, offset, buffer);
            return Ok(Op::completed(self, allocation.server, "get"));
        }
        let mut inner = self.lock();
        if inner.links[allocation.server].uses_messages() {
            inner.get_messages(allocation, offset, buffer, self.config.timeout)?;
            inner.count_get(buffer.len());
            return Ok(Op::completed(self, allocation.server, "get"));
        }
        let link = &inner.links[allocation.server];
        // SAFETY: the returned Op borrows `buffer` and waits for completion before it is dropped.
        let posted = unsafe { link.data("get")?.get_nbx(buffer.as_mut_ptr(), buffer.len(), target, link.rkey()) };
        let op = inner.op(self, allocation.server, posted, "get")?;
        inner.traffic.gets += 1;
        inner.traffic.bytes_got += buffer.len() as u64;
        Ok(op)
    }

    /// Waits for every operation; returns the first error after all have finished.
    pub fn wait_all<'a>(&self, ops: impl IntoIterator<Item = Op<'a>>) -> Result<()> {
        let mut first = Ok(());
        for op in ops {
            let result = op.wait();
            if first.is_ok() {
                first = result;
            }
        }
        first
    }

    /// Remote completion of every operation issued so far, on every server.
    pub fn flush(&self) -> Result<()> {
        (0..self.server_count()).try_for_each(|s| self.flush_server(s))
    }

    /// Remote completion of every operation issued so far to server `server`.
    pub fn flush_server(&self, server: usize) -> Result<()> {
        let inner = self.lock();
        // Learn of a dead server before promising remote completion.
        inner.worker.progress();
        let link = inner.links.get(server).ok_or(Error::InvalidArgument("server index out of range"))?;
        if link.uses_messages() {
            // Every message operation completed at the server before it returned.
            return match link.control.failure() {
                Some(source) => Err(Error::Transport { addr: link.addr, what: "flush", source }),
                None => Ok(()),
            };
        }
        let posted = link.data("flush")?.flush_nbx().map_err(|source| Error::Transport {
            addr: link.addr,
            what: "flush",
            source,
        })?;
        link.wait(posted, self.config.timeout, "flush")
    }

    /// Orders operations: everything issued before completes at its target before anything
    /// issued after.
    pub fn fence(&self) -> Result<()> {
        let inner = self.lock();
        inner.worker.fence().map_err(|source| Error::Transport { addr: inner.links[0].addr, what: "fence", source })
    }

    fn atomic(&self, allocation: &Allocation, offset: u64, op: AtomicOp, value: u64, compare: u64) -> Result<u64> {
        let target = allocation.word(offset)?;
        if let Some(base) = self.direct_base(allocation, "atomic")? {
            let word = self.direct_word(base, offset);
            use std::sync::atomic::Ordering::SeqCst;
            return match op {
                AtomicOp::Add => Ok(word.fetch_add(value, SeqCst)),
                AtomicOp::Swap => Ok(word.swap(value, SeqCst)),
                AtomicOp::CompareSwap => {
                    Ok(word.compare_exchange(compare, value, SeqCst, SeqCst).unwrap_or_else(|old| old))
                }
                AtomicOp::And | AtomicOp::Or | AtomicOp::Xor => {
                    Err(Error::InvalidArgument("bitwise atomics are not offered by the client"))
                }
            };
        }
        let mut inner = self.lock();
        if inner.links[allocation.server].uses_messages() {
            let kind = match op {
                AtomicOp::Add => AtomicKind::FetchAdd,
                AtomicOp::Swap => AtomicKind::Swap,
                AtomicOp::CompareSwap => AtomicKind::CompareSwap,
                AtomicOp::And | AtomicOp::Or | AtomicOp::Xor => {
                    return Err(Error::InvalidArgument("bitwise atomics are not offered by the client"))
                }
            };
            let old = inner.atomic_messages(allocation, offset, kind, value, compare, self.config.timeout)?;
            inner.traffic.atomics += 1;
            return Ok(old);
        }
        let link = &inner.links[allocation.server];
        let (operand, mut reply) = match op {
            AtomicOp::CompareSwap => (compare, value),
            _ => (value, 0),
        };
        // SAFETY: operand and reply live on this frame until the wait returns.
        let posted = unsafe { link.data("atomic")?.atomic_nbx(op, &operand, &mut reply, target, link.rkey()) }
            .map_err(|source| Error::Transport { addr: link.addr, what: "atomic", source })?;
        match posted {
            Posted::Done => inner.note_immediate_completion(),
            posted => inner.links[allocation.server].wait(posted, self.config.timeout, "atomic")?,
        }
        let result = reply;
        inner.traffic.atomics += 1;
        Ok(result)
    }

    /// Atomically adds `value` to the 64-bit word at `offset`; returns the old value.
    #[inline]
    pub fn fetch_add(&self, allocation: &Allocation, offset: u64, value: u64) -> Result<u64> {
        self.atomic(allocation, offset, AtomicOp::Add, value, 0)
    }

    /// Atomically replaces the word; returns the old value.
    pub fn swap(&self, allocation: &Allocation, offset: u64, value: u64) -> Result<u64> {
        self.atomic(allocation, offset, AtomicOp::Swap, value, 0)
    }

    /// Stores `value` if the word equals `compare`; returns the old value either way.
    pub fn compare_swap(&self, allocation: &Allocation, offset: u64, compare: u64, value: u64) -> Result<u64> {
        self.atomic(allocation, offset, AtomicOp::CompareSwap, value, compare)
    }

    /// Atomically reads the word.
    pub fn fetch(&self, allocation: &Allocation, offset: u64) -> Result<u64> {
        self.atomic(allocation, offset, AtomicOp::Add, 0, 0)
    }

    /// Puts `data`, then updates the signal word so that a reader that sees the signal also
    /// sees the data (put, fence, atomic). Data and signal word must be on the same server.
    pub fn put_signal(&self, allocation: &Allocation, offset: u64, data: &[u8], signal: Signal<'_>) -> Result<()> {
        let Signal { word: signal, offset: signal_offset, value, op } = signal;
        if allocation.server != signal.server {
            return Err(Error::InvalidArgument("data and signal word must be on the same server"));
        }
        let target = allocation.target(offset, data.len())?;
        let word = signal.word(signal_offset)?;
        if let (Some(base), Some(signal_base)) =
            (self.direct_base(allocation, "put_signal")?, self.direct_base(signal, "put_signal")?)
        {
            // The SeqCst atomic orders the copy before the signal for every observer.
            self.direct_put(base, offset, data);
            let word = self.direct_word(signal_base, signal_offset);
            use std::sync::atomic::Ordering::SeqCst;
            match op {
                SignalOp::Set => word.store(value, SeqCst),
                SignalOp::Add => {
                    word.fetch_add(value, SeqCst);
                }
            }
            return Ok(());
        }
        let mut inner = self.lock();
        let timeout = self.config.timeout;
        if inner.links[allocation.server].uses_messages() {
            // The server executes messages in order: the data is stored before the signal.
            inner.put_messages(allocation, offset, data, timeout)?;
            let kind = if op == SignalOp::Set { AtomicKind::Swap } else { AtomicKind::FetchAdd };
            inner.atomic_messages(signal, signal_offset, kind, value, 0, timeout)?;
            inner.count_put(data.len());
            inner.traffic.atomics += 1;
            return Ok(());
        }
        let link = &inner.links[allocation.server];
        let (addr, ep) = (link.addr, link.data("put_signal")?);
        let transport = |what| move |source| Error::Transport { addr, what, source };
        // SAFETY: `data` is borrowed until the put is waited for below.
        let put = unsafe { ep.put_nbx(data.as_ptr(), data.len(), target, link.rkey()) }.map_err(transport("put"))?;
        inner.worker.fence().map_err(transport("fence"))?;
        let mut old = value;
        let (atomic_op, reply) = match op {
            SignalOp::Set => (AtomicOp::Swap, &mut old as *mut u64),
            SignalOp::Add => (AtomicOp::Add, std::ptr::null_mut()),
        };
        // SAFETY: `value` and `old` live on this frame until the waits below return.
        let signal_op = unsafe { ep.atomic_nbx(atomic_op, &value, reply, word, link.rkey()) };
        let put_result = link.wait(put, timeout, "put");
        let signal_result = signal_op.map_err(transport("signal")).and_then(|p| link.wait(p, timeout, "signal"));
        put_result?;
        signal_result?;
        inner.traffic.puts += 1;
        inner.traffic.bytes_put += data.len() as u64;
        inner.traffic.atomics += 1;
        Ok(())
    }

    /// Waits until the 64-bit word at `offset` satisfies `compare` against `value`, or
    /// `timeout` passes. Returns the word's value. Polls without holding the client lock
    /// between reads, so other threads keep working.
    pub fn wait_until(
        &self,
        allocation: &Allocation,
        offset: u64,
        compare: Compare,
        value: u64,
        timeout: Duration,
    ) -> Result<u64> {
        let deadline = Instant::now() + timeout;
        let mut polls = 0u32;
        loop {
            let word = self.fetch(allocation, offset)?;
            if compare.holds(word, value) {
                return Ok(word);
            }
            if Instant::now() >= deadline {
                return Err(Error::WaitTimeout { timeout_ms: timeout.as_millis() as u64, last: word });
            }
            polls = polls.saturating_add(1);
            if polls > 64 {
                // Back off: a waiter should not take the server's (or this core's) time.
                std::thread::sleep(Duration::from_micros((polls as u64).min(1000)));
            }
        }
    }

    /// Statistics of server `server`.
    pub fn status(&self, server: usize) -> Result<StatusReply> {
        let mut inner = self.lock();
        match inner.call(server, &Request::Status, "status", self.config.timeout)? {
            Reply::Status(s) => Ok(s),
            other => Err(unexpected(inner.links[server].addr, "status", other)),
        }
    }

    /// The data path this client uses to server `server`.
    pub fn data_path(&self, server: usize) -> Option<DataPath> {
        self.lock().links.get(server).map(Link::path)
    }

    /// One-sided traffic issued by this client so far.
    pub fn traffic(&self) -> TrafficReport {
        let locked = self.lock().traffic;
        self.direct.add_to(locked)
    }

    /// The names the servers gave themselves.
    pub fn server_names(&self) -> Vec<String> {
        self.lock().links.iter().map(|l| l.server_name.clone()).collect()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let report = self.direct.add_to(self.inner.get_mut().traffic);
        let inner = self.inner.get_mut();
        for server in 0..inner.links.len() {
            // Best effort: a server that is gone reclaims through the lease instead.
            let _ = inner.call(server, &Request::Goodbye(report), "goodbye", Duration::from_secs(1));
        }
    }
}

impl Inner {
    fn count_put(&mut self, bytes: usize) {
        self.traffic.puts += 1;
        self.traffic.bytes_put += bytes as u64;
    }

    fn count_get(&mut self, bytes: usize) {
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
        let id = self.request_id();
        self.links[server].call(&self.replies, (id, request), what, timeout, patient)
    }

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
        link.remember_rkey(&grant.rkey)?;
        let live = self.held.entry((server, grant.handle)).or_insert_with(|| Arc::new(AtomicBool::new(true))).clone();
        let link = &self.links[server];
        let local = match link.path() {
            DataPath::SharedMemory => link.rkey().local_ptr(grant.remote_addr).map_or(0, |p| p as usize),
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
        })
    }

    /// Over shared memory, operations complete without progressing the worker, and only
    /// progress delivers the control endpoint's news that the server died. Progress every
    /// [`HEALTH_CHECK_OPS`] immediate completions so a dead server is noticed within a few
    /// operations instead of never (a put into an orphaned segment would be lost silently).
    #[inline]
    fn note_immediate_completion(&mut self) {
        self.unprogressed_ops += 1;
        if self.unprogressed_ops >= HEALTH_CHECK_OPS {
            self.unprogressed_ops = 0;
            self.worker.progress();
        }
    }

    #[inline]
    fn finish(
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

    fn op<'a>(
        &self,
        client: &'a Client,
        server: usize,
        posted: nam_ucx::Result<Posted>,
        what: &'static str,
    ) -> Result<Op<'a>> {
        let addr = self.links[server].addr;
        let request = match posted.map_err(|source| Error::Transport { addr, what, source })? {
            Posted::Done => None,
            Posted::InFlight(request) => Some(request),
        };
        Ok(Op { client, server, request, what, _buffer: PhantomData })
    }
}

fn unexpected(addr: SocketAddr, what: &'static str, reply: Reply) -> Error {
    log::warn!("server {addr} answered {what} with {reply:?}");
    Error::UnexpectedReply { addr, what }
}

/// Asks the server at `addr` for its statistics without authenticating (for `nam status`).
pub fn server_status(addr: SocketAddr, timeout: Duration) -> Result<StatusReply> {
    let transport = |source| Error::Connect { addr, source };
    let context = Context::new(Features::CLIENT).map_err(transport)?;
    let worker = Worker::new(&context).map_err(transport)?;
    let replies: ReplyQueue = Arc::default();
    let sink = replies.clone();
    worker.set_am_handler(AM_ID_REPLY, move |m| sink.lock().push(m.data.unwrap_or(&[]).to_vec())).map_err(transport)?;
    let link = Link::connect(&worker, addr)?;
    match link.call(&replies, (1, &Request::Status), "status", timeout, false)? {
        Reply::Status(s) => Ok(s),
        other => Err(unexpected(addr, "status", other)),
    }
}
