//! Byte-exact restart in every mode, on the RAM and SSD levels, with unaligned regions.

use nam_incr::{restore, Config, DirStore, Engine, Mode, Store, TrackerChoice, TrackerKind};
use rand::{Rng, SeedableRng};
use std::sync::Arc;

fn temp(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("nam-incr-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A page-aligned anonymous mapping (a Vec's heap block may share pages with other data).
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(len: usize) -> Mapping {
        // SAFETY: anonymous private mapping, checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        Mapping { ptr: ptr as *mut u8, len }
    }
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: our mapping.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// Runs intervals of random sparse and dense writes on two unaligned regions, checking the
/// restart image after each committed checkpoint.
fn run(mode: Mode, consolidate: bool, store: Arc<dyn Store>, tracker: TrackerChoice) {
    let mut config = Config::new(mode);
    config.consolidate = consolidate;
    config.tracker = tracker;
    config.merge_ratio = 1.3;
    config.segment_bytes = 64 * 1024;
    let mut map = Mapping::new(40 * 4096);
    let engine = Engine::new(config, store.clone()).unwrap();
    let (a_off, a_len, b_off, b_len) = (100, 9 * 4096 + 77, 12 * 4096 + 3, 20 * 4096 + 1000);
    let base = map.ptr;
    // SAFETY: both ranges lie in `map`, which outlives the engine.
    unsafe {
        assert_eq!(engine.protect(base.add(a_off), a_len).unwrap(), 0);
        assert_eq!(engine.protect(base.add(b_off), b_len).unwrap(), 1);
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(mode as u64 * 2 + consolidate as u64);
    for interval in 1..=8u32 {
        let bytes = map.bytes();
        let writes = if interval % 3 == 0 { 4000 } else { 60 };
        for _ in 0..writes {
            let at = if rng.gen_bool(0.5) { a_off + rng.gen_range(0..a_len) } else { b_off + rng.gen_range(0..b_len) };
            bytes[at] = rng.gen();
        }
        let expected = (bytes[a_off..a_off + a_len].to_vec(), bytes[b_off..b_off + b_len].to_vec());
        assert_eq!(engine.checkpoint().unwrap(), interval);
        // Overwrite right away: the checkpoint must still hold the values above.
        for _ in 0..writes {
            let at = b_off + rng.gen_range(0..b_len);
            map.bytes()[at] ^= 0xff;
        }
        assert_eq!(engine.wait().unwrap(), Some(interval));
        let back = restore(&*store).unwrap();
        assert_eq!(back.interval, interval);
        assert!(back.regions[0] == expected.0, "{mode:?} interval {interval}: region 0 differs");
        assert!(back.regions[1] == expected.1, "{mode:?} interval {interval}: region 1 differs");
    }
    let stats = engine.stats();
    assert!(stats.bytes_written > 0);
    if mode.tracks() {
        assert!(stats.faults > 0, "{mode:?} saw no write faults");
    }
}

#[test]
fn every_mode_restarts_byte_exact_from_ram_and_ssd() {
    for mode in Mode::ALL {
        for consolidate in [false, true] {
            if !mode.incremental() && consolidate {
                continue;
            }
            let dir = temp(&format!("{}-{consolidate}", mode.name()));
            let store: Arc<dyn Store> = if consolidate {
                Arc::new(DirStore::ssd(&dir).unwrap())
            } else {
                Arc::new(DirStore::ram(&dir).unwrap())
            };
            run(mode, consolidate, store, TrackerChoice::Auto);
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
}

#[test]
fn every_incremental_mode_works_with_synchronous_userfaultfd_faults() {
    for mode in [Mode::Incremental, Mode::PartiallyNonBlocking, Mode::EarlyLate] {
        let dir = temp(&format!("sync-{}", mode.name()));
        run(mode, true, Arc::new(DirStore::ram(&dir).unwrap()), TrackerChoice::UserfaultfdSync);
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn incremental_modes_use_the_asynchronous_tracker_where_the_kernel_has_it() {
    // UFFD_FEATURE_WP_ASYNC and PAGEMAP_SCAN are Linux 6.7+; older kernels fall back.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit()).map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    let dir = temp("async-kind");
    for mode in Mode::ALL {
        let engine = Engine::new(Config::new(mode), Arc::new(DirStore::ram(&dir).unwrap())).unwrap();
        let kind = engine.tracker();
        match mode {
            Mode::StopAndCopy => assert_eq!(kind, None),
            Mode::Fork => assert_eq!(kind, Some(TrackerKind::Userfaultfd)),
            _ if (major, minor) >= (6, 7) => assert_eq!(kind, Some(TrackerKind::UserfaultfdAsync), "{mode:?}"),
            _ => assert!(kind.is_some()),
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn every_mode_works_with_the_mprotect_tracker() {
    for mode in [Mode::Incremental, Mode::PartiallyNonBlocking, Mode::EarlyLate] {
        let dir = temp(&format!("mprotect-{}", mode.name()));
        run(mode, true, Arc::new(DirStore::ram(&dir).unwrap()), TrackerChoice::Mprotect);
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn bad_configuration_and_regions_get_typed_errors() {
    let dir = temp("config");
    let store: Arc<dyn Store> = Arc::new(DirStore::ram(&dir).unwrap());
    let mut config = Config::new(Mode::EarlyLate);
    config.fault_around_pages = 3;
    assert!(matches!(Engine::new(config, store.clone()), Err(nam_incr::IncrError::InvalidConfig(_))));
    let mut config = Config::new(Mode::EarlyLate);
    config.record_bytes = 1000;
    assert!(matches!(Engine::new(config, store.clone()), Err(nam_incr::IncrError::InvalidConfig(_))));
    let engine = Engine::new(Config::new(Mode::Incremental), store.clone()).unwrap();
    let mut map = Mapping::new(4 * 4096);
    // SAFETY: inside `map`, which outlives the engine.
    unsafe {
        assert!(matches!(engine.protect(map.ptr, 0), Err(nam_incr::IncrError::EmptyRegion)));
        engine.protect(map.ptr.add(10), 4096).unwrap();
        assert!(matches!(engine.protect(map.ptr.add(4096), 10), Err(nam_incr::IncrError::Overlap { .. })));
    }
    assert!(matches!(engine.unprotect(7), Err(nam_incr::IncrError::UnknownRegion(7))));
    map.bytes()[10] = 1;
    drop(engine);
    assert!(matches!(restore(&*store), Err(nam_incr::IncrError::NothingToRestore { .. })));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn merging_backwards_keeps_restart_byte_exact_and_shrinks_the_chain() {
    let dir = temp("merge");
    let store = Arc::new(DirStore::ram(&dir).unwrap());
    let mut config = Config::new(Mode::Incremental);
    config.merge_ratio = 1.5;
    config.segment_bytes = 16 * 1024;
    let engine = Engine::new(config, store.clone()).unwrap();
    let mut map = Mapping::new(16 * 4096);
    // SAFETY: `map` outlives the engine.
    unsafe { engine.protect(map.ptr, map.len).unwrap() };
    for interval in 0..12u8 {
        // Dense rewrites: without merging the chain would grow by a region per interval.
        map.bytes().iter_mut().enumerate().for_each(|(i, b)| *b = (i as u8) ^ interval);
        engine.checkpoint().unwrap();
        assert!(restore(&*store).unwrap().regions[0] == map.bytes().to_vec());
    }
    let names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().any(|n| n.starts_with("mrg")), "no merged objects: {names:?}");
    let stored: u64 = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    assert!(stored < 3 * map.len as u64, "{stored} bytes stored for a {} byte region", map.len);
    drop(engine);
    std::fs::remove_dir_all(dir).unwrap();
}
