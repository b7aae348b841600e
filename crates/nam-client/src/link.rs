//! One connection to one memory server: its endpoint, the pool's remote key, and
//! request/reply over active messages with a deadline.

use crate::constants::{PATIENT_SLEEP_MAX, PATIENT_SPIN, POLL_BACKOFF_STEP, RECEIVE_SPIN};
use crate::error::{Error, Result};
use nam_proto::{decode_header, Reply, Request, AM_ID_REQUEST};
use nam_ucx::{Endpoint, RemoteKey, Worker};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Replies received by the worker's handler, waiting to be matched to their request.
pub(crate) type ReplyQueue = Arc<parking_lot::Mutex<Vec<Vec<u8>>>>;

/// Two endpoints to one server. The *control* endpoint is a sockaddr connection with peer
/// failure detection; it carries requests and replies. The *data* endpoint is opened to
/// the server worker's address. When the server is on this host, it is opened without
/// failure detection, whatever the data path: UCX's shared-memory transports cannot do
/// peer error handling, and UCX skips them when it is asked for; it would then emulate RMA
/// over TCP, which in UCX 1.22 has no fetching atomics. Its operations then run on mapped
/// memory. Across hosts it detects failures itself, so that a dead server fails its
/// requests cleanly. Data operations check the control endpoint first and watch it while
/// they wait.
/// How data operations reach one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataPath {
    /// One-sided UCX RMA through shared memory: same host, data endpoint without failure
    /// detection (see `Link`).
    SharedMemory,
    /// One-sided UCX RMA over a fabric with hardware RMA (RDMA), with failure detection
    /// when the server is on another host (see `Link`).
    Rdma,
    /// Control messages the server executes (put, get, atomics), for peers with neither:
    /// UCX would emulate RMA in the server there, and UCX 1.13 aborts a server whose
    /// emulated-RMA acknowledgement to a just-died client fails. The server checks the
    /// handle and bounds of every operation on this path.
    Messages,
}

pub(crate) struct Link {
    pub(crate) addr: SocketAddr,
    pub(crate) control: Endpoint,
    data: Option<Endpoint>,
    path: DataPath,
    /// The packed bytes and unpacked keys of the server's arena segments this client was
    /// granted memory in (its tenant's only), each unpacked once.
    rkeys: Vec<(Vec<u8>, RemoteKey)>,
    /// The server worker's address the data endpoint was opened to (for contexts' own).
    worker_address: Vec<u8>,
    pub(crate) server_name: String,
    /// Whether the server runs on this host (its Hello carried this host's id).
    server_is_local: bool,
    /// The server has answered once: a peer failure after that is a transport error of the
    /// operation at hand, not a failure to connect.
    established: std::sync::atomic::AtomicBool,
}

impl Link {
    pub(crate) fn connect(worker: &Worker, addr: SocketAddr) -> Result<Link> {
        let control = Endpoint::connect(worker, addr).map_err(|source| Error::Connect { addr, source })?;
        Ok(Link {
            addr,
            control,
            data: None,
            path: DataPath::Messages,
            rkeys: Vec::new(),
            worker_address: Vec::new(),
            server_name: String::new(),
            server_is_local: false,
            established: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Sets up the data path chosen for this server (see [`DataPath`]); `server_is_local`
    /// says whether the server runs on this host (see [`Link`] for what that changes).
    pub(crate) fn open_data_plane(
        &mut self,
        worker_address: &[u8],
        path: DataPath,
        server_is_local: bool,
    ) -> Result<()> {
        self.path = path;
        self.server_is_local = server_is_local;
        if path == DataPath::Messages {
            return Ok(());
        }
        let detect_failure = !server_is_local;
        let data = Endpoint::connect_to_worker(self.control.worker(), worker_address, detect_failure)
            .map_err(|source| Error::Connect { addr: self.addr, source })?;
        self.data = Some(data);
        self.worker_address = worker_address.to_vec();
        Ok(())
    }

    /// A link for a context ([`crate::Context`]): the same control endpoint (its failure
    /// flag), a data endpoint of its own on `worker`, and this link's remote keys unpacked
    /// on it under the same indices.
    pub(crate) fn for_context(&self, worker: &Worker) -> Result<Link> {
        let mut link = Link {
            addr: self.addr,
            control: self.control.clone(),
            data: None,
            path: self.path,
            rkeys: Vec::new(),
            worker_address: Vec::new(),
            server_name: self.server_name.clone(),
            server_is_local: self.server_is_local,
            established: std::sync::atomic::AtomicBool::new(true),
        };
        if self.data.is_some() {
            let detect_failure = !self.server_is_local;
            let data = Endpoint::connect_to_worker(worker, &self.worker_address, detect_failure)
                .map_err(|source| Error::Connect { addr: self.addr, source })?;
            link.data = Some(data);
            link.worker_address = self.worker_address.clone();
            link.adopt_rkeys(self)?;
        }
        Ok(link)
    }

    /// Whether remote key `index` is unpacked here.
    #[inline]
    pub(crate) fn has_rkey(&self, index: usize) -> bool {
        index < self.rkeys.len() || self.uses_messages()
    }

    /// Unpacks, under the same indices, the keys `parent` learnt since this context link
    /// was made (allocations granted later).
    pub(crate) fn adopt_rkeys(&mut self, parent: &Link) -> Result<()> {
        for (packed, _) in &parent.rkeys[self.rkeys.len().min(parent.rkeys.len())..] {
            let key = self.data("unpack remote key")?.unpack_rkey(packed).map_err(|source| Error::Transport {
                addr: self.addr,
                what: "unpack remote key",
                source,
            })?;
            self.rkeys.push((packed.clone(), key));
        }
        Ok(())
    }

    /// The data path to this server.
    #[inline]
    pub(crate) fn path(&self) -> DataPath {
        self.path
    }

    /// Whether data operations go as control messages executed by the server.
    #[inline]
    pub(crate) fn uses_messages(&self) -> bool {
        self.path == DataPath::Messages
    }

    /// The data endpoint, if the server is still alive as far as the control endpoint knows.
    #[inline]
    pub(crate) fn data(&self, what: &'static str) -> Result<&Endpoint> {
        if let Some(source) = self.control.failure() {
            return Err(Error::Transport { addr: self.addr, what, source });
        }
        Ok(self.data.as_ref().expect("RMA data paths open a data endpoint during connect"))
    }

    /// Waits for a data operation, giving up early if the control endpoint fails.
    #[inline]
    pub(crate) fn wait(&self, posted: nam_ucx::Posted, timeout: Duration, what: &'static str) -> Result<()> {
        let data = self.data.as_ref().expect("RMA data paths open a data endpoint during connect");
        data.wait_watching(posted, timeout, &self.control).map_err(|source| Error::Transport {
            addr: self.addr,
            what,
            source,
        })
    }

    /// Sends `request` and waits for its reply. A refusal becomes [`Error::Refused`].
    /// `patient` is for a request the server may answer only after a step of long work
    /// (checkpoint groups: it folds parity between requests): after [`PATIENT_SPIN`] the wait
    /// sleeps between polls instead of spinning, so a waiting rank leaves its core to the
    /// server and the other ranks.
    pub(crate) fn call(
        &self,
        replies: &ReplyQueue,
        (request_id, request): (u64, &Request),
        what: &'static str,
        timeout: Duration,
        patient: bool,
    ) -> Result<Reply> {
        // Calls are serialized by the client lock, so anything queued now is a late reply to
        // a call that already timed out.
        replies.lock().clear();
        self.call_keeping(replies, (request_id, request), what, timeout, patient)
    }

    /// [`Link::call`] for a caller that emptied the reply queue of late replies itself,
    /// keeping those that other streams still await ([`crate::pending`]).
    pub(crate) fn call_keeping(
        &self,
        replies: &ReplyQueue,
        (request_id, request): (u64, &Request),
        what: &'static str,
        timeout: Duration,
        patient: bool,
    ) -> Result<Reply> {
        // One deadline for the send and the wait for the reply: the call's (`nam.h`).
        let deadline = Instant::now() + timeout;
        self.send(request_id, request, what, timeout)?;
        self.receive_until(replies, request_id, what, (deadline, timeout), patient)
    }

    /// Sends one request without waiting for its reply.
    pub(crate) fn send(&self, request_id: u64, request: &Request, what: &'static str, timeout: Duration) -> Result<()> {
        self.send_bytes(&request.encode(request_id), what, timeout)
    }

    /// Sends one encoded message without waiting for its reply.
    pub(crate) fn send_bytes(&self, bytes: &[u8], what: &'static str, timeout: Duration) -> Result<()> {
        let addr = self.addr;
        let established = self.established.load(std::sync::atomic::Ordering::Relaxed);
        self.control.am_send(AM_ID_REQUEST, bytes, timeout).map_err(|source| match source {
            nam_ucx::Error::PeerFailed { .. } if !established => Error::Connect { addr, source },
            source => Error::Transport { addr, what, source },
        })
    }

    /// Waits for the reply to `request_id`.
    pub(crate) fn receive(
        &self,
        replies: &ReplyQueue,
        request_id: u64,
        what: &'static str,
        timeout: Duration,
    ) -> Result<Reply> {
        self.receive_until(replies, request_id, what, (Instant::now() + timeout, timeout), false)
    }

    /// Waits for the reply to `request_id` until `deadline`; `timeout` is the call's, for the
    /// error.
    fn receive_until(
        &self,
        replies: &ReplyQueue,
        request_id: u64,
        what: &'static str,
        (deadline, timeout): (Instant, Duration),
        patient: bool,
    ) -> Result<Reply> {
        let addr = self.addr;
        let start = Instant::now();
        let mut polls = 0u64;
        loop {
            if let Some(reply) = self.poll_reply(replies, request_id, what)? {
                return Ok(reply);
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout { addr, what, timeout_ms: timeout.as_millis() as u64 });
            }
            // Give the core to the server or a peer rank if they share it (oversubscribed
            // nodes): a reply that waits for other processes (allreduce) would otherwise
            // wait for the scheduler's time slice, milliseconds.
            if patient && start.elapsed() >= PATIENT_SPIN {
                polls += 1;
                std::thread::sleep((POLL_BACKOFF_STEP * polls as u32).min(PATIENT_SLEEP_MAX));
            } else if !self.yields_at_once() && start.elapsed() < RECEIVE_SPIN {
                // First keep the core (RECEIVE_SPIN): yielding it to a CPU-bound thread
                // costs that thread's whole slice, where the reply takes microseconds.
                // A far-memory page fault is one such round trip: numpy pinned to a core
                // shared with a busy loop ran 10x slower yielding from the first poll.
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Whether a wait for this server's reply yields the core from its first poll instead
    /// of spinning for [`RECEIVE_SPIN`]: true over TCP to a server on this host. Loopback
    /// TCP wakes the server as a synchronous wake-up (the sender is expected to sleep), so
    /// the scheduler puts it on this core when the others are busy, where a spin keeps it
    /// from answering: a fetch-add took 170-180 us against 20-30 us yielding, on 2 cores
    /// with other work. A remote server, or one reached through shared memory, answers from
    /// its own core, and the spin spares this core's CPU-bound neighbour a slice per call.
    #[inline]
    fn yields_at_once(&self) -> bool {
        self.server_is_local && self.path == DataPath::Messages
    }

    /// Progresses once and takes the reply to `request_id` if it arrived; fails if the
    /// server's endpoint did.
    pub(crate) fn poll_reply(
        &self,
        replies: &ReplyQueue,
        request_id: u64,
        what: &'static str,
    ) -> Result<Option<Reply>> {
        let addr = self.addr;
        self.control.worker().progress();
        if let Some(bytes) = take_reply(replies, request_id) {
            self.established.store(true, std::sync::atomic::Ordering::Relaxed);
            let (_, _, reply) = Reply::decode(&bytes).map_err(|source| Error::Protocol { addr, source })?;
            return match reply {
                Reply::Error { status, message } => Err(Error::Refused { addr, what, status, message }),
                reply => Ok(Some(reply)),
            };
        }
        if let Some(source) = self.control.failure() {
            return Err(Error::Transport { addr, what, source });
        }
        Ok(None)
    }

    /// Caches the remote key of a grant's arena segment (unpacking each key once); returns
    /// its index for [`Link::rkey`] (0 on the message path, which uses no key).
    pub(crate) fn remember_rkey(&mut self, packed: &[u8]) -> Result<usize> {
        if self.uses_messages() {
            return Ok(0);
        }
        // Newest first: a new allocation is most often in the segment the last one was.
        if let Some(index) = self.rkeys.iter().rposition(|(bytes, _)| bytes == packed) {
            return Ok(index);
        }
        let key = self.data("unpack remote key")?.unpack_rkey(packed).map_err(|source| Error::Transport {
            addr: self.addr,
            what: "unpack remote key",
            source,
        })?;
        self.rkeys.push((packed.to_vec(), key));
        Ok(self.rkeys.len() - 1)
    }

    /// The unpacked key `index` ([`Link::remember_rkey`]).
    #[inline]
    pub(crate) fn rkey(&self, index: usize) -> &RemoteKey {
        &self.rkeys[index].1
    }
}

fn take_reply(replies: &ReplyQueue, request_id: u64) -> Option<Vec<u8>> {
    let mut queue = replies.lock();
    let position =
        queue.iter().position(|bytes| matches!(decode_header(bytes), Ok((h, _)) if h.request_id == request_id))?;
    Some(queue.swap_remove(position))
}

/// The data path to a server whose Hello reply carried `server_host`: shared memory on the
/// same host when the transports allow it, RDMA when this host has an RDMA device and the
/// transports allow it, else messages the server executes.
pub(crate) fn choose_data_path(server_host: &str, transports: Option<&str>) -> DataPath {
    const SHARED: [&str; 7] = ["sm", "shm", "posix", "sysv", "cma", "xpmem", "knem"];
    const RDMA: [&str; 12] =
        ["ib", "rc", "rc_v", "rc_x", "rc_mlx5", "dc", "dc_x", "dc_mlx5", "ud", "ud_v", "ud_x", "rdmacm"];
    if server_host == nam_proto::host_id() && transports_allow(transports, &SHARED) {
        DataPath::SharedMemory
    } else if rdma_device_present() && transports_allow(transports, &RDMA) {
        DataPath::Rdma
    } else {
        DataPath::Messages
    }
}

/// Whether a UCX transport list (`UCX_TLS` syntax; `None` reads the environment) allows any
/// of `family`.
fn transports_allow(transports: Option<&str>, family: &[&str]) -> bool {
    let list = match transports {
        Some(t) => t.to_string(),
        None => std::env::var("UCX_TLS").unwrap_or_else(|_| "all".into()),
    };
    let names: Vec<&str> = list.trim_start_matches('^').split(',').map(str::trim).collect();
    if list.starts_with('^') {
        !names.iter().any(|n| family.contains(n))
    } else {
        names.iter().any(|n| *n == "all" || family.contains(n))
    }
}

/// Whether this host has an RDMA device (`/sys/class/infiniband` lists one).
fn rdma_device_present() -> bool {
    std::fs::read_dir("/sys/class/infiniband").map(|mut d| d.next().is_some()).unwrap_or(false)
}
