//! Waking waiters on the direct path: a waiter sleeps on its word with a shared futex (the
//! pool is a shared mapping, so the kernel matches sleepers and wakers in other processes),
//! and whoever changes the word through this path (another client's direct store or atomic;
//! the server for message-path atomics) calls `FUTEX_WAKE` on it.
//!
//! A `FUTEX_WAKE` is a system call, several times the cost of a direct put. So waiters say
//! where they sleep in a small table that every client of the tenant on the server's host
//! maps: the allocation named [`WAKE_TABLE_NAME`] (shared, created by the first waiter).
//! Word 0 counts the sleepers; then [`WAKE_SLOTS`] slots of (word address, sleepers on it),
//! keyed by the word's server address (the same in every process). A signaller loads word 0
//! after its store and, only when someone sleeps, wakes the slots its range covers.
//!
//! No lost wake-up: the waiter increments the counts, then reads the word, then sleeps only
//! if the word still holds what it read (the kernel compares); the signaller stores, then reads
//! the count, both sequentially consistent. Either the signaller sees the count and wakes, or
//! the waiter sees the new word. Atomics and put-with-signal follow this exactly; plain puts
//! read the count without a store-load fence (it would double a small put's cost), so a put
//! racing a waiter by nanoseconds is seen at the waiter's next slice
//! ([`crate::constants::WAIT_SLEEP_SLICE`]). A table that cannot be had (quota) or is full
//! leaves waiters sleeping in short slices instead.

use crate::allocation::{AllocOptions, Allocation};
use crate::error::{Error, Result};
use crate::session::Session;
use nam_proto::{Alloc, Request, Status, ALLOC_FLAG_SHARED};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Name of the per-tenant wake table on each server.
pub const WAKE_TABLE_NAME: &str = "nam.wake-table";
/// Slots of the wake table: words slept on at once per tenant and server before waiters fall
/// back to slices.
pub const WAKE_SLOTS: usize = 255;
/// Slots a waiter probes from its word's hash.
const WAKE_PROBES: usize = 8;
/// Changed ranges of at most this many bytes (a signal, an atomic) wake by probing their
/// words' slots; longer ones (puts) scan the table.
const WAKE_PROBED_BYTES_MAX: u64 = 8;
/// Direct operations between two glances at the clock of a putter that found no wake table.
const WAKE_RECHECK_OPS: u64 = 4096;
/// Least time between two looks (each a round trip to the server) for a wake table that a
/// putter found missing. Counted in operations alone, a client of small puts looked every
/// 4096 puts, some 80 µs of them, and the look (100 µs and more when the server sleeps)
/// more than doubled their cost. Until it looks again, a waiter its puts would wake (which
/// created the table as it first slept) sleeps at most [`crate::constants::WAIT_SLEEP_SLICE`]
/// at a time; signals and atomics look for the table, or create it, at once.
const WAKE_RECHECK_INTERVAL: Duration = Duration::from_secs(1);

/// One server's wake table, mapped.
pub(crate) struct WakeTable {
    /// Held for the client's life (freed with it).
    _allocation: Allocation,
    /// Local address of word 0.
    base: usize,
}

/// The wake tables of every server: looked up once, then (if found) kept.
pub(crate) struct WakeTables {
    tables: Vec<OnceLock<WakeTable>>,
    /// Direct operations since a signaller last looked for a missing table.
    misses: AtomicU64,
    /// When a putter last looked for a missing table, in ns since `epoch`.
    looked_ns: AtomicU64,
    epoch: Instant,
}

impl WakeTables {
    /// No table looked up yet, for `servers` servers.
    pub(crate) fn new(servers: usize) -> WakeTables {
        WakeTables {
            tables: (0..servers).map(|_| OnceLock::new()).collect(),
            misses: AtomicU64::new(0),
            looked_ns: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

impl WakeTable {
    #[inline]
    fn word(&self, index: usize) -> &AtomicU64 {
        // SAFETY: the table's allocation is (1 + 2 * WAKE_SLOTS) words, mapped while
        // `_allocation` is held; 8-byte aligned.
        unsafe { &*((self.base + index * 8) as *const AtomicU64) }
    }

    /// The first slot of `key`'s probe window.
    #[inline]
    fn window(key: u64) -> usize {
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize % WAKE_SLOTS
    }

    /// The slot that holds `key`, if a sleeper ever registered on it: the slot in its probe
    /// window whose key it is. Slots are claimed in window order and never released, so no
    /// slot before it in the window is free, and the search stops at the first free one.
    #[inline]
    fn find(&self, key: u64) -> Option<usize> {
        let start = Self::window(key);
        for probe in 0..WAKE_PROBES {
            let slot = (start + probe) % WAKE_SLOTS;
            match self.word(1 + 2 * slot).load(SeqCst) {
                k if k == key => return Some(slot),
                0 => return None,
                _ => {}
            }
        }
        None
    }

    /// Registers a sleeper on the word at server address `key`: the slot it counts in, or
    /// `None` when its probes are all taken by other words.
    fn register(&self, key: u64) -> Option<usize> {
        let start = Self::window(key);
        for probe in 0..WAKE_PROBES {
            let slot = (start + probe) % WAKE_SLOTS;
            let slot_key = self.word(1 + 2 * slot);
            let owned = match slot_key.compare_exchange(0, key, SeqCst, SeqCst) {
                Ok(_) => true,
                Err(found) => found == key,
            };
            if owned {
                self.word(2 + 2 * slot).fetch_add(1, SeqCst);
                self.word(0).fetch_add(1, SeqCst);
                return Some(slot);
            }
        }
        None
    }

    /// Undoes [`WakeTable::register`]. The slot keeps its key for the next sleeper there.
    fn unregister(&self, slot: usize) {
        self.word(0).fetch_sub(1, SeqCst);
        self.word(2 + 2 * slot).fetch_sub(1, SeqCst);
    }

    /// Wakes the sleepers on words inside server addresses `[low, high)`, whose local address
    /// is `local(key)`. Call after the store, ordered after it as the module docs say.
    #[inline]
    fn wake_range(&self, low: u64, high: u64, local: impl Fn(u64) -> usize) {
        if self.word(0).load(SeqCst) == 0 {
            return;
        }
        if high - low <= WAKE_PROBED_BYTES_MAX {
            // A signal or an atomic: only its word's (at most two) 32-bit halves can have
            // sleepers, each in its own probe window (a slot keeps its key once claimed, so
            // a key's slot is the first in its window that holds it): a few loads instead of
            // the whole table, on the path between the store and the waiter's wake-up.
            let mut key = low & !3;
            while key < high {
                if let Some(slot) = self.find(key) {
                    if self.word(2 + 2 * slot).load(SeqCst) > 0 {
                        futex_wake(local(key));
                    }
                }
                key += 4;
            }
            return;
        }
        for slot in 0..WAKE_SLOTS {
            let key = self.word(1 + 2 * slot).load(Relaxed);
            if key >= low && key < high && self.word(2 + 2 * slot).load(SeqCst) > 0 {
                futex_wake(local(key));
            }
        }
    }
}

/// Wakes every process asleep on the 32-bit word at local address `at`.
fn futex_wake(at: usize) {
    // SAFETY: FUTEX_WAKE only looks the address up; it lies in the mapped pool.
    unsafe { libc::syscall(libc::SYS_futex, at as *const u32, libc::FUTEX_WAKE, i32::MAX, 0usize, 0usize, 0u32) };
}

/// Sleeps while the 32-bit word at local address `at` holds `seen`, at most `timeout`
/// (spurious returns allowed: callers read the word again).
pub(crate) fn futex_wait(at: usize, seen: u32, timeout: Duration) {
    let timeout = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
    // SAFETY: `at` lies in the mapped pool while the caller holds the allocation; FUTEX_WAIT
    // only reads the word and sleeps.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            at as *const u32,
            libc::FUTEX_WAIT,
            seen,
            &timeout as *const libc::timespec,
            0usize,
            0u32,
        )
    };
}

impl Session {
    /// Server `server`'s wake table, creating it if `create` (a waiter); `None` if there is
    /// none (a signaller before any waiter) or it cannot be had.
    fn wake_table(&self, server: usize, create: bool) -> Option<&WakeTable> {
        let tables = &self.wake;
        if let Some(table) = tables.tables[server].get() {
            return Some(table);
        }
        if !create {
            // A plain put does not create the table (a client that only puts should not
            // allocate one); it looks for one now and then: at its first put, then at most
            // once per WAKE_RECHECK_INTERVAL, checked every WAKE_RECHECK_OPS. Not
            // read-modify-writes: racing threads may skip a count or look twice, which only
            // shifts the next look.
            let misses = tables.misses.load(Relaxed);
            tables.misses.store(misses + 1, Relaxed);
            if !misses.is_multiple_of(WAKE_RECHECK_OPS) {
                return None;
            }
            let now = tables.epoch.elapsed().as_nanos() as u64;
            if misses != 0
                && now.saturating_sub(tables.looked_ns.load(Relaxed)) < WAKE_RECHECK_INTERVAL.as_nanos() as u64
            {
                return None;
            }
            tables.looked_ns.store(now, Relaxed);
        }
        match self.open_wake_table(server, create) {
            Ok(Some(allocation)) if allocation.local != 0 => {
                let base = allocation.local;
                Some(tables.tables[server].get_or_init(|| WakeTable { _allocation: allocation, base }))
            }
            Ok(_) => None,
            Err(e) => {
                log::info!("server {server}: no wake table ({e}); waiters sleep in slices");
                None
            }
        }
    }

    /// Opens the tenant's wake table on `server`, or creates it if `create`.
    fn open_wake_table(&self, server: usize, create: bool) -> Result<Option<Allocation>> {
        let mut inner = self.lock();
        let open = Request::Open { name: WAKE_TABLE_NAME.into() };
        match inner.grant(server, &open, "open wake table", self.timeout) {
            Ok(a) => return Ok(Some(a)),
            Err(Error::Refused { status: Status::NameNotFound, .. }) if !create => return Ok(None),
            Err(Error::Refused { status: Status::NameNotFound, .. }) => {}
            Err(e) => return Err(e),
        }
        let size = (1 + 2 * WAKE_SLOTS as u64) * 8;
        let alloc = Request::Alloc(Alloc {
            size,
            align: AllocOptions::default().align,
            flags: ALLOC_FLAG_SHARED,
            name: WAKE_TABLE_NAME.into(),
        });
        match inner.grant(server, &alloc, "create wake table", self.timeout) {
            Ok(a) => Ok(Some(a)),
            // Another client created it first.
            Err(Error::Refused { status: Status::NameExists, .. }) => {
                inner.grant(server, &open, "open wake table", self.timeout).map(Some)
            }
            Err(e) => Err(e),
        }
    }

    /// After a direct store (`signal` false: a plain put) or a signal or atomic (`signal`
    /// true) on server addresses `[low, high)` of allocation `a`: wakes whoever sleeps on a
    /// word there. A signal's first use on a server opens or creates the wake table, so that
    /// no waiter that registers later is missed; a plain put only uses one it knows of.
    #[inline]
    pub(crate) fn wake_direct(&self, a: &Allocation, (low, high): (u64, u64), signal: bool) {
        if let Some(table) = self.wake_table(a.server, signal) {
            table.wake_range(low, high, |key| a.local + (key - a.remote_addr) as usize);
        }
    }

    /// Registers a sleeper on the 32-bit word at server address `key`, so that signallers
    /// wake it; the guard unregisters. `None`: sleep in slices.
    pub(crate) fn sleep_on(&self, server: usize, key: u64) -> Option<Sleeper<'_>> {
        let table = self.wake_table(server, true)?;
        table.register(key).map(|slot| Sleeper { table, slot })
    }
}

/// A registered sleeper (see [`Session::sleep_on`]).
pub(crate) struct Sleeper<'a> {
    table: &'a WakeTable,
    slot: usize,
}

impl Drop for Sleeper<'_> {
    fn drop(&mut self) {
        self.table.unregister(self.slot);
    }
}
