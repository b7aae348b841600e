//! A flood of hostile TCP connections against a real `nam serve`'s UCX listener: eight
//! threads open connections as fast as they can and, at random, send nothing, noise, or a
//! plausible connection-manager header (a length and a status) followed by all, part or
//! none of the bytes it announces; then close normally, reset (`SO_LINGER` 0) or hold the
//! connection for a while. Meanwhile a well-behaved client allocates, puts and gets.
//!
//! The server must live through it and keep serving: the client's data must read back, and
//! a client connecting after the flood must work. With Debian 12's UCX 1.13 the server died
//! within a minute of this flood, every run (heap corruption, "malloc(): smallbin double
//! linked list corrupted"; an assertion in UCX's async.c; a descriptor closed under the
//! server): UCX's event thread delivered events it had missed, stale, to connections whose
//! descriptor numbers had been reused. docs/architecture.md, "UCX version".
//! `NAM_FLOOD_SECS` sets the flood's length (default 40).

mod common;

use common::ServerProcess;
use nam_client::AllocOptions;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const FLOODERS: u64 = 8;
/// Connections one flooder holds open at most (the oldest is closed beyond).
const HELD_MAX: usize = 50;

/// One flooder: connects, misbehaves at random, closes or holds, until `stop`.
fn flood(addr: SocketAddr, seed: u64, stop: &AtomicBool, connections: &AtomicU64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut held = std::collections::VecDeque::new();
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        connections.fetch_add(1, Ordering::Relaxed);
        let announced: usize = rng.gen_range(0..512);
        let header = || {
            let mut h = (announced as u64).to_le_bytes().to_vec();
            h.push(0);
            h
        };
        let _ = match rng.gen_range(0..6) {
            1 => s.write_all(&(0..rng.gen_range(1..4096)).map(|_| rng.gen::<u8>()).collect::<Vec<_>>()),
            2 => s.write_all(&[header(), (0..announced).map(|_| rng.gen::<u8>()).collect()].concat()),
            3 => {
                let part = rng.gen_range(0..=announced);
                s.write_all(&[header(), (0..part).map(|_| rng.gen::<u8>()).collect()].concat())
            }
            4 => {
                held.push_back(s);
                if held.len() > HELD_MAX {
                    held.pop_front();
                }
                continue;
            }
            _ => Ok(()),
        };
        if rng.gen_bool(0.5) {
            let linger = libc::linger { l_onoff: 1, l_linger: 0 };
            // SAFETY: a valid socket and a `linger` of the size given.
            unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    &linger as *const _ as *const libc::c_void,
                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                )
            };
        }
        if rng.gen_bool(0.3) {
            std::thread::sleep(Duration::from_micros(rng.gen_range(0..10_000)));
        }
    }
}

#[test]
fn a_flood_of_hostile_connections_neither_crashes_the_server_nor_stops_its_clients() {
    let secs = std::env::var("NAM_FLOOD_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(40);
    let mut server = ServerProcess::start("tcp", &["--capacity", "64MiB"]);
    let addr = server.addr;
    let client = server.client();
    let region = client.alloc(1 << 20, &AllocOptions::default()).expect("alloc before the flood");
    let stop = Arc::new(AtomicBool::new(false));
    let connections = Arc::new(AtomicU64::new(0));
    let flooders: Vec<_> = (0..FLOODERS)
        .map(|seed| {
            let (stop, connections) = (stop.clone(), connections.clone());
            std::thread::spawn(move || flood(addr, seed, &stop, &connections))
        })
        .collect();

    let started = Instant::now();
    let mut round = 0u64;
    let mut served = 0u64;
    while started.elapsed() < Duration::from_secs(secs) {
        if let Ok(Some(status)) = server.child.try_wait() {
            stop.store(true, Ordering::Relaxed);
            panic!(
                "the server died {:?} into the flood ({status}, {} connections so far; its last words are on \
                 stderr above)",
                started.elapsed(),
                connections.load(Ordering::Relaxed)
            );
        }
        // The well-behaved client keeps working through the flood; a call may time out while
        // the listener is this busy, but what it wrote must read back once a put succeeded.
        round += 1;
        let data = vec![(round % 251) as u8; 4096];
        let offset = (round % 256) * 4096;
        if client.put_sync(&region, offset, &data).is_ok() {
            let mut back = vec![0u8; 4096];
            if client.get(&region, offset, &mut back).is_ok() {
                assert_eq!(back, data, "round {round}: the client's data changed under the flood");
                served += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        f.join().unwrap();
    }
    assert!(server.child.try_wait().unwrap().is_none(), "the server died at the end of the flood");
    assert!(served > 0, "the well-behaved client was not served once in {round} rounds");
    eprintln!(
        "{} hostile connections in {secs} s; the client was served in {served} of {round} rounds",
        connections.load(Ordering::Relaxed)
    );
    // A client connecting after the flood works, and the first client's data is intact.
    let late = server.client();
    let late_region = late.alloc(4096, &AllocOptions::default()).expect("alloc after the flood");
    late.put_sync(&late_region, 0, b"after the flood").expect("put after the flood");
    let mut back = [0u8; 15];
    late.get(&late_region, 0, &mut back).expect("get after the flood");
    assert_eq!(&back, b"after the flood");
    server.terminate();
}
