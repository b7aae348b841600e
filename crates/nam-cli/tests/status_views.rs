//! What `Status` tells whom (issue 25, "authentication that reveals nothing"), over a real
//! server with two tenants: a stranger learns only that the server is alive; a tenant's
//! client its own tenant's figures; the administrator (the server's admin token) everything.
//! And `nam status`, which takes its credentials from the environment like every client.

mod common;

use common::{temp_dir, write_config, ServerProcess};
use nam_client::{
    server_status, server_status_as, AllocOptions, Client, Error, Status, StatusCredentials, StatusReply,
};
use nam_proto::{Alloc, Hello, Reply, Request, ADMIN_TENANT};
use std::process::Command;
use std::time::Duration;

const ADMIN: &str = "the-admin-token-from-the-config";
const TIMEOUT: Duration = Duration::from_secs(5);

fn tenant(name: &str, token: &str) -> StatusCredentials {
    StatusCredentials::Tenant { tenant: name.into(), token: token.into() }
}

fn refusal(result: Result<StatusReply, Error>) -> (Status, String) {
    let e = result.expect_err("expected a refusal");
    (e.server_status().unwrap_or_else(|| panic!("not a refusal: {e}")), e.to_string())
}

/// `nam status` with only the `NAM_*` variables given.
fn nam_status(server: &ServerProcess, env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nam"));
    cmd.args(["status", &server.addr.to_string(), "--json"]).env("UCX_TLS", "tcp");
    for var in ["NAM_TENANT", "NAM_TOKEN", nam_client::config::ADMIN_TOKEN_VAR] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "nam status {env:?}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn status_tells_a_stranger_nothing_a_tenant_its_own_figures_and_the_admin_everything() {
    let dir = temp_dir("status-views");
    let config = write_config(
        &dir,
        &format!(
            r#"
            name = "views"
            admin_token = "{ADMIN}"
            [[tenant]]
            name = "alice"
            token = "a-secret"
            quota = "2MiB"
            [[tenant]]
            name = "bob"
            token = "b-secret"
            "#
        ),
    );
    let server = ServerProcess::start("tcp", &["--capacity", "8MiB", "--config", config.to_str().unwrap()]);
    let connect = |name: &str, token: &str| {
        let mut c = server.config();
        c.tenant = name.into();
        c.token = token.into();
        Client::connect(c).unwrap()
    };
    let alice = connect("alice", "a-secret");
    let bob = connect("bob", "b-secret");
    let _a = alice.alloc(4096, &AllocOptions::shared("alice-data")).unwrap();
    let _b1 = bob.alloc(64 << 10, &AllocOptions::default()).unwrap();
    let _b2 = bob.alloc(128 << 10, &AllocOptions::default()).unwrap();

    // A stranger: alive (a reply came) and nothing else, not even the server's name.
    let stranger = server_status(server.addr, TIMEOUT).unwrap();
    assert_eq!(stranger, StatusReply::default(), "a stranger learns figures");

    // A tenant: its own usage, quota, allocations and clients (its status query included),
    // no other tenant's name and no server-wide counter.
    let seen = server_status_as(server.addr, &tenant("alice", "a-secret"), TIMEOUT).unwrap();
    assert_eq!((seen.server_name.as_str(), seen.capacity), ("views", 8 << 20));
    assert_eq!((seen.used, seen.allocations, seen.clients), (4096, 1, 2));
    assert_eq!(seen.tenants.len(), 1);
    assert_eq!((seen.tenants[0].name.as_str(), seen.tenants[0].quota), ("alice", 2 << 20));
    assert_eq!(
        (seen.clients_total, seen.requests, seen.request_errors, seen.bytes_in, seen.bytes_out),
        (0, 0, 0, 0, 0),
        "server-wide counters"
    );
    let seen = bob.status(0).unwrap();
    assert_eq!((seen.used, seen.allocations, seen.clients), (192 << 10, 2, 1));
    assert!(seen.tenants.iter().all(|t| t.name == "bob"), "{:?}", seen.tenants);

    // The administrator: every tenant and counter; its own connection is no tenant's client.
    let admin = server_status_as(server.addr, &StatusCredentials::Admin { token: ADMIN.into() }, TIMEOUT).unwrap();
    assert_eq!((admin.used, admin.allocations, admin.clients), (4096 + (192 << 10), 3, 2));
    let mut names: Vec<&str> = admin.tenants.iter().map(|t| t.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["alice", "bob"]);
    assert!(admin.requests > 0 && admin.clients_total >= 4, "{admin:?}");

    // Wrong credentials fail alike, whoever they claim to be; the config's admin token wins
    // over the one the environment gave the server.
    let (status, message) = refusal(server_status_as(server.addr, &tenant("alice", "guess"), TIMEOUT));
    assert_eq!(status, Status::AuthFailed);
    let wrong_admin = StatusCredentials::Admin { token: common::ADMIN_TOKEN.into() };
    assert_eq!(refusal(server_status_as(server.addr, &wrong_admin, TIMEOUT)), (status, message.clone()));
    assert_eq!(refusal(server_status_as(server.addr, &tenant("nobody", "a-secret"), TIMEOUT)), (status, message));

    // An admin connection reads status and does nothing else.
    let raw = common::raw::RawPeer::connect(&server);
    let hello = Hello { tenant: ADMIN_TENANT.into(), token: ADMIN.into(), client_name: "admin".into(), pid: 1 };
    assert!(matches!(raw.exchange(&Request::Hello(hello).encode(1)).2, Reply::Hello(_)));
    let alloc = Request::Alloc(Alloc { size: 64, align: 0, flags: 0, name: String::new() });
    match raw.exchange(&alloc.encode(2)).2 {
        Reply::Error { status: Status::NotConnected, message } => assert!(message.contains("admin"), "{message}"),
        other => panic!("the admin connection allocated: {other:?}"),
    }
    match raw.exchange(&Request::Status.encode(3)).2 {
        Reply::Status(s) => assert_eq!(s.tenants.len(), 2),
        other => panic!("{other:?}"),
    }

    // `nam status`: no credentials (this server has no open default tenant): alive only.
    let out = nam_status(&server, &[]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((json["alive"].as_bool(), json["view"].as_str()), (Some(true), Some("stranger")), "{out}");
    assert!(!out.contains("alice") && !out.contains("views"), "{out}");
    // As alice: her figures only.
    let out = nam_status(&server, &[("NAM_TENANT", "alice"), ("NAM_TOKEN", "a-secret")]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((json["view"].as_str(), json["used"].as_u64()), (Some("tenant alice"), Some(4096)), "{out}");
    assert!(!out.contains("bob"), "{out}");
    // As the admin: everything.
    let out = nam_status(&server, &[(nam_client::config::ADMIN_TOKEN_VAR, ADMIN)]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((json["view"].as_str(), json["allocations"].as_u64()), (Some("admin"), Some(3)), "{out}");
    assert_eq!(json["tenants"].as_array().map(Vec::len), Some(2), "{out}");
    drop((alice, bob));
    std::fs::remove_dir_all(&dir).unwrap();
}
