//! Non-blocking atomics completed one at a time through their handles, and contexts whose
//! quiet waits only for their own operations, end to end against real server processes
//! over UCX TCP (the message path) and shared memory (the direct path, and UCX RMA).

mod common;

use common::{ServerProcess, TRANSPORTS};
use nam_client::{AllocOptions, AmoKind, Client, DataPath, Error};
use std::time::Duration;

/// Every transport on its own data path, and shared memory forced onto UCX RMA.
fn clients(server: &ServerProcess, tls: &str) -> Vec<(String, Client)> {
    let mut all = vec![(tls.to_string(), server.client())];
    if tls != "tcp" {
        let mut config = server.config();
        config.data_path = Some(DataPath::Rdma);
        all.push((format!("{tls} (RMA)"), Client::connect(config).unwrap()));
    }
    all
}

/// Stops (SIGSTOP) or continues (SIGCONT) a server process.
fn signal(server: &ServerProcess, sig: i32) {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(server.child.id() as i32, sig) };
}

#[test]
fn atomic_handles_complete_one_at_a_time_and_by_quiet() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "16MiB"]);
        for (name, c) in clients(&server, tls) {
            let a = c.alloc(4096, &AllocOptions::default()).unwrap();
            c.atomic_set::<u64>(&a, 0, 10).unwrap();
            c.atomic_set::<i32>(&a, 8, -3).unwrap();
            c.atomic_set::<u64>(&a, 16, 0b1100).unwrap();
            // Many in flight; each waited for on its own, the last first.
            let adds: Vec<_> = (0..40).map(|_| c.atomic_nb(&a, 0, AmoKind::FetchAdd, 1u64, 0).unwrap()).collect();
            let mut olds: Vec<u64> = adds.into_iter().rev().map(|op| op.wait().unwrap()).collect();
            olds.sort_unstable();
            assert_eq!(olds, (10..50).collect::<Vec<u64>>(), "over {name}: fetch-adds lost or repeated");

            // Polled with test until done; value() gives the old word without consuming.
            let mut small = c.atomic_nb(&a, 8, AmoKind::FetchAdd, 5i32, 0).unwrap();
            let mut polls = 0;
            while !small.test().unwrap() {
                polls += 1;
                assert!(polls < 10_000_000, "over {name}: a polled atomic never completed");
            }
            assert_eq!(small.value().unwrap(), Some(-3), "over {name}");
            assert_eq!(small.wait().unwrap(), -3, "over {name}");
            let swap = c.atomic_nb(&a, 24, AmoKind::Swap, 77u64, 0).unwrap();
            let cas = c.atomic_nb(&a, 24, AmoKind::CompareSwap, 88u64, 77).unwrap();
            let and = c.atomic_nb(&a, 16, AmoKind::FetchAnd, 0b0110u64, 0).unwrap();
            let or = c.atomic_nb(&a, 16, AmoKind::FetchOr, 0b0001u64, 0).unwrap();
            let xor = c.atomic_nb(&a, 16, AmoKind::FetchXor, 0b1111u64, 0).unwrap();
            let read = c.atomic_nb(&a, 16, AmoKind::Fetch, 0u64, 0).unwrap();
            let inc = c.atomic_nb(&a, 8, AmoKind::Inc, 0i32, 0).unwrap();
            let set = c.atomic_nb(&a, 32, AmoKind::Set, u32::MAX, 0).unwrap();
            // Quiet completes every handle: each then reports at once.
            c.quiet().unwrap();
            let (mut swap, mut cas, mut xor, mut read) = (swap, cas, xor, read);
            for (what, op) in [("swap", &mut swap), ("cas", &mut cas), ("xor", &mut xor), ("read", &mut read)] {
                assert!(op.test().unwrap(), "over {name}: {what} incomplete after quiet");
            }
            assert_eq!((swap.wait().unwrap(), cas.wait().unwrap()), (0, 77), "over {name}");
            assert_eq!((and.wait().unwrap(), or.wait().unwrap()), (0b1100, 0b0100), "over {name}");
            assert_eq!((xor.wait().unwrap(), read.wait().unwrap()), (0b0101, 0b1010), "over {name}");
            assert_eq!(inc.wait().unwrap(), 2, "over {name}");
            assert_eq!(set.wait().unwrap(), 0, "over {name}");
            assert_eq!(c.atomic_fetch::<u64>(&a, 24).unwrap(), 88, "over {name}");
            assert_eq!(c.atomic_fetch::<i32>(&a, 8).unwrap(), 3, "over {name}");
            assert_eq!(c.atomic_fetch::<u32>(&a, 32).unwrap(), u32::MAX, "over {name}");
            // Handle-less atomics and handles mixed: quiet delivers the one, the handle the other.
            let mut fetched = 0u64;
            // SAFETY: `fetched` is read only after the quiet below.
            unsafe { c.atomic_fetch_add_nbi(&mut fetched, &a, 0, 100u64).unwrap() };
            let after = c.atomic_nb(&a, 0, AmoKind::FetchAdd, 1u64, 0).unwrap();
            assert_eq!(after.wait().unwrap(), 150, "over {name}: a handle overtook an earlier atomic");
            c.quiet().unwrap();
            assert_eq!(fetched, 50, "over {name}");
            // Dropping a handle completes it.
            drop(c.atomic_nb(&a, 0, AmoKind::Add, 1000u64, 0).unwrap());
            assert_eq!(c.atomic_fetch::<u64>(&a, 0).unwrap(), 1151, "over {name}");
            // Checked before anything is sent.
            let bad = c.atomic_nb(&a, 4, AmoKind::FetchAdd, 1u64, 0).map(drop);
            assert!(matches!(bad, Err(Error::Misaligned { offset: 4 })), "over {name}: {bad:?}");
            let bad = c.atomic_nb(&a, 4096, AmoKind::FetchAdd, 1u64, 0).map(drop);
            assert!(matches!(bad, Err(Error::OutOfBounds { .. })), "over {name}: {bad:?}");
            c.free(&a).unwrap();
        }
    }
}

#[test]
fn an_atomic_handle_to_a_stopped_server_times_out_at_its_deadline() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "16MiB"]);
        let mut config = server.config();
        config.timeout = Duration::from_millis(1500);
        let c = Client::connect(config).unwrap();
        let a = c.alloc(4096, &AllocOptions::default()).unwrap();
        c.atomic_set::<u64>(&a, 0, 1).unwrap();
        signal(&server, libc::SIGSTOP);
        let mut op = c.atomic_nb(&a, 0, AmoKind::FetchAdd, 1u64, 0).unwrap();
        let polled = op.test();
        let started = std::time::Instant::now();
        let waited = op.wait();
        let took = started.elapsed();
        signal(&server, libc::SIGCONT);
        if a.is_direct() {
            // Mapped memory: the CPU's atomic needs no server.
            assert_eq!(polled, Ok(true), "over {tls}");
            assert_eq!(waited, Ok(1), "over {tls}");
        } else {
            assert_eq!(polled, Ok(false), "over {tls}: a stopped server answered");
            assert!(matches!(waited, Err(Error::Timeout { .. })), "over {tls}: {waited:?}");
            assert!(took < Duration::from_secs(4), "over {tls}: the wait outlived its deadline: {took:?}");
            // The server answers again: later atomics complete, the late reply is dropped.
            let next = c.atomic_nb(&a, 0, AmoKind::FetchAdd, 1u64, 0).unwrap();
            assert_eq!(next.wait().unwrap(), 2, "over {tls}");
        }
        let want = if a.is_direct() { 2 } else { 3 };
        assert_eq!(c.atomic_fetch::<u64>(&a, 0).unwrap(), want, "over {tls}: an atomic was lost or repeated");
    }
}

#[test]
fn a_contexts_quiet_does_not_wait_for_another_streams_operations() {
    for tls in TRANSPORTS {
        let (slow, fast) =
            (ServerProcess::start(tls, &["--capacity", "16MiB"]), ServerProcess::start(tls, &["--capacity", "16MiB"]));
        let mut config = slow.config();
        config.servers = vec![slow.addr, fast.addr];
        config.timeout = Duration::from_millis(1500);
        let c = Client::connect(config).unwrap();
        let on = |server: usize| AllocOptions { server: Some(server), ..AllocOptions::default() };
        let (stuck, free) = (c.alloc(1 << 16, &on(0)).unwrap(), c.alloc(1 << 16, &on(1)).unwrap());
        let (ctx_a, ctx_b) = (c.context().unwrap(), c.context().unwrap());
        let old: Vec<u8> = (0..16384u32).map(|i| (i % 251) as u8).collect();
        let new: Vec<u8> = (0..16384u32).map(|i| (i % 241) as u8 ^ 0x5a).collect();

        // Context A and the client itself leave operations in flight to the slow server.
        signal(&slow, libc::SIGSTOP);
        ctx_a.put(&stuck, 0, &old).unwrap();
        let stuck_atomic = ctx_a.atomic_nb(&stuck, 49152, AmoKind::FetchAdd, 1u64, 0).unwrap();
        c.put(&stuck, 16384, &old).unwrap();

        // Context B's quiet completes its own put to the other server, and only that.
        ctx_b.put(&free, 0, &new).unwrap();
        let fetched = ctx_b.atomic_nb(&free, 49152, AmoKind::FetchAdd, 7u64, 0).unwrap();
        assert_eq!(ctx_b.quiet(), Ok(()), "over {tls}: context B's quiet waited for another stream");
        assert_eq!(fetched.wait(), Ok(0), "over {tls}");
        let mut back = vec![0u8; new.len()];
        ctx_b.get(&free, 0, &mut back).unwrap();
        assert!(back == new, "over {tls}: context B's bytes differ at the fast server");

        let a_quiet = ctx_a.quiet();
        let stuck_result = stuck_atomic.wait();
        let c_quiet = c.quiet();
        signal(&slow, libc::SIGCONT);
        if stuck.is_direct() {
            // Mapped memory: stores and atomics complete without the server.
            assert_eq!((a_quiet, stuck_result.clone(), c_quiet), (Ok(()), Ok(0), Ok(())), "over {tls}");
        } else {
            // Their own quiets wait for the stopped server, and give up at the deadline.
            assert!(matches!(a_quiet, Err(Error::Timeout { .. })), "over {tls}: context A's quiet: {a_quiet:?}");
            assert!(matches!(c_quiet, Err(Error::Timeout { .. })), "over {tls}: the client's quiet: {c_quiet:?}");
            assert!(stuck_result.is_err(), "over {tls}: {stuck_result:?}");
        }
        // Once the server runs again, the same streams complete and read the bytes back.
        ctx_a.put(&stuck, 0, &old).unwrap();
        ctx_a.quiet().unwrap();
        c.put(&stuck, 16384, &old).unwrap();
        c.quiet().unwrap();
        let mut back = vec![0u8; old.len()];
        ctx_a.get(&stuck, 0, &mut back).unwrap();
        assert!(back == old, "over {tls}: context A's bytes differ at the slow server");
        c.get(&stuck, 16384, &mut back).unwrap();
        assert!(back == old, "over {tls}: the client's bytes differ at the slow server");
        drop((ctx_a, ctx_b));
    }
}
