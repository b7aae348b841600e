//! OpenSHMEM's remaining one-sided calls end to end, against real server processes over UCX
//! TCP (the message path) and shared memory (the direct path, and UCX RMA above the
//! crossover): single-element and strided put/get, non-blocking fetching atomics completed by
//! quiet, contexts, and the barrier and broadcast of a named group.

mod common;

use common::{ServerProcess, TRANSPORTS};
use nam_client::{AllocOptions, Client, DataPath, Error, ReduceGroup, Status};
use std::time::{Duration, Instant};

/// The client configurations each test runs with: every transport on its own data path,
/// and shared memory forced onto UCX RMA (no mapped allocation), so the RMA path's
/// non-blocking atomics are reached too.
fn clients(server: &ServerProcess, tls: &str) -> Vec<(String, Client)> {
    let mut all = vec![(tls.to_string(), server.client())];
    if tls != "tcp" {
        let mut config = server.config();
        config.data_path = Some(DataPath::Rdma);
        all.push((format!("{tls} (RMA)"), Client::connect(config).unwrap()));
    }
    all
}

#[test]
fn single_elements_and_strided_puts_and_gets() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "16MiB"]);
        for (name, c) in clients(&server, tls) {
            let a = c.alloc(1 << 16, &AllocOptions::default()).unwrap();
            c.put_value(&a, 3, 0xabu8).unwrap();
            c.put_value(&a, 16, -5i64).unwrap();
            c.put_value(&a, 24, 2.5f64).unwrap();
            c.put_value(&a, 32, u128::MAX - 1).unwrap();
            c.quiet().unwrap();
            assert_eq!(c.get_value::<u8>(&a, 3).unwrap(), 0xab, "over {name}");
            assert_eq!(c.get_value::<i64>(&a, 16).unwrap(), -5, "over {name}");
            assert_eq!(c.get_value::<f64>(&a, 24).unwrap(), 2.5, "over {name}");
            assert_eq!(c.get_value::<u128>(&a, 32).unwrap(), u128::MAX - 1, "over {name}");
            assert!(matches!(c.put_value(&a, (1 << 16) - 4, 1u64), Err(Error::OutOfBounds { .. })));

            // Every third u32 at the server from every second of the source: 100 elements.
            let src: Vec<u32> = (0..200).collect();
            let base = 4096u64;
            c.iput(&a, base, 3, &src, 2, 100).unwrap();
            c.quiet().unwrap();
            let mut whole = vec![0u32; 300];
            c.iget(&a, base, 1, &mut whole, 1, 300).unwrap();
            for (i, w) in whole.iter().enumerate() {
                let want = if i % 3 == 0 { (i / 3 * 2) as u32 } else { 0 };
                assert_eq!(*w, want, "over {name}: element {i}");
            }
            // Gather back into every other element of a buffer; the rest stay untouched.
            let mut back = vec![7u32; 200];
            c.iget(&a, base, 3, &mut back, 2, 100).unwrap();
            for (i, b) in back.iter().enumerate() {
                let want = if i % 2 == 0 { i as u32 } else { 7 };
                assert_eq!(*b, want, "over {name}: gathered element {i}");
            }
            // A sparse stride (one get per element) and a contiguous target (one put).
            let mut sparse = vec![0u64; 4];
            c.put_value(&a, 8192, 11u64).unwrap();
            c.put_value(&a, 8192 + 8 * 1000, 22u64).unwrap();
            c.quiet().unwrap();
            c.iget(&a, 8192, 1000, &mut sparse, 2, 2).unwrap();
            assert_eq!(sparse, [11, 0, 22, 0], "over {name}");
            c.iput(&a, 12288, 1, &[1u16, 9, 2, 9, 3], 2, 3).unwrap();
            c.quiet().unwrap();
            assert_eq!(c.get_value::<u64>(&a, 12288).unwrap() & 0xffff_ffff_ffff, 0x0003_0002_0001, "over {name}");

            // Checked before anything moves: a range past the end, a short local buffer, stride 0.
            let before = c.get_value::<u32>(&a, base).unwrap();
            let past = c.iput(&a, (1 << 16) - 64, 16, &[9u32; 8], 1, 8);
            assert!(matches!(past, Err(Error::OutOfBounds { .. })), "over {name}: {past:?}");
            assert_eq!(c.get_value::<u32>(&a, (1 << 16) - 64).unwrap(), 0, "over {name}: a failed iput wrote");
            let short = c.iput(&a, base, 1, &[9u32; 8], 2, 8);
            assert!(matches!(short, Err(Error::InvalidArgument(_))), "over {name}: {short:?}");
            let zero = c.iget(&a, base, 0, &mut [0u32; 4], 1, 4);
            assert!(matches!(zero, Err(Error::InvalidArgument(_))), "over {name}: {zero:?}");
            assert_eq!(c.get_value::<u32>(&a, base).unwrap(), before);
            c.free(&a).unwrap();
        }
    }
}

#[test]
fn non_blocking_fetching_atomics_deliver_at_quiet() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "16MiB"]);
        for (name, c) in clients(&server, tls) {
            let a = c.alloc(4096, &AllocOptions::default()).unwrap();
            c.atomic_set::<u64>(&a, 0, 10).unwrap();
            c.atomic_set::<i32>(&a, 8, -3).unwrap();
            c.atomic_set::<u64>(&a, 16, 0b1100).unwrap();
            let mut olds = [0u64; 64];
            let (mut small, mut swapped, mut cas, mut and, mut or, mut xor, mut read, mut inc) =
                (0i32, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0i32);
            // SAFETY: every location is read only after the quiet below and outlives it.
            unsafe {
                for old in olds.iter_mut() {
                    c.atomic_fetch_add_nbi(old, &a, 0, 1u64).unwrap();
                }
                c.atomic_fetch_add_nbi(&mut small, &a, 8, 5i32).unwrap();
                c.atomic_fetch_inc_nbi::<i32>(&mut inc, &a, 8).unwrap();
                c.atomic_swap_nbi(&mut swapped, &a, 24, 77u64).unwrap();
                c.atomic_compare_swap_nbi(&mut cas, &a, 24, 77u64, 88).unwrap();
                c.atomic_fetch_and_nbi(&mut and, &a, 16, 0b0110u64).unwrap();
                c.atomic_fetch_or_nbi(&mut or, &a, 16, 0b0001u64).unwrap();
                c.atomic_fetch_xor_nbi(&mut xor, &a, 16, 0b1111u64).unwrap();
                c.atomic_fetch_nbi(&mut read, &a, 16).unwrap();
            }
            c.quiet().unwrap();
            let mut sorted = olds;
            sorted.sort_unstable();
            assert_eq!(sorted.to_vec(), (10..74).collect::<Vec<u64>>(), "over {name}: fetch-adds lost or repeated");
            assert_eq!((small, inc), (-3, 2), "over {name}");
            assert_eq!((swapped, cas), (0, 77), "over {name}");
            assert_eq!((and, or, xor, read), (0b1100, 0b0100, 0b0101, 0b1010), "over {name}");
            assert_eq!(c.atomic_fetch::<u64>(&a, 0).unwrap(), 74);
            assert_eq!(c.atomic_fetch::<i32>(&a, 8).unwrap(), 3);
            assert_eq!(c.atomic_fetch::<u64>(&a, 24).unwrap(), 88);
            // Checked before anything is sent.
            let mut unused = 0u64;
            // SAFETY: nothing is posted.
            let bad = unsafe { c.atomic_fetch_add_nbi(&mut unused, &a, 4, 1u64) };
            assert!(matches!(bad, Err(Error::Misaligned { offset: 4 })), "over {name}: {bad:?}");
            // SAFETY: nothing is posted.
            let bad = unsafe { c.atomic_fetch_add_nbi(&mut unused, &a, 4096, 1u64) };
            assert!(matches!(bad, Err(Error::OutOfBounds { .. })), "over {name}: {bad:?}");
            c.free(&a).unwrap();
        }
    }
}

/// `ranks` clients (threads) of group `name`, each running `body` with its rank.
fn in_group<R: Send + 'static>(
    server: &ServerProcess,
    name: &'static str,
    ranks: u32,
    body: impl Fn(&Client, &mut ReduceGroup, u32) -> R + Send + Sync + 'static,
) -> Vec<R> {
    let body = std::sync::Arc::new(body);
    let threads: Vec<_> = (0..ranks)
        .map(|rank| {
            let client = server.client();
            let body = body.clone();
            std::thread::spawn(move || {
                let mut group = ReduceGroup::attach(&client, name, ranks, rank, 4096, 0).unwrap();
                let result = body(&client, &mut group, rank);
                group.detach(&client).unwrap();
                result
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn barrier_holds_every_rank_until_the_last_arrives() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "16MiB"]);
        let flags = server.client();
        let board = flags.alloc(4096, &AllocOptions::shared("board")).unwrap();
        // Each rank bumps the counter, waits at the barrier, then reads it: every rank must
        // see every bump. Rank 2 comes late.
        let seen = in_group(&server, "barrier", 4, |client, group, rank| {
            let board = client.open("board").unwrap();
            let mut seen = Vec::new();
            for round in 1..=3u64 {
                if rank == 2 {
                    std::thread::sleep(Duration::from_millis(50));
                }
                client.atomic_add::<u64>(&board, 0, 1).unwrap();
                client.quiet().unwrap();
                group.barrier(client).unwrap();
                seen.push((round, client.atomic_fetch::<u64>(&board, 0).unwrap()));
                group.barrier(client).unwrap();
            }
            seen
        });
        for ranks in seen {
            for (round, count) in ranks {
                assert_eq!(count, round * 4, "over {tls}: a rank passed the barrier of round {round} early");
            }
        }
        flags.free(&board).unwrap();
    }
}

#[test]
fn barrier_times_out_at_the_deadline_when_a_rank_stays_away() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "16MiB"]);
        let mut config = server.config();
        config.timeout = Duration::from_millis(400);
        let client = Client::connect(config).unwrap();
        let mut group = ReduceGroup::attach(&client, "lonely", 2, 0, 4096, 0).unwrap();
        let start = Instant::now();
        let result = group.barrier(&client);
        assert!(matches!(result, Err(Error::WaitTimeout { .. })), "over {tls}: {result:?}");
        assert!(start.elapsed() >= Duration::from_millis(400), "over {tls}: gave up before its deadline");
        assert!(start.elapsed() < Duration::from_secs(5), "over {tls}: the deadline did not hold");
        // Bad groups are refused with their cause.
        let bad = ReduceGroup::attach(&client, "bad", 2, 2, 4096, 0);
        assert!(bad.is_err(), "over {tls}: rank 2 of 2 was accepted");
        let bad = ReduceGroup::attach(&client, "bad", 0, 0, 4096, 0);
        assert!(bad.is_err(), "over {tls}: a group of no ranks was accepted");
        let bad = group.broadcast(&client, 2, &mut [0u8; 8]);
        assert!(matches!(bad, Err(Error::InvalidArgument(_))), "over {tls}: {bad:?}");
    }
}

#[test]
fn broadcast_gives_every_rank_the_roots_bytes() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "16MiB"]);
        // Lengths below, at and above a chunk (4096 bytes per round), odd ones too.
        let results = in_group(&server, "bcast", 3, |client, group, rank| {
            let mut all = Vec::new();
            for (root, len) in [(0u32, 0usize), (1, 1), (2, 13), (0, 4096), (1, 10_000)] {
                let mut buffer = vec![rank as u8 + 100; len];
                if rank == root {
                    buffer = (0..len).map(|i| (i * 7 + root as usize) as u8).collect();
                }
                group.broadcast(client, root, &mut buffer).unwrap();
                all.push((root, buffer));
            }
            all
        });
        for (rank, rounds) in results.iter().enumerate() {
            for (root, buffer) in rounds {
                let want: Vec<u8> = (0..buffer.len()).map(|i| (i * 7 + *root as usize) as u8).collect();
                assert!(*buffer == want, "over {tls}: rank {rank} got other bytes from root {root}");
            }
        }
        // Ranks that disagree on the length (same padded size) or the root all get the
        // mismatch, and their buffers stay as they were.
        let results = in_group(&server, "bcast-bad", 2, |client, group, rank| {
            let mut buffer = vec![1u8; 5 + rank as usize];
            let lengths = group.broadcast(client, 0, &mut buffer);
            let mut other = vec![2u8; 8];
            let roots = group.broadcast(client, rank, &mut other);
            (lengths, buffer, roots, other)
        });
        for (lengths, buffer, roots, other) in results {
            for r in [lengths, roots] {
                assert!(matches!(r, Err(Error::Refused { status: Status::ReduceMismatch, .. })), "over {tls}: {r:?}");
            }
            assert!(buffer.iter().all(|&b| b == 1) && other.iter().all(|&b| b == 2), "over {tls}: written");
        }
    }
}

#[test]
fn contexts_are_independent_streams_completed_by_their_own_quiet() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "32MiB"]);
        for (name, c) in clients(&server, tls) {
            // Made before the allocation: its keys are adopted on first use.
            let early = c.context().unwrap();
            let a = c.alloc(4 << 20, &AllocOptions::default()).unwrap();
            c.atomic_set::<u64>(&a, 0, 0).unwrap();
            let threads = 4u64;
            let chunk = 256 << 10;
            std::thread::scope(|scope| {
                for t in 0..threads {
                    let (c, a, name) = (&c, &a, &name);
                    scope.spawn(move || {
                        let ctx = c.context().unwrap();
                        let data: Vec<u8> = (0..chunk).map(|i| (i as u64 * 3 + t) as u8).collect();
                        let mut olds = [0u64; 8];
                        let at = 4096 + t * chunk as u64;
                        // SAFETY: `data` and `olds` outlive the quiet below and are untouched.
                        unsafe {
                            ctx.put_nbi(a, at, &data[..chunk / 2]).unwrap();
                            ctx.put_nbi(a, at + chunk as u64 / 2, &data[chunk / 2..]).unwrap();
                            for old in olds.iter_mut() {
                                ctx.atomic_fetch_add_nbi(old, a, 0, 1u64).unwrap();
                            }
                        }
                        ctx.fence().unwrap();
                        ctx.atomic_add::<u64>(a, 8, 1).unwrap();
                        ctx.quiet().unwrap();
                        let mut back = vec![0u8; chunk];
                        ctx.get(a, at, &mut back).unwrap();
                        assert!(back == data, "over {name}: context {t} read other bytes back");
                        olds.sort_unstable();
                        assert!(olds.windows(2).all(|w| w[0] < w[1]), "over {name}: a fetched word repeated");
                    });
                }
            });
            assert_eq!(c.atomic_fetch::<u64>(&a, 0).unwrap(), threads * 8, "over {name}");
            assert_eq!(c.atomic_fetch::<u64>(&a, 8).unwrap(), threads, "over {name}");
            // The early context reaches the later allocation, and checks bounds first.
            early.put(&a, 64, b"early").unwrap();
            early.quiet().unwrap();
            let mut back = [0u8; 5];
            c.get(&a, 64, &mut back).unwrap();
            assert_eq!(&back, b"early", "over {name}");
            assert_eq!(early.atomic_compare_swap::<u64>(&a, 8, threads, 99).unwrap(), threads);
            assert_eq!(early.atomic_fetch::<u64>(&a, 8).unwrap(), 99);
            early.atomic_set::<u32>(&a, 16, 7).unwrap();
            assert_eq!(early.atomic_fetch_add::<u32>(&a, 16, 1).unwrap(), 7);
            assert!(matches!(early.put(&a, 4 << 20, b"x"), Err(Error::OutOfBounds { .. })));
            drop(early);
            c.free(&a).unwrap();
        }
    }
}

#[test]
fn a_rank_leaving_between_rounds_fails_the_next_round_not_the_last() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "16MiB"]);
        let (stay, leave) = (server.client(), server.client());
        let mut kept = ReduceGroup::attach(&stay, "leaving", 2, 0, 4096, 0).unwrap();
        let left = std::thread::spawn(move || {
            let mut group = ReduceGroup::attach(&leave, "leaving", 2, 1, 4096, 0).unwrap();
            group.barrier(&leave).unwrap();
            // Leaves as soon as it has seen the round: the other rank may not have yet.
            group.detach(&leave).unwrap();
        });
        std::thread::sleep(Duration::from_millis(100));
        kept.barrier(&stay).unwrap_or_else(|e| panic!("over {tls}: the finished round failed: {e}"));
        left.join().unwrap();
        let start = Instant::now();
        let next = kept.barrier(&stay);
        assert!(
            matches!(next, Err(Error::Refused { status: Status::ReduceAborted, .. })),
            "over {tls}: the round after the departure: {next:?}"
        );
        assert!(start.elapsed() < stay.config().timeout, "over {tls}: the abort waited for the deadline");
    }
}
