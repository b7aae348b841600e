//! Servers against client processes that `nam-bench gas` starts: a holder killed while it
//! moves data loses its allocations after the lease, and 64 concurrent client processes
//! succeed and leave nothing behind (moved here from nam-cli's `faults.rs` with the command).

#[path = "../../nam-cli/tests/common/mod.rs"]
mod common;

use common::{eventually, ServerProcess};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The holder is killed while it moves data, over both transports. (Over TCP this once
/// aborted the server inside UCX's emulated RMA; see docs/architecture.md.)
#[test]
fn a_killed_client_loses_its_allocations_after_the_lease() {
    for (tls, transport) in [("tcp", "tcp"), ("sm,self,tcp", "shm")] {
        let mut server = ServerProcess::start(tls, &["--capacity", "64MiB", "--lease-ms", "500"]);
        let mut holder = Command::new(env!("CARGO_BIN_EXE_nam-bench"))
            .args(["gas", "--server", &server.addr.to_string(), "--transport", transport, "--op", "put"])
            .args(["--size", "1MiB", "--iters", "100000000", "--repeat", "1"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let status = || server.admin_status();
        assert!(eventually(Duration::from_secs(20), || status().allocations == 1), "the holder never allocated");
        assert_eq!(status().clients, 1);
        holder.kill().unwrap();
        holder.wait().unwrap();
        assert!(eventually(Duration::from_secs(10), || status().clients == 0), "the server never noticed");
        assert!(eventually(Duration::from_secs(10), || status().allocations == 0), "not reclaimed after the lease");
        let s = status();
        assert_eq!((s.used, s.leases_reclaimed, s.clients_lingering), (0, 1, 0), "over {tls}");
        assert!(server.child.try_wait().unwrap().is_none(), "the server died with its client over {tls}");
    }
}

#[test]
fn sixty_four_client_processes_succeed_and_leave_nothing_behind() {
    let server = ServerProcess::start("tcp", &["--capacity", "64MiB"]);
    let out = Command::new(env!("CARGO_BIN_EXE_nam-bench"))
        .args(["gas", "--server", &server.addr.to_string(), "--transport", "tcp", "--op", "fadd"])
        .args(["--iters", "100", "--repeat", "1", "--clients", "64"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("64 concurrent client processes: 0 failed, 12800 of 12800"), "{stdout}");
    let s = server.admin_status();
    assert_eq!((s.allocations, s.used, s.clients), (0, 0, 0));
    assert!(s.clients_total >= 66);
}
