//! OpenSHMEM-style one-sided synchronization end to end, over UCX TCP (the message path:
//! waits sleep on a Watch the server answers) and shared memory (the direct path: waits
//! sleep on a futex the signaller wakes): waits that time out, many waiters on one word,
//! signals racing the waiter's sleep, the wait variants, and every atomic on every word type.

mod common;

use common::{ServerProcess, TRANSPORTS};
use nam_client::{AllocOptions, Client, Compare, Error, Signal, SignalOp};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A shared allocation `name` and a second client that opened it.
fn pair(server: &ServerProcess, name: &str) -> (Client, nam_client::Allocation, Client, nam_client::Allocation) {
    pair_of(server, name, 4096)
}

/// [`pair`] with an allocation of `size` bytes.
fn pair_of(
    server: &ServerProcess,
    name: &str,
    size: u64,
) -> (Client, nam_client::Allocation, Client, nam_client::Allocation) {
    let a = server.client();
    let word = a.alloc(size, &AllocOptions::shared(name)).unwrap();
    let b = server.client();
    let view = b.open(name).unwrap();
    (a, word, b, view)
}

#[test]
fn waits_time_out_with_the_last_word_and_test_never_sleeps() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "4MiB"]);
        let client = server.client();
        let a = client.alloc(64, &AllocOptions::default()).unwrap();
        client.atomic_set::<u64>(&a, 8, 41).unwrap();
        let start = Instant::now();
        let result = client.wait_until(&a, 8, Compare::Eq, 42, Duration::from_millis(60));
        let took = start.elapsed();
        assert!(matches!(result, Err(Error::WaitTimeout { last: 41, .. })), "over {tls}: {result:?}");
        assert!(took >= Duration::from_millis(60), "over {tls}: returned after {took:?}, before its deadline");
        assert!(!client.test(&a, 8, Compare::Eq, 42).unwrap());
        assert!(client.test(&a, 8, Compare::Lt, 42).unwrap());
        // 32-bit, signed: -1 < 0 although its bits are larger.
        client.atomic_set::<i32>(&a, 16, -1).unwrap();
        assert!(client.test_as::<i32>(&a, 16, Compare::Lt, 0).unwrap(), "over {tls}");
        assert!(!client.test_as::<u32>(&a, 16, Compare::Lt, 0).unwrap(), "over {tls}");
        assert_eq!(client.wait_until_as::<i32>(&a, 16, Compare::Le, -1, Duration::from_secs(1)).unwrap(), -1);
        assert!(matches!(client.test_as::<u32>(&a, 2, Compare::Eq, 0), Err(Error::Misaligned { offset: 2 })));
        assert!(matches!(client.wait_until(&a, 64, Compare::Eq, 0, Duration::ZERO), Err(Error::OutOfBounds { .. })));
    }
}

#[test]
fn many_waiters_on_one_word_all_wake() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "4MiB"]);
        let signaller = server.client();
        let word = signaller.alloc(4096, &AllocOptions::shared("flag")).unwrap();
        let waiters: Vec<_> = (0..6)
            .map(|_| {
                let client = server.client();
                std::thread::spawn(move || {
                    let view = client.open("flag").unwrap();
                    client.wait_until(&view, 0, Compare::Ge, 1, Duration::from_secs(20)).map(|w| (w, Instant::now()))
                })
            })
            .collect();
        // Let every waiter pass its spin and fall asleep.
        std::thread::sleep(Duration::from_millis(300));
        let signalled = Instant::now();
        signaller.atomic_set::<u64>(&word, 0, 1).unwrap();
        for waiter in waiters {
            let (seen, woke) = waiter.join().unwrap().unwrap_or_else(|e| panic!("over {tls}: {e}"));
            assert_eq!(seen, 1);
            assert!(woke >= signalled);
        }
    }
}

#[test]
fn signals_racing_the_sleep_are_never_lost() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "4MiB"]);
        let (producer, data, consumer, view) = pair(&server, "race");
        const ROUNDS: u64 = 300;
        let consumer = Arc::new(consumer);
        let waiter = std::thread::spawn(move || {
            let mut latencies = Vec::new();
            for round in 1..=ROUNDS {
                let start = Instant::now();
                let word = consumer.wait_until(&view, 0, Compare::Ge, round, Duration::from_secs(10)).unwrap();
                assert!(word >= round);
                let mut data = [0u8; 8];
                consumer.get(&view, 64, &mut data).unwrap();
                assert!(u64::from_le_bytes(data) >= round, "round {round}: the data is older than its signal");
                latencies.push(start.elapsed());
            }
            latencies
        });
        // Signal at delays around the waiter's spin time, so that some signals land while
        // the waiter registers and falls asleep.
        for round in 1..=ROUNDS {
            let delay = Duration::from_micros((round * 37) % 120);
            let until = Instant::now() + delay;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            let signal = Signal { word: &data, offset: 0, value: round, op: SignalOp::Set };
            producer.put_signal(&data, 64, &round.to_le_bytes(), signal).unwrap();
        }
        let mut latencies = waiter.join().unwrap();
        latencies.sort();
        // A lost wake-up costs a whole sleep slice (10 ms); the median round must not.
        let median = latencies[latencies.len() / 2];
        assert!(median < Duration::from_millis(5), "over {tls}: median round {median:?}: wake-ups lost");
    }
}

#[test]
fn wait_until_all_any_and_some() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "4MiB"]);
        let (signaller, words, waiter, view) = pair(&server, "words");
        let offsets = [0u64, 8, 64, 128];
        let timeout = Duration::from_millis(50);
        {
            let list: Vec<_> = offsets.iter().map(|&o| (&view, o)).collect();
            assert!(matches!(waiter.wait_until_any(&list, Compare::Eq, 1, timeout), Err(Error::WaitTimeout { .. })));
            signaller.atomic_set::<u64>(&words, 64, 1).unwrap();
            assert_eq!(waiter.wait_until_any(&list, Compare::Eq, 1, timeout).unwrap(), 2, "over {tls}");
            signaller.atomic_set::<u64>(&words, 8, 1).unwrap();
            assert_eq!(waiter.wait_until_some(&list, Compare::Eq, 1, timeout).unwrap(), vec![1, 2]);
            assert!(matches!(waiter.wait_until_all(&list, Compare::Eq, 1, timeout), Err(Error::WaitTimeout { .. })));
        }
        let waiter = Arc::new(waiter);
        let view = Arc::new(view);
        let (w, v) = (waiter.clone(), view.clone());
        let all = std::thread::spawn(move || {
            let list: Vec<_> = offsets.iter().map(|&o| (&*v, o)).collect();
            w.wait_until_all(&list, Compare::Eq, 1, Duration::from_secs(10))
        });
        std::thread::sleep(Duration::from_millis(100));
        signaller.atomic_set::<u64>(&words, 0, 1).unwrap();
        signaller.atomic_set::<u64>(&words, 128, 1).unwrap();
        all.join().unwrap().unwrap_or_else(|e| panic!("over {tls}: {e}"));
        assert!(matches!(waiter.wait_until_any(&[], Compare::Eq, 1, timeout), Err(Error::InvalidArgument(_))));
    }
}

#[test]
fn every_atomic_on_every_word_type() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "4MiB"]);
        let c = server.client();
        let a = c.alloc(64, &AllocOptions::default()).unwrap();
        // 64-bit unsigned at 8, 32-bit words at 16 and 20 (two halves of one 64-bit word).
        assert_eq!(c.atomic_fetch_add::<u64>(&a, 8, 5).unwrap(), 0);
        c.atomic_add::<u64>(&a, 8, 5).unwrap();
        c.atomic_inc::<u64>(&a, 8).unwrap();
        assert_eq!(c.atomic_fetch_inc::<u64>(&a, 8).unwrap(), 11);
        assert_eq!(c.atomic_fetch::<u64>(&a, 8).unwrap(), 12);
        assert_eq!(c.atomic_fetch_and::<u64>(&a, 8, 0b1000).unwrap(), 12);
        c.atomic_or::<u64>(&a, 8, 0b0011).unwrap();
        assert_eq!(c.atomic_fetch_xor::<u64>(&a, 8, 0xff).unwrap(), 0b1011);
        assert_eq!(c.atomic_fetch::<u64>(&a, 8).unwrap(), 0xf4);
        c.atomic_set::<u64>(&a, 8, u64::MAX).unwrap();
        assert_eq!(c.atomic_swap::<u64>(&a, 8, 3).unwrap(), u64::MAX);
        assert_eq!(c.atomic_compare_swap::<u64>(&a, 8, 3, 4).unwrap(), 3);
        assert_eq!(c.atomic_compare_swap::<u64>(&a, 8, 3, 5).unwrap(), 4, "a failed compare leaves the word");
        // 32-bit signed and unsigned, next to each other: neither disturbs the other half.
        c.atomic_set::<i32>(&a, 16, -2).unwrap();
        c.atomic_set::<u32>(&a, 20, 0xdead_beef).unwrap();
        assert_eq!(c.atomic_fetch_add::<i32>(&a, 16, 1).unwrap(), -2);
        assert_eq!(c.atomic_fetch_inc::<i32>(&a, 16).unwrap(), -1);
        assert_eq!(c.atomic_fetch::<i32>(&a, 16).unwrap(), 0);
        assert_eq!(c.atomic_fetch_add::<u32>(&a, 20, 0x2152_4111).unwrap(), 0xdead_beef, "over {tls}");
        assert_eq!(c.atomic_fetch::<u32>(&a, 20).unwrap(), 0, "wraps at 32 bits");
        assert_eq!(c.atomic_fetch::<i32>(&a, 16).unwrap(), 0, "the carry stays out of the other half");
        c.atomic_or::<u32>(&a, 20, 0xf0f0).unwrap();
        c.atomic_and::<u32>(&a, 20, 0xff00).unwrap();
        c.atomic_xor::<u32>(&a, 20, 0x0101).unwrap();
        assert_eq!(c.atomic_swap::<u32>(&a, 20, 7).unwrap(), 0xf101);
        assert_eq!(c.atomic_compare_swap::<u32>(&a, 20, 7, 8).unwrap(), 7);
        assert_eq!(c.atomic_compare_swap::<u32>(&a, 20, 7, 9).unwrap(), 8);
        assert_eq!(c.atomic_fetch::<u64>(&a, 16).unwrap(), 8 << 32, "both halves as one word");
        c.atomic_set::<i64>(&a, 24, -5).unwrap();
        assert_eq!(c.atomic_fetch_add::<i64>(&a, 24, 10).unwrap(), -5);
        assert_eq!(c.atomic_fetch::<i64>(&a, 24).unwrap(), 5);
        // Checks before anything is sent.
        assert!(matches!(c.atomic_add::<u32>(&a, 2, 1), Err(Error::Misaligned { offset: 2 })));
        assert!(matches!(c.atomic_add::<u64>(&a, 4, 1), Err(Error::Misaligned { offset: 4 })));
        assert!(matches!(c.atomic_add::<u32>(&a, 64, 1), Err(Error::OutOfBounds { .. })));
        assert!(matches!(c.atomic_add::<u64>(&a, 60, 1), Err(Error::Misaligned { .. })));
    }
}

#[test]
fn puts_and_gets_without_handles_complete_at_quiet() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "16MiB"]);
        let (writer, target, reader, view) = pair_of(&server, "nbi", 2 << 20);
        // Sizes on both sides of any direct/RMA crossover.
        let sizes = [8usize, 4096, 65536, 1 << 20];
        let sources: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| vec![i as u8 + 1; n]).collect();
        let mut at = 0u64;
        let mut offsets = Vec::new();
        for source in &sources {
            offsets.push(at);
            // SAFETY: `sources` outlives the quiet below and is not modified.
            unsafe { writer.put_nbi(&target, at, source) }.unwrap();
            at += source.len() as u64;
        }
        writer.quiet().unwrap();
        let mut backs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
        for (back, &offset) in backs.iter_mut().zip(&offsets) {
            // SAFETY: `backs` is read only after the quiet below.
            unsafe { reader.get_nbi(&view, offset, back) }.unwrap();
        }
        reader.quiet().unwrap();
        assert!(backs == sources, "over {tls}: the data differs after quiet");
        // Checked before anything is posted.
        // SAFETY: nothing is posted.
        let bad = unsafe { writer.put_nbi(&target, 2 << 20, &[1]) };
        assert!(matches!(bad, Err(Error::OutOfBounds { .. })), "{bad:?}");
    }
}
