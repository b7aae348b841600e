//! A hostile tenant against a real `nam serve`: a raw UCX client (nam-ucx plus nam-proto
//! encoders, connecting as the real client does) authenticates as tenant `bob` and sends
//! garbage and mutated values in every field of `CkptJoin` (worker addresses, remote keys,
//! counts, lengths, offsets), and random or mutated bytes for every other control message,
//! authenticated and not, for a bounded time on each transport. Meanwhile a well-behaved
//! client of tenant `alice` (the real `nam_client::Client`) allocates, puts, gets and checks
//! its data. The server must never die, and every hostile request that is answered must be
//! answered with a typed error (or a legitimate success).
//!
//! The server's anonymous resident memory (`/proc/<pid>/status`, `RssAnon`) must not grow
//! from a sample taken a quarter into the run to its end.
//! `NAM_HOSTILE_SEED` replays a run (the seed is printed); `NAM_HOSTILE_SECS` sets the time
//! per transport (default 10).

mod common;

use common::{temp_dir, write_config, ServerProcess, TRANSPORTS};
use nam_client::{AllocOptions, Client};
use nam_proto::ckpt::{CkptJoin, CkptRequest};
use nam_proto::{Alloc, Hello, Reply, Request, Status, AM_ID_REPLY, AM_ID_REQUEST};
use nam_ucx::{Context, Endpoint, Features, MemRegion, Posted, Worker};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// A UCX client that speaks the wire protocol by hand.
struct RawClient {
    worker: Worker,
    endpoint: Endpoint,
    replies: Arc<Mutex<Vec<Vec<u8>>>>,
    next_id: u64,
    // Declared last: dropped after the endpoint and worker.
    context: Context,
}

/// What became of one hostile request.
enum Outcome {
    /// A reply that decodes.
    Reply(Reply),
    /// No reply within the deadline, or the connection failed.
    Lost(String),
}

impl RawClient {
    fn connect(addr: std::net::SocketAddr, transports: &str) -> RawClient {
        let context = Context::with_transports(Features::CLIENT, Some(transports)).expect("UCX context");
        let worker = Worker::new(&context).expect("UCX worker");
        let replies: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let sink = replies.clone();
        worker
            .set_am_handler(AM_ID_REPLY, move |m| sink.lock().unwrap().push(m.data.unwrap_or(&[]).to_vec()))
            .expect("reply handler");
        let endpoint = Endpoint::connect(&worker, addr).expect("connect");
        RawClient { worker, endpoint, replies, next_id: 1, context }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Sends `bytes` (whose header carries `request_id`) and waits for the reply.
    fn call_raw(&mut self, bytes: &[u8], request_id: u64) -> Outcome {
        // Calls are one at a time: anything queued now is a late reply to an earlier one.
        self.replies.lock().unwrap().clear();
        let deadline = Instant::now() + REPLY_TIMEOUT;
        // SAFETY: `bytes` outlives the wait below.
        let posted = match unsafe { self.endpoint.am_send_nbx(AM_ID_REQUEST, bytes.as_ptr(), bytes.len()) } {
            Ok(p) => p,
            Err(e) => return Outcome::Lost(format!("send: {e}")),
        };
        if let Posted::InFlight(request) = &posted {
            while request.check().is_none() {
                self.worker.progress();
                if Instant::now() >= deadline {
                    self.endpoint.abort();
                    while request.check().is_none() {
                        self.worker.progress();
                    }
                    return Outcome::Lost("send did not complete".into());
                }
            }
        }
        loop {
            self.worker.progress();
            let found = {
                let mut queue = self.replies.lock().unwrap();
                // A request whose header does not decode is answered with request id 0.
                let at = queue
                    .iter()
                    .position(|r| r.get(8..16).is_some_and(|b| b == request_id.to_le_bytes() || b == [0; 8]));
                at.map(|i| queue.swap_remove(i))
            };
            if let Some(bytes) = found {
                return match Reply::decode(&bytes) {
                    Ok((_, _, reply)) => Outcome::Reply(reply),
                    Err(e) => panic!("the server's reply does not decode: {e}: {bytes:02x?}"),
                };
            }
            if let Some(e) = self.endpoint.failure() {
                return Outcome::Lost(format!("connection failed: {e}"));
            }
            if Instant::now() >= deadline {
                return Outcome::Lost("no reply".into());
            }
            std::thread::yield_now();
        }
    }

    fn call(&mut self, request: &Request) -> Outcome {
        let id = self.id();
        self.call_raw(&request.encode(id), id)
    }

    fn hello(&mut self, tenant: &str, token: &str) {
        let hello = Request::Hello(Hello {
            tenant: tenant.into(),
            token: token.into(),
            client_name: "hostile".into(),
            pid: std::process::id(),
        });
        match self.call(&hello) {
            Outcome::Reply(Reply::Hello(_)) => {}
            Outcome::Reply(other) => panic!("hello refused: {other:?}"),
            Outcome::Lost(why) => panic!("hello lost: {why}"),
        }
    }
}

/// Counts of what the hostile client saw.
#[derive(Default, Debug)]
struct Tally {
    sent: u64,
    refused: u64,
    accepted: u64,
    lost: u64,
    reconnects: u64,
    /// The last request went unanswered: the server may be dying.
    last_lost: bool,
}

impl Tally {
    fn record(&mut self, what: &str, outcome: Outcome) -> Option<Reply> {
        self.sent += 1;
        match outcome {
            Outcome::Reply(Reply::Error { status, message }) => {
                assert_ne!(status, Status::Ok, "{what}: an error reply with status Ok");
                assert!(!message.is_empty(), "{what}: refused ({status:?}) without naming the cause");
                self.refused += 1;
                None
            }
            Outcome::Reply(reply) => {
                self.accepted += 1;
                Some(reply)
            }
            Outcome::Lost(why) => {
                eprintln!("{what}: {why}");
                self.last_lost = true;
                self.lost += 1;
                None
            }
        }
    }
}

/// The hostile client's own registered buffer: real values to mutate.
struct RealValues {
    worker_address: Vec<u8>,
    rkey: Vec<u8>,
    buffer_addr: u64,
    buffer_len: u64,
}

fn random_bytes(rng: &mut ChaCha8Rng, max: usize) -> Vec<u8> {
    let len = rng.gen_range(0..=max);
    (0..len).map(|_| rng.gen()).collect()
}

/// `bytes` truncated, with bytes flipped, or with bytes inserted.
fn mutate(rng: &mut ChaCha8Rng, bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    match rng.gen_range(0..4) {
        0 => out.truncate(rng.gen_range(0..=bytes.len())),
        1 | 2 => {
            for _ in 0..rng.gen_range(1..=4) {
                if !out.is_empty() {
                    let i = rng.gen_range(0..out.len());
                    out[i] ^= rng.gen_range(1..=255u8);
                }
            }
        }
        _ => {
            let i = rng.gen_range(0..=out.len());
            out.insert(i, rng.gen());
        }
    }
    out
}

fn extreme_u32(rng: &mut ChaCha8Rng, normal: u32) -> u32 {
    *[0, 1, normal, normal.wrapping_add(1), u32::MAX, u32::MAX / 2, rng.gen(), 16, 4096, 1 << 20]
        .get(rng.gen_range(0..10))
        .unwrap()
}

fn extreme_u64(rng: &mut ChaCha8Rng, normal: u64) -> u64 {
    *[0, 1, normal, normal.wrapping_add(1), normal.wrapping_sub(1), u64::MAX, i64::MAX as u64, rng.gen(), 1 << 40]
        .get(rng.gen_range(0..9))
        .unwrap()
}

fn hostile_join(rng: &mut ChaCha8Rng, real: &RealValues, server_host: &str) -> CkptJoin {
    let worker_address = match rng.gen_range(0..6) {
        0 => random_bytes(rng, 400),
        1 => real.worker_address[..rng.gen_range(0..real.worker_address.len())].to_vec(),
        2 | 3 => mutate(rng, &real.worker_address),
        4 => Vec::new(),
        _ => real.worker_address.clone(),
    };
    let rkey = match rng.gen_range(0..6) {
        0 => random_bytes(rng, 128),
        1 => real.rkey[..rng.gen_range(0..real.rkey.len())].to_vec(),
        2 | 3 => mutate(rng, &real.rkey),
        4 => Vec::new(),
        _ => real.rkey.clone(),
    };
    let ranks = if rng.gen_bool(0.7) { rng.gen_range(1..4) } else { extreme_u32(rng, 2) };
    CkptJoin {
        group: if rng.gen_bool(0.9) { format!("g{}", rng.gen_range(0..6)) } else { String::new() },
        ranks,
        rank: if rng.gen_bool(0.7) { rng.gen_range(0..ranks.max(1)) } else { extreme_u32(rng, 0) },
        segment_bytes: if rng.gen_bool(0.7) { 0 } else { extreme_u32(rng, 4096) },
        in_flight: if rng.gen_bool(0.7) { 0 } else { extreme_u32(rng, 4) },
        timeout_ms: if rng.gen_bool(0.7) { 2000 } else { extreme_u32(rng, 1000) },
        node: format!("node{}", rng.gen_range(0..1000)),
        host: match rng.gen_range(0..3) {
            0 => "elsewhere".into(),
            _ => server_host.into(),
        },
        buffer_len: if rng.gen_bool(0.6) { real.buffer_len } else { extreme_u64(rng, real.buffer_len) },
        buffer_addr: if rng.gen_bool(0.6) { real.buffer_addr } else { extreme_u64(rng, real.buffer_addr) },
        rkey,
        worker_address,
    }
}

/// A request of some kind, valid or close to it, to mutate.
fn sample_request(rng: &mut ChaCha8Rng, groups: &[u64]) -> Request {
    let group_id = groups.get(rng.gen_range(0..groups.len().max(1))).copied().unwrap_or_else(|| rng.gen());
    let handle = extreme_u64(rng, 1);
    match rng.gen_range(0..22) {
        0 => Request::Hello(Hello { tenant: "bob".into(), token: "b-secret".into(), client_name: "x".into(), pid: 1 }),
        1 => Request::Alloc(Alloc {
            size: extreme_u64(rng, 4096),
            align: extreme_u64(rng, 64),
            flags: extreme_u32(rng, 1),
            name: if rng.gen_bool(0.5) { "ckpt:g0:control".into() } else { format!("n{}", rng.gen_range(0..4)) },
        }),
        2 => Request::Open { name: if rng.gen_bool(0.5) { "ckpt:g0:parity0".into() } else { "n1".into() } },
        3 => Request::Free { handle },
        4 => Request::Status,
        5 => Request::Put { handle, offset: extreme_u64(rng, 0), data: random_bytes(rng, 64) },
        6 => Request::Get { handle, offset: extreme_u64(rng, 0), len: extreme_u32(rng, 8) },
        7 => Request::Atomic {
            handle,
            offset: extreme_u64(rng, 8),
            // Every operation, 64- and 32-bit: the server picks the width from the code.
            op: nam_proto::AtomicKind::ALL[rng.gen_range(0..nam_proto::AtomicKind::ALL.len())],
            value: rng.gen(),
            compare: rng.gen(),
        },
        8 => Request::Ckpt(CkptRequest::Ready { group_id, rank: extreme_u32(rng, 0), epoch: extreme_u64(rng, 1) }),
        9 => Request::Ckpt(CkptRequest::Restore {
            group_id,
            lost_rank: extreme_u32(rng, 0),
            epoch: extreme_u64(rng, 0),
            flags: extreme_u32(rng, 1),
        }),
        10 => Request::Ckpt(CkptRequest::Query { group_id }),
        11 => Request::Ckpt(CkptRequest::Destroy { group_id }),
        12 => Request::Gas(nam_proto::gas::GasRequest::ReduceAttach {
            name: "r".into(),
            ranks: extreme_u32(rng, 2),
            rank: extreme_u32(rng, 0),
            chunk_bytes: extreme_u64(rng, 64),
        }),
        13 => Request::Gas(nam_proto::gas::GasRequest::Domain),
        // Every remaining field of every kind, extreme or random.
        14 => Request::Hello(Hello {
            // The empty tenant is the administrator's: a guessed token must fail like any other.
            tenant: ["", "alice", "bob", "nobody", "\u{0}"][rng.gen_range(0..5)].into(),
            token: String::from_utf8_lossy(&random_bytes(rng, 40)).into_owned(),
            client_name: String::from_utf8_lossy(&random_bytes(rng, 120)).into_owned(),
            pid: extreme_u32(rng, 1),
        }),
        15 => Request::Goodbye(nam_proto::TrafficReport {
            puts: extreme_u64(rng, 1),
            gets: extreme_u64(rng, 1),
            atomics: extreme_u64(rng, 1),
            bytes_put: extreme_u64(rng, 1),
            bytes_got: extreme_u64(rng, 1),
        }),
        16 => Request::Atomic {
            handle,
            offset: extreme_u64(rng, 0),
            op: [nam_proto::AtomicKind::Swap, nam_proto::AtomicKind::CompareSwap][rng.gen_range(0..2)],
            value: rng.gen(),
            compare: extreme_u64(rng, 0),
        },
        17 => Request::Gas(nam_proto::gas::GasRequest::Resolve {
            address: nam_proto::GlobalAddress(if rng.gen_bool(0.5) {
                rng.gen()
            } else {
                nam_proto::GlobalAddress::new(
                    rng.gen(),
                    rng.gen_range(0..4),
                    handle & 0xff,
                    extreme_u64(rng, 0) & 0xffff,
                )
                .map_or(0, |a| a.0)
            }),
        }),
        18 => Request::Gas(nam_proto::gas::GasRequest::ReduceKick { handle }),
        // A wait held at the server: any comparison code, width and timeout, valid or not.
        19 => Request::Gas(nam_proto::gas::GasRequest::Watch {
            handle,
            offset: extreme_u64(rng, 0),
            compare: rng.gen(),
            width_bytes: [4, 8, rng.gen()][rng.gen_range(0..3)],
            value: rng.gen(),
            // Mostly short: a watch on a word that never matches is held that long, and this
            // client waits for each reply in turn.
            timeout_ms: if rng.gen_bool(0.05) { u32::MAX } else { rng.gen_range(0..20) },
        }),
        // A put-with-signal: any atomic code (only swap and fetch-add are served), ranges
        // in or out of bounds, aligned or not.
        20 => Request::Gas(nam_proto::gas::GasRequest::PutSignal {
            handle,
            offset: extreme_u64(rng, 0),
            signal_handle: extreme_u64(rng, 1),
            signal_offset: extreme_u64(rng, 8),
            op: nam_proto::AtomicKind::ALL[rng.gen_range(0..nam_proto::AtomicKind::ALL.len())],
            value: rng.gen(),
            data: random_bytes(rng, 300),
        }),
        _ => Request::Gas(nam_proto::gas::GasRequest::MailboxSend {
            handle,
            offset: extreme_u64(rng, 0),
            sender: extreme_u32(rng, 1),
            data: random_bytes(rng, 300),
        }),
    }
}

/// Encoded bytes of a hostile non-join message: a mutated valid request, or a well-formed
/// header of any kind over a random body. Returns the bytes and their request id.
fn hostile_message(rng: &mut ChaCha8Rng, id: u64, groups: &[u64]) -> Vec<u8> {
    let mut bytes = sample_request(rng, groups).encode(id);
    match rng.gen_range(0..4) {
        0 => {}
        1 => {
            // Mutate the body only, keeping the header (and its request id) readable.
            let body = bytes.split_off(nam_proto::HEADER_LEN);
            bytes.extend(mutate(rng, &body));
            let len = (bytes.len() - nam_proto::HEADER_LEN) as u32;
            if rng.gen_bool(0.8) {
                bytes[16..20].copy_from_slice(&len.to_le_bytes());
            }
        }
        2 => {
            let kinds = [
                0u16, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 16, 17, 18, 19, 20, 21, 32, 33, 34, 35, 36, 37, 38, 47, 0x8001,
            ];
            let body = random_bytes(rng, 96);
            bytes.truncate(nam_proto::HEADER_LEN);
            bytes[6..8].copy_from_slice(&kinds[rng.gen_range(0..kinds.len())].to_le_bytes());
            bytes[16..20].copy_from_slice(&(body.len() as u32).to_le_bytes());
            bytes.extend(body);
        }
        _ => {
            // Anything at all after the request id.
            let tail = mutate(rng, &bytes[16..]);
            bytes.truncate(16);
            bytes.extend(tail);
        }
    }
    bytes
}

fn config(dir: &std::path::Path) -> std::path::PathBuf {
    write_config(
        dir,
        r#"
        lease_ms = 500
        [[tenant]]
        name = "alice"
        token = "a-secret"
        quota = "16MiB"
        [[tenant]]
        name = "bob"
        token = "b-secret"
        quota = "16MiB"
        "#,
    )
}

/// Alice's client: allocate, put a pattern, read it back, free, until `stop`.
fn well_behaved(server: &ServerProcess, stop: Arc<AtomicBool>, ops: Arc<AtomicU64>) -> std::thread::JoinHandle<()> {
    let mut config = server.config();
    config.tenant = "alice".into();
    config.token = "a-secret".into();
    std::thread::spawn(move || {
        let client = Client::connect(config).expect("alice connects");
        let kept = client.alloc(64 << 10, &AllocOptions::default()).expect("alice's long-lived allocation");
        let pattern: Vec<u8> = (0..64u32 << 10).map(|i| (i * 31 + 7) as u8).collect();
        client.put(&kept, 0, &pattern).expect("alice puts");
        let mut round = 0u64;
        while !stop.load(Ordering::Relaxed) {
            round += 1;
            let size = 256 + (round % 16) * 512;
            let a = client.alloc(size, &AllocOptions::default()).expect("alice allocates");
            let data: Vec<u8> = (0..size).map(|i| (i ^ round) as u8).collect();
            client.put(&a, 0, &data).expect("alice puts");
            let mut back = vec![0u8; size as usize];
            client.get(&a, 0, &mut back).expect("alice gets");
            assert_eq!(back, data, "alice's data changed (round {round})");
            client.free(&a).expect("alice frees");
            let mut back = vec![0u8; pattern.len()];
            client.get(&kept, 0, &mut back).expect("alice reads her long-lived allocation");
            assert_eq!(back, pattern, "alice's long-lived allocation changed (round {round})");
            ops.fetch_add(1, Ordering::Relaxed);
        }
    })
}

fn assert_alive(server: &mut ServerProcess, what: &str, seed: u64, lost: bool) {
    // After an unanswered request, give a dying server time to be reaped, so the crash is
    // blamed on the request that caused it.
    let grace = if lost { Duration::from_secs(1) } else { Duration::ZERO };
    let deadline = Instant::now() + grace;
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("nam serve died ({status}) after {what} (seed {seed}; replay with NAM_HOSTILE_SEED={seed})");
        }
        if Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `Query` of `group_id` until `done` says so.
fn query_until(
    client: &mut RawClient,
    group_id: u64,
    what: &str,
    done: impl Fn(&nam_proto::ckpt::CkptInfo) -> bool,
) -> nam_proto::ckpt::CkptInfo {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match client.call(&Request::Ckpt(CkptRequest::Query { group_id })) {
            Outcome::Reply(Reply::Ckpt(nam_proto::ckpt::CkptReply::Info(info))) if done(&info) => return info,
            Outcome::Reply(Reply::Ckpt(_)) => {}
            Outcome::Reply(other) => panic!("{what}: query answered {other:?}"),
            Outcome::Lost(why) => panic!("{what}: query lost: {why}"),
        }
        assert!(Instant::now() < deadline, "{what}: not done within 30 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A rank that says it runs on another host is pulled through its own connection: the
/// worker address it sends (garbage here) is not used, its epoch completes, and a restore
/// from the parity gives back its bytes.
fn rank_elsewhere_is_pulled_through_its_connection(server: &ServerProcess) {
    let mut bob = RawClient::connect(server.addr, &server.transports);
    bob.hello("bob", "b-secret");
    let len = 96 << 10;
    let region = MemRegion::allocate(&bob.context, len).expect("map a buffer");
    let pattern: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
    // SAFETY: the region maps at least `len` writable bytes.
    unsafe { std::ptr::copy_nonoverlapping(pattern.as_ptr(), region.address(), len) };
    let join = CkptJoin {
        group: "elsewhere".into(),
        ranks: 1,
        rank: 0,
        segment_bytes: 0,
        in_flight: 0,
        timeout_ms: 20_000,
        node: "far".into(),
        host: "another host".into(),
        buffer_len: len as u64,
        buffer_addr: region.address() as u64,
        rkey: region.pack_rkey().expect("pack rkey"),
        worker_address: vec![0xff; 16],
    };
    let group_id = match bob.call(&Request::Ckpt(CkptRequest::Join(join))) {
        Outcome::Reply(Reply::Ckpt(nam_proto::ckpt::CkptReply::Joined(j))) => j.group_id,
        Outcome::Reply(other) => panic!("join from another host refused: {other:?}"),
        Outcome::Lost(why) => panic!("join from another host lost: {why}"),
    };
    match bob.call(&Request::Ckpt(CkptRequest::Ready { group_id, rank: 0, epoch: 1 })) {
        Outcome::Reply(Reply::Done) => {}
        other => panic!("ready: {:?}", matches!(other, Outcome::Lost(_))),
    }
    let info = query_until(&mut bob, group_id, "epoch 1", |i| i.complete_epoch == 1 || i.last_status != Status::Ok);
    assert_eq!((info.complete_epoch, info.last_status), (1, Status::Ok), "{}", info.last_error);
    let grant = match bob.call(&Request::Ckpt(CkptRequest::Restore { group_id, lost_rank: 0, epoch: 0, flags: 0 })) {
        Outcome::Reply(Reply::Alloc(grant)) => grant,
        Outcome::Reply(other) => panic!("restore refused: {other:?}"),
        Outcome::Lost(why) => panic!("restore lost: {why}"),
    };
    let info = query_until(&mut bob, group_id, "restore", |i| i.running_epoch == 0);
    assert_eq!(info.last_status, Status::Ok, "{}", info.last_error);
    let mut restored = Vec::new();
    while restored.len() < len {
        let chunk = (len - restored.len()).min(32 << 10) as u32;
        let get = Request::Get { handle: grant.handle, offset: restored.len() as u64, len: chunk };
        match bob.call(&get) {
            Outcome::Reply(Reply::Data(data)) => restored.extend(data),
            Outcome::Reply(other) => panic!("reading the restored bytes: {other:?}"),
            Outcome::Lost(why) => panic!("reading the restored bytes: {why}"),
        }
    }
    assert!(restored == pattern, "the restore from another host's rank differs from its buffer");
    let _ = bob.call(&Request::Ckpt(CkptRequest::Destroy { group_id }));
}

/// Anonymous resident memory of process `pid` (heap and private mappings; the pool is a
/// shared mapping and not counted), from `/proc`.
fn rss_anon_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc status");
    let line = status.lines().find(|l| l.starts_with("RssAnon:")).expect("RssAnon in /proc status");
    let kib: u64 = line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("RssAnon in kB");
    kib << 10
}

fn run_transport(transports: &str, seed: u64, budget: Duration) {
    let dir = temp_dir(&format!("hostile-{}", transports.replace(',', "-")));
    let config = config(&dir);
    let mut server = ServerProcess::start(transports, &["--capacity", "64MiB", "--config", config.to_str().unwrap()]);
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let alice = well_behaved(&server, stop.clone(), ops.clone());
    rank_elsewhere_is_pulled_through_its_connection(&server);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let server_host = nam_proto::host_id();

    let mut bob = RawClient::connect(server.addr, &server.transports);
    bob.hello("bob", "b-secret");
    let mut stranger = RawClient::connect(server.addr, &server.transports);
    // The hostile client's own buffer, registered in its context: the real values to mutate.
    let region = MemRegion::allocate(&bob.context, 64 << 10).expect("map a buffer");
    let real = RealValues {
        worker_address: bob.worker.address().expect("worker address"),
        rkey: region.pack_rkey().expect("pack rkey"),
        buffer_addr: region.address() as u64,
        buffer_len: 64 << 10,
    };
    let mut tally = Tally::default();
    let mut groups = Vec::new();
    let started = Instant::now();
    let mut step = 0u64;
    // The server's memory once the hostile run is under way (UCX's pools and the engines'
    // tables warmed up): it must not grow from here however long the run.
    let mut rss_warm = None;
    while started.elapsed() < budget {
        step += 1;
        if rss_warm.is_none() && started.elapsed() >= budget / 4 {
            rss_warm = Some(rss_anon_bytes(server.child.id()));
        }
        let what;
        match rng.gen_range(0..10) {
            0..=4 => {
                let join = hostile_join(&mut rng, &real, &server_host);
                what = format!("join #{step}: {join:?}");
                if let Some(Reply::Ckpt(nam_proto::ckpt::CkptReply::Joined(j))) =
                    tally.record(&what, bob.call(&Request::Ckpt(CkptRequest::Join(join))))
                {
                    groups.push(j.group_id);
                }
            }
            5..=7 => {
                let id = bob.id();
                let bytes = hostile_message(&mut rng, id, &groups);
                what = format!("authenticated message #{step}: {bytes:02x?}");
                tally.record(&what, bob.call_raw(&bytes, id));
            }
            _ => {
                let id = stranger.id();
                let bytes = hostile_message(&mut rng, id, &groups);
                what = format!("unauthenticated message #{step}: {bytes:02x?}");
                tally.record(&what, stranger.call_raw(&bytes, id));
            }
        }
        assert_alive(&mut server, &what, seed, std::mem::take(&mut tally.last_lost));
        // A mutated Hello or Goodbye may have changed who a client is: start over.
        for (client, tenant) in [(&mut bob, Some("bob")), (&mut stranger, None)] {
            if client.endpoint.failure().is_some() || step.is_multiple_of(200) {
                tally.reconnects += 1;
                let fresh = RawClient::connect(server.addr, &server.transports);
                let old = std::mem::replace(client, fresh);
                drop(old);
                if let Some(t) = tenant {
                    client.hello(t, "b-secret");
                }
            }
        }
        if step.is_multiple_of(50) {
            // Goodbye and reconnect bob now and then, so his groups and endpoints are torn down.
            let _ = bob.call(&Request::Goodbye(Default::default()));
        }
    }
    stop.store(true, Ordering::Relaxed);
    alice.join().expect("alice's client failed");
    assert_alive(&mut server, "the run", seed, true);
    let (warm, end) = (rss_warm.expect("warm-up sample"), rss_anon_bytes(server.child.id()));
    eprintln!("{transports}: server anonymous RSS {} KiB after warm-up, {} KiB at the end", warm >> 10, end >> 10);
    assert!(
        end <= warm + RSS_GROWTH_MAX,
        "the server's memory grew by {} KiB during the hostile run (seed {seed})",
        (end - warm) >> 10
    );
    eprintln!(
        "{transports}: {step} hostile steps in {:?}: {tally:?}; alice did {} verified rounds",
        started.elapsed(),
        ops.load(Ordering::Relaxed)
    );
    assert!(ops.load(Ordering::Relaxed) > 0, "alice never finished a round");
    assert!(tally.refused > tally.sent / 2, "most hostile requests should be refused: {tally:?}");
    drop(region);
    server.terminate();
}

/// How much the server's anonymous memory may grow from the warm-up sample to the end of a
/// run: allocator slack and UCX's own per-endpoint state for the clients that reconnect
/// (a few hundred KiB measured); a kilobyte leaked per hostile request would exceed it over
/// a run's thousands of requests.
const RSS_GROWTH_MAX: u64 = 4 << 20;

#[test]
fn hostile_tenant_cannot_crash_the_server() {
    let seed = std::env::var("NAM_HOSTILE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen::<u64>());
    let secs = std::env::var("NAM_HOSTILE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
    eprintln!("hostile_client seed {seed} (replay with NAM_HOSTILE_SEED={seed}), {secs} s per transport");
    for transports in TRANSPORTS {
        run_transport(transports, seed, Duration::from_secs(secs));
    }
}

/// The error a call was refused with; panics on anything else.
fn refused_with(outcome: Outcome, what: &str) -> (Status, String) {
    match outcome {
        Outcome::Reply(Reply::Error { status, message }) => (status, message),
        Outcome::Reply(other) => panic!("{what}: accepted: {other:?}"),
        Outcome::Lost(why) => panic!("{what}: lost: {why}"),
    }
}

fn hello_as(tenant: &str, token: &str) -> Request {
    Request::Hello(Hello { tenant: tenant.into(), token: token.into(), client_name: "probe".into(), pid: 1 })
}

/// Issue 25, "authentication that reveals nothing": an unknown tenant and a wrong token are
/// refused alike, and a failed re-Hello leaves the connection unauthenticated.
#[test]
fn failed_hello_reveals_nothing_and_deauthenticates() {
    let dir = temp_dir("hostile-auth");
    let config = config(&dir);
    let transports = TRANSPORTS[0];
    let mut server = ServerProcess::start(transports, &["--capacity", "8MiB", "--config", config.to_str().unwrap()]);
    let mut stranger = RawClient::connect(server.addr, &server.transports);
    let wrong_token = refused_with(stranger.call(&hello_as("alice", "b-secret")), "wrong token");
    let unknown_tenant = refused_with(stranger.call(&hello_as("mallory", "b-secret")), "unknown tenant");
    assert_eq!(wrong_token.0, Status::AuthFailed);
    assert_eq!(wrong_token, unknown_tenant, "the two failures must be indistinguishable");

    let mut bob = RawClient::connect(server.addr, &server.transports);
    bob.hello("bob", "b-secret");
    let alloc = Request::Alloc(Alloc { size: 4096, align: 0, flags: 0, name: String::new() });
    assert!(matches!(bob.call(&alloc), Outcome::Reply(Reply::Alloc(_))), "bob allocates once authenticated");
    let (status, _) = refused_with(bob.call(&hello_as("alice", "guess")), "re-Hello with a wrong token");
    assert_eq!(status, Status::AuthFailed);
    let (status, _) = refused_with(bob.call(&alloc), "alloc after a failed re-Hello");
    assert_eq!(status, Status::NotConnected, "a failed re-Hello leaves the connection unauthenticated");
    bob.hello("bob", "b-secret");
    assert!(matches!(bob.call(&alloc), Outcome::Reply(Reply::Alloc(_))), "a good Hello authenticates again");
    assert_alive(&mut server, "after the auth probes", 0, false);
    server.terminate();
}
