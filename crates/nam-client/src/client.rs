//! The client: connections to memory servers, allocations, one-sided operations.
//!
//! Every data operation is a bounds check on the [`Allocation`], one look-up of its path
//! in the client's [`PathTable`] and one call on that [`Path`]; the paths live in
//! [`crate::path`], the connections they share in [`crate::session`].

use crate::allocation::{AllocOptions, Allocation};
use crate::config::ClientConfig;
use crate::constants::{
    GOODBYE_TIMEOUT, PROBE_BYTES_MAX, PROBE_BYTES_MIN, PROBE_BYTES_PER_SIZE, PROBE_REPS_MAX, PROBE_REPS_MIN,
    PROBE_SIZE_FACTOR,
};
use crate::error::{Error, Result};
use crate::global::GlobalState;
use crate::link::{choose_data_path, DataPath, Link, ReplyQueue};
use crate::lock::Guard;
use crate::op::Op;
use crate::path::{crossover, direct, Atomic, Path, PathTable, ServerPaths, SignalPut, Store, TransferPath};
use crate::session::{unexpected, Inner, Session};
use crate::signal::Signal;
use nam_proto::{
    Alloc, AtomicKind, GlobalAddress, Hello, Reply, Request, StatusReply, TrafficReport, ALLOC_FLAG_PERSISTENT,
    ALLOC_FLAG_SHARED, AM_ID_REPLY,
};
use nam_ucx::{Context, Features, Worker};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A connection to one or several memory servers. Share it between threads by reference
/// or `Arc`: operations serialize on one internal lock (the UCX worker is single-threaded).
///
/// Completion semantics: [`Client::put`] returns when the source buffer may be reused;
/// the data is visible at the server after [`Client::flush`] (or use [`Client::put_sync`]).
/// [`Client::get`] returns with the data. Atomics return when done at the server.
pub struct Client {
    pub(crate) session: Session,
    config: ClientConfig,
    /// Global-address state: server tags, domains, resolved allocations.
    global: GlobalState,
    /// The path of each operation class to each server, fixed after connecting.
    pub(crate) paths: PathTable,
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
        // Wake-up: a waiter sleeps on the worker's event fd until the server's answer comes.
        let features = Features { wakeup: true, ..Features::CLIENT };
        // UCX's TCP data ports only on the devices that lead to the servers (`nam_ucx::devices`).
        let devices = nam_ucx::devices::for_reaching(&config.servers);
        let context = Context::configured(features, config.transports.as_deref(), &devices).map_err(transport)?;
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
            unacked: Default::default(),
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
                    link.open_data_plane(&h.worker_address, path, h.host_id == nam_proto::host_id())?;
                }
                other => return Err(unexpected(addr, "hello", other)),
            }
            inner.links.push(link);
        }
        let links: Vec<(SocketAddr, DataPath)> = inner.links.iter().map(|l| (l.addr, l.path())).collect();
        let mut session = Session::new(inner, config.servers.clone(), config.timeout);
        session.wait_spin = config.wait_spin;
        let mut client = Client { session, config, global: Default::default(), paths: Default::default() };
        let transfers =
            links.iter().enumerate().map(|(server, &(_, path))| client.transfer_split(server, path)).collect();
        client.paths = PathTable::new(&links, transfers);
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
        self.session.lock()
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

    // ---- Data: every operation is a bounds check and a call on its path. ----

    /// Blocking put: returns when `data` may be reused (local completion). A failed put
    /// transfers nothing when it fails its checks, and the target is unchanged.
    #[inline]
    pub fn put(&self, allocation: &Allocation, offset: u64, data: &[u8]) -> Result<()> {
        allocation.target(offset, data.len())?;
        self.paths.transfer(allocation, data.len()).put(&self.session, allocation, offset, data, Store::Cached)
    }

    /// A put whose data bypasses the writer's caches on the direct path; otherwise exactly
    /// [`Client::put`] (UCX RMA, messages). Same checks, same completion (local; a later
    /// flush or fence orders it as it orders a put).
    ///
    /// A put over the direct path is a copy by the calling core into the server's mapped
    /// pool. Made with ordinary stores, each destination cache line is first read from DRAM
    /// (the store needs the line's ownership) and then written back: three bytes moved per
    /// byte put. A write-back of a far-memory cache, a checkpoint or any put the writer will
    /// not read again soon gains nothing from that read. This copies with non-temporal
    /// stores instead (x86-64 `movntdq`): the bytes go to memory without the read, two bytes
    /// moved per byte, and the writer's caches keep their contents. Measured on the
    /// development machine (AMD EPYC, 128 MiB in 64 KiB puts): 12 ms with streaming stores
    /// against 18-20 ms with `memcpy`.
    pub fn put_streaming(&self, allocation: &Allocation, offset: u64, data: &[u8]) -> Result<()> {
        allocation.target(offset, data.len())?;
        self.paths.transfer(allocation, data.len()).put(&self.session, allocation, offset, data, Store::Streaming)
    }

    /// Put with remote completion: the data is visible at the server when this returns.
    pub fn put_sync(&self, allocation: &Allocation, offset: u64, data: &[u8]) -> Result<()> {
        // The put and its flush share the call's deadline.
        let _call = self.session.begin_call();
        self.put(allocation, offset, data)?;
        self.flush_server(allocation.server)
    }

    /// Blocking get.
    #[inline]
    pub fn get(&self, allocation: &Allocation, offset: u64, buffer: &mut [u8]) -> Result<()> {
        allocation.target(offset, buffer.len())?;
        self.paths.transfer_get(allocation, buffer.len()).get(&self.session, allocation, offset, buffer)
    }

    /// Non-blocking put; complete it with [`Op::wait`], [`Op::test`] or [`Client::wait_all`].
    pub fn put_nb<'a>(&'a self, allocation: &Allocation, offset: u64, data: &'a [u8]) -> Result<Op<'a>> {
        allocation.target(offset, data.len())?;
        self.paths.transfer(allocation, data.len()).put_nb(&self.session, allocation, offset, data)
    }

    /// Non-blocking get into `buffer`; read it only after the [`Op`] completes.
    pub fn get_nb<'a>(&'a self, allocation: &Allocation, offset: u64, buffer: &'a mut [u8]) -> Result<Op<'a>> {
        allocation.target(offset, buffer.len())?;
        self.paths.transfer_get(allocation, buffer.len()).get_nb(&self.session, allocation, offset, buffer)
    }

    /// Non-blocking put without a handle (OpenSHMEM's `shmem_putmem_nbi`): returns at once;
    /// the next [`Client::quiet`] (or flush of the server) completes it, remotely. Checked
    /// as [`Client::put`] before anything is posted.
    ///
    /// # Safety
    /// `data` must stay valid and unmodified until that flush returns (the transport may read
    /// it until then).
    pub unsafe fn put_nbi(&self, allocation: &Allocation, offset: u64, data: &[u8]) -> Result<()> {
        allocation.target(offset, data.len())?;
        let path = self.paths.transfer(allocation, data.len());
        path.put_nbi(&self.session, allocation, offset, (data.as_ptr(), data.len()))
    }

    /// Non-blocking get without a handle (OpenSHMEM's `shmem_getmem_nbi`): `buffer` holds the
    /// data once the next [`Client::quiet`] (or flush of the server) returns.
    ///
    /// # Safety
    /// `buffer` must stay valid, and must not be read, until that flush returns.
    pub unsafe fn get_nbi(&self, allocation: &Allocation, offset: u64, buffer: &mut [u8]) -> Result<()> {
        allocation.target(offset, buffer.len())?;
        let path = self.paths.transfer_get(allocation, buffer.len());
        path.get_nbi(&self.session, allocation, offset, (buffer.as_mut_ptr(), buffer.len()))
    }

    /// Waits for every operation; returns the first error after all have finished.
    pub fn wait_all<'a>(&self, ops: impl IntoIterator<Item = Op<'a>>) -> Result<()> {
        // One deadline for the whole set.
        let _call = self.session.begin_call();
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
        // One deadline for all the servers, not one each; a single server's flush keeps one
        // for its own steps, and needs no clock read when it has nothing to complete.
        let _call = (self.server_count() > 1).then(|| self.session.begin_call());
        (0..self.server_count()).try_for_each(|s| self.flush_server(s))
    }

    /// Remote completion of every operation issued so far to server `server`. Direct
    /// stores need none; the link's path (RMA or messages) completes the rest.
    pub fn flush_server(&self, server: usize) -> Result<()> {
        if server >= self.server_count() {
            return Err(Error::InvalidArgument("server index out of range"));
        }
        self.paths.link(server).flush(&self.session, server)
    }

    /// Remote completion of every operation this client issued, on every server:
    /// OpenSHMEM's `shmem_quiet` (the same as [`Client::flush`]). Reports the first refusal
    /// of a message-path put that returned before the server answered it.
    pub fn quiet(&self) -> Result<()> {
        self.flush()
    }

    /// Orders operations: everything issued before completes at its target before anything
    /// issued after.
    pub fn fence(&self) -> Result<()> {
        let inner = self.lock();
        inner.worker.fence().map_err(|source| Error::Transport { addr: inner.links[0].addr, what: "fence", source })
    }

    #[inline]
    fn atomic(&self, allocation: &Allocation, offset: u64, op: AtomicKind, value: u64, compare: u64) -> Result<u64> {
        allocation.word(offset)?;
        self.paths.word(allocation).atomic(&self.session, allocation, offset, Atomic { op, value, compare })
    }

    /// Atomically adds `value` to the 64-bit word at `offset`; returns the old value.
    #[inline]
    pub fn fetch_add(&self, allocation: &Allocation, offset: u64, value: u64) -> Result<u64> {
        self.atomic(allocation, offset, AtomicKind::FetchAdd, value, 0)
    }

    /// Atomically replaces the word; returns the old value.
    pub fn swap(&self, allocation: &Allocation, offset: u64, value: u64) -> Result<u64> {
        self.atomic(allocation, offset, AtomicKind::Swap, value, 0)
    }

    /// Stores `value` if the word equals `compare`; returns the old value either way.
    pub fn compare_swap(&self, allocation: &Allocation, offset: u64, compare: u64, value: u64) -> Result<u64> {
        self.atomic(allocation, offset, AtomicKind::CompareSwap, value, compare)
    }

    /// Atomically reads the word.
    pub fn fetch(&self, allocation: &Allocation, offset: u64) -> Result<u64> {
        self.atomic(allocation, offset, AtomicKind::FetchAdd, 0, 0)
    }

    /// Puts `data`, then updates the signal word so that a reader that sees the signal also
    /// sees the data (put, fence, atomic). Data and signal word must be on the same server.
    pub fn put_signal(&self, allocation: &Allocation, offset: u64, data: &[u8], signal: Signal<'_>) -> Result<()> {
        let Signal { word, offset: signal_offset, value, op } = signal;
        if allocation.server != word.server {
            return Err(Error::InvalidArgument("data and signal word must be on the same server"));
        }
        allocation.target(offset, data.len())?;
        word.word(signal_offset)?;
        // Both ends mapped: stores and a CPU atomic; else the link's path for both.
        let path = match (self.paths.word(allocation), self.paths.word(word)) {
            (Path::Direct, Path::Direct) => Path::Direct,
            _ => self.paths.link(allocation.server),
        };
        let put = SignalPut { data: allocation, offset, bytes: data, word, word_offset: signal_offset, value, op };
        path.put_signal(&self.session, put)
    }

    // ---- The direct path's extras: reading mapped bytes in place. ----

    /// Where bytes `[offset, offset + len)` of `allocation` lie in this process, for reading
    /// them in place without a copy (whatever the size; [`Client::read_in_place`] follows a
    /// get's choice of path instead), when its server's pool is mapped here (a same-host
    /// server on the shared-memory data path); `None` otherwise (network, messages). Counted
    /// as a direct get of `len` bytes. The pointer stays valid while the client lives and the
    /// allocation is not freed; what it reads are plain loads of the server's memory, as
    /// racy against other writers as a get (readers that need a consistent snapshot copy).
    pub fn mapped(&self, allocation: &Allocation, offset: u64, len: usize) -> Result<Option<*const u8>> {
        allocation.target(offset, len)?;
        let Some(base) = direct::base(&self.session, allocation, "get")? else { return Ok(None) };
        self.session.count_direct_get(len);
        Ok(Some((base + offset as usize) as *const u8))
    }

    /// Reads `len` bytes at `offset` of `allocation` where they lie, when a get of that size
    /// would take the direct path: calls `read` with this process's address of the first
    /// byte (valid for `len` bytes during the call), counts a get of `len` bytes, and returns
    /// `Some` of what `read` returned. Returns `Ok(None)` without calling `read` when the
    /// allocation is reached through UCX; use [`Client::get`] then.
    ///
    /// For a consumer that copies the bytes once more anyway (a page-fault handler that
    /// installs them with `UFFDIO_COPY`, a checksum): it saves the copy into a buffer that a
    /// get would make. The server's memory may change under a concurrent writer exactly as
    /// it may during a get; `read` must copy what it needs before it returns.
    #[inline]
    pub fn read_in_place<R>(
        &self,
        allocation: &Allocation,
        offset: u64,
        len: usize,
        read: impl FnOnce(*const u8) -> R,
    ) -> Result<Option<R>> {
        if self.paths.transfer_get(allocation, len) != Path::Direct {
            allocation.target(offset, len)?;
            return Ok(None);
        }
        Ok(self.mapped(allocation, offset, len)?.map(read))
    }

    // ---- Path choice. ----

    /// Whether a `len`-byte put to `allocation` takes the direct path (and is so visible at
    /// the server when it returns, without a flush).
    #[inline]
    pub fn takes_direct_path(&self, allocation: &Allocation, len: usize) -> bool {
        self.paths.transfer(allocation, len) == Path::Direct
    }

    /// The path atomics and signals on `allocation` take.
    pub(crate) fn word_path(&self, allocation: &Allocation) -> Path {
        self.paths.word(allocation)
    }

    /// The path chosen for each server's operations when the client connected, one row per
    /// configured server in order (read-only: the table is fixed for the client's life).
    /// `nam status` prints it.
    pub fn path_table(&self) -> &[ServerPaths] {
        self.paths.reports()
    }

    /// The transfer-path split to server `server`, if the pool is mapped here (`None` for a
    /// server reached over the network or through messages).
    pub fn transfer_path(&self, server: usize) -> Option<TransferPath> {
        self.paths.reports().get(server).and_then(|r| r.transfer.clone())
    }

    /// The one-sided traffic that took the direct path (a part of [`Client::traffic`]).
    pub fn direct_traffic(&self) -> TrafficReport {
        self.session.direct.add_to(TrafficReport::default())
    }

    /// The split between the direct path and RMA to server `server` reached by `path`:
    /// configured, or measured; `None` unless the server shares this host's memory.
    fn transfer_split(&self, server: usize, path: DataPath) -> Option<TransferPath> {
        if path != DataPath::SharedMemory {
            return None;
        }
        Some(match self.config.direct_max_bytes {
            Some(bytes) => TransferPath { direct_max_bytes: bytes, measured: false, probes: Vec::new() },
            // A failed probe (no room for the scratch allocation, say) must not fail the
            // connection: keep the direct path for every size, and say so.
            None => self.measure_crossover(server).unwrap_or_else(|e| {
                log::warn!("server {server}: cannot measure the direct/RMA crossover ({e}); direct at every size");
                TransferPath { direct_max_bytes: u64::MAX, measured: false, probes: Vec::new() }
            }),
        })
    }

    /// Times puts of [`PROBE_BYTES_MIN`] to [`PROBE_BYTES_MAX`] both ways on a scratch
    /// allocation. The crossover is the largest size below the smallest one from which RMA
    /// stays faster.
    fn measure_crossover(&self, server: usize) -> Result<TransferPath> {
        let scratch =
            self.alloc(PROBE_BYTES_MAX, &AllocOptions { server: Some(server), align: 4096, ..Default::default() })?;
        if !scratch.is_direct() {
            self.free(&scratch)?;
            return Ok(TransferPath { direct_max_bytes: 0, measured: true, probes: Vec::new() });
        }
        let source = vec![0x5au8; PROBE_BYTES_MAX as usize];
        let mut probes = Vec::new();
        let mut size = PROBE_BYTES_MIN;
        while size <= PROBE_BYTES_MAX {
            let reps = (PROBE_BYTES_PER_SIZE / size).clamp(PROBE_REPS_MIN, PROBE_REPS_MAX) as u32;
            let data = &source[..size as usize];
            let time = |path: Path| -> Result<f64> {
                path.put(&self.session, &scratch, 0, data, Store::Cached)?; // warm
                let t0 = Instant::now();
                for _ in 0..reps {
                    path.put(&self.session, &scratch, 0, data, Store::Cached)?;
                }
                Ok(t0.elapsed().as_nanos() as f64 / reps as f64)
            };
            let (direct, rma) = (time(Path::Direct)?, time(Path::Rma)?);
            probes.push((size, direct, rma));
            size *= PROBE_SIZE_FACTOR;
        }
        Path::Rma.flush(&self.session, server)?;
        self.free(&scratch)?;
        Ok(TransferPath { direct_max_bytes: crossover(&probes), measured: true, probes })
    }

    // ---- Global addresses (state and protocol in crate::global). ----

    /// The global address of byte `offset` of `allocation`: pass it to any process (through
    /// MPI, a file, the environment) whose client acts for the same tenant.
    pub fn global_address(&self, allocation: &Allocation, offset: u64) -> Result<GlobalAddress> {
        self.global.address(&self.session, allocation, offset)
    }

    /// The allocation an address points into and the offset in it. The first call for an
    /// allocation asks its server (which refuses another domain's or tenant's allocation with
    /// [`nam_proto::Status::UnknownHandle`], as if it did not exist, and the caller's own
    /// tenant's freed allocation with [`nam_proto::Status::FreedHandle`]); later calls are answered from a cache. The client
    /// holds the allocation from then on: [`Client::free`] on the result releases it.
    pub fn resolve(&self, address: GlobalAddress) -> Result<(Allocation, u64)> {
        self.global.resolve(&self.session, address)
    }

    /// Forgets the cached resolution of the allocation `address` points into (after
    /// [`Client::free`] of it, so a later use asks the server again).
    pub fn forget_global(&self, address: GlobalAddress) {
        self.global.forget(address)
    }

    /// Put `data` at a global address (local completion, as [`Client::put`]).
    pub fn put_global(&self, address: GlobalAddress, data: &[u8]) -> Result<()> {
        let (allocation, offset) = self.resolve(address)?;
        self.put(&allocation, offset, data)
    }

    /// Put with remote completion at a global address.
    pub fn put_global_sync(&self, address: GlobalAddress, data: &[u8]) -> Result<()> {
        let (allocation, offset) = self.resolve(address)?;
        self.put_sync(&allocation, offset, data)
    }

    /// Get from a global address.
    pub fn get_global(&self, address: GlobalAddress, buffer: &mut [u8]) -> Result<()> {
        let (allocation, offset) = self.resolve(address)?;
        self.get(&allocation, offset, buffer)
    }

    /// Atomic fetch-and-add on the 64-bit word at a global address; returns the old value.
    pub fn fetch_add_global(&self, address: GlobalAddress, value: u64) -> Result<u64> {
        let (allocation, offset) = self.resolve(address)?;
        self.fetch_add(&allocation, offset, value)
    }

    /// Atomic compare-and-swap on the word at a global address; returns the old value.
    pub fn compare_swap_global(&self, address: GlobalAddress, compare: u64, value: u64) -> Result<u64> {
        let (allocation, offset) = self.resolve(address)?;
        self.compare_swap(&allocation, offset, compare, value)
    }

    // ---- Reports. ----

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
        self.session.traffic()
    }

    /// The names the servers gave themselves.
    pub fn server_names(&self) -> Vec<String> {
        self.lock().links.iter().map(|l| l.server_name.clone()).collect()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let report = self.session.traffic();
        let inner = self.session.get_mut();
        for server in 0..inner.links.len() {
            // Best effort: a server that is gone reclaims through the lease instead.
            let _ = inner.call(server, &Request::Goodbye(report), "goodbye", GOODBYE_TIMEOUT);
        }
    }
}

/// Asks the server at `addr` for its statistics without authenticating: a stranger's answer,
/// which says only that the server is alive and speaks this protocol (every figure zero, no
/// name). [`server_status_as`] authenticates first.
pub fn server_status(addr: SocketAddr, timeout: Duration) -> Result<StatusReply> {
    server_status_as(addr, &StatusCredentials::Stranger, timeout)
}

/// Who asks a server for its status, and so what it answers (`docs/protocol.md`, Status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusCredentials {
    /// No Hello: liveness and version only.
    Stranger,
    /// A tenant's client: that tenant's usage, quota and clients only.
    Tenant {
        /// Tenant name.
        tenant: String,
        /// Its token.
        token: String,
    },
    /// The server's administrator (its configured admin token): every tenant and counter.
    Admin {
        /// The admin token.
        token: String,
    },
}

impl StatusCredentials {
    /// From the environment, where clients take their credentials: the admin token in
    /// [`crate::config::ADMIN_TOKEN_VAR`] if set and not empty (no server accepts an empty
    /// one), else `NAM_TENANT`/`NAM_TOKEN` (the default tenant with an empty token when they
    /// are unset, as for every client).
    pub fn from_env() -> StatusCredentials {
        if let Some(token) = std::env::var(crate::config::ADMIN_TOKEN_VAR).ok().filter(|t| !t.is_empty()) {
            return StatusCredentials::Admin { token };
        }
        let mut config = ClientConfig::new(Vec::new());
        if let Ok(t) = std::env::var("NAM_TENANT") {
            config.tenant = t;
        }
        if let Ok(t) = std::env::var("NAM_TOKEN") {
            config.token = t;
        }
        StatusCredentials::Tenant { tenant: config.tenant, token: config.token }
    }
}

/// Asks the server at `addr` for its statistics as `who` (for `nam status` and tests): a
/// Hello first unless `who` is a stranger, then Status, then (a tenant) Goodbye, so the query
/// leaves nothing held on the server.
pub fn server_status_as(addr: SocketAddr, who: &StatusCredentials, timeout: Duration) -> Result<StatusReply> {
    let transport = |source| Error::Connect { addr, source };
    let devices = nam_ucx::devices::for_reaching(&[addr]);
    let context = Context::configured(Features::CLIENT, None, &devices).map_err(transport)?;
    let worker = Worker::new(&context).map_err(transport)?;
    let replies: ReplyQueue = Arc::default();
    let sink = replies.clone();
    worker.set_am_handler(AM_ID_REPLY, move |m| sink.lock().push(m.data.unwrap_or(&[]).to_vec())).map_err(transport)?;
    let link = Link::connect(&worker, addr)?;
    let (tenant, token) = match who {
        StatusCredentials::Stranger => (None, ""),
        StatusCredentials::Tenant { tenant, token } => (Some(tenant.as_str()), token.as_str()),
        StatusCredentials::Admin { token } => (Some(nam_proto::ADMIN_TENANT), token.as_str()),
    };
    if let Some(tenant) = tenant {
        let hello = Request::Hello(Hello {
            tenant: tenant.to_string(),
            token: token.to_string(),
            client_name: "nam status".into(),
            pid: std::process::id(),
        });
        match link.call(&replies, (1, &hello), "hello", timeout, false)? {
            Reply::Hello(_) => {}
            other => return Err(unexpected(addr, "hello", other)),
        }
    }
    let status = match link.call(&replies, (2, &Request::Status), "status", timeout, false)? {
        Reply::Status(s) => s,
        other => return Err(unexpected(addr, "status", other)),
    };
    if matches!(who, StatusCredentials::Tenant { .. }) {
        // A tenant's connection that just vanished would be held for a lease.
        link.call(&replies, (3, &Request::Goodbye(TrafficReport::default())), "goodbye", timeout, false)?;
    }
    Ok(status)
}
