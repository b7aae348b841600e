//! Incremental checkpoints on the memory-server level: objects are persistent allocations on
//! a real `nam serve`, written through nam-client over UCX; restart happens in a new client
//! (as a restarted process would), and a server killed mid-copy is an error at the next call.

mod common;

use common::{ServerProcess, TRANSPORTS};
use nam_incr::{restore, Config, Engine, IncrError, Mode, NamStore, Store};
use std::sync::Arc;

const LEN: usize = 37 * 4096 + 123;

fn pattern(bytes: &mut [u8], interval: u32, sparse: bool) {
    let step = if sparse { 997 } else { 1 };
    for i in (0..bytes.len()).step_by(step) {
        bytes[i] = (i as u32).wrapping_mul(2654435761).wrapping_add(interval) as u8;
    }
}

#[test]
fn every_mode_restarts_byte_exact_from_a_memory_server() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "64MiB"]);
        for mode in [Mode::StopAndCopy, Mode::Incremental, Mode::PartiallyNonBlocking, Mode::EarlyLate] {
            let prefix = format!("incr-{}", mode.name());
            let store: Arc<dyn Store> = Arc::new(NamStore::new(server.client(), &prefix));
            let mut data = vec![0u8; LEN + 64];
            let engine = Engine::new(Config::new(mode), store.clone()).unwrap();
            // SAFETY: `data` outlives the engine; an unaligned start inside it.
            unsafe { engine.protect(data.as_mut_ptr().add(5), LEN).unwrap() };
            let mut expected = Vec::new();
            for interval in 1..=4 {
                pattern(&mut data[5..5 + LEN], interval, interval % 2 == 0);
                expected = data[5..5 + LEN].to_vec();
                engine.checkpoint().unwrap();
                pattern(&mut data[5..5 + LEN], 100 + interval, true);
                assert_eq!(engine.wait().unwrap(), Some(interval));
            }
            drop(engine);
            // A new connection, as after a restart of the process.
            let fresh = NamStore::new(server.client(), &prefix);
            let back = restore(&fresh).unwrap();
            assert_eq!(back.interval, 4, "{mode:?} over {tls}");
            assert!(back.regions[0] == expected, "{mode:?} over {tls}: restored bytes differ");
        }
    }
}

#[test]
fn memory_server_killed_mid_copy_is_an_error_at_the_next_call() {
    let mut server = ServerProcess::start("tcp", &["--capacity", "64MiB"]);
    let store: Arc<dyn Store> = Arc::new(NamStore::new(server.client(), "incr-kill"));
    let mut data = vec![0u8; LEN];
    let engine = Engine::new(Config::new(Mode::PartiallyNonBlocking), store).unwrap();
    // SAFETY: `data` outlives the engine.
    unsafe { engine.protect(data.as_mut_ptr(), LEN).unwrap() };
    pattern(&mut data, 1, false);
    engine.checkpoint().unwrap();
    engine.wait().unwrap();
    server.kill();
    pattern(&mut data, 2, false);
    engine.checkpoint().unwrap();
    let error = engine.wait().unwrap_err();
    assert!(matches!(error, IncrError::CheckpointFailed { interval: 2, previous: Some(1), .. }), "{error}");
    // The writes of the application went on meanwhile and nothing waits forever.
    pattern(&mut data, 3, false);
}

#[test]
fn fork_mode_refuses_the_memory_server_level() {
    let server = ServerProcess::start("tcp", &["--capacity", "16MiB"]);
    let store: Arc<dyn Store> = Arc::new(NamStore::new(server.client(), "incr-fork"));
    let error = Engine::new(Config::new(Mode::Fork), store).err().unwrap();
    assert!(matches!(error, IncrError::Unsupported { mode: "fork", .. }), "{error}");
}
