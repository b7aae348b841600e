//! `nam-bench mailbox`: the round trip of a small message through two mailboxes in server
//! memory (A sends to B's mailbox, B answers into A's) beside the round trip of an 8-byte
//! put+signal (A puts 8 bytes and a signal word into memory B polls, B answers the same
//! way), measured in the same run with the same polling; prints the ratio. The two kinds
//! alternate in blocks (which goes first alternates too) and each is the median over its
//! blocks, so a change of the shared machine's load hits both.

use super::Transport;
use crate::harness::server::LocalServer;
use crate::harness::stats::middle_of;
use crate::limits::{MAILBOX_DEADLINE as DEADLINE, MAILBOX_SPIN_POLLS as SPIN_POLLS};
use anyhow::{bail, Context, Result};
use nam_client::{AllocOptions, Allocation, Client, ClientConfig, Mailbox, MailboxSender, Signal, SignalOp};
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `nam-bench mailbox`.
#[derive(clap::Args, Debug)]
pub struct MailboxArgs {
    /// Server to measure, HOST:PORT; without it a local `nam serve` is started.
    #[arg(long)]
    server: Option<String>,
    /// UCX transport of the two clients and a local server.
    #[arg(long, value_enum, default_value = "shm")]
    transport: Transport,
    /// Round trips of each kind [default: 20000].
    #[arg(long)]
    iters: Option<u64>,
    /// Alternating blocks of round trips are 2x this many (at least 8); the median block counts.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Print one JSON object instead of the line.
    #[arg(long)]
    json: bool,
    /// Write a Markdown report (command, table, target).
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Exit with an error when the target is missed.
    #[arg(long)]
    check: bool,
}

const MESSAGE_BYTES: usize = 8;

/// Spins (yielding after [`SPIN_POLLS`]) until `ready` gives a value or the deadline
/// passes. The same for both kinds of round trip.
fn poll<T>(mut ready: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    let deadline = Instant::now() + DEADLINE;
    let mut polls = 0u32;
    loop {
        if let Some(v) = ready()? {
            return Ok(v);
        }
        polls = polls.saturating_add(1);
        if polls > SPIN_POLLS {
            std::thread::yield_now();
            if Instant::now() > deadline {
                bail!("no answer within {DEADLINE:?}");
            }
        } else {
            std::hint::spin_loop();
        }
    }
}

/// `iters` put+signal round trips; the signal values continue from `first`.
fn put_signal_side(
    client: &Client,
    mine: &Allocation,
    theirs: &Allocation,
    first: u64,
    iters: u64,
    starts: bool,
) -> Result<f64> {
    let payload = [7u8; MESSAGE_BYTES];
    let send = |i: u64| {
        client.put_signal(theirs, 0, &payload, Signal { word: theirs, offset: 64, value: i, op: SignalOp::Set })
    };
    let wait = |i: u64| poll(|| Ok((client.fetch(mine, 64)? >= i).then_some(())));
    let t0 = Instant::now();
    for i in first..first + iters {
        if starts {
            send(i)?;
            wait(i)?;
        } else {
            wait(i)?;
            send(i)?;
        }
    }
    Ok(t0.elapsed().as_secs_f64() * 1e6 / iters as f64)
}

fn mailbox_side(
    client: &Client,
    mine: &mut Mailbox,
    theirs: &mut MailboxSender,
    iters: u64,
    starts: bool,
) -> Result<f64> {
    let payload = [7u8; MESSAGE_BYTES];
    let mut buffer = [0u8; 64];
    let t0 = Instant::now();
    for _ in 0..iters {
        if starts {
            theirs.send(client, &payload)?;
            poll(|| Ok(mine.try_recv_into(client, &mut buffer)?))?;
        } else {
            poll(|| Ok(mine.try_recv_into(client, &mut buffer)?))?;
            theirs.send(client, &payload)?;
        }
    }
    Ok(t0.elapsed().as_secs_f64() * 1e6 / iters as f64)
}

/// Ping-pongs between two clients (threads) in `blocks` blocks of `iters` round trips of each
/// kind, alternating which kind goes first: both kinds sample the same (shared, changing)
/// machine. Returns per block (mailbox, put+signal) round trips in microseconds, as seen by
/// the side that starts.
fn measure(config: &ClientConfig, iters: u64, blocks: u64) -> Result<Vec<(f64, f64)>> {
    let (a, b) = (Client::connect(config.clone())?, Client::connect(config.clone())?);
    let options = AllocOptions { server: Some(0), ..Default::default() };
    let (words_a, words_b) = (a.alloc(128, &options)?, b.alloc(128, &options)?);
    let (addr_a, addr_b) = (a.global_address(&words_a, 0)?, b.global_address(&words_b, 0)?);
    let (mut box_a, mut box_b) = (Mailbox::create(&a, 64, 64, Some(0))?, Mailbox::create(&b, 64, 64, Some(0))?);
    let (box_addr_a, box_addr_b) = (box_a.address(), box_b.address());
    // Both sides run the same sequence; `starts` picks whose timings count.
    let side = |client: &Client, mine: &Allocation, addr, mbox: &mut Mailbox, box_addr, starts| {
        let (theirs, _) = client.resolve(addr)?;
        let mut to = MailboxSender::open(client, box_addr)?;
        let mut times = Vec::new();
        for block in 0..blocks {
            let first = block * iters + 1;
            let (mailbox, put_signal) = if block % 2 == 0 {
                let p = put_signal_side(client, mine, &theirs, first, iters, starts)?;
                (mailbox_side(client, mbox, &mut to, iters, starts)?, p)
            } else {
                let m = mailbox_side(client, mbox, &mut to, iters, starts)?;
                (m, put_signal_side(client, mine, &theirs, first, iters, starts)?)
            };
            times.push((mailbox, put_signal));
        }
        anyhow::Ok(times)
    };
    std::thread::scope(|s| {
        let other = s.spawn(|| side(&b, &words_b, addr_a, &mut box_b, box_addr_a, false));
        let times = side(&a, &words_a, addr_b, &mut box_a, box_addr_b, true)?;
        other.join().expect("the answering side panicked")?;
        Ok(times)
    })
}

/// Runs `nam-bench mailbox`.
pub fn run(args: MailboxArgs) -> Result<()> {
    let args = &args;
    let local;
    let addr = match &args.server {
        Some(s) => nam_client::config::parse_servers(s)?[0],
        None => {
            local = LocalServer::start(args.transport, 64 << 20)?;
            local.addr
        }
    };
    let mut config = ClientConfig::new(vec![addr]);
    config.transports = Some(args.transport.ucx_tls().to_string());
    let iters = args.iters.unwrap_or(20_000);
    let blocks = (args.repeat.max(1) as u64 * 2).max(8);
    measure(&config, iters / 10 + 1, 2).context("warm-up")?;
    let per_block = iters.div_ceil(blocks).max(100);
    let runs = measure(&config, per_block, blocks)?;
    let (mailbox, put_signal) = (middle_of(&runs, |r| r.0), middle_of(&runs, |r| r.1));
    let ratio = mailbox / put_signal;
    let met = if ratio <= 1.5 { "met" } else { "MISSED" };
    let verdict = format!(
        "mailbox round trip {mailbox:.2} us vs 8-byte put+signal round trip {put_signal:.2} us: {ratio:.2}x (target ≤ 1.5x: {met})"
    );
    if args.json {
        let v = serde_json::json!({"op": "mailbox_rtt", "size": MESSAGE_BYTES, "iters": iters,
            "transport": args.transport.ucx_tls(), "nam_latency_us": mailbox, "put_signal_latency_us": put_signal,
            "ratio": ratio});
        println!("{v}");
    } else {
        println!("{verdict}");
    }
    if let Some(path) = &args.markdown {
        let text = format!(
            "### Mailbox round trip (UCX_TLS={})\n\nCommand: `{}`\n\n| message | mailbox RTT (us) | put+signal RTT (us) | ratio |\n| ---: | ---: | ---: | ---: |\n| {MESSAGE_BYTES} B | {mailbox:.2} | {put_signal:.2} | {ratio:.2} |\n\nMedian over {blocks} alternating blocks of {per_block} round trips of each kind.\n\nTarget: {verdict}\n",
            args.transport.ucx_tls(),
            crate::harness::docs::command_line()
        );
        std::fs::write(path, text)?;
    }
    if args.check && ratio > 1.5 {
        bail!("a benchmark target was missed");
    }
    Ok(())
}
