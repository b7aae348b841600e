//! How each operation reaches its server's memory: one [`Path`] per server and size class,
//! chosen once when the client connects, and the operations every path implements (put,
//! get, atomic, word load, put with signal, flush).
//!
//! Three paths:
//! - [`Path::Direct`] (`direct`): the server's pool is mapped into this process (same
//!   host, shared-memory data path): plain loads, stores and CPU atomics.
//! - [`Path::Rma`] (`rma`): one-sided UCX operations through the pool's remote key, over
//!   shared memory or RDMA.
//! - [`Path::Messages`] (`messages`): control messages the server executes, for peers
//!   with neither (TCP).
//!
//! The choice (the Unimem MPhil thesis, Ch. 4: native stores below a threshold, the RDMA
//! engine above it; UCX selects its protocols from per-size thresholds the same way) is a
//! small table, `PathTable`: for each server, its link's path ([`Path::Rma`] or
//! [`Path::Messages`], from the [`DataPath`] picked at connect time) and, for a same-host
//! server, the largest transfer that takes [`Path::Direct`] instead. That crossover is
//! measured with puts when the client connects (unless configured with `direct_max_bytes` /
//! `NAM_DIRECT_MAX`, [`crate::ClientConfig`]). A measured crossover holds for puts only: a
//! get on the direct path is one copy out of the mapped pool, which UCX's own shared-memory
//! get also makes, after its request machinery, so gets of every size take it (measured: a
//! 4 KiB get over RMA took 3.5 µs, about 30 times OpenSHMEM's direct copy). A configured
//! crossover holds for both. Atomics and signals take the direct path whenever the
//! allocation is mapped. A client operation is a bounds check, one look-up in
//! this table and one call on the path; nothing else in the client branches on the path.
//! [`crate::Client::path_table`] and `nam status` report the table.

pub(crate) mod direct;
pub(crate) mod messages;
pub(crate) mod rma;

use crate::allocation::Allocation;
use crate::constants::CROSSOVER_MARGIN;
use crate::error::Result;
use crate::link::DataPath;
use crate::op::Op;
use crate::session::Session;
use crate::signal::SignalOp;
use nam_proto::AtomicKind;

pub use crate::constants::PROBE_BYTES_MAX;

/// One way of reaching a server's memory (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// Plain loads, stores and CPU atomics on the server's pool mapped into this process.
    Direct,
    /// One-sided UCX RMA through the pool's remote key (shared memory or RDMA).
    Rma,
    /// Control messages the server executes.
    Messages,
}

/// A 64-bit atomic and its operands; the path returns the old word.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Atomic {
    pub(crate) op: AtomicKind,
    pub(crate) value: u64,
    /// The word a compare-and-swap expects (ignored by the others).
    pub(crate) compare: u64,
}

/// A put followed by a signal on the same server: `bytes` at `offset` of `data`, then `op`
/// with `value` on the word at `word_offset` of `word`, ordered after the data for every
/// observer. Ranges checked by the caller.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SignalPut<'a> {
    pub(crate) data: &'a Allocation,
    pub(crate) offset: u64,
    pub(crate) bytes: &'a [u8],
    pub(crate) word: &'a Allocation,
    pub(crate) word_offset: u64,
    pub(crate) value: u64,
    pub(crate) op: SignalOp,
}

/// How a direct put writes: through this core's caches, or around them (streaming stores;
/// see [`crate::Client::put_streaming`]). The other paths ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Store {
    Cached,
    Streaming,
}

impl Path {
    /// The path's name as `nam status` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Path::Direct => "direct (load/store)",
            Path::Rma => "UCX RMA",
            Path::Messages => "messages executed by the server",
        }
    }

    /// Puts `data` at byte `offset` of `a` (range checked by the caller); returns when
    /// `data` may be reused.
    #[inline]
    pub(crate) fn put(self, s: &Session, a: &Allocation, offset: u64, data: &[u8], store: Store) -> Result<()> {
        match self {
            Path::Direct => direct::put(s, a, offset, data, store),
            Path::Rma => rma::put(s, a, offset, data),
            Path::Messages => messages::put(s, a, offset, data),
        }
    }

    /// A put whose completion the returned [`Op`] reports (complete at once except on RMA).
    pub(crate) fn put_nb<'a>(self, s: &'a Session, a: &Allocation, offset: u64, data: &'a [u8]) -> Result<Op<'a>> {
        match self {
            Path::Rma => rma::put_nb(s, a, offset, data),
            path => path.put(s, a, offset, data, Store::Cached).map(|()| Op::completed(s, a.server, "put")),
        }
    }

    /// A put without a handle: complete (locally) at once except on RMA, where the next
    /// flush of the server waits for it.
    ///
    /// # Safety
    /// `data` must stay valid and unmodified for `len` bytes until the next flush.
    pub(crate) unsafe fn put_nbi(
        self,
        s: &Session,
        a: &Allocation,
        offset: u64,
        data: (*const u8, usize),
    ) -> Result<()> {
        match self {
            Path::Rma => rma::put_nbi(s, a, offset, data),
            path => path.put(s, a, offset, std::slice::from_raw_parts(data.0, data.1), Store::Cached),
        }
    }

    /// A get without a handle: complete at once except on RMA, where the next flush of the
    /// server waits for it.
    ///
    /// # Safety
    /// `buffer` must stay valid for `len` bytes of writes, and unread, until the next flush.
    pub(crate) unsafe fn get_nbi(
        self,
        s: &Session,
        a: &Allocation,
        offset: u64,
        buffer: (*mut u8, usize),
    ) -> Result<()> {
        match self {
            Path::Rma => rma::get_nbi(s, a, offset, buffer),
            path => path.get(s, a, offset, std::slice::from_raw_parts_mut(buffer.0, buffer.1)),
        }
    }

    /// Gets bytes from `offset` of `a` into `buffer` (range checked by the caller).
    #[inline]
    pub(crate) fn get(self, s: &Session, a: &Allocation, offset: u64, buffer: &mut [u8]) -> Result<()> {
        match self {
            Path::Direct => direct::get(s, a, offset, buffer),
            Path::Rma => rma::get(s, a, offset, buffer),
            Path::Messages => messages::get(s, a, offset, buffer),
        }
    }

    /// A get whose completion the returned [`Op`] reports (complete at once except on RMA).
    pub(crate) fn get_nb<'a>(
        self,
        s: &'a Session,
        a: &Allocation,
        offset: u64,
        buffer: &'a mut [u8],
    ) -> Result<Op<'a>> {
        match self {
            Path::Rma => rma::get_nb(s, a, offset, buffer),
            path => path.get(s, a, offset, buffer).map(|()| Op::completed(s, a.server, "get")),
        }
    }

    /// A 64-bit atomic on the word at `offset` (aligned, checked by the caller); returns the
    /// old value.
    #[inline]
    pub(crate) fn atomic(self, s: &Session, a: &Allocation, offset: u64, atomic: Atomic) -> Result<u64> {
        match self {
            Path::Direct => direct::atomic(s, a, offset, atomic),
            Path::Rma => rma::atomic(s, a, offset, atomic),
            Path::Messages => messages::atomic(s, a, offset, atomic),
        }
    }

    /// A fetching atomic without a handle: its old word goes to `sink` by the next flush of
    /// the server. Posted and left in flight on RMA (64-bit kinds) and on the message path;
    /// done at once on the direct path and for RMA's 32-bit kinds (a compare-and-swap loop).
    ///
    /// # Safety
    /// `sink` must stay valid, and unread, until the next flush of the server.
    pub(crate) unsafe fn atomic_nbi(
        self,
        s: &Session,
        a: &Allocation,
        offset: u64,
        atomic: Atomic,
        sink: crate::pending::FetchSink,
    ) -> Result<()> {
        match self {
            Path::Rma if atomic.op.width_bytes() == 8 => rma::atomic_nbi(s, a, offset, atomic, sink),
            Path::Messages => messages::atomic_nbi(s, a, offset, atomic, sink),
            path => path.atomic(s, a, offset, atomic).map(|old| sink.deliver(old)),
        }
    }

    /// An atomic with a handle ([`crate::AtomicOp`]): posted and left in flight on RMA
    /// (64-bit kinds) and on the message path, where the handle or the next flush completes
    /// it; done at once on the direct path and for RMA's 32-bit kinds.
    pub(crate) fn atomic_nb(
        self,
        s: &Session,
        a: &Allocation,
        offset: u64,
        atomic: Atomic,
    ) -> Result<crate::pending::AmoPending> {
        match self {
            Path::Rma if atomic.op.width_bytes() == 8 => rma::atomic_nb(s, a, offset, atomic),
            Path::Messages => messages::atomic_nb(s, a, offset, atomic),
            path => path.atomic(s, a, offset, atomic).map(crate::pending::AmoPending::Done),
        }
    }

    /// Reads the 64-bit word at `offset` (aligned, checked by the caller) without a
    /// read-modify-write, so that polling it does not take its cache line from the writer:
    /// an acquire load on the direct path, an 8-byte get elsewhere. Counted as a get.
    #[inline]
    pub(crate) fn load(self, s: &Session, a: &Allocation, offset: u64) -> Result<u64> {
        match self {
            Path::Direct => direct::load(s, a, offset),
            path => {
                let mut word = [0u8; 8];
                path.get(s, a, offset, &mut word)?;
                Ok(u64::from_le_bytes(word))
            }
        }
    }

    /// A put with a signal (see [`SignalPut`]), so that a reader that sees the signal also
    /// sees the data.
    pub(crate) fn put_signal(self, s: &Session, put: SignalPut<'_>) -> Result<()> {
        match self {
            Path::Direct => direct::put_signal(s, put),
            Path::Rma => rma::put_signal(s, put),
            Path::Messages => messages::put_signal(s, put),
        }
    }

    /// Sleeps until the word at `offset` may satisfy `watch` (it read `seen` just before),
    /// `until` passes, or a spurious wake-up: on the direct path on a futex that signallers
    /// wake ([`crate::wake`]); elsewhere by a Watch the server answers when the word satisfies
    /// the comparison. Returns the word when the server sent it.
    pub(crate) fn sleep(
        self,
        s: &Session,
        a: &Allocation,
        offset: u64,
        watch: crate::wait::WordWatch,
        seen: u64,
        until: std::time::Instant,
    ) -> Result<Option<u64>> {
        match self {
            Path::Direct => direct::sleep(s, a, offset, watch, seen, until).map(|()| None),
            Path::Rma | Path::Messages => messages::watch(s, a, offset, watch, until),
        }
    }

    /// Remote completion of everything this path issued to `server`.
    pub(crate) fn flush(self, s: &Session, server: usize) -> Result<()> {
        match self {
            // Stores into the mapping are visible to the server when they retire.
            Path::Direct => s.alive(server, "flush"),
            Path::Rma => rma::flush(s, server),
            Path::Messages => messages::flush(s, server),
        }
    }

    /// Whether one get on this path reads its range as one snapshot with respect to every
    /// other operation on the server's memory: true of the message path, whose server
    /// executes one message at a time. Readers of multi-word records (mailbox slots) then
    /// need one round trip instead of a load of the guard word first.
    pub(crate) fn gets_are_snapshots(self) -> bool {
        self == Path::Messages
    }
}

/// How transfers to one same-host server are split between the direct path and RMA.
#[derive(Debug, Clone, PartialEq)]
pub struct TransferPath {
    /// Transfers of at most this many bytes take the direct path (`u64::MAX`: every size;
    /// 0: none).
    pub direct_max_bytes: u64,
    /// Whether the crossover was measured (else configured).
    pub measured: bool,
    /// The measurement: (bytes, direct ns, RMA ns) per probed size.
    pub probes: Vec<(u64, f64, f64)>,
}

/// The paths one server's operations take: a row of [`crate::Client::path_table`].
#[derive(Debug, Clone, PartialEq)]
pub struct ServerPaths {
    /// The server's address.
    pub addr: std::net::SocketAddr,
    /// How its data endpoint reaches it.
    pub data_path: DataPath,
    /// Puts of at most [`ServerPaths::small_max_bytes`] to a mapped allocation take this
    /// path, and gets too when the crossover was configured; with a measured crossover, gets
    /// from a mapped allocation take it at every size (module docs).
    pub small: Path,
    /// The largest transfer that takes [`ServerPaths::small`] (`u64::MAX`: every size).
    pub small_max_bytes: u64,
    /// Larger transfers, and every operation on an allocation that is not mapped here, take
    /// this path: the link's own ([`Path::Rma`] or [`Path::Messages`]).
    pub large: Path,
    /// Atomics and signals on a mapped allocation take this path.
    pub words: Path,
    /// For a same-host server, how the crossover was set (measured or configured).
    pub transfer: Option<TransferPath>,
}

/// One server's row of the table, as the hot path reads it.
#[derive(Debug, Clone, Copy)]
struct Row {
    /// Puts of at most this many bytes to a mapped allocation take the direct path.
    direct_max: u64,
    /// Gets of at most this many bytes from a mapped allocation take the direct path.
    get_direct_max: u64,
    /// The link's path: everything else.
    link: Path,
}

impl Row {
    /// The direct path for a `len`-byte transfer on mapped `a` within `direct_max`, else the
    /// link's.
    #[inline]
    fn pick(&self, a: &Allocation, len: usize, direct_max: u64) -> Path {
        if a.local != 0 && len as u64 <= direct_max {
            Path::Direct
        } else {
            self.link
        }
    }
}

/// The path of every operation to every server, fixed once the client has connected.
#[derive(Debug, Default)]
pub(crate) struct PathTable {
    rows: Vec<Row>,
    reports: Vec<ServerPaths>,
}

impl PathTable {
    /// The table for servers reached by `links` (address and data path each), with the
    /// crossover of each same-host one in `transfers`.
    pub(crate) fn new(links: &[(std::net::SocketAddr, DataPath)], transfers: Vec<Option<TransferPath>>) -> PathTable {
        let mut rows = Vec::with_capacity(links.len());
        let mut reports = Vec::with_capacity(links.len());
        for (&(addr, data_path), transfer) in links.iter().zip(transfers) {
            let link = if data_path == DataPath::Messages { Path::Messages } else { Path::Rma };
            // Only a shared-memory link maps the pool; elsewhere no allocation is mapped and
            // the limit is never consulted.
            let direct_max = match (&transfer, data_path) {
                (Some(t), _) => t.direct_max_bytes,
                (None, DataPath::SharedMemory) => u64::MAX,
                (None, _) => 0,
            };
            let get_direct_max = match &transfer {
                Some(t) if t.measured => u64::MAX,
                _ => direct_max,
            };
            let mapped = data_path == DataPath::SharedMemory;
            rows.push(Row { direct_max, get_direct_max, link });
            reports.push(ServerPaths {
                addr,
                data_path,
                small: if mapped && direct_max > 0 { Path::Direct } else { link },
                small_max_bytes: direct_max,
                large: link,
                words: if mapped { Path::Direct } else { link },
                transfer,
            });
        }
        PathTable { rows, reports }
    }

    /// The path of a `len`-byte put to `a`.
    #[inline]
    pub(crate) fn transfer(&self, a: &Allocation, len: usize) -> Path {
        let row = self.rows[a.server];
        row.pick(a, len, row.direct_max)
    }

    /// The path of a `len`-byte get from `a` (module docs: a measured crossover is for puts).
    #[inline]
    pub(crate) fn transfer_get(&self, a: &Allocation, len: usize) -> Path {
        let row = self.rows[a.server];
        row.pick(a, len, row.get_direct_max)
    }

    /// The path of an atomic or a signal on a word of `a`.
    #[inline]
    pub(crate) fn word(&self, a: &Allocation) -> Path {
        if a.local != 0 {
            Path::Direct
        } else {
            self.rows[a.server].link
        }
    }

    /// The path of server `server`'s link (what a flush completes).
    pub(crate) fn link(&self, server: usize) -> Path {
        self.rows[server].link
    }

    /// The table as reported to users.
    pub(crate) fn reports(&self) -> &[ServerPaths] {
        &self.reports
    }
}

/// The direct-path limit from probes: below the smallest size from which RMA is faster (by
/// more than [`CROSSOVER_MARGIN`], against noise) at every larger probed size; `u64::MAX`
/// if there is none.
pub fn crossover(probes: &[(u64, f64, f64)]) -> u64 {
    let rma_wins = |p: &(u64, f64, f64)| p.2 * CROSSOVER_MARGIN < p.1;
    match probes.iter().position(rma_wins) {
        Some(i) if probes[i..].iter().all(rma_wins) => probes[i].0 - 1,
        _ => u64::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::crossover;

    #[test]
    fn the_crossover_is_where_rma_starts_winning_for_good() {
        assert_eq!(crossover(&[(4, 10.0, 50.0), (16, 20.0, 40.0), (64, 80.0, 30.0), (256, 200.0, 60.0)]), 63);
        assert_eq!(crossover(&[(4, 10.0, 50.0), (16, 30.0, 20.0), (64, 20.0, 60.0)]), u64::MAX, "a lone win is noise");
        assert_eq!(crossover(&[(4, 10.0, 50.0), (16, 20.0, 19.0)]), u64::MAX, "within 10% is a tie");
        assert_eq!(crossover(&[(4, 50.0, 10.0)]), 3);
    }
}
