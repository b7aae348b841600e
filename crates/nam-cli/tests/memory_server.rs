//! The memory server and client library, end to end: real `nam serve` processes, real
//! clients, over UCX TCP and UCX shared memory.

mod common;

use common::{eventually, ServerProcess, TRANSPORTS};
use nam_client::{AllocOptions, Compare, DataPath, Error, Signal, SignalOp, Status};
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn several_clients_share_a_named_allocation() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "16MiB"]);
        let writer = server.client();
        let shared = writer.alloc(1 << 16, &AllocOptions::shared("job-42")).unwrap();
        writer.put_sync(&shared, 100, b"written by the first client").unwrap();
        let readers: Vec<_> = (0..3).map(|_| server.client()).collect();
        for reader in &readers {
            let view = reader.open("job-42").unwrap();
            assert_eq!(view.handle(), shared.handle());
            assert_eq!(view.size(), 1 << 16);
            let mut buf = [0u8; 27];
            reader.get(&view, 100, &mut buf).unwrap();
            assert_eq!(&buf, b"written by the first client", "over {tls}");
            reader.fetch_add(&view, 0, 1).unwrap();
        }
        assert_eq!(writer.fetch(&shared, 0).unwrap(), 3);
        // Opening what this client already holds gives a handle that dies with the first.
        let again = writer.open("job-42").unwrap();
        assert_eq!(again.handle(), shared.handle());
        // The creator frees its reference; the readers still hold the memory.
        writer.free(&shared).unwrap();
        assert!(matches!(writer.put(&again, 0, b"x"), Err(Error::Freed { .. })), "second handle outlived the free");
        let view = readers[0].open("job-42").unwrap();
        assert_eq!(readers[0].fetch(&view, 0).unwrap(), 3);
    }
}

#[test]
fn random_put_get_sequences_match_a_local_model() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "16MiB"]);
        let client = server.client();
        let size = 256 * 1024;
        let a = client.alloc(size, &AllocOptions::default()).unwrap();
        // Shared memory gets the direct load/store path; TCP (no RDMA here) the message path.
        let expected = if tls == "tcp" { DataPath::Messages } else { DataPath::SharedMemory };
        assert_eq!(client.data_path(0), Some(expected));
        assert_eq!(a.is_direct(), tls != "tcp");
        let mut model = vec![0u8; size as usize];
        client.put_sync(&a, 0, &model).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
        for step in 0..600 {
            let len = rng.gen_range(1..8192usize);
            let offset = rng.gen_range(0..size as usize - len);
            match rng.gen_range(0..4) {
                0 | 1 => {
                    let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                    client.put(&a, offset as u64, &data).unwrap();
                    model[offset..offset + len].copy_from_slice(&data);
                }
                2 => {
                    let mut buf = vec![0u8; len];
                    client.flush().unwrap();
                    client.get(&a, offset as u64, &mut buf).unwrap();
                    assert_eq!(buf, &model[offset..offset + len], "step {step} over {tls}");
                }
                _ => {
                    let word = (offset / 8 * 8) as u64;
                    let add = rng.gen_range(0..1000u64);
                    client.flush().unwrap();
                    let old = client.fetch_add(&a, word, add).unwrap();
                    let w = word as usize;
                    let expect = u64::from_le_bytes(model[w..w + 8].try_into().unwrap());
                    assert_eq!(old, expect, "step {step} over {tls}");
                    model[w..w + 8].copy_from_slice(&expect.wrapping_add(add).to_le_bytes());
                }
            }
        }
        let mut all = vec![0u8; size as usize];
        client.flush().unwrap();
        client.get(&a, 0, &mut all).unwrap();
        assert!(all == model, "final contents differ over {tls}");
    }
}

/// Puts that the message path splits into several messages (sizes around its chunk and
/// the 64 KiB protocol limit, at odd offsets), each with its signal, land byte for byte
/// where they belong.
#[test]
fn multi_message_puts_land_at_their_offsets() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "16MiB"]);
        let client = server.client();
        let size = 1u64 << 20;
        let a = client.alloc(size, &AllocOptions::default()).unwrap();
        let signal = client.alloc(64, &AllocOptions::default()).unwrap();
        let mut model = vec![0u8; size as usize];
        client.put_sync(&a, 0, &model).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(0xc4a2);
        for (step, len) in [65475usize, 65476, 65477, 65536, 65537, 3 * 65536 + 123, 500_000].into_iter().enumerate() {
            let offset = rng.gen_range(0..size as usize - len) | 1;
            let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            let signal_op = Signal { word: &signal, offset: 0, value: step as u64 + 1, op: SignalOp::Set };
            client.put_signal(&a, offset as u64, &data, signal_op).unwrap();
            model[offset..offset + len].copy_from_slice(&data);
            assert_eq!(client.fetch(&signal, 0).unwrap(), step as u64 + 1, "signal of put {step} over {tls}");
            let mut back = vec![0u8; len];
            client.get(&a, offset as u64, &mut back).unwrap();
            assert!(back == data, "put {step} of {len} bytes at {offset} over {tls} differs");
        }
        let mut all = vec![0u8; size as usize];
        client.flush().unwrap();
        client.get(&a, 0, &mut all).unwrap();
        assert!(all == model, "final contents differ over {tls}");
    }
}

#[test]
fn non_blocking_operations_and_wait_all() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "64MiB"]);
        let client = server.client();
        let chunk = 1 << 20;
        let a = client.alloc(8 * chunk as u64, &AllocOptions::default()).unwrap();
        let sources: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i.wrapping_mul(37); chunk]).collect();
        let ops: Vec<_> =
            sources.iter().enumerate().map(|(i, s)| client.put_nb(&a, (i * chunk) as u64, s).unwrap()).collect();
        client.wait_all(ops).unwrap();
        client.flush().unwrap();
        let mut sinks = vec![vec![0u8; chunk]; 8];
        let mut ops: Vec<_> =
            sinks.iter_mut().enumerate().map(|(i, s)| client.get_nb(&a, (i * chunk) as u64, s).unwrap()).collect();
        while !ops.iter_mut().all(|op| op.test().unwrap()) {}
        drop(ops);
        assert_eq!(sinks, sources, "over {tls}");
    }
}

#[test]
fn concurrent_threads_share_one_client() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "16MiB"]);
        let client = Arc::new(server.client());
        let a = client.alloc(1 << 20, &AllocOptions::default()).unwrap();
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (client, a) = (client.clone(), a.clone());
                std::thread::spawn(move || {
                    let base = 4096 + t * 65536;
                    for i in 0..200u64 {
                        client.fetch_add(&a, 0, 1).unwrap();
                        let data = (t * 1000 + i).to_le_bytes();
                        client.put(&a, base + i * 8, &data).unwrap();
                    }
                    client.flush().unwrap();
                    for i in 0..200u64 {
                        let mut back = [0u8; 8];
                        client.get(&a, base + i * 8, &mut back).unwrap();
                        assert_eq!(u64::from_le_bytes(back), t * 1000 + i);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(client.fetch(&a, 0).unwrap(), 800, "over {tls}");
    }
}

#[test]
fn signals_make_data_visible_before_the_signal() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "16MiB"]);
        let producer = server.client();
        let consumer = server.client();
        let data = producer.alloc(1 << 20, &AllocOptions::shared("mailbox")).unwrap();
        let view = consumer.open("mailbox").unwrap();
        let waiter = std::thread::spawn(move || {
            for round in 1..=20u64 {
                consumer.wait_until(&view, 0, Compare::Ge, round, Duration::from_secs(10)).unwrap();
                let mut buf = vec![0u8; 64 * 1024];
                consumer.get(&view, 4096, &mut buf).unwrap();
                // The producer may already be writing a later round, never an earlier one.
                assert!(buf.iter().all(|&b| b >= round as u8), "round {round}: data older than its signal");
            }
            let timeout = consumer.wait_until(&view, 0, Compare::Eq, 999, Duration::from_millis(50));
            assert!(matches!(timeout, Err(Error::WaitTimeout { last: 20, .. })), "{timeout:?}");
        });
        for round in 1..=20u64 {
            let payload = vec![round as u8; 64 * 1024];
            producer
                .put_signal(&data, 4096, &payload, Signal { word: &data, offset: 0, value: 1, op: SignalOp::Add })
                .unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        waiter.join().unwrap();
        producer.put_signal(&data, 8, b"x", Signal { word: &data, offset: 0, value: 7, op: SignalOp::Set }).unwrap();
        assert_eq!(producer.fetch(&data, 0).unwrap(), 7, "over {tls}");
    }
}

#[test]
fn atomics_swap_and_compare_swap() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "1MiB"]);
        let client = server.client();
        let a = client.alloc(64, &AllocOptions::default()).unwrap();
        assert_eq!(client.swap(&a, 8, 5).unwrap(), 0);
        assert_eq!(client.compare_swap(&a, 8, 5, 9).unwrap(), 5);
        assert_eq!(client.compare_swap(&a, 8, 5, 11).unwrap(), 9, "a failed compare leaves the word");
        assert_eq!(client.fetch(&a, 8).unwrap(), 9);
        assert!(matches!(client.fetch_add(&a, 4, 1), Err(Error::Misaligned { offset: 4 })));
        assert!(matches!(client.fetch_add(&a, 64, 1), Err(Error::OutOfBounds { .. })));
    }
}

#[test]
fn status_reports_usage_clients_and_traffic() {
    let server = ServerProcess::start("tcp", &["--capacity", "8MiB", "--name", "status-test"]);
    {
        let client = server.client();
        let a = client.alloc(4096, &AllocOptions::default()).unwrap();
        client.put(&a, 0, &[1u8; 100]).unwrap();
        let s = client.status(0).unwrap();
        assert_eq!(
            (s.server_name.as_str(), s.capacity, s.used, s.allocations, s.clients),
            ("status-test", 8 << 20, 4096, 1, 1)
        );
    }
    let s = server.admin_status();
    assert_eq!((s.used, s.allocations, s.clients), (0, 0, 0), "goodbye released everything");
    assert_eq!((s.reported.puts, s.reported.bytes_put), (1, 100));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nam"))
        .args(["status", &server.addr.to_string(), "--json"])
        .env("UCX_TLS", "tcp")
        .env(nam_client::config::ADMIN_TOKEN_VAR, common::ADMIN_TOKEN)
        .output()
        .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["capacity"], 8 << 20);
    assert_eq!(json["server"], "status-test");
}

#[test]
fn an_idle_server_sleeps() {
    let server = ServerProcess::start("tcp", &["--capacity", "8MiB"]);
    let pid = server.child.id();
    // Nanoseconds the server's threads have run, from the scheduler's own accounting: what
    // other processes on the machine do changes when it runs, not how long.
    let cpu_ns = || -> u64 {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
        tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
            .map(|s| s.split_whitespace().next().unwrap().parse::<u64>().unwrap())
            .sum()
    };
    drop(server.client());
    // Measure from the moment its progress loop (the main thread) sleeps on the event fd.
    let wchan = format!("/proc/{pid}/task/{pid}/wchan");
    let asleep = || std::fs::read_to_string(&wchan).is_ok_and(|w| w.contains("poll"));
    assert!(eventually(Duration::from_secs(10), asleep), "the idle server never went to sleep");
    let (before, started) = (cpu_ns(), Instant::now());
    // An idle server wakes only for housekeeping; a busy-polling one would run all along.
    let window = Duration::from_secs(2);
    while started.elapsed() < window {
        std::thread::sleep(window - started.elapsed());
    }
    let (used, elapsed) = (cpu_ns() - before, started.elapsed());
    assert!(
        used * 20 <= elapsed.as_nanos() as u64,
        "the idle server ran {:?} of {elapsed:?} (more than 5%)",
        Duration::from_nanos(used)
    );
}

#[test]
fn new_allocations_start_zeroed() {
    let server = ServerProcess::start("tcp", &["--capacity", "1MiB"]);
    let first = server.client();
    let a = first.alloc(1 << 20, &AllocOptions::default()).unwrap();
    first.put_sync(&a, 0, &vec![0xee; 1 << 20]).unwrap();
    first.free(&a).unwrap();
    let second = server.client();
    let b = second.alloc(1 << 20, &AllocOptions::default()).unwrap();
    let mut back = vec![1u8; 1 << 20];
    second.get(&b, 0, &mut back).unwrap();
    assert!(back.iter().all(|&x| x == 0), "a new allocation shows its predecessor's bytes");
}

#[test]
fn status_codes_of_refusals_are_typed() {
    let server = ServerProcess::start("tcp", &["--capacity", "1MiB"]);
    let client = server.client();
    let refused = |r: Result<nam_client::Allocation, Error>| match r {
        Err(Error::Refused { status, .. }) => status,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert_eq!(refused(client.alloc(0, &AllocOptions::default())), Status::InvalidArgument);
    assert_eq!(refused(client.alloc(1 << 41, &AllocOptions::default())), Status::TooLarge);
    assert_eq!(refused(client.alloc(2 << 20, &AllocOptions::default())), Status::PoolExhausted);
    assert_eq!(refused(client.open("nothing")), Status::NameNotFound);
}

#[test]
fn the_demo_runs_from_start_to_finish() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nam")).arg("demo").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for step in [
        "bob reads \"hello from alice\"",
        "counter = 20",
        "signal 3: bob woke up",
        "outside the 1048576-byte",
        "server stopped",
    ] {
        assert!(stdout.contains(step), "demo output lacks {step:?}:\n{stdout}");
    }
}
