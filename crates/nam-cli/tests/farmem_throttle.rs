//! Feedback-directed prefetch throttling of a paged region against a real `nam serve`: short
//! runs of sequential misses that confirm streams whose prefetches then go unused turn the
//! prefetcher off, a long sequential sweep afterwards turns it back on, and the data stays
//! right throughout (every byte checked against the pattern it was written with).

mod common;

use common::ServerProcess;
use nam_client::{Client, ClientConfig};
use nam_farmem::{FaultMode, PagedRegion, PagerConfig, PrefetchConfig, Stats};
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;

const PAGE: usize = 4096;
const PAGES: usize = 4096;

fn byte_of(page: usize) -> u8 {
    (page * 7 + 3) as u8
}

/// Reads every byte of `page` and checks it.
fn read_page(mem: &[u8], page: usize) {
    let want = byte_of(page);
    assert!(mem[page * PAGE..(page + 1) * PAGE].iter().all(|&b| b == want), "page {page} corrupted");
}

/// Waits until the handler has installed the prefetch windows it has queued, then reads the
/// counters.
fn settled(region: &PagedRegion) -> Stats {
    assert!(region.wait_settled(Duration::from_secs(10)), "the pager's handler never settled");
    region.stats()
}

#[test]
fn unused_prefetches_turn_the_prefetcher_off_and_a_stream_turns_it_back_on() {
    for mode in [FaultMode::Signal, FaultMode::Thread] {
        throttle_off_and_on(mode);
    }
}

fn throttle_off_and_on(mode: FaultMode) {
    let server = ServerProcess::start("sm,self,tcp", &[]);
    let mut config = ClientConfig::new(vec![server.addr]);
    config.transports = Some("sm,self,tcp".into());
    config.timeout = Duration::from_secs(3);
    let client = Arc::new(Client::connect(config).expect("connect"));
    let mut config = PagerConfig::new((PAGES * PAGE) as u64, (256 * PAGE) as u64);
    config.prefetch = PrefetchConfig { enabled: true, depth: 8, ..PrefetchConfig::default() };
    config.fault_mode = mode;
    let region = PagedRegion::new(client, config).unwrap();
    // SAFETY: the only view of the region in this test.
    let mem = unsafe { region.as_slice_mut() };
    for page in 0..PAGES {
        mem[page * PAGE..(page + 1) * PAGE].fill(byte_of(page));
    }
    region.evict_all().unwrap();
    let filled = settled(&region); // the fill was one long stream: accurate prefetches

    // Triples of sequential pages at random places: each confirms a stream (threshold 2)
    // whose window is never read, and is evicted unused under the 256-page budget.
    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    let mut triples = |count: usize| {
        for _ in 0..count {
            let start = rng.gen_range(0..PAGES - 16);
            for page in start..start + 3 {
                read_page(mem, page);
            }
        }
    };
    triples(100);
    let early = settled(&region);
    assert!(early.prefetches > filled.prefetches, "streams confirmed early prefetch: {early:?}");
    triples(400);
    let before = settled(&region);
    let (used, wasted) = (before.prefetch_hits - filled.prefetch_hits, before.prefetch_wasted - filled.prefetch_wasted);
    assert!(wasted > 2 * used, "prefetches went mostly unused: {used} used, {wasted} wasted");
    triples(100);
    let after = settled(&region);
    assert_eq!(after.prefetches, before.prefetches, "throttled off, 100 more triples prefetch nothing");
    assert!(after.misses >= before.misses + 250, "{before:?} -> {after:?}");

    // A sequential sweep: its shadow windows are reached, the throttle steps back up and
    // the sweep is mostly prefetched.
    let start = 1024;
    for page in start..start + 2048 {
        read_page(mem, page);
    }
    let swept = settled(&region);
    let prefetched = swept.prefetches - after.prefetches;
    assert!(prefetched >= 1024, "{mode:?}: the stream turned the prefetcher back on: {prefetched} pages prefetched");
    assert!(swept.misses - after.misses <= 1024, "{after:?} -> {swept:?}");
    assert!(swept.prefetch_hits > after.prefetch_hits, "{after:?} -> {swept:?}");
}
