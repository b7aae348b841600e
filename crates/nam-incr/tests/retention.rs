//! Older checkpoints kept for a collective restart: `Config::keep`, `Engine::keep_from`,
//! `restore_interval`, the caller's metadata in each commit, and a new engine continuing the
//! numbering of a used store (a restarted job) and collecting its old checkpoints.

use nam_incr::{checkpoints, restore, restore_interval, Config, DirStore, Engine, IncrError, Mode, Store};
use std::sync::Arc;

const LEN: usize = 9 * 4096 + 17;

fn temp(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("nam-incr-ret-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn fill(data: &mut [u8], interval: u8) {
    for (i, b) in data.iter_mut().enumerate().step_by(331) {
        *b = (i as u8).wrapping_mul(7).wrapping_add(interval);
    }
}

/// Takes checkpoints 1..=n of `data` (meta = interval number) and returns each one's bytes.
fn run(engine: &Engine, data: &mut [u8], n: u8) -> Vec<Vec<u8>> {
    let mut versions = Vec::new();
    for i in 1..=n {
        fill(data, i);
        versions.push(data.to_vec());
        engine.checkpoint_with(vec![i]).unwrap();
        engine.wait().unwrap();
    }
    versions
}

#[test]
fn keep_and_pin_decide_which_older_checkpoints_stay_restorable() {
    for mode in [Mode::StopAndCopy, Mode::Incremental, Mode::EarlyLate] {
        let dir = temp(mode.name());
        let store: Arc<dyn Store> = Arc::new(DirStore::ram(&dir).unwrap());
        let mut config = Config::new(mode);
        config.keep = 2;
        config.merge_ratio = 1.5; // merges happen too, and must keep what is retained
        let mut data = vec![0u8; LEN];
        let engine = Engine::new(config.clone(), store.clone()).unwrap();
        // SAFETY: `data` outlives the engine.
        unsafe { engine.protect(data.as_mut_ptr(), LEN).unwrap() };
        let versions = run(&engine, &mut data, 4);
        let listed: Vec<(u32, Vec<u8>)> =
            checkpoints(&*store).unwrap().into_iter().map(|l| (l.interval, l.meta)).collect();
        assert_eq!(listed, vec![(4, vec![4]), (3, vec![3])], "{mode:?}: keep = 2");
        let back = restore_interval(&*store, 3).unwrap();
        assert!(back.regions[0] == versions[2] && back.meta == vec![3], "{mode:?}: interval 3 byte-exact");
        let gone = restore_interval(&*store, 2).unwrap_err();
        assert!(matches!(gone, IncrError::NoSuchCheckpoint { interval: 2, .. }), "{mode:?}: {gone}");
        // Pinned at 4: 4 stays however many newer ones come.
        engine.keep_from(4);
        run(&engine, &mut data, 3);
        let intervals: Vec<u32> = checkpoints(&*store).unwrap().into_iter().map(|l| l.interval).collect();
        assert_eq!(intervals, vec![7, 6, 5, 4], "{mode:?}: pinned");
        assert!(restore_interval(&*store, 4).unwrap().regions[0] == versions[3], "{mode:?}: pinned bytes");
        drop(engine);
        // A new engine (a restarted job) numbers after the stored checkpoints and collects them.
        let engine = Engine::new(config, store.clone()).unwrap();
        // SAFETY: as above.
        unsafe { engine.protect(data.as_mut_ptr(), LEN).unwrap() };
        fill(&mut data, 99);
        assert_eq!(engine.checkpoint().unwrap(), 8, "{mode:?}: continues the numbering");
        engine.wait().unwrap();
        engine.checkpoint().unwrap();
        engine.wait().unwrap();
        let intervals: Vec<u32> = checkpoints(&*store).unwrap().into_iter().map(|l| l.interval).collect();
        assert_eq!(intervals, vec![9, 8], "{mode:?}: the old run's checkpoints were collected");
        assert!(restore(&*store).unwrap().regions[0] == data, "{mode:?}: newest byte-exact");
        drop(engine);
        let leftovers = std::fs::read_dir(&dir).unwrap().count();
        assert!(leftovers <= 8, "{mode:?}: {leftovers} objects left in the store");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
