//! What stayed local, and why: counters the hooks bump when they leave a request to local
//! memory, printed by `NAM_FARMEM_STATS=1` at exit beside the pager's counters, so that a
//! user sees how much of the program's heap far memory really holds.

use std::sync::atomic::{AtomicU64, Ordering};

/// Why a request stayed in local memory.
#[derive(Clone, Copy)]
pub enum Local {
    /// A `malloc`-family request under the threshold: the program's allocator serves it
    /// (from its heap, which is far where the allocator maps it with `mmap`).
    SmallBlock,
    /// A request made while the region was being made, or by the library or the pager
    /// themselves (their memory must never fault on the thread that serves faults).
    Internal,
    /// The region could not take it: not made (no server), full, or a `fork` child.
    Unavailable,
    /// An `mmap` under the threshold.
    SmallMapping,
    /// An `mmap` that is not a plain anonymous private read-write mapping: files, shared
    /// memory, reservations (`PROT_NONE`), stacks, executable or huge-page or fixed
    /// mappings. The kernel keeps those.
    OtherMapping,
}

const KINDS: usize = 5;
static COUNT: [AtomicU64; KINDS] = [const { AtomicU64::new(0) }; KINDS];
static BYTES: [AtomicU64; KINDS] = [const { AtomicU64::new(0) }; KINDS];
static FAR_BLOCKS: AtomicU64 = AtomicU64::new(0);
static FAR_BLOCK_BYTES: AtomicU64 = AtomicU64::new(0);
static FAR_MAPS: AtomicU64 = AtomicU64::new(0);
static FAR_MAP_BYTES: AtomicU64 = AtomicU64::new(0);

/// Whether `NAM_FARMEM_STATS` is set: the counters cost an atomic add per small
/// allocation, paid only when someone reads them.
fn enabled() -> bool {
    static ON: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    match ON.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var_os("NAM_FARMEM_STATS").is_some();
            ON.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
        v => v == 2,
    }
}

/// Counts a request of `bytes` left local for `why` (when `NAM_FARMEM_STATS` is set).
#[inline]
pub fn local(why: Local, bytes: usize) {
    if !enabled() {
        return;
    }
    COUNT[why as usize].fetch_add(1, Ordering::Relaxed);
    BYTES[why as usize].fetch_add(bytes as u64, Ordering::Relaxed);
}

/// Counts a block of `bytes` placed in far memory.
pub fn far_block(bytes: usize) {
    FAR_BLOCKS.fetch_add(1, Ordering::Relaxed);
    FAR_BLOCK_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// Counts an anonymous mapping of `bytes` placed in far memory.
pub fn far_mapping(bytes: usize) {
    FAR_MAPS.fetch_add(1, Ordering::Relaxed);
    FAR_MAP_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// One line: far blocks and mappings, then every kind of request that stayed local, counted
/// since the start.
pub fn summary() -> String {
    let kind = |why: Local, what: &str| {
        format!(
            "{} {what} ({} bytes)",
            COUNT[why as usize].load(Ordering::Relaxed),
            BYTES[why as usize].load(Ordering::Relaxed)
        )
    };
    format!(
        "since the start: {} blocks in far memory ({} bytes), {} anonymous mappings in far memory ({} bytes); \
         kept local: {}, {}, {}, {}, {}",
        FAR_BLOCKS.load(Ordering::Relaxed),
        FAR_BLOCK_BYTES.load(Ordering::Relaxed),
        FAR_MAPS.load(Ordering::Relaxed),
        FAR_MAP_BYTES.load(Ordering::Relaxed),
        kind(Local::SmallBlock, "blocks under the threshold, to the program's allocator"),
        kind(Local::Internal, "requests of the library and pager"),
        kind(Local::Unavailable, "requests far memory could not take"),
        kind(Local::SmallMapping, "mappings under the threshold"),
        kind(Local::OtherMapping, "file, shared, stack, reserved or fixed mappings"),
    )
}
