//! `nam demo`: starts a local memory server, walks a client through allocation, put/get,
//! atomics, signals between two clients and a short benchmark, then stops the server.

use crate::local::{banner_addr, spawn_serve};
use anyhow::{ensure, Context, Result};
use nam_client::{AllocOptions, Allocation, Client, ClientConfig, Compare, Signal, SignalOp};
use nam_proto::size::format_size;
use std::time::{Duration, Instant};

/// Arguments of `nam demo` (none are needed).
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// UCX transports for the demo (`UCX_TLS` syntax).
    #[arg(long, default_value = "sm,self,tcp")]
    transports: String,
}

/// Runs `nam demo`.
pub fn run(args: DemoArgs) -> Result<()> {
    println!("== starting a memory server (64 MiB, UCX_TLS={})", args.transports);
    let (mut server, banner) = spawn_serve(&["--capacity", "64MiB", "--name", "demo"], Some(&args.transports))?;
    print!("   {banner}");
    let result = (|| {
        let addr = banner_addr(&banner).context("no address in the server banner")?;
        let mut config = ClientConfig::new(vec![addr]);
        config.transports = Some(args.transports.clone());
        config.name = "demo".into();
        walkthrough(config, addr)
    })();
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    server.wait()?;
    println!("== server stopped");
    result
}

fn walkthrough(config: ClientConfig, addr: std::net::SocketAddr) -> Result<()> {
    let alice = Client::connect(config.clone())?;
    let bob = Client::connect(config)?;
    println!("== two clients connected to {addr}");

    let shared = alice.alloc(1 << 20, &AllocOptions::shared("demo/results"))?;
    let seen = bob.open("demo/results")?;
    println!("   alice allocated 1 MiB named \"demo/results\"; bob opened it (handle {})", seen.handle());

    alice.put_sync(&shared, 4096, b"hello from alice")?;
    let mut buf = [0u8; 16];
    bob.get(&seen, 4096, &mut buf)?;
    println!("   put/get: bob reads {:?}", String::from_utf8_lossy(&buf));
    ensure!(&buf == b"hello from alice", "bob read the wrong bytes");

    for _ in 0..10 {
        alice.fetch_add(&shared, 0, 1)?;
        bob.fetch_add(&seen, 0, 1)?;
    }
    println!("   atomics: 20 fetch-adds from two clients -> counter = {}", alice.fetch(&shared, 0)?);

    let producer = std::thread::spawn(move || -> Result<()> {
        for round in 1..=3u64 {
            let message = format!("message {round}");
            let signal = Signal { word: &shared, offset: 8, value: round, op: SignalOp::Set };
            alice.put_signal(&shared, 8192, message.as_bytes(), signal)?;
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    });
    for round in 1..=3u64 {
        bob.wait_until(&seen, 8, Compare::Ge, round, Duration::from_secs(5))?;
        let mut msg = [0u8; 9];
        bob.get(&seen, 8192, &mut msg)?;
        println!("   signal {round}: bob woke up and read {:?}", String::from_utf8_lossy(&msg));
    }
    producer.join().expect("producer thread")?;

    let bad = bob.put(&seen, (1 << 20) - 4, b"too long");
    println!("   bad input: {}", bad.err().map(|e| e.to_string()).unwrap_or_else(|| "accepted?!".into()));

    quick_measure(&bob, &seen)?;

    let status = bob.status(0)?;
    println!(
        "== nam status: {} used of {} in {} allocation(s), {} clients",
        format_size(status.used),
        format_size(status.capacity),
        status.allocations,
        status.clients
    );
    Ok(())
}

/// A short measurement on the shared allocation: 1 MiB put bandwidth and 8-byte get latency.
fn quick_measure(bob: &Client, seen: &Allocation) -> Result<()> {
    let block = vec![0x5au8; 1 << 20];
    let started = Instant::now();
    let rounds = 200;
    for _ in 0..rounds {
        bob.put(seen, 0, &block)?;
    }
    bob.flush()?;
    let put_rate = rounds as f64 * block.len() as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    let gets = 20_000;
    let mut word = [0u8; 8];
    for _ in 0..gets {
        bob.get(seen, 0, &mut word)?;
    }
    let get_us = started.elapsed().as_secs_f64() * 1e6 / gets as f64;
    println!(
        "   bench: 1 MiB puts at {}/s, 8-byte get in {get_us:.3} us (nam-bench gas --vs-ucx for more)",
        format_size(put_rate as u64)
    );
    Ok(())
}
