//! Bad input and faults against real `nam serve` processes: every case gets a typed error
//! naming its cause, nothing waits forever, stored data is never changed by a failed
//! operation, and the server keeps serving other clients.

mod common;

use common::raw::RawPeer;
use common::{eventually, temp_dir, write_config, ServerProcess, TRANSPORTS};
use nam_client::{AllocOptions, Client, ClientConfig, Error, Status};
use nam_proto::{Alloc, Reply, Request, REPLY_BIT};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn refusal<T: std::fmt::Debug>(result: Result<T, Error>) -> Status {
    match result {
        Err(Error::Refused { status, .. }) => status,
        other => panic!("expected a refusal from the server, got {other:?}"),
    }
}

#[test]
fn bad_arguments_get_typed_errors_and_leave_data_unchanged() {
    for tls in TRANSPORTS {
        let server = ServerProcess::start(tls, &["--capacity", "4MiB"]);
        let client = server.client();
        let a = client.alloc(4096, &AllocOptions::default()).unwrap();
        let original = vec![7u8; 4096];
        client.put_sync(&a, 0, &original).unwrap();

        let oob = [
            client.put(&a, 4000, &[1u8; 200]),
            client.put(&a, 4097, &[1u8; 1]),
            client.put(&a, u64::MAX - 2, &[1u8; 8]),
            client.get(&a, 4090, &mut [0u8; 10]),
        ];
        for result in oob {
            assert!(matches!(result, Err(Error::OutOfBounds { size: 4096, .. })), "{result:?} over {tls}");
        }
        let mut back = vec![0u8; 4096];
        client.get(&a, 0, &mut back).unwrap();
        assert_eq!(back, original, "a refused put changed the target over {tls}");

        assert_eq!(refusal(client.alloc(0, &AllocOptions::default())), Status::InvalidArgument);
        assert_eq!(refusal(client.alloc(1 << 41, &AllocOptions::default())), Status::TooLarge);
        assert_eq!(refusal(client.alloc(8 << 20, &AllocOptions::default())), Status::PoolExhausted);
        let odd_align = AllocOptions { align: 48, ..Default::default() };
        assert_eq!(refusal(client.alloc(64, &odd_align)), Status::InvalidArgument);
        let nameless = AllocOptions { persistent: true, ..Default::default() };
        assert_eq!(refusal(client.alloc(64, &nameless)), Status::InvalidArgument);

        let b = client.alloc(64, &AllocOptions::shared("once")).unwrap();
        assert_eq!(refusal(client.alloc(64, &AllocOptions::shared("once"))), Status::NameExists);
        client.free(&b).unwrap();
        assert!(matches!(client.free(&b), Err(Error::Freed { .. })), "double free");
        assert!(matches!(client.put(&b, 0, b"late"), Err(Error::Freed { .. })), "put after free");
        assert!(matches!(client.fetch_add(&b, 0, 1), Err(Error::Freed { .. })), "atomic after free");
        assert_eq!(refusal(client.open("once")), Status::NameNotFound, "freed names disappear");

        // The pool is whole again after all of it was refused or freed.
        client.free(&a).unwrap();
        let full = client.alloc(4 << 20, &AllocOptions::default()).unwrap();
        client.free(&full).unwrap();
    }
}

#[test]
fn malformed_and_truncated_messages_are_answered_and_the_server_keeps_serving() {
    let server = ServerProcess::start("tcp", &["--capacity", "4MiB"]);
    let bystander = server.client();
    let kept = bystander.alloc(64, &AllocOptions::default()).unwrap();
    bystander.put_sync(&kept, 0, b"still here").unwrap();

    let raw = RawPeer::connect(&server);
    let malformed = |bytes: &[u8], expect_id: u64| {
        let (kind, id, reply) = raw.exchange(bytes);
        assert_eq!(id, expect_id);
        assert_eq!(kind & REPLY_BIT, 0, "kind {kind:#x} is the request kind without the reply bit");
        match reply {
            Reply::Error { status: Status::Malformed, message } => message,
            other => panic!("expected Malformed, got {other:?}"),
        }
    };
    let garbage = malformed(b"this is not a nam message", 0);
    assert!(garbage.contains("magic"), "{garbage}");
    let valid = Request::Alloc(Alloc { size: 64, align: 0, flags: 0, name: "n".into() }).encode(42);
    let truncated = malformed(&valid[..valid.len() - 3], 0);
    assert!(truncated.contains("body"), "{truncated}");
    // A header that agrees with a body too short for its fields.
    let mut short = valid[..30].to_vec();
    short[16..20].copy_from_slice(&6u32.to_le_bytes());
    let fields = malformed(&short, 42);
    assert!(fields.contains("truncated"), "{fields}");
    let unknown_kind = {
        let mut bytes = Request::Status.encode(7);
        bytes[6..8].copy_from_slice(&77u16.to_le_bytes());
        bytes
    };
    assert!(malformed(&unknown_kind, 7).contains("kind 77"));
    // Well-formed, but before Hello.
    match raw.exchange(&valid).2 {
        Reply::Error { status: Status::NotConnected, .. } => {}
        other => panic!("expected NotConnected before Hello, got {other:?}"),
    }
    // Unknown handle, after a proper Hello.
    let hello = Request::Hello(nam_proto::Hello {
        tenant: "default".into(),
        token: String::new(),
        client_name: "raw".into(),
        pid: 1,
    });
    assert!(matches!(raw.exchange(&hello.encode(1)).2, Reply::Hello(_)));
    match raw.exchange(&Request::Free { handle: 987_654 }.encode(2)).2 {
        Reply::Error { status: Status::UnknownHandle, .. } => {}
        other => panic!("expected UnknownHandle, got {other:?}"),
    }

    let mut back = [0u8; 10];
    bystander.get(&kept, 0, &mut back).unwrap();
    assert_eq!(&back, b"still here");
    // The server-wide counters are the admin's to read; a tenant sees its own figures.
    assert_eq!(bystander.status(0).unwrap().request_errors, 0, "a tenant's view has no server-wide counters");
    let status = server.admin_status();
    assert!(status.request_errors >= 6, "refusals are counted: {}", status.request_errors);
}

#[test]
fn connecting_to_no_server_fails_within_the_deadline() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    for tls in TRANSPORTS {
        let mut config = ClientConfig::new(vec![format!("127.0.0.1:{port}").parse().unwrap()]);
        config.transports = Some(tls.into());
        config.connect_timeout = Duration::from_secs(2);
        let started = Instant::now();
        let result = Client::connect(config);
        assert!(matches!(result, Err(Error::Connect { .. }) | Err(Error::Timeout { .. })), "over {tls}");
        assert!(started.elapsed() < Duration::from_secs(4), "took {:?}", started.elapsed());
        let text = result.err().unwrap().to_string();
        assert!(text.contains(&port.to_string()), "the error names the server: {text}");
    }
    assert!(matches!(
        ClientConfig::new(vec![]).servers.is_empty().then(|| Client::connect(ClientConfig::new(vec![]))),
        Some(Err(Error::NoServers))
    ));
}

#[test]
fn killing_the_server_gives_errors_within_the_deadline() {
    for tls in TRANSPORTS {
        let mut server = ServerProcess::start(tls, &["--capacity", "64MiB"]);
        let mut config = server.config();
        config.timeout = Duration::from_secs(2);
        let client = Arc::new(Client::connect(config).unwrap());
        let a = client.alloc(16 << 20, &AllocOptions::default()).unwrap();
        // One thread keeps moving data while the server dies under it.
        let mover = {
            let (client, a) = (client.clone(), a.clone());
            std::thread::spawn(move || {
                let data = vec![1u8; 1 << 20];
                let mut last = Instant::now();
                loop {
                    let result = client.put_sync(&a, 0, &data).and_then(|()| client.fetch_add(&a, 0, 1).map(drop));
                    if let Err(e) = result {
                        return (e, last.elapsed());
                    }
                    last = Instant::now();
                }
            })
        };
        // Kill it once the mover is well under way (its counter has moved a few times).
        let moving = eventually(Duration::from_secs(20), || client.fetch(&a, 0).is_ok_and(|n| n >= 3));
        assert!(moving, "the mover never got going over {tls}");
        server.kill();
        let (error, stalled) = mover.join().unwrap();
        assert!(stalled < Duration::from_secs(4), "the failing operation took {stalled:?} over {tls}");
        assert!(matches!(error, Error::Transport { .. } | Error::Timeout { .. }), "{error:?}");
        for (what, result) in [
            ("get", client.get(&a, 0, &mut [0u8; 8])),
            ("alloc", client.alloc(64, &AllocOptions::default()).map(drop)),
            ("flush", client.flush()),
        ] {
            let started = Instant::now();
            assert!(result.is_err(), "{what} succeeded against a dead server over {tls}");
            assert!(started.elapsed() < Duration::from_secs(3), "{what} took {:?}", started.elapsed());
        }
    }
}

#[test]
fn a_file_backed_pool_keeps_persistent_allocations_across_restarts() {
    let dir = temp_dir("backing");
    let backing = dir.join("pool.bin");
    let backing_arg = backing.to_str().unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let (handle, size) = {
        let server = ServerProcess::start("tcp", &["--capacity", "8MiB", "--backing", backing_arg]);
        let client = server.client();
        let options = AllocOptions { persistent: true, ..AllocOptions::shared("checkpoint") };
        let p = client.alloc(data.len() as u64, &options).unwrap();
        let scratch = client.alloc(4096, &AllocOptions::default()).unwrap();
        client.put_sync(&scratch, 0, &[9u8; 4096]).unwrap();
        client.put_sync(&p, 0, &data).unwrap();
        (p.handle(), p.size())
        // kill -9 when `server` drops: no clean shutdown.
    };
    for restart in 0..2 {
        let mut server = ServerProcess::start("tcp", &["--capacity", "8MiB", "--backing", backing_arg]);
        let client = server.client();
        let p = client.open("checkpoint").unwrap();
        assert_eq!((p.handle(), p.size()), (handle, size), "restart {restart}");
        let mut back = vec![0u8; data.len()];
        client.get(&p, 0, &mut back).unwrap();
        assert!(back == data, "contents lost across restart {restart}");
        let s = client.status(0).unwrap();
        assert_eq!((s.allocations, s.used), (1, size), "only the persistent allocation survives");
        drop(client);
        server.terminate();
    }
    let manifest = nam_server::manifest_path_for(&backing);
    assert!(manifest.exists(), "{} missing", manifest.display());
    // A pool too small for its manifest is refused with a clear error, not truncated.
    let out = Command::new(env!("CARGO_BIN_EXE_nam"))
        .args(["serve", "--listen", "127.0.0.1:0", "--capacity", "1MiB", "--backing", backing_arg])
        .env("UCX_TLS", "tcp")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("capacity"), "{stderr}");
}

/// The backing file and its manifest hold every tenant's data and names: the server's user
/// only may read them. A non-empty backing file whose manifest is gone is refused, naming the
/// file and the flag that starts the pool afresh, and left exactly as it was.
#[test]
fn a_backing_file_is_private_and_never_silently_reset() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = temp_dir("backing-private");
    let backing = dir.join("pool.bin");
    let backing_arg = backing.to_str().unwrap();
    let manifest = nam_server::manifest_path_for(&backing);
    // A file made readable by everyone before the server first used it.
    std::fs::write(&backing, b"").unwrap();
    std::fs::set_permissions(&backing, std::fs::Permissions::from_mode(0o644)).unwrap();
    {
        let mut server = ServerProcess::start("tcp", &["--capacity", "4MiB", "--backing", backing_arg]);
        let client = server.client();
        let options = AllocOptions { persistent: true, ..AllocOptions::shared("kept") };
        let a = client.alloc(4096, &options).unwrap();
        client.put_sync(&a, 0, &[7u8; 4096]).unwrap();
        for file in [&backing, &manifest] {
            let mode = std::fs::metadata(file).unwrap().mode() & 0o777;
            assert_eq!(mode, 0o600, "{} has mode {mode:o}", file.display());
        }
        drop(client);
        server.terminate();
    }
    std::fs::remove_file(&manifest).unwrap();
    let before = std::fs::read(&backing).unwrap();
    let serve = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_nam"))
            .args(["serve", "--listen", "127.0.0.1:0", "--capacity", "4MiB", "--backing", backing_arg])
            .args(extra)
            .env("UCX_TLS", "tcp")
            .stdout(Stdio::null())
            .output()
            .unwrap()
    };
    let out = serve(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a pool without its manifest started: {stderr}");
    assert!(stderr.contains(backing_arg) && stderr.contains("--reinit-pool"), "{stderr}");
    assert!(std::fs::read(&backing).unwrap() == before, "the refused start changed the backing file");
    assert!(!manifest.exists(), "the refused start wrote a manifest");
    // Asked for deliberately, the pool starts empty.
    let server = ServerProcess::start("tcp", &["--capacity", "4MiB", "--backing", backing_arg, "--reinit-pool"]);
    let client = server.client();
    assert!(client.open("kept").is_err(), "the discarded allocation is still there");
    assert_eq!(client.status(0).unwrap().allocations, 0);
    assert!(manifest.exists(), "a reinitialized pool has a manifest at once");
    drop(client);
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tenants_are_isolated_and_held_to_their_quotas() {
    let dir = temp_dir("tenants");
    let config = write_config(
        &dir,
        r#"
        lease_ms = 1000
        [[tenant]]
        name = "climate"
        token = "c-secret"
        quota = "1MiB"
        [[tenant]]
        name = "genomics"
        token = "g-secret"
        "#,
    );
    let server = ServerProcess::start("tcp", &["--capacity", "8MiB", "--config", config.to_str().unwrap()]);
    let as_tenant = |tenant: &str, token: &str| {
        let mut c = server.config();
        c.tenant = tenant.into();
        c.token = token.into();
        Client::connect(c)
    };
    for (tenant, token) in [("climate", "wrong"), ("nobody", ""), ("default", "")] {
        let result = as_tenant(tenant, token);
        assert!(
            matches!(result, Err(Error::Refused { status: Status::AuthFailed, .. })),
            "{tenant}: {:?}",
            result.err()
        );
    }
    let climate = as_tenant("climate", "c-secret").unwrap();
    let genomics = as_tenant("genomics", "g-secret").unwrap();
    let x = climate.alloc(512 << 10, &AllocOptions::shared("x")).unwrap();
    assert_eq!(refusal(genomics.open("x")), Status::NameNotFound, "names are per tenant");
    let g = genomics.alloc(64, &AllocOptions::shared("x")).unwrap();
    assert_ne!(g.handle(), x.handle());
    let quota = climate.alloc(600 << 10, &AllocOptions::default());
    let message = quota.as_ref().err().map(ToString::to_string).unwrap_or_default();
    assert_eq!(refusal(quota), Status::QuotaExceeded);
    assert!(message.contains("climate") && message.contains("quota"), "{message}");
    genomics.alloc(2 << 20, &AllocOptions::default()).unwrap();
    let usage = climate.status(0).unwrap().tenants;
    let climate_usage = usage.iter().find(|t| t.name == "climate").unwrap();
    assert_eq!((climate_usage.used, climate_usage.quota, climate_usage.allocations), (512 << 10, 1 << 20, 1));
}
