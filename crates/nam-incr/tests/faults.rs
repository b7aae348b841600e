//! Every fault of the issue: late copying still running at restart, a store failing mid-copy,
//! a region unprotected or unmapped during a copy, kill -9 during background copying, and
//! userfaultfd not permitted.

use nam_incr::{restore, Config, DirStore, Engine, IncrError, Mode, Store, StoreError, TrackerKind};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

const PAGES: usize = 48;

fn temp(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("nam-incr-fault-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The tests of this file one at a time: a test that unmaps a protected mapping frees its
/// addresses while its engine still tracks them, and another test's mapping placed there
/// meanwhile would be refused as overlapping.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Longest a held store keeps a put waiting, so a mistake in a test cannot hang it.
const HOLD_MAX: Duration = Duration::from_secs(10);

/// A real directory store that takes `delay` per object, can hold every put until released
/// (so a fault lands while a background copy is certainly running, however loaded the
/// machine), and, optionally, starts failing after `fail_after` objects (the writer's target
/// failing mid-copy).
struct SlowStore {
    inner: DirStore,
    delay: Duration,
    puts: AtomicUsize,
    fail_after: AtomicUsize,
    held: Mutex<bool>,
    released: Condvar,
}

impl SlowStore {
    fn new(dir: &std::path::Path, delay_ms: u64) -> Arc<SlowStore> {
        Arc::new(SlowStore {
            inner: DirStore::ssd(dir).unwrap(),
            delay: Duration::from_millis(delay_ms),
            puts: AtomicUsize::new(0),
            fail_after: AtomicUsize::new(usize::MAX),
            held: Mutex::new(false),
            released: Condvar::new(),
        })
    }

    /// Puts wait from now on until [`SlowStore::release`] (or [`HOLD_MAX`]).
    fn hold(&self) {
        *self.held.lock().unwrap() = true;
    }

    fn release(&self) {
        *self.held.lock().unwrap() = false;
        self.released.notify_all();
    }
}

impl Store for SlowStore {
    fn level(&self) -> &str {
        "ssd"
    }
    fn put_parts(&self, name: &str, parts: &[&[u8]]) -> Result<(), StoreError> {
        let held = self.held.lock().unwrap();
        drop(self.released.wait_timeout_while(held, HOLD_MAX, |held| *held).unwrap());
        std::thread::sleep(self.delay);
        if self.puts.fetch_add(1, Ordering::AcqRel) >= self.fail_after.load(Ordering::Acquire) {
            let source = std::io::Error::from_raw_os_error(libc::EIO);
            return Err(StoreError::Io { what: format!("write {name}"), source });
        }
        self.inner.put_parts(name, parts)
    }
    fn get(&self, name: &str) -> Result<Vec<u8>, StoreError> {
        self.inner.get(name)
    }
    fn remove(&self, name: &str) -> Result<(), StoreError> {
        self.inner.remove(name)
    }
}

struct Mapping(*mut u8, usize);

impl Mapping {
    fn new(len: usize) -> Mapping {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: anonymous private mapping, checked below.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        assert_ne!(p, libc::MAP_FAILED);
        Mapping(p as *mut u8, len)
    }
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: our mapping, alive until drop (tests do not keep two slices at once).
        unsafe { std::slice::from_raw_parts_mut(self.0, self.1) }
    }
    fn unmap(&mut self) {
        // SAFETY: our mapping; afterwards the struct holds a null pointer.
        unsafe { libc::munmap(self.0 as *mut libc::c_void, self.1) };
        self.1 = 0;
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.1 > 0 {
            self.unmap();
        }
    }
}

fn fill(bytes: &mut [u8], seed: u8) {
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
    }
}

/// One 16 KiB record per stored segment, so a slow store gives a long background copy.
fn engine(mode: Mode, store: Arc<dyn Store>, map: &Mapping) -> Engine {
    let mut config = Config::new(mode);
    config.segment_bytes = 16 * 1024;
    let engine = Engine::new(config, store).unwrap();
    // SAFETY: the mapping outlives the engine in every test (or is unmapped on purpose).
    unsafe { engine.protect(map.0, map.1).unwrap() };
    engine
}

#[test]
fn restart_from_an_interval_whose_late_copy_was_running() {
    let _serial = serial();
    let dir = temp("late");
    let store = SlowStore::new(&dir, 15);
    let mut map = Mapping::new(PAGES * 4096);
    let engine = engine(Mode::EarlyLate, store.clone(), &map);
    fill(map.bytes(), 1);
    assert_eq!(engine.checkpoint().unwrap(), 1);
    engine.wait().unwrap();
    fill(map.bytes(), 2);
    let expected = map.bytes().to_vec();
    store.hold();
    assert_eq!(engine.checkpoint().unwrap(), 2);
    // Late copying of interval 2 runs now (the store holds it until the writes below have
    // hit pages not yet persisted); every write below must wait for its page.
    let stalled = std::thread::scope(|s| {
        let engine = &engine;
        let store = store.clone();
        s.spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while engine.pages_awaited() == 0 && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            store.release();
        });
        fill(map.bytes(), 3);
        engine.stats().stall_ns
    });
    assert_eq!(engine.wait().unwrap(), Some(2));
    assert_eq!(restore(&*store).unwrap().regions[0], expected, "restart must give interval 2, not the newer writes");
    assert!(engine.stats().faults > 0);
    assert!(stalled > 0, "writes to pages not yet persisted did not wait");
    drop(engine);
    std::fs::remove_dir_all(dir).unwrap();
}

/// The fault injection a crash test relies on: with the next commit held, the interval the
/// checkpoint closed never becomes complete, and dropping the engine does not wait for it.
#[test]
fn held_commit_leaves_the_interval_incomplete_and_the_previous_one_restorable() {
    let _serial = serial();
    let dir = temp("held");
    let store = SlowStore::new(&dir, 0);
    let mut map = Mapping::new(PAGES * 4096);
    let engine = engine(Mode::EarlyLate, store.clone(), &map);
    fill(map.bytes(), 1);
    let expected = map.bytes().to_vec();
    assert_eq!(engine.checkpoint().unwrap(), 1);
    engine.wait().unwrap();
    assert!(engine.hold_next_commit());
    fill(map.bytes(), 2);
    assert_eq!(engine.checkpoint().unwrap(), 2);
    // Once interval 2 is copied, the writer stops before its commit.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while engine.commit_held() != Some(2) {
        assert!(std::time::Instant::now() < deadline, "the writer never reached the held commit");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(engine.committed(), Some(1), "a held commit happened");
    let started = std::time::Instant::now();
    drop(engine);
    assert!(started.elapsed() < Duration::from_secs(5), "drop waited for the held commit");
    assert_eq!(restore(&*store).unwrap().regions[0], expected);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn target_failing_mid_copy_keeps_the_previous_checkpoint_and_reports_at_the_next_call() {
    let _serial = serial();
    for mode in [Mode::PartiallyNonBlocking, Mode::EarlyLate, Mode::Incremental] {
        let dir = temp(&format!("fail-{}", mode.name()));
        let store = SlowStore::new(&dir, 0);
        let mut map = Mapping::new(PAGES * 4096);
        let engine = engine(mode, store.clone(), &map);
        fill(map.bytes(), 1);
        engine.checkpoint().unwrap();
        engine.wait().unwrap();
        let first = map.bytes().to_vec();
        fill(map.bytes(), 2);
        store.fail_after.store(store.puts.load(Ordering::Acquire) + 2, Ordering::Release);
        let background = mode != Mode::Incremental;
        let result = engine.checkpoint();
        let error = if background {
            assert!(result.is_ok());
            engine.wait().unwrap_err()
        } else {
            result.unwrap_err()
        };
        assert!(matches!(error, IncrError::CheckpointFailed { interval: 2, previous: Some(1), .. }), "{error}");
        assert_eq!(restore(&*store).unwrap().regions[0], first);
        // The target recovers: the next checkpoint writes everything anew.
        store.fail_after.store(usize::MAX, Ordering::Release);
        fill(map.bytes(), 4);
        engine.checkpoint().unwrap();
        engine.wait().unwrap();
        assert_eq!(restore(&*store).unwrap().regions[0], map.bytes().to_vec());
        drop(engine);
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn region_unprotected_during_a_copy_is_an_error_not_a_crash() {
    let _serial = serial();
    let dir = temp("unprotect");
    let store = SlowStore::new(&dir, 10);
    let mut map = Mapping::new(PAGES * 4096);
    let engine = engine(Mode::PartiallyNonBlocking, store.clone(), &map);
    fill(map.bytes(), 1);
    engine.checkpoint().unwrap();
    engine.wait().unwrap();
    let first = map.bytes().to_vec();
    fill(map.bytes(), 2);
    store.hold();
    engine.checkpoint().unwrap();
    engine.unprotect(0).unwrap();
    fill(map.bytes(), 3); // writable again at once
    store.release();
    let error = engine.wait().unwrap_err();
    assert!(matches!(error, IncrError::RegionRemoved(0, 2)), "{error}");
    assert_eq!(restore(&*store).unwrap().regions[0], first);
    drop(engine);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn region_unmapped_during_a_copy_is_an_error_not_a_crash() {
    let _serial = serial();
    let dir = temp("unmap");
    let store = SlowStore::new(&dir, 10);
    let mut map = Mapping::new(PAGES * 4096);
    let engine = engine(Mode::PartiallyNonBlocking, store.clone(), &map);
    fill(map.bytes(), 1);
    engine.checkpoint().unwrap();
    engine.wait().unwrap();
    let first = map.bytes().to_vec();
    fill(map.bytes(), 2);
    store.hold();
    engine.checkpoint().unwrap();
    map.unmap();
    store.release();
    let error = engine.wait().unwrap_err();
    assert!(matches!(error, IncrError::RegionUnreadable { region: 0, .. }), "{error}");
    assert_eq!(restore(&*store).unwrap().regions[0], first);
    engine.unprotect(0).unwrap();
    drop(engine);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Child side of the kill test: commits interval 1, starts interval 2's slow background copy,
/// says so, and waits to be killed.
#[test]
fn kill_child_body() {
    let _serial = serial();
    let Ok(dir) = std::env::var("NAM_INCR_KILL_DIR") else { return };
    let store = SlowStore::new(std::path::Path::new(&dir), 20);
    let mut map = Mapping::new(PAGES * 4096);
    let engine = engine(Mode::EarlyLate, store, &map);
    fill(map.bytes(), 1);
    engine.checkpoint().unwrap();
    engine.wait().unwrap();
    fill(map.bytes(), 2);
    // Interval 2's copy runs but never commits, however fast it is: the kill lands during it.
    assert!(engine.hold_next_commit());
    engine.checkpoint().unwrap();
    println!("COPYING");
    std::thread::sleep(Duration::from_secs(30));
}

#[test]
fn kill_during_background_copy_restarts_from_the_last_complete_version() {
    let _serial = serial();
    let dir = temp("kill");
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["kill_child_body", "--exact", "--nocapture", "--test-threads=1"])
        .env("NAM_INCR_KILL_DIR", &dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(lines.any(|l| l.unwrap().contains("COPYING")), "child did not start copying");
    // Kill once the copy has stored something (a crash in the middle, not before it started).
    let first_segment = dir.join("seg-0000000002-000000");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !first_segment.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let store = DirStore::ssd(&dir).unwrap();
    let back = restore(&store).unwrap();
    let mut expected = vec![0u8; PAGES * 4096];
    fill(&mut expected, 1);
    assert_eq!(back.interval, 1);
    assert!(back.regions[0] == expected);
    assert!(store.exists("seg-0000000002-000000").unwrap(), "the kill did not land during interval 2's copy");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Child side of the EPERM test: runs as an unprivileged user, where the kernel refuses
/// userfaultfd (vm.unprivileged_userfaultfd=0) and /dev/userfaultfd is root-only.
#[test]
fn eperm_child_body() {
    let _serial = serial();
    let Ok(dir) = std::env::var("NAM_INCR_EPERM_DIR") else { return };
    // SAFETY: dropping privileges of this child process only.
    assert_eq!(unsafe { libc::setgid(65534) }, 0);
    assert_eq!(unsafe { libc::setuid(65534) }, 0);
    let store: Arc<dyn Store> = Arc::new(DirStore::ram(&dir).unwrap());
    let mut map = Mapping::new(PAGES * 4096);
    let engine = engine(Mode::PartiallyNonBlocking, store.clone(), &map);
    assert_eq!(engine.tracker(), Some(TrackerKind::Mprotect));
    let reason = engine.tracker_fallback().unwrap().to_string();
    assert!(reason.contains("not permitted"), "{reason}");
    fill(map.bytes(), 5);
    engine.checkpoint().unwrap();
    fill(map.bytes(), 6);
    engine.wait().unwrap();
    let mut expected = vec![0u8; PAGES * 4096];
    fill(&mut expected, 5);
    assert!(restore(&*store).unwrap().regions[0] == expected);
    println!("FALLBACK-OK {reason}");
}

#[test]
fn userfaultfd_not_permitted_falls_back_to_mprotect_with_a_clear_message() {
    let _serial = serial();
    let sysctl = std::fs::read_to_string("/proc/sys/vm/unprivileged_userfaultfd").unwrap_or_default();
    // SAFETY: getuid has no preconditions.
    if sysctl.trim() != "0" || unsafe { libc::getuid() } != 0 {
        panic!("this test needs root and vm.unprivileged_userfaultfd=0 to make userfaultfd fail with EPERM");
    }
    let dir = temp("eperm");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["eperm_child_body", "--exact", "--nocapture", "--test-threads=1"])
        .env("NAM_INCR_EPERM_DIR", &dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("FALLBACK-OK"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(dir).unwrap();
}
