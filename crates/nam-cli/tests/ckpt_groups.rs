//! Job-end cleanup of checkpoint groups against a real `nam serve`: what a finished group
//! leaves on the server is listed by `nam status` and removed by `nam ckpt drop`, as the
//! group's own tenant only.

mod common;

use common::ServerProcess;
use nam_client::{CkptMember, Client, GroupSpec};
use std::time::Duration;

fn spec(name: &str, ranks: u32, rank: u32) -> GroupSpec {
    let mut spec = GroupSpec::new(name, ranks);
    spec.node = format!("node{rank}");
    spec.timeout = Duration::from_secs(10);
    spec
}

/// Every member fills its buffer and flags it ready; returns the epoch once its parity is complete.
fn checkpoint_all(members: &mut [CkptMember<'_>]) -> u64 {
    for (r, m) in members.iter_mut().enumerate() {
        m.buffer_mut().unwrap().fill(r as u8 + 1);
    }
    let epochs: Vec<u64> = members.iter_mut().map(|m| m.ready().unwrap()).collect();
    for m in members.iter_mut() {
        m.wait(Duration::from_secs(20)).unwrap();
    }
    members[0].wait_complete(epochs[0], Duration::from_secs(20)).unwrap();
    epochs[0]
}

/// What a finished checkpoint group leaves on a server is listed and removable: after its
/// ranks' processes are gone, `nam status` lists the group (name, tenant, bytes, ranks joined,
/// last complete epoch); `nam ckpt drop` as another tenant cannot remove it, as its own
/// tenant it does, and the server's memory is back.
#[test]
fn a_finished_group_is_listed_by_status_and_dropped_by_its_tenant() {
    let dir = common::temp_dir("job-end");
    let config = dir.join("tenants.toml");
    std::fs::write(
        &config,
        "[[tenant]]\nname = \"climate\"\ntoken = \"c\"\n[[tenant]]\nname = \"genomics\"\ntoken = \"g\"\n",
    )
    .unwrap();
    let server = ServerProcess::start("tcp", &["--capacity", "32MiB", "--config", config.to_str().unwrap()]);
    let as_tenant = |tenant: &str, token: &str| {
        let mut c = server.config();
        c.tenant = tenant.into();
        c.token = token.into();
        Client::connect(c).unwrap()
    };
    let clients: Vec<Client> = (0..2).map(|_| as_tenant("climate", "c")).collect();
    {
        let mut members: Vec<CkptMember<'_>> = clients
            .iter()
            .enumerate()
            .map(|(r, c)| c.ckpt_join(&spec("job-end", 2, r as u32), r as u32, 1 << 20).unwrap())
            .collect();
        assert_eq!(checkpoint_all(&mut members), 1);
    }
    drop(clients);
    // `nam status` as the admin (every tenant's groups); other commands as `tenant`.
    let nam = |args: &[&str], tenant: &str, token: &str| {
        let admin = if args[0] == "status" { common::ADMIN_TOKEN } else { "" };
        let out = std::process::Command::new(common::server_bin())
            .args(args)
            .env("NAM_TENANT", tenant)
            .env("NAM_TOKEN", token)
            .env(nam_client::config::ADMIN_TOKEN_VAR, admin)
            .env("NAM_TRANSPORTS", "tcp")
            .output()
            .unwrap();
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    };
    let addr = server.addr.to_string();
    let (ok, status) = nam(&["status", &addr], "", "");
    assert!(ok, "{status}");
    let listed = status.lines().find(|l| l.starts_with("ckpt group   job-end ")).unwrap_or_else(|| panic!("{status}"));
    assert!(listed.contains("tenant climate") && listed.contains("0 of 2 ranks joined"), "{listed}");
    assert!(listed.contains("last complete epoch 1") && !listed.contains(": 0 B"), "{listed}");
    let (ok, json) = nam(&["status", &addr, "--json"], "", "");
    assert!(ok, "{json}");
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["ckpt_groups"]["total"], 1, "{json}");
    let bytes = value["ckpt_groups"]["listed"][0]["bytes"].as_u64().unwrap();
    assert!(bytes >= 2 << 20 && value["used"].as_u64().unwrap() >= bytes, "{json}");

    let (ok, refused) = nam(&["ckpt", "drop", "job-end", "--server", &addr], "genomics", "g");
    assert!(!ok && refused.contains("no checkpoint group \"job-end\" of tenant \"genomics\""), "{refused}");
    let (ok, dropped) = nam(&["ckpt", "drop", "job-end", "--server", &addr], "climate", "c");
    assert!(ok && dropped.contains("dropped checkpoint group job-end of tenant climate"), "{dropped}");
    let (ok, json) = nam(&["status", &addr, "--json"], "", "");
    assert!(ok, "{json}");
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["ckpt_groups"]["total"], 0, "{json}");
    assert_eq!(value["used"], 0, "{json}");
    let _ = std::fs::remove_dir_all(&dir);
}
