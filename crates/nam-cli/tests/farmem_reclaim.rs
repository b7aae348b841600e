//! The pager's background reclaim (`PagerConfig::evict_ahead`, `PagerConfig::watermarks`)
//! against a real `nam serve`: in both fault modes, two threads write and read random pages
//! of a region four times its budget while the handler thread evicts behind them, and a
//! third thread watches the resident set. Checked: no write is lost (every byte against a
//! local model, during the run and after everything was written back), the resident set
//! never exceeds the budget, background reclaim evicted, and once the program stops at
//! least the low watermark's pages are free, with the default watermarks and with
//! configured ones. With reclaim off, the faults evict and the data is the same. Timing (a fault's p99 against its median) is the benchmark's
//! (`nam-bench farmem --workload fault-latency --fault-local-fraction 0.25`), not a test's.

mod common;

use common::ServerProcess;
use nam_client::{Client, ClientConfig};
use nam_farmem::{FaultMode, PagedRegion, PagerConfig, Watermarks};
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PAGE: usize = 4096;

/// One UCX client at a time in this process (openucx/ucx#9942, as in farmem_pager.rs).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn client(addr: std::net::SocketAddr) -> Arc<Client> {
    let mut config = ClientConfig::new(vec![addr]);
    config.transports = Some("sm,self,tcp".into());
    config.timeout = Duration::from_secs(5);
    Arc::new(Client::connect(config).expect("connect"))
}

/// Random page-sized reads and writes of `mem`, each read checked against `model`.
fn churn(mem: &mut [u8], model: &mut [u8], rounds: usize, seed: u64, what: &str) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let pages = mem.len() / PAGE;
    for _ in 0..rounds {
        let page = rng.gen_range(0..pages);
        let at = page * PAGE + rng.gen_range(0..PAGE - 64);
        if rng.gen_bool(0.5) {
            let v: u8 = rng.gen();
            mem[at..at + 64].fill(v);
            model[at..at + 64].fill(v);
        } else {
            assert!(mem[at..at + 64] == model[at..at + 64], "{what}: bytes at {at:#x} differ from the model");
        }
    }
}

/// Runs two churning threads over the halves of a region of `bytes` with `budget` bytes
/// resident while a third checks the resident set against the budget; then writes
/// everything back and compares the whole region with the model. Returns the region.
fn churn_region(addr: std::net::SocketAddr, config: PagerConfig, what: &str) -> PagedRegion {
    let budget_pages = (config.budget_bytes / PAGE as u64) as usize;
    let bytes = config.bytes as usize;
    let (free_low, free_high) = config.watermarks.pages(budget_pages as u64);
    let (free_low, free_high) = (free_low as usize, free_high as usize);
    let region = PagedRegion::new(client(addr), config).unwrap();
    // SAFETY: the two halves are disjoint views of the region, dropped before it.
    let (a, b) = unsafe { region.as_slice_mut() }.split_at_mut(bytes / 2);
    let mut models = [vec![0u8; a.len()], vec![0u8; b.len()]];
    let [ma, mb] = &mut models;
    let done = AtomicBool::new(false);
    let most = AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                most.fetch_max(region.resident_pages(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let ta = s.spawn(|| churn(a, ma, 6000, 1, what));
        let tb = s.spawn(|| churn(b, mb, 6000, 2, what));
        let (ra, rb) = (ta.join(), tb.join());
        done.store(true, Ordering::Release);
        if let Err(e) = ra.and(rb) {
            std::panic::resume_unwind(e);
        }
    });
    let most = most.load(Ordering::Relaxed).max(region.resident_pages());
    assert!(most <= budget_pages, "{what}: {most} pages resident, budget {budget_pages}");
    let settled = region.wait_settled(Duration::from_secs(10));
    assert!(settled, "{what}: the handler did not settle");
    let resident = region.resident_pages();
    // A fault that left fewer than the low watermark's pages free woke the handler, which
    // then evicted up to the high one.
    if region.stats().reclaim_evictions > 0 {
        assert!(
            budget_pages - resident >= free_low,
            "{what}: {resident} of {budget_pages} pages resident once settled: fewer than {free_low} free (high {free_high})"
        );
    }
    region.flush().unwrap();
    region.evict_all().unwrap();
    // SAFETY: the threads ended; the only view of the region now.
    let mem = unsafe { region.as_slice_mut() };
    assert!(mem[..bytes / 2] == models[0][..] && mem[bytes / 2..] == models[1][..], "{what}: data lost");
    region
}

#[test]
fn background_reclaim_loses_no_write_and_keeps_the_resident_set_within_the_budget() {
    let _serial = serial();
    let server = ServerProcess::start("sm,self,tcp", &[]);
    for mode in [FaultMode::Signal, FaultMode::Thread] {
        let what = format!("{mode:?} faults");
        let mut config = PagerConfig::new(8 << 20, 2 << 20);
        config.fault_mode = mode;
        let region = churn_region(server.addr, config, &what);
        let s = region.stats();
        assert!(s.evictions > 0 && s.writebacks > 0, "{what}: {s:?}");
        assert!(s.reclaim_evictions > 0, "{what}: background reclaim evicted nothing: {s:?}");
        assert!(
            s.reclaim_evictions + s.full_evictions <= s.evictions,
            "{what}: reclaim and full-budget evictions are evictions: {s:?}"
        );
    }
}

#[test]
fn configured_watermarks_are_the_free_pages_reclaim_leaves() {
    let _serial = serial();
    let server = ServerProcess::start("sm,self,tcp", &[]);
    // 1024 pages of budget: 10% and 20% are 102 and 204 pages, above the floors.
    let mut config = PagerConfig::new(16 << 20, 4 << 20);
    config.watermarks = Watermarks { low_per_mille: 100, high_per_mille: 200 };
    assert_eq!(config.watermarks.pages(1024), (102, 204));
    let region = churn_region(server.addr, config, "watermarks 10% and 20%");
    assert!(region.stats().reclaim_evictions > 0, "{:?}", region.stats());
}

#[test]
fn watermarks_stay_inside_the_budget_whatever_is_asked() {
    let w = Watermarks::default();
    let (low, high) = w.pages(1024);
    assert!(0 < low && low < high && high <= 256, "default ({low}, {high})");
    // Floors for small budgets, capped at a quarter of the budget.
    let (low, high) = w.pages(64);
    assert!(low < high && high <= 16, "({low}, {high}) of 64 pages");
    // A high watermark below the low one is raised to it; per mille above 1000 is the budget.
    let (low, high) = Watermarks { low_per_mille: 500, high_per_mille: 100 }.pages(10_000);
    assert!(low < high && high <= 2500, "({low}, {high})");
    let (low, high) = Watermarks { low_per_mille: 5000, high_per_mille: 9000 }.pages(10_000);
    assert!(low < high && high == 2500, "({low}, {high})");
    assert_eq!(w.pages(2), (0, 0), "a budget of two pages keeps none free");
}

#[test]
fn without_background_reclaim_the_faults_evict_and_keep_the_data() {
    let _serial = serial();
    let server = ServerProcess::start("sm,self,tcp", &[]);
    let mut config = PagerConfig::new(8 << 20, 2 << 20);
    config.evict_ahead = false;
    let started = Instant::now();
    let region = churn_region(server.addr, config, "reclaim off");
    let s = region.stats();
    assert_eq!(s.reclaim_evictions, 0, "{s:?}");
    assert!(s.full_evictions > 0, "{s:?} after {:?}", started.elapsed());
}

#[test]
fn data_streamed_in_once_and_left_idle_ages_out_of_the_budget() {
    // Drop-behind keeps the pages a program streamed through first; when the program never
    // comes back to them (arrays filled, then left idle), they must leave the budget to the
    // data it works on now: here a zone of 300 pages read in a loop, which fits in the budget
    // of 512 pages only once the idle zone's kept pages are gone.
    let _serial = serial();
    let server = ServerProcess::start("sm,self,tcp", &[]);
    for mode in [FaultMode::Signal, FaultMode::Thread] {
        let mut config = PagerConfig::new(8 << 20, 2 << 20);
        config.fault_mode = mode;
        config.prefetch.enabled = false;
        let region = PagedRegion::new(client(server.addr), config).unwrap();
        // SAFETY: the only view of the region in this test.
        let mem = unsafe { region.as_slice_mut() };
        let idle = 0..1024 * PAGE;
        let work = 1024 * PAGE..1324 * PAGE;
        for at in idle.clone().step_by(PAGE) {
            mem[at] = (at / PAGE) as u8;
        }
        for at in work.clone().step_by(PAGE) {
            mem[at] = (at / PAGE) as u8 ^ 0x5a;
        }
        let mut last = 0;
        for pass in 0..12 {
            let before = region.stats().misses;
            for at in work.clone().step_by(PAGE) {
                assert_eq!(mem[at], (at / PAGE) as u8 ^ 0x5a, "{mode:?}: pass {pass}, page {}", at / PAGE);
            }
            last = region.stats().misses - before;
        }
        assert!(last <= 300 / 4, "{mode:?}: {last} misses in the last pass over 300 pages: {:?}", region.stats());
        for at in idle.clone().step_by(PAGE) {
            assert_eq!(mem[at], (at / PAGE) as u8, "{mode:?}: idle page {}", at / PAGE);
        }
    }
}
