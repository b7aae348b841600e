//! What a program can tell a paged region, against real `nam serve` processes: fetch these
//! ranges now (`PagedRegion::fetch_ranges`, `madvise(MADV_WILLNEED)`'s counterpart) and drop
//! that range now (`PagedRegion::evict_range`, `MADV_PAGEOUT`'s), in both fault modes, with
//! the data checked against a local model; ranges outside the region; a server that died;
//! pages the program drops behind the pager's back with `madvise(MADV_DONTNEED)`; and the
//! benchmark's graph query that asks for its pages (`--workload fof-hinted`).

#[path = "../../nam-cli/tests/common/mod.rs"]
mod common;

use common::ServerProcess;
use nam_client::{Client, ClientConfig};
use nam_farmem::{Error, FaultMode, PagedRegion, PagerConfig};
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

const PAGE: u64 = 4096;

/// One UCX client at a time in this process (see `farmem_pager.rs`: openucx/ucx#9942).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn region(servers: &[&ServerProcess], transports: &str, bytes: u64, budget: u64, mode: FaultMode) -> PagedRegion {
    let mut config = ClientConfig::new(servers.iter().map(|s| s.addr).collect());
    config.transports = Some(transports.into());
    config.timeout = Duration::from_secs(3);
    let client = Arc::new(Client::connect(config).expect("connect"));
    let mut pager = PagerConfig::new(bytes, budget);
    pager.prefetch.enabled = false; // every page that comes in is a miss or was asked for
    pager.fault_mode = mode;
    PagedRegion::new(client, pager).expect("region")
}

/// Fills the region with a pattern, mirrored in the returned model, and evicts it all.
fn filled(region: &PagedRegion) -> Vec<u8> {
    // SAFETY: the only view of the region while this runs.
    let mem = unsafe { region.as_slice_mut() };
    let model: Vec<u8> = (0..mem.len()).map(|i| (i % 249) as u8).collect();
    mem.copy_from_slice(&model);
    region.evict_all().unwrap();
    assert_eq!(region.resident_pages(), 0);
    model
}

fn pages_of(ranges: &[(u64, u64)]) -> BTreeSet<u64> {
    ranges.iter().flat_map(|&(offset, len)| offset / PAGE..(offset + len).div_ceil(PAGE)).collect()
}

#[test]
fn fetched_ranges_are_read_without_faults_in_both_fault_modes() {
    let _serial = serial();
    let server = ServerProcess::start("sm,self,tcp", &[]);
    for mode in [FaultMode::Thread, FaultMode::Signal] {
        let bytes = 4 << 20;
        let region = region(&[&server], "sm,self,tcp", bytes, bytes / 4, mode);
        let model = filled(&region);
        // Scattered ranges of up to three pages, some overlapping: fewer pages than half the
        // budget (128), so all of them come in.
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let ranges: Vec<(u64, u64)> =
            (0..40).map(|_| (rng.gen_range(0..bytes - 3 * PAGE), rng.gen_range(1..2 * PAGE))).collect();
        let wanted = pages_of(&ranges);
        assert!(wanted.len() < 128);
        let before = region.stats();
        assert_eq!(region.fetch_ranges(&ranges).unwrap(), wanted.len() as u64, "{mode:?}");
        assert_eq!(region.resident_pages(), wanted.len(), "{mode:?}");
        // SAFETY: the only view of the region in this loop.
        let mem = unsafe { region.as_slice_mut() };
        for &(offset, len) in &ranges {
            let (a, b) = (offset as usize, (offset + len) as usize);
            assert!(mem[a..b] == model[a..b], "{mode:?}: bytes at {a:#x} differ from the model");
        }
        let after = region.stats();
        assert_eq!(after.misses, before.misses, "{mode:?}: reading fetched ranges faulted");
        assert_eq!(after.prefetches - before.prefetches, wanted.len() as u64, "{mode:?}");
        assert_eq!(region.fetch_ranges(&ranges).unwrap(), 0, "{mode:?}: resident pages fetched again");
        assert_eq!(region.fetch_ranges(&[]).unwrap(), 0);
        assert_eq!(region.fetch_ranges(&[(PAGE, 0)]).unwrap(), 0, "an empty range has no pages");
    }
}

#[test]
fn a_fetch_larger_than_half_the_budget_brings_half_and_keeps_the_data() {
    let _serial = serial();
    let server = ServerProcess::start("sm,self,tcp", &[]);
    for mode in [FaultMode::Thread, FaultMode::Signal] {
        let bytes = 4 << 20;
        let budget_pages = (bytes / 4 / PAGE) as usize;
        let region = region(&[&server], "sm,self,tcp", bytes, bytes / 4, mode);
        let mut model = filled(&region);
        assert_eq!(region.fetch_ranges(&[(0, bytes)]).unwrap(), budget_pages as u64 / 2, "{mode:?}");
        // Writes over everything, with fetches of the rest of the region in between: the
        // budget holds, and every byte is still right.
        // SAFETY: the only view of the region in this loop.
        let mem = unsafe { region.as_slice_mut() };
        let mut rng = rand::rngs::StdRng::seed_from_u64(6);
        for round in 0..20u64 {
            let at = rng.gen_range(0..bytes - 64 * PAGE);
            region.fetch_ranges(&[(at, 64 * PAGE)]).unwrap();
            let v = round as u8;
            let (a, b) = (at as usize, (at + 64 * PAGE) as usize);
            mem[a..b].fill(v);
            model[a..b].fill(v);
            assert!(region.resident_pages() <= budget_pages, "{mode:?}: resident set above the budget");
        }
        region.evict_all().unwrap();
        assert!(mem[..] == model[..], "{mode:?}: region differs from the model");
    }
}

#[test]
fn evict_range_writes_back_and_drops_that_range_only() {
    let _serial = serial();
    let servers = [ServerProcess::start("sm,self,tcp", &[]), ServerProcess::start("sm,self,tcp", &[])];
    for mode in [FaultMode::Thread, FaultMode::Signal] {
        let bytes = 1 << 20; // 256 pages, all resident: the budget is the whole region
        let region = region(&[&servers[0], &servers[1]], "sm,self,tcp", bytes, bytes, mode);
        let mut model = filled(&region);
        // SAFETY: the only view of the region in this loop.
        let mem = unsafe { region.as_slice_mut() };
        for (i, b) in mem.iter_mut().enumerate() {
            *b = (i % 241) as u8;
            model[i] = *b;
        }
        assert_eq!(region.resident_pages(), 256);
        let before = region.stats();
        // Pages 10-73: the range starts and ends inside a page, which goes too.
        assert_eq!(region.evict_range(10 * PAGE + 100, 64 * PAGE - 200).unwrap(), 64, "{mode:?}");
        assert_eq!(region.resident_pages(), 192, "{mode:?}");
        assert_eq!(region.stats().writebacks - before.writebacks, 64, "{mode:?}: dirty pages not written back");
        assert_eq!(region.evict_range(10 * PAGE, 64 * PAGE).unwrap(), 0, "{mode:?}: nothing left to drop");
        let misses = region.stats().misses;
        assert!(mem[..] == model[..], "{mode:?}: region differs from the model");
        assert_eq!(region.stats().misses - misses, 64, "{mode:?}: only the dropped pages come back");
    }
}

#[test]
fn ranges_outside_the_region_are_refused_and_change_nothing() {
    let _serial = serial();
    let server = ServerProcess::start("sm,self,tcp", &[]);
    let bytes = 1 << 20;
    let region = region(&[&server], "sm,self,tcp", bytes, bytes / 4, FaultMode::Signal);
    filled(&region);
    for range in [(bytes - 10, 20), (bytes, 1), (u64::MAX, 2)] {
        match region.fetch_ranges(&[(0, PAGE), range]) {
            Err(Error::OutOfRange { addr, len, size }) => assert_eq!((addr, len, size), (range.0, range.1, bytes)),
            other => panic!("fetch of {range:?}: {other:?}"),
        }
        match region.evict_range(range.0, range.1) {
            Err(e @ Error::OutOfRange { .. }) => assert!(e.to_string().contains("outside"), "{e}"),
            other => panic!("eviction of {range:?}: {other:?}"),
        }
    }
    assert_eq!(region.resident_pages(), 0, "a refused call fetched pages");
    assert_eq!(region.stats().prefetches, 0);
}

#[test]
fn a_fetch_from_a_dead_server_is_an_error_naming_it_and_the_live_servers_pages_still_come() {
    let _serial = serial();
    let mut servers = [ServerProcess::start("tcp", &[]), ServerProcess::start("tcp", &[])];
    let dead = servers[1].addr;
    let bytes = 256 << 10;
    let region = region(&[&servers[0], &servers[1]], "tcp", bytes, bytes, FaultMode::Signal);
    let model = filled(&region);
    servers[1].kill();
    // Pages alternate between the servers: a run over both needs the dead one.
    match region.fetch_ranges(&[(0, 16 * PAGE)]) {
        Err(e @ Error::Server { server: 1, .. }) => assert!(e.to_string().contains(&dead.to_string()), "{e}"),
        other => panic!("fetch from a dead server: {other:?}"),
    }
    // The live server's pages (the even ones) come, with their data.
    let even: Vec<(u64, u64)> = (0..32).map(|p| (2 * p * PAGE, PAGE)).collect();
    assert_eq!(region.fetch_ranges(&even).unwrap(), 32);
    // SAFETY: the only view of the region; only resident pages are read.
    let mem = unsafe { region.as_slice_mut() };
    for &(offset, len) in &even {
        let (a, b) = (offset as usize, (offset + len) as usize);
        assert!(mem[a..b] == model[a..b], "the live server's page at {a:#x} differs");
    }
    drop(region); // releasing its chunks on the dead server fails with a warning, and ends
}

#[test]
fn the_hinted_graph_query_computes_what_the_local_one_does_with_few_misses() {
    // The benchmark fails if a round's checksum differs between the local and the paged run.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nam-bench"))
        .args(["farmem", "--workload", "fof,fof-hinted", "--scale", "0.2", "--json"])
        .args(["--local-fraction", "0.5", "--repeat", "1", "--transport", "shm"])
        .output()
        .expect("run nam-bench farmem");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {}", String::from_utf8_lossy(&out.stderr));
    let runs: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(runs.len(), 2, "{stdout}");
    let misses = |workload: &str| -> u64 {
        let run = runs.iter().find(|r| r["workload"] == workload).expect(workload);
        run["misses"].as_u64().unwrap()
    };
    let (plain, hinted) = (misses("fof"), misses("fof-hinted"));
    // The queries ask for every page they read; what still misses was evicted in between.
    assert!(plain > 1000 && hinted * 4 < plain, "misses: {plain} plain, {hinted} hinted");
}

#[test]
fn pages_the_program_drops_itself_come_back_from_the_servers_instead_of_faulting_forever() {
    let _serial = serial();
    let server = ServerProcess::start("sm,self,tcp", &[]);
    // On huge pages too (the refusal without them is tested in farmem_pager).
    // Four pages of budget, and one for an install in flight.
    let _huge_pages = common::reserve_huge_pages(5);
    for (mode, huge) in [(FaultMode::Signal, false), (FaultMode::Thread, false), (FaultMode::Signal, true)] {
        let what = format!("{mode:?} faults, huge pages {huge}");
        let page = if huge { nam_farmem::huge_page_bytes().expect("huge pages reserved") } else { PAGE } as usize;
        let mut config = ClientConfig::new(vec![server.addr]);
        config.transports = Some("sm,self,tcp".into());
        let client = Arc::new(Client::connect(config).expect("connect"));
        let mut pager = PagerConfig::new(4 * page as u64, 4 * page as u64);
        pager.fault_mode = mode;
        if huge {
            pager = pager.with_huge_pages();
        }
        let region = PagedRegion::new(client, pager).expect("region");
        // SAFETY: the only view of the region in this loop.
        let mem = unsafe { region.as_slice_mut() };
        mem[..3 * page].fill(5);
        region.flush().unwrap();
        mem[..page].fill(6); // dirty again, not written back
                             // SAFETY: advice on region memory, whose contents the program gives up.
        assert_eq!(unsafe { libc::madvise(mem.as_mut_ptr().cast(), 2 * page, libc::MADV_DONTNEED) }, 0, "{what}");
        // Before the pager checked, these reads faulted again and again, for ever: read them
        // on another thread and give up on it after a while.
        let (tx, rx) = std::sync::mpsc::channel();
        let (page0, page1) = (mem.as_ptr() as usize, mem.as_ptr() as usize + page);
        std::thread::spawn(move || {
            // SAFETY: region memory, alive until the test ends (or leaked with this thread).
            let read = |at: usize| unsafe { std::ptr::read_volatile(at as *const u8) };
            let _ = tx.send((read(page0), read(page1)));
        });
        let got = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| panic!("{what}: the read never ended"));
        assert_eq!(got, (5, 5), "{what}: pages come back as of their last write-back");
        mem[..page].fill(7);
        region.evict_all().unwrap();
        let kept = mem[..page].iter().all(|&b| b == 7) && mem[page..3 * page].iter().all(|&b| b == 5);
        assert!(kept, "{what}: region differs from the model");
    }
}
