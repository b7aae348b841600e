//! Bounded resources and honest liveness against real `nam serve` processes: a client that
//! never takes its replies, connections that fail or never complete, a restart after kill -9,
//! a reader over shared memory whose server dies, and a transfer to a stopped server. Each
//! test asserts the behaviour it names with generous bounds; how fast things happen is the
//! benchmarks' business.

mod common;

use common::probe::{self, sockets};
use common::raw::RawClient;
use common::{eventually, temp_dir, write_config, ServerProcess};
use nam_client::{AllocOptions, Client, ClientConfig, Error, Path};
use nam_proto::{Alloc, Hello, Reply, Request, AM_ID_REQUEST};
use nam_ucx::Posted;
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The server's anonymous memory (it is running).
fn rss_anon(pid: u32) -> u64 {
    probe::rss_anon(pid).expect("RssAnon of the running server")
}

/// A client of the default tenant that puts, gets and checks its data until `stop`,
/// counting its rounds; panics (failing the test at join) on any error.
fn well_behaved(server: &ServerProcess, stop: Arc<AtomicBool>, rounds: Arc<AtomicU64>) -> std::thread::JoinHandle<()> {
    let config = server.config();
    std::thread::spawn(move || {
        let client = Client::connect(config).expect("the well-behaved client connects");
        let a = client.alloc(64 << 10, &AllocOptions::default()).expect("it allocates");
        let mut round = 0u64;
        while !stop.load(Ordering::Relaxed) {
            round += 1;
            let data: Vec<u8> = (0..64u64 << 10).map(|i| (i ^ round) as u8).collect();
            client.put(&a, 0, &data).expect("it puts");
            let mut back = vec![0u8; data.len()];
            client.get(&a, 0, &mut back).expect("it gets");
            assert!(back == data, "its data changed (round {round})");
            rounds.fetch_add(1, Ordering::Relaxed);
        }
    })
}

#[test]
fn a_client_that_never_takes_its_replies_cannot_grow_the_server() {
    const BOUND: u64 = 32 << 20;
    const SLACK: u64 = 48 << 20;
    let dir = temp_dir("flood");
    let config = write_config(
        &dir,
        r#"
        [limits]
        client_reply_bytes = "4MiB"
        reply_bytes = "32MiB"
        reply_timeout_ms = 2000
        "#,
    );
    let server = ServerProcess::start("tcp", &["--capacity", "64MiB", "--config", config.to_str().unwrap()]);
    let pid = server.child.id();
    let (stop, rounds) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let good = well_behaved(&server, stop.clone(), rounds.clone());
    assert!(eventually(Duration::from_secs(20), || rounds.load(Ordering::Relaxed) > 0), "the good client never ran");
    let before = rss_anon(pid);

    // The flooder: authenticates, allocates 64 KiB, then asks for it 20,000 times without
    // ever progressing its worker again, so it never takes a reply.
    let flooder = RawClient::connect(server.addr, "tcp").expect("the flooder connects");
    let hello = Hello { tenant: "default".into(), token: String::new(), client_name: "flood".into(), pid: 1 };
    let reply = flooder.call(1, &Request::Hello(hello), Duration::from_secs(5));
    assert!(matches!(reply, Some(Reply::Hello(_))), "{reply:?}");
    let alloc = Request::Alloc(Alloc { size: 64 << 10, align: 64, flags: 0, name: String::new() });
    let Some(Reply::Alloc(grant)) = flooder.call(2, &alloc, Duration::from_secs(5)) else {
        panic!("the flooder's alloc was refused")
    };
    let requests: Vec<Vec<u8>> = (0..20_000u64)
        .map(|i| Request::Get { handle: grant.handle, offset: 0, len: 64 << 10 }.encode(100 + i))
        .collect();
    let mut high = before;
    let mut posted = Vec::new();
    for (i, bytes) in requests.iter().enumerate() {
        // SAFETY: `requests` outlives `posted` (dropped first, below) and the endpoint.
        match unsafe { flooder.endpoint.am_send_nbx(AM_ID_REQUEST, bytes.as_ptr(), bytes.len()) } {
            Ok(Posted::InFlight(request)) => posted.push(request),
            Ok(Posted::Done) => {}
            Err(_) => break,
        }
        if i % 256 == 0 {
            high = high.max(rss_anon(pid));
        }
    }
    let flood_start = rounds.load(Ordering::Relaxed);
    let watch_until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < watch_until {
        high = high.max(rss_anon(pid));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        high < before + BOUND + SLACK,
        "the server's anonymous memory went from {} MiB to {} MiB with a {} MiB bound",
        before >> 20,
        high >> 20,
        BOUND >> 20
    );
    assert!(rounds.load(Ordering::Relaxed) > flood_start, "the well-behaved client was not served during the flood");

    let status = server.admin_status();
    assert_eq!(status.resources.client_reply_bytes_max, 4 << 20, "{:?}", status.resources);
    assert_eq!(status.resources.reply_bytes_max, BOUND, "{:?}", status.resources);
    assert!(status.resources.clients_cut_off >= 1, "the flooder was never disconnected: {:?}", status.resources);
    let shown = std::process::Command::new(env!("CARGO_BIN_EXE_nam"))
        .args(["status", &server.addr.to_string()])
        .env("UCX_TLS", "tcp")
        .env(nam_client::config::ADMIN_TOKEN_VAR, common::ADMIN_TOKEN)
        .output()
        .expect("nam status");
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("32.0 MiB bound") && shown.contains("4.0 MiB per client"), "{shown}");

    drop(posted);
    drop(flooder);
    drop(requests);
    let settled = eventually(Duration::from_secs(15), || rss_anon(pid) < before + SLACK);
    assert!(settled, "the server kept {} MiB after the flooder left (had {} MiB)", rss_anon(pid) >> 20, before >> 20);
    stop.store(true, Ordering::Relaxed);
    good.join().expect("the well-behaved client failed");
}

#[test]
fn connections_that_fail_are_closed() {
    let server = ServerProcess::start("tcp", &["--capacity", "16MiB"]);
    let pid = server.child.id();
    let before = sockets(pid);
    for i in 0..200u32 {
        let mut s = TcpStream::connect(server.addr).expect("TCP connect");
        let garbage: Vec<u8> = (0..4096u32).map(|j| (j.wrapping_mul(2_654_435_761) ^ i) as u8).collect();
        let _ = s.write_all(&garbage);
    }
    let closed = eventually(Duration::from_secs(20), || sockets(pid) <= before + 2);
    assert!(closed, "the server holds {} sockets, {before} before 200 failed connections", sockets(pid));
    let client = server.client();
    let a = client.alloc(4096, &AllocOptions::default()).unwrap();
    client.put(&a, 0, &[5u8; 4096]).unwrap();
    let mut back = [0u8; 4096];
    client.get(&a, 0, &mut back).unwrap();
    assert_eq!(back, [5u8; 4096]);
}

#[test]
fn half_open_connections_do_not_lock_clients_out() {
    let dir = temp_dir("half-open");
    let config = write_config(&dir, "[limits]\nhandshake_timeout_ms = 2000\n");
    let server = ServerProcess::start("tcp", &["--capacity", "16MiB", "--config", config.to_str().unwrap()]);
    let held: Vec<TcpStream> = (0..1100).map(|_| TcpStream::connect(server.addr).expect("TCP connect")).collect();
    // The server closes the excess within its scan interval; give it a moment.
    std::thread::sleep(Duration::from_secs(1));
    let client = Client::connect(server.config()).expect("a legitimate client connects beside 1100 half-open ones");
    let a = client.alloc(4096, &AllocOptions::default()).unwrap();
    client.put(&a, 0, &[9u8; 64]).unwrap();
    let status = server.admin_status();
    assert!(status.resources.sockets_reaped > 0, "{:?}", status.resources);
    drop(held);
}

#[test]
fn a_connection_that_never_authenticates_is_closed_at_the_handshake_deadline() {
    let dir = temp_dir("handshake");
    let config = write_config(&dir, "[limits]\nhandshake_timeout_ms = 1000\n");
    let server = ServerProcess::start("tcp", &["--capacity", "16MiB", "--config", config.to_str().unwrap()]);
    let anonymous = RawClient::connect(server.addr, "tcp").expect("connect");
    // Anonymous peers may ask for the status; the connection is up.
    assert!(matches!(anonymous.call(1, &Request::Status, Duration::from_secs(5)), Some(Reply::Status(_))));
    let closed = anonymous.wait_closed(Duration::from_secs(15));
    assert!(closed.is_some(), "an anonymous connection stayed open 15 s with a 1 s handshake deadline");
    // An authenticated client is not subject to it.
    let client = server.client();
    let a = client.alloc(64, &AllocOptions::default()).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    client.put(&a, 0, &[1u8; 64]).expect("an authenticated client outlives the handshake deadline");
}

#[test]
fn a_server_restarted_after_kill_9_binds_its_port_at_once() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let mut server = ServerProcess::start_on(&listen, "tcp", &["--capacity", "16MiB"]);
    // Connected clients at the time of the kill leave the dead server's side of their
    // connections in TIME-WAIT on the port.
    let clients: Vec<Client> = (0..3).map(|_| server.client()).collect();
    for c in &clients {
        let a = c.alloc(4096, &AllocOptions::default()).unwrap();
        c.put(&a, 0, &[3u8; 4096]).unwrap();
    }
    server.kill();
    drop(clients);
    let restarted = ServerProcess::start_on(&listen, "tcp", &["--capacity", "16MiB"]);
    assert_eq!(restarted.addr.port(), port);
    let client = restarted.client();
    client.alloc(64, &AllocOptions::default()).expect("the restarted server serves");
}

#[test]
fn a_reader_over_shared_memory_learns_that_its_server_died() {
    let mut server = ServerProcess::start("sm,self,tcp", &["--capacity", "16MiB"]);
    let mut config = server.config();
    config.timeout = Duration::from_secs(2);
    let client = Arc::new(Client::connect(config).unwrap());
    let a = client.alloc(4096, &AllocOptions::default()).unwrap();
    client.put(&a, 0, &[7u8; 64]).unwrap();
    assert_eq!(client.path_table()[0].small, Path::Direct, "the test needs the direct (load/store) path");
    // A reader that polls a word a hundred times a second, only loading from the mapping.
    let reader = {
        let (client, a) = (client.clone(), a.clone());
        std::thread::spawn(move || {
            let mut word = [0u8; 8];
            loop {
                if let Err(e) = client.get(&a, 0, &mut word) {
                    return (e, Instant::now());
                }
                assert_eq!(word, [7u8; 8], "the reader saw other data");
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let killed = Instant::now();
    server.kill();
    let (error, failed) = reader.join().unwrap();
    let noticed = failed.duration_since(killed);
    assert!(matches!(error, Error::Transport { .. }), "{error:?}");
    assert!(noticed < Duration::from_secs(4), "the reader learned of the dead server after {noticed:?} (deadline 2 s)");
}

#[test]
fn a_transfer_to_a_stopped_server_fails_within_its_deadline() {
    let server = ServerProcess::start("tcp", &["--capacity", "64MiB"]);
    let mut config = server.config();
    config.timeout = Duration::from_secs(1);
    let data = vec![0x5au8; 4 << 20];
    let (putter, getter) = (Client::connect(config.clone()).unwrap(), Client::connect(config).unwrap());
    let a = putter.alloc(4 << 20, &AllocOptions::default()).unwrap();
    let b = getter.alloc(4 << 20, &AllocOptions::default()).unwrap();
    putter.put_sync(&a, 0, &data).expect("a put to a running server");
    let pid = server.child.id() as i32;
    // SAFETY: signals to our own child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let started = Instant::now();
    let put = putter.put_sync(&a, 0, &data);
    let put_took = started.elapsed();
    let started = Instant::now();
    let mut back = vec![0u8; 4 << 20];
    let get = getter.get(&b, 0, &mut back);
    let get_took = started.elapsed();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert!(put.is_err(), "a 4 MiB put_sync to a stopped server succeeded");
    assert!(get.is_err(), "a 4 MiB get from a stopped server succeeded");
    assert!(put_took < Duration::from_secs(3), "put_sync with a 1 s deadline took {put_took:?}: {put:?}");
    assert!(get_took < Duration::from_secs(3), "get with a 1 s deadline took {get_took:?}: {get:?}");
}

/// A call made of steps keeps one deadline: a flush that must collect the replies of two
/// stopped servers fails within its timeout, not one timeout per server (each server's
/// wait used to get the whole timeout, so two stopped servers took twice as long).
#[test]
fn a_flush_over_two_stopped_servers_fails_within_one_deadline() {
    let servers =
        [ServerProcess::start("tcp", &["--capacity", "16MiB"]), ServerProcess::start("tcp", &["--capacity", "16MiB"])];
    let mut config = ClientConfig::new(servers.iter().map(|s| s.addr).collect());
    config.transports = Some("tcp".into());
    let timeout = Duration::from_secs(2);
    config.timeout = timeout;
    let client = Client::connect(config).unwrap();
    let on = |server| client.alloc(4096, &AllocOptions { server: Some(server), ..Default::default() }).unwrap();
    let allocations = [on(0), on(1)];
    for a in &allocations {
        client.put_sync(a, 0, b"before").expect("a put to a running server");
    }
    let pids = servers.iter().map(|s| s.child.id() as i32).collect::<Vec<_>>();
    for &pid in &pids {
        // SAFETY: signals to our own children.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
    }
    // Over TCP a put returns once it is sent; its reply is collected by the flush.
    for a in &allocations {
        client.put(a, 0, b"after").expect("a put is sent without waiting for its reply");
    }
    let started = Instant::now();
    let flushed = client.flush();
    let took = started.elapsed();
    for &pid in &pids {
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };
    }
    assert!(flushed.is_err(), "a flush over two stopped servers succeeded");
    // The deadline, plus the abort of the late endpoints and a loaded machine's share; two
    // deadlines would be 4 s.
    assert!(
        took < timeout + Duration::from_millis(1500),
        "flush with a {timeout:?} deadline took {took:?}: {flushed:?}"
    );
}
