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
//!
//! Every client and every hostile role is a process of its own (this test binary started
//! again, running [`soak_role`]): UCX 1.13 keys its event handlers by descriptor number across
//! the whole process, and 64 UCX contexts in one process reconnecting after each restart
//! tripped its assertion `handler->async == async` (a descriptor one context closed, reused
//! by another) and aborted the test process. One client per process is also how clients run.

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
use std::path::{Path as FsPath, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CLIENTS: usize = 64;
/// Bytes of each client's region; a fetch-add counter follows it.
const REGION: usize = 4096;
/// Deadline of every client call, and of connecting: generous, because 64 clients that
/// spin while they wait for replies share two cores with the server here.
const TIMEOUT: Duration = Duration::from_secs(10);
/// What a failing call may take beyond its deadline before it counts as late: after a
/// missed deadline or a failed peer, the force close of the endpoint, the drain of its
/// requests and (for a failed connect) the close of the dropped endpoint are each bounded by
/// nam-ucx's `CLOSE_TIMEOUT` (2 s), and a loaded machine adds its share (measured: a connect
/// failed 5.5 s after its 10 s deadline).
const SLACK: Duration = Duration::from_secs(8);
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
    /// The counters in the order of [`Stats::report`] and [`Stats::add`].
    fn counters(&self) -> [&AtomicU64; 11] {
        [
            &self.ops,
            &self.acked_puts,
            &self.acked_adds,
            &self.checked_gets,
            &self.errors,
            &self.reconnects,
            &self.verified_regions,
            &self.slowest_error_ms,
            &self.flood_rounds,
            &self.garbage_connections,
            &self.half_open_connections,
        ]
    }

    /// What a role process prints for the test: one line of counters, one per violation.
    fn report(&self) -> String {
        let numbers: Vec<String> = self.counters().iter().map(|c| c.load(Ordering::Relaxed).to_string()).collect();
        // On a line of its own: the test harness prints the test's name before its output.
        let mut out = format!("\nSOAK-STATS {}\n", numbers.join(" "));
        for v in self.violations.lock().unwrap().iter() {
            out += &format!("SOAK-VIOLATION {v}\n");
        }
        out
    }

    /// Adds a role process's report (its standard output).
    fn add(&self, output: &str) {
        for line in output.lines() {
            if let Some(numbers) = line.strip_prefix("SOAK-STATS ") {
                for (i, (counter, n)) in self.counters().iter().zip(numbers.split(' ')).enumerate() {
                    let n: u64 = n.parse().unwrap_or(0);
                    if i == 7 {
                        counter.fetch_max(n, Ordering::Relaxed);
                    } else {
                        counter.fetch_add(n, Ordering::Relaxed);
                    }
                }
            } else if let Some(v) = line.strip_prefix("SOAK-VIOLATION ") {
                self.violations.lock().unwrap().push(v.to_string());
            }
        }
    }

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
    while !stop.load(Ordering::Relaxed) {
        let Some((client, a)) = session(i, &config, &mut model, &stats) else {
            // Jittered, so 64 clients do not all knock again at once.
            std::thread::sleep(Duration::from_millis(rng.gen_range(100..2000)));
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

/// Opens a TCP connection, sends 4 KiB of noise and closes, four times a second.
fn garbage(addr: SocketAddr, stop: Arc<AtomicBool>, stats: Arc<Stats>) {
    let mut rng = ChaCha8Rng::seed_from_u64(0x6a7b);
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(250));
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
            "lease_ms = 2000\n[limits]\nclient_reply_bytes = \"4MiB\"\nreply_bytes = \"{}MiB\"\nreply_timeout_ms = 3000\n\
             handshake_timeout_ms = {}\n",
            REPLY_BOUND >> 20,
            // As long as the clients' own connect deadline: 64 processes reconnecting at once
            // on two cores take longer than the default 5 s to say Hello.
            TIMEOUT.as_millis()
        ),
    );
    let backing = dir.join("pool.bin");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let args = ["--capacity", "64MiB", "--backing", backing.to_str().unwrap(), "--config", config.to_str().unwrap()];
    let mut server = ServerProcess::start_on(&listen, "tcp", &args);
    let addr = server.addr;
    let pid = Arc::new(AtomicU32::new(server.child.id()));
    let stop = Arc::new(AtomicBool::new(false));
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
    let stop_hostile = dir.join("stop-hostile");
    let stop_clients = dir.join("stop-clients");
    // `NAM_SOAK_HOSTILE` picks the hostile roles (`flood,garbage,half-open`, the default;
    // `none`), to tell their effects apart.
    let hostile = std::env::var("NAM_SOAK_HOSTILE").unwrap_or_else(|_| "flood,garbage,half-open".into());
    let helpers: Vec<Child> = ["flood", "garbage", "half-open"]
        .into_iter()
        .filter(|role| hostile.split(',').any(|h| h == *role))
        .map(|role| spawn_role(role, 0, addr, &stop_hostile))
        .collect();
    let clients: Vec<Child> = (0..CLIENTS)
        .map(|i| {
            // Staggered, as a job's processes start: 64 handshakes at once on two cores
            // miss their deadlines.
            std::thread::sleep(Duration::from_millis(50));
            spawn_role("client", i, addr, &stop_clients)
        })
        .collect();

    let started = Instant::now();
    let mut restarts = 0u32;
    let mut next_restart = started + restart_every;
    let mut deaths = 0u32;
    while started.elapsed() < duration {
        std::thread::sleep(Duration::from_millis(200));
        // A server that exits without being killed was crashed by a peer (UCX aborts on an
        // assertion print their message on the inherited stderr above): the violation this
        // test exists to find. It is restarted so that the run goes on counting.
        if let Ok(Some(status)) = server.child.try_wait() {
            deaths += 1;
            stats.violation(format!(
                "the server died on its own after {:?} ({status}); its last words are on stderr above",
                started.elapsed()
            ));
            server = ServerProcess::start_on(&listen, "tcp", &args);
            pid.store(server.child.id(), Ordering::Relaxed);
            next_restart = Instant::now() + restart_every;
        }
        if Instant::now() >= next_restart && started.elapsed() + Duration::from_secs(5) < duration {
            server.kill();
            // Binds the port at once (SO_REUSEADDR); a failure to start fails the test here.
            server = ServerProcess::start_on(&listen, "tcp", &args);
            pid.store(server.child.id(), Ordering::Relaxed);
            restarts += 1;
            next_restart = Instant::now() + restart_every;
        }
    }
    std::fs::write(&stop_hostile, b"").unwrap();
    for h in helpers {
        stats.add(&finish(h, "a hostile role"));
    }
    std::fs::write(&stop_clients, b"").unwrap();
    for c in clients {
        stats.add(&finish(c, "a well-behaved client"));
    }
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();

    let status = common::admin_status(addr);
    let s = &*stats;
    let max_rss = max_rss.load(Ordering::Relaxed);
    eprintln!(
        "soak: {:?}, {restarts} restarts (kill -9), {deaths} unplanned server deaths, {} ops ({} acknowledged puts, {} fetch-adds, {} checked gets), \
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

/// Starts this test binary again as one role of the soak ([`soak_role`]).
fn spawn_role(role: &str, index: usize, addr: SocketAddr, stop_file: &FsPath) -> Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "soak_role", "--nocapture", "--test-threads", "1"])
        .env("NAM_SOAK_ROLE", role)
        .env("NAM_SOAK_INDEX", index.to_string())
        .env("NAM_SOAK_ADDR", addr.to_string())
        .env("NAM_SOAK_STOP", stop_file)
        .env("NAM_SOAK_PARENT", std::process::id().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start a soak role process")
}

/// Waits for a role process and returns its report; a crash is a failure of the test.
fn finish(child: Child, what: &str) -> String {
    let out = child.wait_with_output().expect("wait for a soak role process");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success() && text.contains("SOAK-STATS"), "{what} failed ({}): {text}", out.status);
    text
}

/// One role of the soak in a process of its own, when the soak started this binary for it
/// (`NAM_SOAK_ROLE`: `client`, `flood`, `garbage` or `half-open`); otherwise nothing. It stops
/// when the file `NAM_SOAK_STOP` appears or its parent is gone, and prints its report.
#[test]
fn soak_role() {
    let Ok(role) = std::env::var("NAM_SOAK_ROLE") else { return };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let addr: SocketAddr = var("NAM_SOAK_ADDR").parse().expect("NAM_SOAK_ADDR");
    let index: usize = var("NAM_SOAK_INDEX").parse().expect("NAM_SOAK_INDEX");
    let parent: i32 = var("NAM_SOAK_PARENT").parse().expect("NAM_SOAK_PARENT");
    let stop_file = PathBuf::from(var("NAM_SOAK_STOP"));
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || loop {
            // SAFETY: getppid has no preconditions.
            if stop_file.exists() || unsafe { libc::getppid() } != parent {
                stop.store(true, Ordering::Relaxed);
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        });
    }
    let stats = Arc::new(Stats::default());
    match role.as_str() {
        "client" => well_behaved(index, addr, stop, stats.clone()),
        "flood" => flooder(addr, stop, stats.clone()),
        "garbage" => garbage(addr, stop, stats.clone()),
        "half-open" => half_open(addr, stop, stats.clone()),
        other => panic!("unknown soak role {other:?}"),
    }
    print!("{}", stats.report());
}
