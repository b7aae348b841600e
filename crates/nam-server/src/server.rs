//! The server: accepts clients, answers control requests, watches for failed peers,
//! reclaims their allocations after a lease, and progresses UCX (which serves one-sided
//! operations that the transport emulates, such as RMA over TCP).

use crate::alloc_engine::checked_range;
use crate::config::ServerConfig;
use crate::constants::{HOUSEKEEPING_INTERVAL, SLEEP_FAILED_BACKOFF, SLEEP_MAX};
use crate::engine::{Caller, EngineCtx, Engines};
use crate::manager::{Manager, Refusal};
use crate::pool::{Pool, PoolError, PoolMapper};
use nam_proto::limits::CLIENTS_MAX;
use nam_proto::{
    decode_header, HelloReply, Reply, Request, Status, StatusReply, TrafficReport, AM_ID_REPLY, AM_ID_REQUEST,
};
use nam_ucx::{Context, Endpoint, EndpointId, Features, Listener, Posted, RkeyLayout, Worker};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

mod manifest;
mod sockets;

#[cfg(feature = "fuzzing")]
pub(crate) use manifest::check_manifest;
pub use manifest::manifest_path_for;
use manifest::{restore_manifest, write_manifest};

/// Why the server could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// UCX could not be initialised or could not listen.
    #[error("{what}: {source}")]
    Transport {
        /// What was being set up.
        what: String,
        /// UCX's error.
        source: nam_ucx::Error,
    },
    /// The pool could not be mapped.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The manifest of a file-backed pool could not be read or written.
    #[error("manifest {path}: {message}")]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
}

struct Connection {
    client_id: u64,
    endpoint: Endpoint,
    label: String,
    authenticated: bool,
    /// Authenticated with the admin token ([`nam_proto::ADMIN_TENANT`]): may read the whole
    /// server's status, and act for no tenant.
    admin: bool,
    released: bool,
    /// Where it came from (per-source limits).
    source: Option<IpAddr>,
    /// When it was accepted (the handshake deadline).
    accepted_at: Instant,
    /// Reply bytes the server holds for it, not yet taken (its used credit).
    queued_bytes: u64,
    /// Replies the server holds for it, counted.
    queued_replies: u32,
}

/// A reply UCX has not finished sending: its buffer, whom it is for, since when.
struct Queued {
    request: nam_ucx::Request,
    bytes: Vec<u8>,
    ep: EndpointId,
    /// The client it is for: an endpoint id (UCX's pointer) may be reused by a later
    /// connection once the client's is closed, and that one's credit is not refunded.
    client: u64,
    at: Instant,
}

#[derive(Default)]
struct Counters {
    clients_total: u64,
    requests: u64,
    request_errors: u64,
    bytes_in: u64,
    bytes_out: u64,
    leases_reclaimed: u64,
    reported: TrafficReport,
    /// Clients disconnected for exceeding their credit or not taking replies in time.
    clients_cut_off: u64,
    /// Connections refused by the connection limits, or closed at the handshake deadline.
    connections_refused: u64,
    /// Sockets closed that UCX accepted but never completed (`sockets`).
    sockets_reaped: u64,
    /// Most reply bytes held at once.
    queued_bytes_high: u64,
}

type Inbox = Arc<Mutex<VecDeque<(Option<EndpointId>, Vec<u8>)>>>;

/// The state the engines share ([`EngineCtx`]), borrowed from the server's fields one by one
/// so that the engines list and the connections stay free to borrow beside it.
macro_rules! engine_ctx {
    ($server:expr) => {
        EngineCtx {
            manager: &mut $server.manager,
            pool: &$server.pool,
            worker: &$server.worker,
            address_reference: &$server.address_reference,
            rkey_layout: &$server.rkey_layout,
            server_tag: $server.server_tag,
        }
    };
}

/// A running memory server. Create with [`Server::bind`], then call [`Server::run`].
pub struct Server {
    config: ServerConfig,
    connections: HashMap<EndpointId, Connection>,
    sends: Vec<Queued>,
    /// Replies to this turn's requests, sent after the engines' late replies of the same
    /// turn ([`Server::run`]).
    held: Vec<(EndpointId, Vec<u8>)>,
    /// Reply bytes held for every client together (the sum of their `queued_bytes`).
    queued_bytes: u64,
    reaper: sockets::SocketReaper,
    lingering: Vec<(u64, Instant)>,
    inbox: Inbox,
    manager: Manager,
    engines: Engines,
    server_tag: u32,
    counters: Counters,
    next_client_id: u64,
    manifest_path: Option<PathBuf>,
    worker_address: Vec<u8>,
    /// What a same-host peer's worker address is checked against ([`nam_ucx::devices::address_reference`]).
    address_reference: Vec<u8>,
    rkey_layout: RkeyLayout,
    listener: Listener,
    pool: Arc<Pool>,
    worker: Worker,
    _context: Context,
}

impl Server {
    /// Maps the pool, restores a file-backed pool's manifest, and starts listening.
    pub fn bind(config: ServerConfig) -> Result<Server, ServerError> {
        config.validate()?;
        let transport = |what: &str| {
            let what = what.to_string();
            move |source| ServerError::Transport { what, source }
        };
        let device_settings = nam_ucx::devices::for_listening_on(config.listen.ip());
        let context = Context::configured(Features::SERVER, None, &device_settings)
            .map_err(transport("cannot initialise UCX"))?;
        let worker = Worker::new(&context).map_err(transport("cannot create a UCX worker"))?;
        let mut manager = Manager::new(config.capacity_bytes, &config.tenants);
        let manifest_path = config.backing.as_ref().map(|b| manifest_path_for(b));
        // The manifest is read (and a backing file without one refused) before the file is
        // opened, so that a refused start leaves the file exactly as it was.
        if let (Some(backing), Some(path)) = (&config.backing, &manifest_path) {
            if !config.reinit_pool {
                restore_manifest(&mut manager, backing, path, config.capacity_bytes)?;
            }
        }
        let pool = match &config.backing {
            Some(path) => Pool::file_backed(&context, path, config.capacity_bytes, config.reinit_pool)?,
            None => Pool::allocate(&context, config.capacity_bytes)?,
        };
        // The restored arenas' segments, each mapped on its own; the manager maps every
        // later one through the pool.
        let pool = Arc::new(pool);
        for (tenant, base, len) in manager.segments() {
            pool.map_segment(&tenant, base, len)?;
        }
        manager.set_mapper(Box::new(PoolMapper(pool.clone())));
        // Every backing file in use has a manifest from now on, so a later start can tell a
        // pool it made from one whose manifest was lost.
        if let Some(path) = &manifest_path {
            write_manifest(path, &manager.manifest())?;
        }
        let inbox: Inbox = Arc::default();
        let sink = inbox.clone();
        worker
            .set_am_handler(AM_ID_REQUEST, move |m| {
                sink.lock().unwrap().push_back((m.reply_ep, m.data.unwrap_or(&[]).to_vec()))
            })
            .map_err(transport("cannot register the request handler"))?;
        let worker_address = worker.address().map_err(transport("cannot query the worker address"))?;
        let address_reference = nam_ucx::devices::address_reference(&device_settings, &worker_address)
            .map_err(transport("cannot learn this host's UCX address layout"))?;
        let rkey_layout =
            RkeyLayout::of_context(&context).map_err(transport("cannot learn the layout of this UCX's remote keys"))?;
        let listener = Listener::bind(&worker, config.listen)
            .map_err(transport(&format!("cannot listen on {}", config.listen)))?;
        let server_tag = nam_proto::address::server_tag(&config.name, &listener.address().to_string());
        let reaper = sockets::SocketReaper::new(listener.address().port());
        // The worker's own segments (UCX's shared-memory receive queues) are the server
        // user's alone too, like the arenas' (`Pool::map_segment`).
        crate::pool::make_shared_memory_private().map_err(|message| PoolError::Private { message })?;
        Ok(Server {
            config,
            connections: HashMap::new(),
            sends: Vec::new(),
            held: Vec::new(),
            queued_bytes: 0,
            reaper,
            lingering: Vec::new(),
            inbox,
            manager,
            engines: Engines::new(),
            server_tag,
            counters: Counters::default(),
            next_client_id: 1,
            manifest_path,
            worker_address,
            address_reference,
            rkey_layout,
            listener,
            pool,
            worker,
            _context: context,
        })
    }

    /// The address actually listened on.
    pub fn address(&self) -> SocketAddr {
        self.listener.address()
    }

    /// Serves until `stop` becomes true. Busy-polls while there is traffic and for
    /// `idle_spin` after it, then sleeps on the worker's event fd.
    pub fn run(&mut self, stop: &AtomicBool) -> Result<(), ServerError> {
        let mut last_busy = Instant::now();
        let mut housekeeping_at = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let mut busy = self.worker.progress() > 0;
            busy |= self.accept_connections();
            busy |= self.handle_requests();
            let (engines, mut ctx) = self.engines_and_ctx();
            busy |= engines.poll(&mut ctx);
            // The late replies first: a watch answered because a request of this turn
            // changed its word wakes its waiter one send earlier than if the request's own
            // reply (which its sender may not even wait for: a put-with-signal) went first.
            let late = self.send_late_replies();
            self.send_held_replies();
            busy |= late;
            let now = Instant::now();
            if !busy || now >= housekeeping_at {
                self.reap_sends(now);
                self.detect_failed_clients(now);
                self.reap_anonymous(now);
                self.expire_leases(now);
                self.save_manifest()?;
                housekeeping_at = now + HOUSEKEEPING_INTERVAL;
            }
            if busy {
                last_busy = now;
            } else if now.duration_since(last_busy) < self.config.idle_spin {
                // Spinning, but let a client on this core run (oversubscribed nodes).
                std::thread::yield_now();
            } else {
                self.sleep(now);
            }
        }
        self.save_manifest()?;
        Ok(())
    }

    /// Puts everything a restart needs on disk: the manifest and a file-backed pool's bytes.
    /// [`Server::run`] saves the manifest when it stops; a caller about to end the process
    /// without dropping the server (as `nam serve` does) calls this first.
    pub fn sync(&mut self) -> Result<(), ServerError> {
        self.save_manifest()?;
        self.pool.sync()?;
        Ok(())
    }

    /// Sleeps on the worker's event fd until traffic arrives, the next lease expires or
    /// [`SLEEP_MAX`] passes, unless an engine finds work while preparing for it.
    fn sleep(&mut self, now: Instant) {
        let wake_at = self.next_lease_expiry().into_iter().chain(self.engines.next_deadline()).min();
        let sleep = wake_at.map_or(SLEEP_MAX, |t| t.saturating_duration_since(now).min(SLEEP_MAX));
        let (engines, mut ctx) = self.engines_and_ctx();
        if !engines.before_sleep(&mut ctx) {
            if let Err(e) = self.worker.wait_for_events(sleep) {
                log::warn!("cannot sleep on the worker event fd, polling instead: {e}");
                std::thread::sleep(SLEEP_FAILED_BACKOFF);
            }
        }
        let (engines, mut ctx) = self.engines_and_ctx();
        engines.after_sleep(&mut ctx);
    }

    /// The engines, and the server state they share, borrowed apart.
    fn engines_and_ctx(&mut self) -> (&mut Engines, EngineCtx<'_>) {
        (&mut self.engines, engine_ctx!(self))
    }

    fn accept_connections(&mut self) -> bool {
        let requests = self.listener.take_requests();
        let any = !requests.is_empty();
        for request in requests {
            let source = request.client_addr().map(|a| a.ip());
            if let Some(why) = self.refuse_connection(source) {
                log::warn!("refusing a connection from {source:?}: {why}");
                self.counters.connections_refused += 1;
                request.reject();
                continue;
            }
            match Endpoint::accept(&self.worker, request) {
                Ok(endpoint) => {
                    let client_id = self.next_client_id;
                    self.next_client_id += 1;
                    self.counters.clients_total += 1;
                    let connection = Connection {
                        client_id,
                        endpoint,
                        label: String::new(),
                        authenticated: false,
                        admin: false,
                        released: false,
                        source,
                        accepted_at: Instant::now(),
                        queued_bytes: 0,
                        queued_replies: 0,
                    };
                    self.connections.insert(connection.endpoint.id(), connection);
                }
                Err(e) => log::warn!("cannot accept a connection: {e}"),
            }
        }
        any
    }

    /// Why a connection from `source` must be refused, if it must: the connection limits
    /// (overall, per source, and of connections not yet authenticated per source). Counting
    /// walks the connections, at most `limits.connections` of them, once per new connection.
    fn refuse_connection(&self, source: Option<IpAddr>) -> Option<String> {
        let limits = &self.config.limits;
        let total = self.connections.len();
        if total >= limits.connections.min(CLIENTS_MAX) {
            return Some(format!("{total} connections, the limit"));
        }
        let (mut from_source, mut pending) = (0, 0);
        for c in self.connections.values().filter(|c| c.source == source) {
            from_source += 1;
            pending += usize::from(!c.authenticated);
        }
        if from_source >= limits.connections_per_source {
            return Some(format!("{from_source} connections from this address, the limit"));
        }
        if pending >= limits.pending_per_source {
            return Some(format!("{pending} connections from this address not yet authenticated, the limit"));
        }
        None
    }

    /// Closes connections that did not authenticate within the handshake deadline (a
    /// `Status` is answered to anonymous peers too; `nam status` then closes), and the
    /// sockets UCX accepted but never completed (`sockets`).
    fn reap_anonymous(&mut self, now: Instant) {
        let deadline = self.config.limits.handshake_timeout;
        let late: Vec<EndpointId> = self
            .connections
            .iter()
            .filter(|(_, c)| !c.authenticated && !c.released && now.duration_since(c.accepted_at) >= deadline)
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            self.counters.connections_refused += 1;
            self.cut_off(id, &format!("not authenticated within {deadline:?}"));
        }
        let reaped = self.reaper.scan(now, deadline, self.config.limits.pending_per_source);
        self.counters.sockets_reaped += reaped.closed + reaped.silent;
    }

    /// Disconnects a client the server will not serve any more (credit exceeded, a reply
    /// not taken in time, no handshake): its endpoint is force-closed, which completes its
    /// queued replies with errors and frees them, and its session ends as a vanished
    /// client's does (allocations kept for the lease).
    fn cut_off(&mut self, ep: EndpointId, why: &str) {
        let Some(c) = self.connections.remove(&ep) else { return };
        log::warn!("client {} ({}) disconnected: {why}", c.client_id, c.label);
        let lease_until = (c.authenticated && !c.released).then(|| Instant::now() + self.config.lease);
        self.client_gone(c.client_id, lease_until);
        // Its queued replies complete with errors now; the next housekeeping frees them.
        c.endpoint.abort();
    }

    /// Whether `ep` has used its credit: a request from it now is one more than a client
    /// that waits for its replies ever has outstanding. O(1): two counters.
    #[inline]
    fn over_credit(&self, ep: EndpointId) -> Option<String> {
        let c = &self.connections[&ep];
        let limits = &self.config.limits;
        if c.queued_bytes >= limits.client_reply_bytes || c.queued_replies >= limits.client_requests {
            return Some(format!(
                "asked for more while {} replies ({} bytes) it had not taken were queued (credit {} replies, {} bytes)",
                c.queued_replies, c.queued_bytes, limits.client_requests, limits.client_reply_bytes
            ));
        }
        None
    }

    /// Serves the requests that arrived; their replies are held for
    /// [`Server::send_held_replies`], after the engines' late replies of the turn.
    fn handle_requests(&mut self) -> bool {
        let batch: Vec<_> = self.inbox.lock().unwrap().drain(..).collect();
        let any = !batch.is_empty();
        // Counted and logged once per batch: a client cut off mid-flood sends thousands.
        let mut unknown = 0u64;
        for (reply_ep, bytes) in batch {
            self.counters.requests += 1;
            self.counters.bytes_in += bytes.len() as u64;
            let Some(ep) = reply_ep.filter(|ep| self.connections.contains_key(ep)) else {
                self.counters.request_errors += 1;
                unknown += 1;
                continue;
            };
            if let Some(why) = self.over_credit(ep) {
                self.counters.request_errors += 1;
                self.counters.clients_cut_off += 1;
                self.cut_off(ep, &why);
                continue;
            }
            let (kind, request_id, mut reply) = self.answer(ep, &bytes);
            if self.engines.take_deferred() {
                continue;
            }
            // A persistent allocation made or freed is in the manifest before the client
            // hears of it: an acknowledged one survives a kill -9 right after (found by the
            // soak test). A no-op unless the request changed the persistent set.
            if let Err(e) = self.save_manifest() {
                log::error!("{e}");
                reply = Reply::Error { status: Status::Internal, message: format!("not recorded durably: {e}") };
            }
            if matches!(reply, Reply::Error { .. }) {
                self.counters.request_errors += 1;
            }
            self.held.push((ep, reply.encode(kind, request_id)));
        }
        if unknown > 0 {
            log::warn!("dropped {unknown} requests from unknown (closed) endpoints");
        }
        any
    }

    /// Decodes one request and computes its reply; never trusts a field unchecked.
    fn answer(&mut self, ep: EndpointId, bytes: &[u8]) -> (u16, u64, Reply) {
        let (kind, request_id) = match decode_header(bytes) {
            Ok((header, _)) => (header.kind, header.request_id),
            Err(e @ nam_proto::DecodeError::Version { .. }) => {
                let (kind, id) = nam_proto::peek_foreign_version(bytes).unwrap_or((0, 0));
                return (
                    kind & !nam_proto::REPLY_BIT,
                    id,
                    Reply::Error { status: Status::VersionMismatch, message: e.to_string() },
                );
            }
            Err(e) => return (0, 0, malformed(e)),
        };
        // Puts are the bulk of the message data path: write the payload straight from the
        // message instead of decoding it into a request first.
        match nam_proto::decode_put(bytes) {
            Ok(Some(put)) => return (kind, request_id, self.execute_put(ep, put)),
            Ok(None) => {}
            Err(e) => return (kind, request_id, malformed(e)),
        }
        let request = match Request::decode(bytes) {
            Ok((_, request)) => request,
            Err(e) => return (kind, request_id, malformed(e)),
        };
        let reply = match self.execute(ep, request_id, request) {
            Ok(reply) => reply,
            Err(refusal) => {
                log::info!("client {}: {refusal}", self.connections[&ep].client_id);
                Reply::Error { status: refusal.status, message: refusal.message }
            }
        };
        (kind, request_id, reply)
    }

    /// Serves one request: the session's own (hello, status, goodbye) here, every other
    /// one by the engine that takes it.
    fn execute(&mut self, ep: EndpointId, request_id: u64, request: Request) -> Result<Reply, Refusal> {
        let connection = self.connections.get_mut(&ep).expect("checked by caller");
        if !connection.authenticated && !matches!(request, Request::Hello(_) | Request::Status) {
            if connection.admin {
                return Err(Refusal {
                    status: Status::NotConnected,
                    message: "an admin connection may only ask for status; say Hello as a tenant for other requests"
                        .into(),
                });
            }
            return Err(not_connected());
        }
        let client = connection.client_id;
        match request {
            Request::Hello(hello) => {
                let admin = hello.tenant == nam_proto::ADMIN_TENANT;
                let result = if admin {
                    self.admin_hello(client, &hello.token)
                } else {
                    self.manager.authenticate(client, &hello.tenant, &hello.token)
                };
                let connection = self.connections.get_mut(&ep).expect("checked by caller");
                if let Err(refusal) = result {
                    // A failed Hello on an authenticated connection de-authenticates it:
                    // the peer proved no right to the tenant it had (docs/protocol.md).
                    connection.authenticated = false;
                    connection.admin = false;
                    return Err(refusal);
                }
                connection.authenticated = !admin;
                connection.admin = admin;
                connection.label = format!("{}@{} (pid {})", hello.client_name, hello.tenant, hello.pid);
                Ok(Reply::Hello(HelloReply {
                    client_id: client,
                    lease_ms: self.config.lease.as_millis() as u64,
                    capacity: self.config.capacity_bytes,
                    server_name: self.config.name.clone(),
                    worker_address: self.worker_address.clone(),
                    host_id: nam_proto::host_id(),
                }))
            }
            Request::Status => Ok(Reply::Status(self.status_for(ep))),
            Request::Goodbye(report) => {
                connection.released = true;
                connection.authenticated = false;
                self.add_report(&report);
                self.client_gone(client, None);
                Ok(Reply::Done)
            }
            request => {
                self.engines.check_reserved(&self.manager, &request)?;
                // The connection is borrowed beside the engines' context, not cloned: this is
                // every message-path request.
                let caller = Caller { client, connection: &self.connections[&ep].endpoint, request_id };
                self.engines.execute(&mut engine_ctx!(self), &caller, request)
            }
        }
    }

    /// Adds a client's own traffic counts from its goodbye: any u64 it likes, so they must
    /// not overflow ours.
    fn add_report(&mut self, report: &TrafficReport) {
        let r = &mut self.counters.reported;
        r.puts = r.puts.saturating_add(report.puts);
        r.gets = r.gets.saturating_add(report.gets);
        r.atomics = r.atomics.saturating_add(report.atomics);
        r.bytes_put = r.bytes_put.saturating_add(report.bytes_put);
        r.bytes_got = r.bytes_got.saturating_add(report.bytes_got);
    }

    /// The one place a client's session ends (it said goodbye, or its endpoint failed):
    /// every engine drops it at once, then its allocations are released now, or at
    /// `lease_until` if it vanished without a goodbye.
    fn client_gone(&mut self, client: u64, lease_until: Option<Instant>) {
        let (engines, mut ctx) = self.engines_and_ctx();
        engines.client_gone(&mut ctx, client);
        match lease_until {
            None => {
                self.manager.release_client(client);
            }
            Some(until) => self.lingering.push((client, until)),
        }
    }

    /// The message data path's puts, written straight from the message (see `answer`).
    fn execute_put(&mut self, ep: EndpointId, put: nam_proto::PutView<'_>) -> Reply {
        let connection = &self.connections[&ep];
        let result = if connection.authenticated {
            checked_range(&self.manager, connection.client_id, put.handle, put.offset, put.data.len() as u64)
        } else {
            Err(not_connected())
        };
        match result {
            Ok(at) => {
                self.pool.write(at, put.data);
                Reply::Done
            }
            Err(refusal) => Reply::Error { status: refusal.status, message: refusal.message },
        }
    }

    /// An administrator's Hello: the server's admin token, compared in constant time, or the
    /// one refusal every failed Hello gets (a server without an admin token has no admin).
    fn admin_hello(&mut self, client: u64, token: &str) -> Result<(), Refusal> {
        let admin = self.config.admin_token.as_deref();
        if !admin.is_some_and(|admin| crate::manager::constant_time_eq(admin.as_bytes(), token.as_bytes())) {
            self.manager.act_for_no_tenant(client);
            return Err(Refusal { status: Status::AuthFailed, message: crate::manager::AUTH_FAILED_MESSAGE.into() });
        }
        self.manager.act_for_no_tenant(client);
        Ok(())
    }

    /// What connection `ep` may learn from a Status request: the whole server for an
    /// administrator; its own tenant's usage and clients for a tenant's client; for anyone
    /// else only that the server is alive (the reply itself) and its protocol version (the
    /// reply's header): every figure zero, no name (issue 25, "authentication that reveals
    /// nothing").
    fn status_for(&self, ep: EndpointId) -> StatusReply {
        let connection = &self.connections[&ep];
        if connection.admin {
            return self.status();
        }
        let tenant = connection.authenticated.then(|| self.manager.tenant(connection.client_id)).flatten();
        let Some(tenant) = tenant else {
            return StatusReply::default();
        };
        let usage: Vec<_> = self.manager.tenant_usage().into_iter().filter(|t| t.name == tenant).collect();
        let clients = self
            .connections
            .values()
            .filter(|c| c.authenticated && self.manager.tenant(c.client_id) == Some(tenant))
            .count() as u64;
        // Its own checkpoint groups only (what its jobs left, and may drop).
        let mut everything = StatusReply::default();
        self.engines.status(&self.manager, &mut everything);
        let ckpt_groups: Vec<_> = everything.ckpt_groups.into_iter().filter(|g| g.tenant == tenant).collect();
        StatusReply {
            server_name: self.config.name.clone(),
            capacity: self.config.capacity_bytes,
            used: usage.iter().map(|t| t.used).sum(),
            allocations: usage.iter().map(|t| t.allocations).sum(),
            clients,
            tenants: usage,
            ckpt_groups_total: ckpt_groups.len() as u64,
            ckpt_groups,
            ..StatusReply::default()
        }
    }

    fn status(&self) -> StatusReply {
        let c = &self.counters;
        let mut status = StatusReply {
            server_name: self.config.name.clone(),
            capacity: self.config.capacity_bytes,
            used: self.manager.used_bytes(),
            allocations: self.manager.allocation_count(),
            clients: self.connections.values().filter(|c| c.authenticated).count() as u64,
            clients_lingering: self.lingering.len() as u64,
            clients_total: c.clients_total,
            requests: c.requests,
            request_errors: c.request_errors,
            bytes_in: c.bytes_in,
            bytes_out: c.bytes_out,
            leases_reclaimed: c.leases_reclaimed,
            reported: c.reported,
            tenants: self.manager.tenant_usage(),
            resources: Box::new(nam_proto::ResourceReport {
                reply_bytes_max: self.config.limits.reply_bytes,
                client_reply_bytes_max: self.config.limits.client_reply_bytes,
                reply_bytes_queued: self.queued_bytes,
                reply_bytes_high: c.queued_bytes_high,
                connections_max: self.config.limits.connections as u64,
                clients_cut_off: c.clients_cut_off,
                connections_refused: c.connections_refused,
                sockets_reaped: c.sockets_reaped,
            }),
            ..StatusReply::default()
        };
        self.engines.status(&self.manager, &mut status);
        status
    }

    fn send_reply(&mut self, ep: EndpointId, bytes: Vec<u8>) {
        // A Goodbye or a failed Hello may have ended the connection while it was served.
        let Some(connection) = self.connections.get_mut(&ep) else { return };
        let len = bytes.len() as u64;
        if self.queued_bytes + len > self.config.limits.reply_bytes && connection.queued_bytes > 0 {
            let why = format!(
                "the server holds {} reply bytes, its bound {}, and {} of them are this client's, not taken",
                self.queued_bytes, self.config.limits.reply_bytes, connection.queued_bytes
            );
            self.counters.clients_cut_off += 1;
            self.cut_off(ep, &why);
            return;
        }
        self.counters.bytes_out += len;
        // SAFETY: `bytes` is kept in `self.sends` until the request completes.
        match unsafe { connection.endpoint.am_send_nbx(AM_ID_REPLY, bytes.as_ptr(), bytes.len()) } {
            Ok(Posted::Done) => {}
            Ok(Posted::InFlight(request)) => {
                connection.queued_bytes += len;
                connection.queued_replies += 1;
                self.queued_bytes += len;
                self.counters.queued_bytes_high = self.counters.queued_bytes_high.max(self.queued_bytes);
                let client = connection.client_id;
                self.sends.push(Queued { request, bytes, ep, client, at: Instant::now() })
            }
            Err(e) => log::info!("client {}: reply not sent: {e}", connection.client_id),
        }
    }

    /// Sends the replies to this turn's requests ([`Server::handle_requests`] holds them).
    fn send_held_replies(&mut self) {
        let mut held = std::mem::take(&mut self.held);
        for (ep, bytes) in held.drain(..) {
            self.send_reply(ep, bytes);
        }
        // The buffer is kept for the next turn.
        self.held = held;
    }

    /// Sends the replies engines deferred and now have ready; true if any.
    fn send_late_replies(&mut self) -> bool {
        let ready = self.engines.late_replies();
        let any = !ready.is_empty();
        for late in ready {
            if self.connections.contains_key(&late.endpoint) {
                self.send_reply(late.endpoint, late.reply.encode(late.request_kind, late.request_id));
            }
        }
        any
    }

    /// Frees the replies UCX has sent, refunding their clients' credit, and disconnects a
    /// client whose oldest reply waited longer than the reply deadline.
    fn reap_sends(&mut self, now: Instant) {
        let deadline = self.config.limits.reply_timeout;
        let mut late = Vec::new();
        let connections = &mut self.connections;
        let queued_bytes = &mut self.queued_bytes;
        self.sends.retain(|q| {
            let connection = connections.get_mut(&q.ep).filter(|c| c.client_id == q.client);
            if q.request.check().is_none() {
                if connection.is_some() && now.saturating_duration_since(q.at) >= deadline {
                    late.push(q.ep);
                }
                return true;
            }
            let len = q.bytes.len() as u64;
            *queued_bytes -= len;
            if let Some(c) = connection {
                c.queued_bytes -= len;
                c.queued_replies -= 1;
            }
            false
        });
        late.dedup();
        for ep in late {
            if self.connections.contains_key(&ep) {
                self.counters.clients_cut_off += 1;
                self.cut_off(ep, &format!("a reply was not taken within {deadline:?}"));
            }
        }
    }

    fn detect_failed_clients(&mut self, now: Instant) {
        let failed: Vec<EndpointId> =
            self.connections.iter().filter(|(_, c)| c.endpoint.failure().is_some()).map(|(id, _)| *id).collect();
        for id in failed {
            let c = self.connections.remove(&id).expect("listed above");
            if c.released || !c.authenticated {
                log::info!("client {} ({}) disconnected", c.client_id, c.label);
                self.client_gone(c.client_id, None);
                continue;
            }
            log::info!(
                "client {} ({}) vanished: {}; reclaiming its allocations in {:?}",
                c.client_id,
                c.label,
                c.endpoint.failure().expect("failed"),
                self.config.lease
            );
            self.client_gone(c.client_id, Some(now + self.config.lease));
            // Requests still in flight to this client complete with errors once it is closed.
            c.endpoint.abort();
        }
    }

    fn expire_leases(&mut self, now: Instant) {
        let (expired, kept): (Vec<_>, Vec<_>) = self.lingering.drain(..).partition(|(_, t)| *t <= now);
        self.lingering = kept;
        for (client, _) in expired {
            let reclaimed = self.manager.release_client(client);
            self.counters.leases_reclaimed += reclaimed;
            log::info!("lease of client {client} expired: {reclaimed} allocations reclaimed");
        }
    }

    fn next_lease_expiry(&self) -> Option<Instant> {
        self.lingering.iter().map(|(_, t)| *t).min()
    }

    fn save_manifest(&mut self) -> Result<(), ServerError> {
        let Some(path) = &self.manifest_path else {
            return Ok(());
        };
        let Some(manifest) = self.manager.take_manifest_if_dirty() else {
            return Ok(());
        };
        write_manifest(path, &manifest)
    }
}

fn not_connected() -> Refusal {
    Refusal { status: Status::NotConnected, message: "send Hello before other requests".into() }
}

fn malformed(e: nam_proto::DecodeError) -> Reply {
    Reply::Error { status: Status::Malformed, message: e.to_string() }
}
