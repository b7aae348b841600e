//! Where a real `nam serve` accepts TCP connections. UCX opens a data port of its own on each
//! network device it uses, and UCX's TCP receiver trusts those ports' peers
//! (`docs/security.md`, "UCX's TCP transport"), so a server told to listen on one address
//! must not accept connections on any other: a server on `127.0.0.1` is unreachable from
//! the network, and still serves its clients over TCP and shared memory. A client of servers
//! on `127.0.0.1` (this test's process) likewise opens its data ports on loopback only.

mod common;

use common::ServerProcess;
use nam_client::AllocOptions;
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The addresses of the TCP sockets process `pid` listens on (`/proc/PID/net/tcp{,6}`,
/// matched to the process's own descriptors by inode).
fn listening_addresses(pid: u32) -> Vec<IpAddr> {
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read the server's descriptors")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|target| {
            let t = target.to_string_lossy().into_owned();
            t.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_string)
        })
        .collect();
    let mut addresses = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl, local_address, rem_address, st, ..., inode (the tenth field).
            if fields.len() < 10 || fields[3] != "0A" || !inodes.contains(fields[9]) {
                continue;
            }
            let ip_hex = fields[1].split(':').next().unwrap();
            addresses.push(parse_proc_ip(ip_hex));
        }
    }
    addresses
}

/// An address as `/proc/net/tcp{,6}` prints it: 32-bit words in host (little-endian) order.
fn parse_proc_ip(hex: &str) -> IpAddr {
    let words: Vec<u32> =
        (0..hex.len() / 8).map(|i| u32::from_str_radix(&hex[i * 8..i * 8 + 8], 16).expect("hex address")).collect();
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    match bytes.len() {
        4 => IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])),
        16 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).unwrap())),
        n => panic!("an address of {n} bytes in /proc/net/tcp"),
    }
}

#[test]
fn a_server_and_a_client_on_loopback_listen_on_loopback_only_and_work_over_tcp_and_shared_memory() {
    for transports in ["tcp", "sm,self,tcp"] {
        let server = ServerProcess::start(transports, &["--capacity", "64MiB"]);
        let addresses = listening_addresses(server.child.id());
        assert!(
            addresses.len() >= 2,
            "over {transports}: expected the listener and a UCX data port, found {addresses:?}"
        );
        assert!(
            addresses.iter().all(|a| a.is_loopback()),
            "over {transports}: a server listening on 127.0.0.1 accepts connections on {addresses:?}"
        );
        let client = server.client();
        let own = listening_addresses(std::process::id());
        assert!(
            !own.is_empty() && own.iter().all(|a| a.is_loopback()),
            "over {transports}: a client of a server on 127.0.0.1 accepts connections on {own:?}"
        );
        let a = client.alloc(1 << 16, &AllocOptions::default()).expect("alloc");
        let data: Vec<u8> = (0..1 << 16).map(|i| (i * 7) as u8).collect();
        client.put(&a, 0, &data).expect("put");
        let mut back = vec![0u8; data.len()];
        client.get(&a, 0, &mut back).expect("get");
        assert_eq!(back, data, "over {transports}: the data read back");
    }
}
