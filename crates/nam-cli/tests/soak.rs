//! The soak test: a file-backed `nam serve`, killed with -9 and restarted on its port every
//! `NAM_SOAK_RESTART_SECS` (20 s), serves for `NAM_SOAK_SECS` (120 s; CI's run) 64
//! well-behaved clients doing puts, gets and fetch-adds on their own persistent allocations,
//! each checked against the client's model of its memory, beside
//!
//! - a flooder that asks for 64 KiB replies thousands of times and never takes them,
//! - a garbage connector that opens TCP connections, sends 4 KiB of noise and closes,
//! - a half-open holder that keeps 200 TCP connections open that never say a word.
//!
//! It asserts that every acknowledged write survives every restart (a write whose call
//! failed may or may not have happened; the next check accepts either and adopts what it
//! finds), that every failing call returned within its deadline (plus slack for a loaded
//! machine), and that the server's anonymous memory stayed under its configured reply bound
//! plus a fixed allowance for UCX and the process itself. It prints its figures, maximum
//! memory included. A longer run: `NAM_SOAK_SECS=1800 cargo test -p nam-cli --test soak --
//! --nocapture`.

mod common;

use common::probe::rss_anon;
use common::raw::RawClient;
use common::{temp_dir, write_config, ServerProcess};
use nam_client::{AllocOptions, Client, ClientConfig, Error, Status};
use nam_proto::{Alloc, Hello, Reply, Request, AM_ID_REQUEST};
use nam_ucx::Posted;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CLIENTS: usize = 64;
/// Bytes of each client's region; a fetch-add counter follows it.
const REGION: usize = 4096;
/// Deadline of every client call, and of connecting: generous, because 64 clients that
/// spin while they wait for replies share two cores with the server here.
const TIMEOUT: Duration = Duration::from_secs(10);
/// What a failing call may take beyond its deadline before it counts as late: the force
/// close of the endpoint and the drain of its requests after a missed deadline are each
/// bounded by nam-ucx's `CLOSE_TIMEOUT` (2 s), and a loaded machine adds its share.
const SLACK: Duration = Duration::from_secs(5);
/// The server's reply bound in this test's configuration.
const REPLY_BOUND: u64 = 64 << 20;
/// The process's own memory besides replies: UCX's per-connection buffers for ~300
/// connections, the allocator's arenas, the binary.
const PROCESS_ALLOWANCE: u64 = 160 << 20;

fn env_secs(name: &str, default: u64) -> Duration {
    Duration::from_secs(std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default))
}

#[derive(Default)]
struct Stats {
    ops: AtomicU64,
    acked_puts: AtomicU64,
    acked_adds: AtomicU64,
    checked_gets: AtomicU64,
    errors: AtomicU64,
    reconnects: AtomicU64,
    verified_regions: AtomicU64,
    slowest_error_ms: AtomicU64,
    flood_rounds: AtomicU64,
    garbage_connections: AtomicU64,
    half_open_connections: AtomicU64,
    violations: Mutex<Vec<String>>,
}

impl Stats {
    fn violation(&self, what: String) {
        eprintln!("VIOLATION: {what}");
        self.violations.lock().unwrap().push(what);
    }

    /// A call failed after `took`: counts it, and a violation if it outlived its deadline.
    fn failed(&self, client: usize, what: &str, took: Duration, deadline: Duration, error: &Error) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.slowest_error_ms.fetch_max(took.as_millis() as u64, Ordering::Relaxed);
        if took > deadline + SLACK {
            self.violation(format!("client {client}: {what} failed after {took:?} (deadline {deadline:?}): {error}"));
        }
    }
}

/// A write whose call failed: it may or may not have reached the server.
enum Pending {
    Put { offset: usize, data: Vec<u8> },
    Add { value: u64 },
}

/// One well-behaved client: its model of its region and counter, kept across restarts.
struct Model {
    region: Vec<u8>,
    counter: u64,
    pending: Option<Pending>,
    created: bool,
}

/// Checks what the server holds against the model (a pending write may or may not have
/// happened), then adopts it.
fn verify(i: usize, model: &mut Model, region: Vec<u8>, counter: u64, stats: &Stats) {
    for (at, (&got, &want)) in region.iter().zip(&model.region).enumerate() {
        let pending_ok = matches!(&model.pending, Some(Pending::Put { offset, data })
            if at >= *offset && at < offset + data.len() && data[at - offset] == got);
        if got != want && !pending_ok {
            stats.violation(format!("client {i}: byte {at} is {got:#x}, the acknowledged value {want:#x}"));
            break;
        }
    }
    let add_ok = matches!(model.pending, Some(Pending::Add { value }) if counter == model.counter.wrapping_add(value));
    if counter != model.counter && !add_ok {
        stats.violation(format!("client {i}: counter is {counter}, acknowledged {}", model.counter));
    }
    model.region = region;
    model.counter = counter;
    model.pending = None;
    stats.verified_regions.fetch_add(1, Ordering::Relaxed);
}

/// Connects, finds (or makes) the client's allocation and checks it; `None` if the server is
/// not there (yet).
fn session(
    i: usize,
    config: &ClientConfig,
    model: &mut Model,
    stats: &Stats,
) -> Option<(Client, nam_client::Allocation)> {
    let started = Instant::now();
    let client = match Client::connect(config.clone()) {
        Ok(c) => c,
        Err(e) => {
            stats.failed(i, "connect", started.elapsed(), config.connect_timeout, &e);
            return None;
        }
    };
    let name = format!("soak-{i}");
    let started = Instant::now();
    let found = match client.open(&name) {
        Ok(a) => Ok(a),
        Err(Error::Refused { status: Status::NameNotFound, .. }) => {
            if model.created {
                stats.violation(format!("client {i}: its acknowledged allocation {name} is gone"));
            }
            let options = AllocOptions { persistent: true, ..AllocOptions::shared(&name) };
            client.alloc((REGION + 8) as u64, &options)
        }
        Err(e) => Err(e),
    };
    let a = match found {
        Ok(a) => a,
        Err(e) => {
            stats.failed(i, "open/alloc", started.elapsed(), TIMEOUT, &e);
            return None;
        }
    };
    let fresh = !model.created;
    model.created = true;
    let mut region = vec![0u8; REGION];
    let started = Instant::now();
    let read = client.get(&a, 0, &mut region).and_then(|()| client.fetch(&a, REGION as u64));
    match read {
        Ok(counter) if fresh => {
            model.region = region;
            model.counter = counter;
        }
        Ok(counter) => verify(i, model, region, counter, stats),
        Err(e) => {
            stats.failed(i, "verify", started.elapsed(), TIMEOUT, &e);
            return None;
        }
    }
    Some((client, a))
}

fn well_behaved(i: usize, addr: SocketAddr, stop: Arc<AtomicBool>, stats: Arc<Stats>) {
    let mut config = ClientConfig::new(vec![addr]);
    config.transports = Some("tcp".into());
    config.timeout = TIMEOUT;
    config.connect_timeout = TIMEOUT;
    config.name = format!("soak-{i}");
    let mut rng = ChaCha8Rng::seed_from_u64(0x50a4 + i as u64);
    let mut model = Model { region: vec![0; REGION], counter: 0, pending: None, created: false };
    let mut first = true;
    // Staggered, as a job's processes start: 64 handshakes at once on two cores miss deadlines.
    std::thread::sleep(Duration::from_millis(50 * i as u64));
    while !stop.load(Ordering::Relaxed) {
        let Some((client, a)) = session(i, &config, &mut model, &stats) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        if !first {
            stats.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        first = false;
        while !stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            let failed = match rng.gen_range(0..3) {
                0 => {
                    let len = rng.gen_range(1..=512);
                    let offset = rng.gen_range(0..=REGION - len);
                    let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                    model.pending = Some(Pending::Put { offset, data: data.clone() });
                    match client.put_sync(&a, offset as u64, &data) {
                        Ok(()) => {
                            model.region[offset..offset + len].copy_from_slice(&data);
                            model.pending = None;
                            stats.acked_puts.fetch_add(1, Ordering::Relaxed);
                            None
                        }
                        Err(e) => Some(("put_sync", e)),
                    }
                }
                1 => {
                    let value = rng.gen_range(1..1000u64);
                    model.pending = Some(Pending::Add { value });
                    match client.fetch_add(&a, REGION as u64, value) {
                        Ok(old) => {
                            if old != model.counter {
                                stats.violation(format!(
                                    "client {i}: fetch_add saw {old}, acknowledged {}",
                                    model.counter
                                ));
                            }
                            model.counter = old.wrapping_add(value);
                            model.pending = None;
                            stats.acked_adds.fetch_add(1, Ordering::Relaxed);
                            None
                        }
                        Err(e) => Some(("fetch_add", e)),
                    }
                }
                _ => {
                    let len = rng.gen_range(1..=1024);
                    let offset = rng.gen_range(0..=REGION - len);
                    let mut back = vec![0u8; len];
                    match client.get(&a, offset as u64, &mut back) {
                        Ok(()) => {
                            if back[..] != model.region[offset..offset + len] {
                                stats.violation(format!("client {i}: a get at {offset}+{len} differs from the model"));
                            }
                            stats.checked_gets.fetch_add(1, Ordering::Relaxed);
                            None
                        }
                        Err(e) => Some(("get", e)),
                    }
                }
            };
            stats.ops.fetch_add(1, Ordering::Relaxed);
            if let Some((what, e)) = failed {
                stats.failed(i, what, started.elapsed(), TIMEOUT, &e);
                break;
            }
            std::thread::sleep(Duration::from_micros(rng.gen_range(1000..5000)));
        }
    }
    // The server is up at the end: one last check of every acknowledged write.
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if session(i, &config, &mut model, &stats).is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stats.violation(format!("client {i}: could not reach the server for its final check"));
}

/// Asks for 64 KiB replies 2,000 times without taking them, again and again.
fn flooder(addr: SocketAddr, stop: Arc<AtomicBool>, stats: Arc<Stats>) {
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(500));
        let Ok(raw) = RawClient::connect(addr, "tcp") else { continue };
        let hello = Hello { tenant: "default".into(), token: String::new(), client_name: "flood".into(), pid: 1 };
        if !matches!(raw.call(1, &Request::Hello(hello), TIMEOUT), Some(Reply::Hello(_))) {
            continue;
        }
        let alloc = Request::Alloc(Alloc { size: 64 << 10, align: 64, flags: 0, name: String::new() });
        let Some(Reply::Alloc(grant)) = raw.call(2, &alloc, TIMEOUT) else { continue };
        let requests: Vec<Vec<u8>> = (0..2000u64)
            .map(|i| Request::Get { handle: grant.handle, offset: 0, len: 64 << 10 }.encode(10 + i))
            .collect();
        let mut posted = Vec::new();
        for bytes in &requests {
            // SAFETY: `requests` outlives `posted`, dropped first below.
            match unsafe { raw.endpoint.am_send_nbx(AM_ID_REQUEST, bytes.as_ptr(), bytes.len()) } {
                Ok(Posted::InFlight(request)) => posted.push(request),
                Ok(Posted::Done) => {}
                Err(_) => break,
            }
        }
        std::thread::sleep(Duration::from_secs(2));
        drop(posted);
        drop(raw);
        drop(requests);
        stats.flood_rounds.fetch_add(1, Ordering::Relaxed);
    }
}

/// Opens a TCP connection, sends 4 KiB of noise and closes, ten times a second.
fn garbage(addr: SocketAddr, stop: Arc<AtomicBool>, stats: Arc<Stats>) {
    let mut rng = ChaCha8Rng::seed_from_u64(0x6a7b);
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            let noise: Vec<u8> = (0..4096).map(|_| rng.gen()).collect();
            let _ = s.write_all(&noise);
            stats.garbage_connections.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Keeps 200 silent TCP connections open, renewed every 5 s.
fn half_open(addr: SocketAddr, stop: Arc<AtomicBool>, stats: Arc<Stats>) {
    while !stop.load(Ordering::Relaxed) {
        let held: Vec<TcpStream> =
            (0..200).filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()).collect();
        stats.half_open_connections.fetch_add(held.len() as u64, Ordering::Relaxed);
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn sixty_four_clients_keep_every_acknowledged_write_through_floods_garbage_and_kill_9() {
    let duration = env_secs("NAM_SOAK_SECS", 120);
    let restart_every = env_secs("NAM_SOAK_RESTART_SECS", 20);
    let dir = temp_dir("soak");
    let config = write_config(
        &dir,
        &format!(
            "lease_ms = 2000\n[limits]\nclient_reply_bytes = \"4MiB\"\nreply_bytes = \"{}MiB\"\nreply_timeout_ms = 3000\n",
            REPLY_BOUND >> 20
        ),
    );
    let backing = dir.join("pool.bin");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let args = ["--capacity", "64MiB", "--backing", backing.to_str().unwrap(), "--config", config.to_str().unwrap()];
    let mut server = ServerProcess::start_on(&listen, "tcp", &args);
    let addr = server.addr;
    let pid = Arc::new(AtomicU32::new(server.child.id()));
    let (stop, stop_clients) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let stats = Arc::new(Stats::default());

    let max_rss = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (pid, stop, max_rss) = (pid.clone(), stop.clone(), max_rss.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(rss) = rss_anon(pid.load(Ordering::Relaxed)) {
                    max_rss.fetch_max(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let mut helpers = Vec::new();
    // `NAM_SOAK_HOSTILE` picks the hostile clients (`flood,garbage,half-open`, the default;
    // `none`), to tell their effects apart.
    let hostile = std::env::var("NAM_SOAK_HOSTILE").unwrap_or_else(|_| "flood,garbage,half-open".into());
    let all: [(&str, fn(SocketAddr, Arc<AtomicBool>, Arc<Stats>)); 3] =
        [("flood", flooder), ("garbage", garbage), ("half-open", half_open)];
    let roles = all.into_iter().filter(|(name, _)| hostile.split(',').any(|h| h == *name)).map(|(_, role)| role);
    for role in roles {
        let (stop, stats) = (stop.clone(), stats.clone());
        helpers.push(std::thread::spawn(move || role(addr, stop, stats)));
    }
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (stop, stats) = (stop_clients.clone(), stats.clone());
            std::thread::spawn(move || well_behaved(i, addr, stop, stats))
        })
        .collect();

    let started = Instant::now();
    let mut restarts = 0u32;
    let mut next_restart = started + restart_every;
    while started.elapsed() < duration {
        std::thread::sleep(Duration::from_millis(200));
        if Instant::now() >= next_restart && started.elapsed() + Duration::from_secs(5) < duration {
            server.kill();
            // Binds the port at once (SO_REUSEADDR); a failure to start fails the test here.
            server = ServerProcess::start_on(&listen, "tcp", &args);
            pid.store(server.child.id(), Ordering::Relaxed);
            restarts += 1;
            next_restart = Instant::now() + restart_every;
        }
    }
    stop.store(true, Ordering::Relaxed);
    helpers.into_iter().for_each(|h| h.join().expect("a hostile helper panicked"));
    stop_clients.store(true, Ordering::Relaxed);
    clients.into_iter().for_each(|c| c.join().expect("a well-behaved client panicked"));
    sampler.join().unwrap();

    let status = nam_client::server_status(addr, Duration::from_secs(5)).expect("status at the end");
    let s = &*stats;
    let max_rss = max_rss.load(Ordering::Relaxed);
    eprintln!(
        "soak: {:?}, {restarts} restarts (kill -9), {} ops ({} acknowledged puts, {} fetch-adds, {} checked gets), \
         {} errors (slowest {} ms, deadline {} ms), {} reconnects, {} regions verified; hostile: {} flood rounds, \
         {} garbage connections, {} half-open connections; server anonymous memory at most {} MiB (reply bound \
         {} MiB + {} MiB allowance); last server: {} clients cut off, {} connections refused, {} sockets closed, \
         reply bytes at most {} KiB",
        started.elapsed(),
        s.ops.load(Ordering::Relaxed),
        s.acked_puts.load(Ordering::Relaxed),
        s.acked_adds.load(Ordering::Relaxed),
        s.checked_gets.load(Ordering::Relaxed),
        s.errors.load(Ordering::Relaxed),
        s.slowest_error_ms.load(Ordering::Relaxed),
        TIMEOUT.as_millis(),
        s.reconnects.load(Ordering::Relaxed),
        s.verified_regions.load(Ordering::Relaxed),
        s.flood_rounds.load(Ordering::Relaxed),
        s.garbage_connections.load(Ordering::Relaxed),
        s.half_open_connections.load(Ordering::Relaxed),
        max_rss >> 20,
        REPLY_BOUND >> 20,
        PROCESS_ALLOWANCE >> 20,
        status.resources.clients_cut_off,
        status.resources.connections_refused,
        status.resources.sockets_reaped,
        status.resources.reply_bytes_high >> 10,
    );
    let violations = s.violations.lock().unwrap();
    assert!(
        violations.is_empty(),
        "{} violations, the first: {:?}",
        violations.len(),
        &violations[..violations.len().min(5)]
    );
    assert!(max_rss < REPLY_BOUND + PROCESS_ALLOWANCE, "server anonymous memory reached {} MiB", max_rss >> 20);
    assert!(s.acked_puts.load(Ordering::Relaxed) > 0 && s.acked_adds.load(Ordering::Relaxed) > 0, "no work done");
    if duration >= restart_every * 2 {
        assert!(restarts >= 1, "the server was never restarted");
        assert!(s.reconnects.load(Ordering::Relaxed) > 0, "no client came back after a restart");
    }
}
