//! What a paged region does with memory the program has not written yet or has given up,
//! against a real `nam serve` (issue 27: a numpy job paid a fetch for every first touch of
//! a new array and a write-back for every page of a freed one):
//! - a page never written back reads as zeros without a fetch, also where an earlier
//!   write-back allocated its chunk on the server (`Stats::zero_fills`);
//! - a range given up (`discard_range`, as `munmap` does) leaves local memory at once
//!   without a write-back and reads as zeros afterwards; one zeroed (`zero_range`, as
//!   `MADV_DONTNEED` does) reads as zeros at once, its resident pages zeroed in place;
//! - a range freed (`free_range`, a heap's `free`) keeps its resident pages, which eviction
//!   drops without a write-back; handed out again (`reuse_range`), its pages are live:
//!   written, they are written back and read back.
//!
//! Prefetching, background reclaim and write prediction are off, so that every count is
//! the program's own doing.

mod common;

use common::ServerProcess;
use nam_client::{Client, ClientConfig};
use nam_farmem::{PagedRegion, PagerConfig};
use std::sync::Arc;
use std::time::Duration;

const PAGE: usize = 4096;

/// One UCX client at a time in this process (see `farmem_pager.rs`).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A region of `pages` pages with `budget_pages` resident at most, over `server`, with the
/// pager's own initiatives (prefetch, background reclaim, write prediction) off.
fn region(server: &ServerProcess, pages: usize, budget_pages: usize) -> PagedRegion {
    let mut config = ClientConfig::new(vec![server.addr]);
    config.transports = Some("sm,self,tcp".into());
    config.timeout = Duration::from_secs(5);
    let client = Arc::new(Client::connect(config).expect("connect"));
    let mut pager = PagerConfig::new((pages * PAGE) as u64, (budget_pages * PAGE) as u64);
    pager.prefetch.enabled = false;
    pager.evict_ahead = false;
    pager.predict_writes = false;
    PagedRegion::new(client, pager).expect("paged region")
}

/// Whether the page at `p` is in local memory (`mincore`): evicted pages are not.
fn resident(p: *const u8) -> bool {
    let mut v = [0u8; 1];
    // SAFETY: one page of the region's mapping; the kernel writes one byte.
    assert_eq!(unsafe { libc::mincore(p as *mut libc::c_void, PAGE, v.as_mut_ptr()) }, 0, "mincore");
    v[0] & 1 != 0
}

#[test]
fn a_page_never_written_back_reads_as_zeros_without_a_fetch_even_where_its_chunk_exists() {
    let _serial = serial();
    let server = ServerProcess::start("sm,self,tcp", &[]);
    let region = region(&server, 64, 16);
    // SAFETY: the only view of the region in this test.
    let mem = unsafe { region.as_slice_mut() };
    mem[0..PAGE].fill(0xa5);
    region.evict_all().unwrap(); // the first write-back allocates the chunk of pages 0..64
    assert!(server.admin_status().used > 0, "the write-back allocated a chunk");
    let before = region.stats();
    for page in 1..9 {
        assert!(mem[page * PAGE..(page + 1) * PAGE].iter().all(|&b| b == 0), "page {page} reads as zeros");
    }
    let after = region.stats();
    assert_eq!(after.misses - before.misses, 8, "each new page faulted once");
    assert_eq!(after.zero_fills - before.zero_fills, 8, "and came from zeros, not from the server");
    assert!(mem[0..PAGE].iter().all(|&b| b == 0xa5), "the page written back comes back");
    assert_eq!(region.stats().zero_fills, after.zero_fills, "fetched, not zero-filled");
}

#[test]
fn a_range_given_up_leaves_local_memory_at_once_without_a_write_back() {
    let _serial = serial();
    let server = ServerProcess::start("sm,self,tcp", &[]);
    let region = region(&server, 64, 32);
    // SAFETY: the only view of the region in this test.
    let mem = unsafe { region.as_slice_mut() };
    for page in 0..16 {
        mem[page * PAGE..(page + 1) * PAGE].fill(page as u8 + 1);
    }
    region.flush().unwrap(); // pages 0..16 are on the server now, and stay resident
    for page in 0..16 {
        mem[page * PAGE] = 0xee; // dirty again
    }
    let before = region.stats();
    assert_eq!(region.resident_pages(), 16);
    region.discard_range(4 * PAGE as u64, 8 * PAGE as u64).unwrap();
    let after = region.stats();
    assert_eq!(region.resident_pages(), 8, "the pages given up left the budget");
    assert_eq!(after.writebacks, before.writebacks, "none was written back");
    assert_eq!(after.given_up - before.given_up, 8);
    assert_eq!(after.evictions, before.evictions, "given up, not evicted");
    for page in 4..12 {
        assert!(!resident(mem[page * PAGE..].as_ptr()), "page {page} was dropped");
        assert!(mem[page * PAGE..(page + 1) * PAGE].iter().all(|&b| b == 0), "page {page} reads as zeros");
    }
    assert_eq!(region.stats().zero_fills - after.zero_fills, 8, "from zeros, not the server's old copy");
    for page in (0..4).chain(12..16) {
        assert_eq!(mem[page * PAGE], 0xee, "page {page} keeps its data");
        assert_eq!(mem[page * PAGE + 1], page as u8 + 1, "page {page} keeps its data");
    }
    // Zeroed: resident pages at once, in place; pages written back before come from zeros.
    region.evict_all().unwrap();
    mem[0] = 0x11; // page 0 resident again, and dirty
    assert_eq!(region.zero_range(0, 3 * PAGE as u64).unwrap(), 1, "one page of three was resident");
    let zero_fills = region.stats().zero_fills;
    assert!(mem[..3 * PAGE].iter().all(|&b| b == 0), "a zeroed range reads as zeros");
    assert_eq!(region.stats().zero_fills - zero_fills, 2, "the pages not resident came from zeros");
    assert_eq!(mem[3 * PAGE + 1], 4, "the page after the range is fetched");
    region.evict_all().unwrap();
    assert!(mem[..PAGE].iter().all(|&b| b == 0), "the page zeroed in place was written back as zeros");
}

#[test]
fn freed_pages_are_never_written_back_and_live_again_once_reused() {
    let _serial = serial();
    let server = ServerProcess::start("sm,self,tcp", &[]);
    let region = region(&server, 128, 32);
    // SAFETY: the only view of the region in this test.
    let mem = unsafe { region.as_slice_mut() };
    // Pages 0..16 are a block the program frees; 16..32 one it frees and is handed again
    // at once (a heap's next block of the same size), then writes.
    for page in 0..32 {
        mem[page * PAGE..(page + 1) * PAGE].fill(page as u8 + 1);
    }
    assert_eq!(region.free_range(0, 16 * PAGE as u64).unwrap(), 16, "sixteen freed pages were resident");
    assert_eq!(region.resident_pages(), 32, "freed pages stay resident");
    let reused = (16 * PAGE) as u64..(32 * PAGE) as u64;
    assert_eq!(region.free_range(reused.start, reused.end - reused.start).unwrap(), 16);
    region.reuse_range(reused.start, reused.end - reused.start).unwrap();
    assert_eq!(region.resident_pages(), 32, "handed out again without a fault");
    let misses = region.stats().misses;
    for page in 16..32 {
        mem[page * PAGE + 1] = 0x42;
    }
    assert_eq!(region.stats().misses, misses, "the reused block was written without a miss");
    region.evict_all().unwrap();
    assert_eq!(region.stats().writebacks, 16, "the reused block was written back, the freed one not");
    for page in 16..32 {
        let p = &mem[page * PAGE..(page + 1) * PAGE];
        assert_eq!((p[0], p[1], p[2]), (page as u8 + 1, 0x42, page as u8 + 1), "reused page {page} kept its data");
    }
    let zero_fills = region.stats().zero_fills;
    for page in 0..16 {
        assert!(mem[page * PAGE..(page + 1) * PAGE].iter().all(|&b| b == 0), "freed page {page} reads as zeros");
    }
    assert_eq!(region.stats().zero_fills - zero_fills, 16, "from zeros, not fetched");
}
