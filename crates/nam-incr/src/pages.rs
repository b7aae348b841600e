//! The per-page state machine shared by the application's write faults, the checkpoint call
//! and the background writer. It is lock-free on purpose: with the mprotect fallback the
//! fault is handled inside a SIGSEGV handler, where only atomics and system calls are safe.
//!
//! States of a tracked page (`*` = write-protected):
//! - `CLEAN`*: its content is in the store (or was never asked for); a write makes it `DIRTY`.
//! - `DIRTY`: written in the current interval; not protected, so further writes are free.
//! - `PROBATION`* (early/late): protected to see whether it stays cold; a write makes it
//!   `DIRTY` again, a sweep that finds it untouched copies it early.
//! - `PENDING`*: its content belongs to interval `tags[page]`, which is not persisted yet. A
//!   write waits (and marks the page urgent, so the writer takes it next: queue jumping).
//! - `COPYING`*: the writer is reading it right now.
//!
//! With the asynchronous userfaultfd tracker (`pagemap >= 0`) "protected" above means two
//! things: every tracked page carries the kernel's write-protect bit, which a write clears
//! without stopping (a minor fault), and which [`PageTable::absorb_writes`] reads and re-arms
//! in one PAGEMAP_SCAN call, turning written pages `DIRTY`; only `PENDING` and `COPYING` pages
//! are also mprotect'ed read-only, so that a write to them stops in the SIGSEGV handler until
//! the writer has their previous version. `PROBATION` is not used: the scans tell which
//! dirty pages stayed cold without protecting them.

use crate::constants::{FAULT_WAIT_MAX, REGIONS_MAX};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// See the module documentation.
pub const CLEAN: u8 = 0;
/// See the module documentation.
pub const DIRTY: u8 = 1;
/// See the module documentation.
pub const PROBATION: u8 = 2;
/// See the module documentation.
pub const PENDING: u8 = 3;
/// See the module documentation.
pub const COPYING: u8 = 4;

const PAGE: usize = crate::geometry::PAGE_BYTES;

/// Tracking state of one protected region's pages.
pub struct PageTable {
    /// Page-aligned address of the first page.
    pub base: usize,
    /// Number of pages.
    pub pages: usize,
    /// One state per page.
    pub states: Box<[AtomicU8]>,
    /// Interval whose content a `PENDING` page holds.
    pub tags: Box<[AtomicU32]>,
    /// A write is waiting for this page.
    pub urgent: Box<[AtomicBool]>,
    /// Number of set `urgent` flags not yet served.
    pub urgent_count: AtomicUsize,
    /// Bumped (and futex-woken) whenever an urgent page is served, so a waiting write sleeps
    /// until then instead of polling.
    pub served: AtomicU32,
    /// userfaultfd descriptor, or -1 for mprotect tracking.
    pub uffd: i32,
    /// `/proc/self/pagemap` of the asynchronous userfaultfd tracker, or -1.
    pub pagemap: i32,
    /// Serializes reading the written bits with closing an interval and with early copies.
    pub scan_lock: parking_lot::Mutex<()>,
    /// Write faults taken.
    pub faults: AtomicU64,
    /// Nanoseconds writes spent waiting for `PENDING` pages.
    pub stall_ns: AtomicU64,
    /// A write gave up waiting: the interval in flight must not be committed.
    pub broken: AtomicBool,
    /// Pages per fault-around group (a power of two; 1 = none).
    pub fault_around: usize,
}

impl PageTable {
    /// A table for `pages` pages from `base`, every page `state`; `pagemap` is the
    /// asynchronous tracker's (-1 for the others).
    pub fn new(base: usize, pages: usize, (uffd, pagemap): (i32, i32), state: u8, fault_around: usize) -> PageTable {
        assert!(fault_around.is_power_of_two());
        PageTable {
            base,
            pages,
            states: (0..pages).map(|_| AtomicU8::new(state)).collect(),
            tags: (0..pages).map(|_| AtomicU32::new(0)).collect(),
            urgent: (0..pages).map(|_| AtomicBool::new(false)).collect(),
            urgent_count: AtomicUsize::new(0),
            served: AtomicU32::new(0),
            uffd,
            pagemap,
            scan_lock: parking_lot::Mutex::new(()),
            faults: AtomicU64::new(0),
            stall_ns: AtomicU64::new(0),
            broken: AtomicBool::new(false),
            fault_around: if pagemap >= 0 { 1 } else { fault_around },
        }
    }

    /// Whether the kernel resolves tracking faults (the asynchronous userfaultfd tracker).
    pub fn is_async(&self) -> bool {
        self.pagemap >= 0
    }

    /// Whether writes to held pages stop in the SIGSEGV handler (mprotect), not userfaultfd.
    pub fn holds_by_mprotect(&self) -> bool {
        self.uffd < 0 || self.is_async()
    }

    /// Asynchronous tracker: reads which pages were written since the last call, re-arming
    /// their write-protect bits, and makes them `DIRTY`. Appends the written page ranges
    /// (`first..end` page indices) to `written`. A written page still held for the previous
    /// interval (a write of another thread slipped in while it was being held) is waited for,
    /// so its new content lands in this interval. Call with `scan_lock` held.
    pub fn absorb_writes(&self, written: &mut Vec<(usize, usize)>) -> std::io::Result<()> {
        let mut ranges = Vec::new();
        nam_uffd::pagemap_scan(self.pagemap, self.base as u64, (self.base + self.pages * PAGE) as u64, &mut ranges)?;
        for (start, end) in ranges.into_iter().map(|(s, e)| (s as usize, e as usize)) {
            let (first, last) = ((start - self.base) / PAGE, (end - self.base) / PAGE);
            self.faults.fetch_add((last - first) as u64, Ordering::Relaxed);
            for page in first..last {
                self.mark_written(page);
            }
            written.push((first, last));
        }
        Ok(())
    }

    fn mark_written(&self, page: usize) {
        let started = monotonic_ns();
        loop {
            match self.states[page].load(Ordering::Acquire) {
                DIRTY => return,
                state @ (CLEAN | PROBATION) => {
                    if self.transition(page, state, DIRTY) {
                        return;
                    }
                }
                _ if monotonic_ns() - started > FAULT_WAIT_MAX.as_nanos() as u64 => {
                    self.broken.store(true, Ordering::Release);
                    return;
                }
                _ => {
                    if !self.urgent[page].swap(true, Ordering::AcqRel) {
                        self.urgent_count.fetch_add(1, Ordering::AcqRel);
                    }
                    pause_briefly();
                }
            }
        }
    }
    /// Protects pages `[first, first + count)` against writes.
    pub fn protect(&self, first: usize, count: usize) -> std::io::Result<()> {
        self.set_protection(first, count, true)
    }

    /// Releases pages; with userfaultfd this also wakes writes blocked on them.
    pub fn unprotect(&self, first: usize, count: usize) -> std::io::Result<()> {
        self.set_protection(first, count, false)
    }

    fn set_protection(&self, first: usize, count: usize, protect: bool) -> std::io::Result<()> {
        debug_assert!(first + count <= self.pages);
        let start = self.base + first * PAGE;
        if !self.holds_by_mprotect() {
            return nam_uffd::write_protect(self.uffd, start as u64, (count * PAGE) as u64, protect);
        }
        let prot = if protect { libc::PROT_READ } else { libc::PROT_READ | libc::PROT_WRITE };
        // SAFETY: the range lies inside a mapping the caller of `Engine::protect` vouched for;
        // mprotect changes permissions only.
        if unsafe { libc::mprotect(start as *mut libc::c_void, count * PAGE, prot) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Moves `page` from `from` to `to`; false when it was in another state.
    pub fn transition(&self, page: usize, from: u8, to: u8) -> bool {
        self.states[page].compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Clears the urgent mark of `page` once served (its state changed), waking the writes
    /// waiting for it.
    pub fn clear_urgent(&self, page: usize) {
        if self.urgent[page].swap(false, Ordering::AcqRel) {
            self.urgent_count.fetch_sub(1, Ordering::AcqRel);
            self.served.fetch_add(1, Ordering::AcqRel);
            // SAFETY: FUTEX_WAKE on a live AtomicU32 of ours; wakes every waiter.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.served.as_ptr(),
                    libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                    i32::MAX,
                )
            };
        }
    }

    /// Sleeps until an urgent page is served after `seen` was read from `served` (at most
    /// [`SERVED_WAIT_NS`](crate::constants::SERVED_WAIT_NS), so deadlines are checked). Async-signal-safe.
    fn wait_served(&self, seen: u32) {
        let ts = libc::timespec { tv_sec: 0, tv_nsec: crate::constants::SERVED_WAIT_NS };
        // SAFETY: FUTEX_WAIT on a live AtomicU32 of ours with a relative timeout we own; it
        // returns at once when the value is no longer `seen`.
        unsafe {
            libc::syscall(libc::SYS_futex, self.served.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, seen, &ts)
        };
    }
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the struct we own; async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn pause_briefly() {
    let ts = libc::timespec { tv_sec: 0, tv_nsec: crate::constants::FAULT_RECHECK_NS };
    // SAFETY: nanosleep reads the struct we own; async-signal-safe.
    unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
}

/// Handles a write fault at `addr` in `table`: marks the page dirty and releases it, waiting
/// first if its previous content is not persisted yet. Async-signal-safe.
pub fn on_write_fault(table: &PageTable, addr: usize) {
    let page = (addr - table.base) / PAGE;
    if table.is_async() {
        return on_held_write(table, page);
    }
    table.faults.fetch_add(1, Ordering::Relaxed);
    let started = monotonic_ns();
    let mut waited = false;
    loop {
        let seen = table.served.load(Ordering::Acquire);
        let state = table.states[page].load(Ordering::Acquire);
        match state {
            CLEAN | PROBATION => {
                if table.transition(page, state, DIRTY) {
                    break;
                }
            }
            DIRTY => break,
            _ => {
                // PENDING or COPYING: jump the queue and wait for the writer.
                if !waited && !table.urgent[page].swap(true, Ordering::AcqRel) {
                    table.urgent_count.fetch_add(1, Ordering::AcqRel);
                }
                waited = true;
                if monotonic_ns() - started > FAULT_WAIT_MAX.as_nanos() as u64 && table.transition(page, PENDING, DIRTY)
                {
                    table.broken.store(true, Ordering::Release);
                    break;
                }
                table.wait_served(seen);
            }
        }
    }
    if waited {
        table.stall_ns.fetch_add(monotonic_ns() - started, Ordering::Relaxed);
    }
    // A failure here leaves the page protected; the write faults again and retries.
    let _ = table.unprotect(page, 1);
    fault_around(table, page);
}

/// Asynchronous tracker: a write to a page held read-only (its previous version is not
/// persisted yet) waits until the writer has copied it; the writer releases the page before
/// marking it `CLEAN`, so the write goes on when the handler returns. Async-signal-safe.
fn on_held_write(table: &PageTable, page: usize) {
    let started = monotonic_ns();
    let mut waited = false;
    loop {
        let seen = table.served.load(Ordering::Acquire);
        match table.states[page].load(Ordering::Acquire) {
            PENDING | COPYING => {
                if !waited && !table.urgent[page].swap(true, Ordering::AcqRel) {
                    table.urgent_count.fetch_add(1, Ordering::AcqRel);
                }
                waited = true;
                if monotonic_ns() - started > FAULT_WAIT_MAX.as_nanos() as u64 && table.transition(page, PENDING, DIRTY)
                {
                    table.broken.store(true, Ordering::Release);
                    let _ = table.unprotect(page, 1);
                    break;
                }
                table.wait_served(seen);
            }
            // Released already (or being released: the write faults again and waits).
            _ => break,
        }
    }
    if waited {
        table.stall_ns.fetch_add(monotonic_ns() - started, Ordering::Relaxed);
    }
}

/// Releases the clean neighbours of `page` in its fault-around group too: a sweep or a stream
/// then takes one fault per group instead of one per page. They count as dirty, and the
/// line-level comparison at the next copy drops what did not change. Pages waiting for the
/// writer or on probation are left alone.
fn fault_around(table: &PageTable, page: usize) {
    let group = table.fault_around;
    let first = page & !(group - 1);
    let mut run_start = None;
    for p in first..(first + group).min(table.pages) + 1 {
        let released = p < table.pages && p < first + group && p != page && table.transition(p, CLEAN, DIRTY);
        match (released, run_start) {
            (true, None) => run_start = Some(p),
            (false, Some(s)) => {
                let _ = table.unprotect(s, p - s);
                run_start = None;
            }
            _ => {}
        }
    }
}

struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    table: AtomicPtr<PageTable>,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SLOT: Slot =
    Slot { start: AtomicUsize::new(0), end: AtomicUsize::new(0), table: AtomicPtr::new(std::ptr::null_mut()) };
static SLOTS: [Slot; REGIONS_MAX] = [EMPTY_SLOT; REGIONS_MAX];
static SLOTS_LOCK: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// Publishes a table so faults in its range find it. Tables are leaked on purpose: a fault
/// handler may still hold one after its region is unprotected, so one is never freed (it costs
/// 6 bytes per page of each region ever protected). Returns false when every slot is taken.
pub fn publish(table: PageTable) -> Option<&'static PageTable> {
    let _guard = SLOTS_LOCK.lock();
    let slot = SLOTS.iter().find(|s| s.table.load(Ordering::Acquire).is_null())?;
    let table: &'static PageTable = Box::leak(Box::new(table));
    slot.start.store(table.base, Ordering::Release);
    slot.end.store(table.base + table.pages * PAGE, Ordering::Release);
    slot.table.store(table as *const PageTable as *mut PageTable, Ordering::Release);
    Some(table)
}

/// Removes a table from fault routing.
pub fn withdraw(table: &'static PageTable) {
    let _guard = SLOTS_LOCK.lock();
    for slot in SLOTS.iter() {
        if std::ptr::eq(slot.table.load(Ordering::Acquire), table) {
            slot.table.store(std::ptr::null_mut(), Ordering::Release);
        }
    }
}

/// Whether any published table's page span overlaps `[start, end)`.
pub fn overlaps(start: usize, end: usize) -> bool {
    SLOTS.iter().any(|s| {
        !s.table.load(Ordering::Acquire).is_null()
            && start < s.end.load(Ordering::Acquire)
            && s.start.load(Ordering::Acquire) < end
    })
}

/// The published table whose span holds `addr`. Async-signal-safe.
pub fn lookup(addr: usize) -> Option<&'static PageTable> {
    SLOTS.iter().find_map(|s| {
        let table = s.table.load(Ordering::Acquire);
        let inside = addr >= s.start.load(Ordering::Acquire) && addr < s.end.load(Ordering::Acquire);
        // SAFETY: published tables are leaked, so a non-null pointer is valid forever.
        (!table.is_null() && inside).then(|| unsafe { &*table })
    })
}
