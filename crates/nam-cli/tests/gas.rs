//! The global address space against real `nam serve` processes: addresses used by another
//! process, protection-domain isolation, freed allocations, mailboxes (order, back-pressure)
//! and allreduce at the server (every op and type against a local reduction, mismatched
//! ranks, a rank killed mid-collective). Every behaviour runs over UCX TCP and shared memory.

mod common;

use common::{temp_dir, write_config, ServerProcess, TRANSPORTS};
use nam_client::{
    AllocOptions, Client, DataType, Error, GlobalAddress, Mailbox, MailboxSender, ReduceGroup, ReduceOp, Status,
};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn refusal<T: std::fmt::Debug>(r: Result<T, Error>) -> Status {
    match r {
        Err(Error::Refused { status, .. }) => status,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The status and message of a refusal: what a peer can learn from it.
fn refusal_message<T: std::fmt::Debug>(r: Result<T, Error>) -> (Status, String) {
    match r {
        Err(Error::Refused { status, message, .. }) => (status, message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A handle no test server issues: the reference for "does not exist".
const NEVER_ISSUED: u64 = 987_654_321;

/// This test binary run again as a child process for the test `role` (see `child_roles`).
fn child(server: &ServerProcess, role: &str, vars: &[(&str, String)]) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", "child_roles", "--nocapture", "--test-threads=1"])
        .env("NAM_GAS_ROLE", role)
        .env("NAM_GAS_SERVER", server.addr.to_string())
        .env("NAM_GAS_TRANSPORTS", &server.transports)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in vars {
        command.env(k, v);
    }
    command
}

fn child_client() -> Client {
    let mut config = nam_client::ClientConfig::new(vec![std::env::var("NAM_GAS_SERVER").unwrap().parse().unwrap()]);
    config.transports = Some(std::env::var("NAM_GAS_TRANSPORTS").unwrap());
    config.timeout = Duration::from_secs(5);
    Client::connect(config).expect("connect")
}

/// The child side of the cross-process tests; does nothing when run as an ordinary test.
#[test]
fn child_roles() {
    let Ok(role) = std::env::var("NAM_GAS_ROLE") else { return };
    let client = child_client();
    match role.as_str() {
        "use-address" => {
            let address: GlobalAddress = std::env::var("NAM_GAS_ADDR").unwrap().parse().unwrap();
            let mut hello = [0u8; 5];
            client.get_global(address, &mut hello).unwrap();
            assert_eq!(&hello, b"hello");
            client.put_global_sync(address.offset_by(8).unwrap(), b"world").unwrap();
            assert_eq!(client.fetch_add_global(address.offset_by(64).unwrap(), 5).unwrap(), 37);
            let (allocation, offset) = client.resolve(address).unwrap();
            assert_eq!((allocation.size(), offset), (4096, 0));
            println!("child done");
        }
        "attach-and-hang" => {
            let _group = ReduceGroup::attach(&client, "doomed", 3, 2, 1024, 0).unwrap();
            println!("attached");
            std::thread::sleep(Duration::from_secs(60));
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn global_addresses_work_in_another_process() {
    for transports in TRANSPORTS {
        let server = ServerProcess::start(transports, &["--capacity", "8MiB"]);
        let client = server.client();
        let a = client.alloc(4096, &AllocOptions::default()).unwrap();
        client.put_sync(&a, 0, b"hello").unwrap();
        client.put_sync(&a, 64, &37u64.to_le_bytes()).unwrap();
        let address = client.global_address(&a, 0).unwrap();
        assert_eq!((address.handle(), address.offset()), (a.handle(), 0));
        let out = child(&server, "use-address", &[("NAM_GAS_ADDR", address.to_string())]).output().unwrap();
        assert!(out.status.success(), "{transports}: child failed: {}", String::from_utf8_lossy(&out.stdout));
        let mut back = [0u8; 13];
        client.get(&a, 0, &mut back).unwrap();
        assert_eq!(&back, b"hello\0\0\0world", "{transports}");
        assert_eq!(client.fetch(&a, 64).unwrap(), 42, "{transports}");
    }
}

#[test]
fn protection_domains_isolate_tenants_and_freed_allocations_fail() {
    let dir = temp_dir("gas-domains");
    let config = write_config(
        &dir,
        "[[tenant]]\nname = \"climate\"\ntoken = \"c\"\n[[tenant]]\nname = \"genomics\"\ntoken = \"g\"\n",
    );
    for transports in TRANSPORTS {
        let server = ServerProcess::start(transports, &["--capacity", "8MiB", "--config", config.to_str().unwrap()]);
        let as_tenant = |tenant: &str, token: &str| {
            let mut c = server.config();
            c.tenant = tenant.into();
            c.token = token.into();
            Client::connect(c).unwrap()
        };
        let (climate, genomics) = (as_tenant("climate", "c"), as_tenant("genomics", "g"));
        let a = climate.alloc(256, &AllocOptions::default()).unwrap();
        climate.put_sync(&a, 0, b"secret").unwrap();
        let address = climate.global_address(&a, 0).unwrap();
        let theirs = genomics.global_address(&genomics.alloc(64, &AllocOptions::default()).unwrap(), 0).unwrap();
        assert_ne!(address.domain(), theirs.domain(), "{transports}");
        // Another domain's address, and the same allocation forged into the caller's domain.
        let forged = GlobalAddress::new(address.server(), theirs.domain(), address.handle(), 0).unwrap();
        // Both answer exactly as a handle never issued (issue 25: lookups reveal nothing).
        let never = GlobalAddress::new(address.server(), theirs.domain(), NEVER_ISSUED, 0).unwrap();
        let never_refusal = refusal_message(genomics.get_global(never, &mut [0u8; 6]));
        assert_eq!(never_refusal.0, Status::UnknownHandle, "{transports}");
        let as_never =
            |handle: u64| (never_refusal.0, never_refusal.1.replace(&NEVER_ISSUED.to_string(), &handle.to_string()));
        for (what, target) in [("their address", address), ("forged", forged)] {
            let expected = as_never(target.handle());
            assert_eq!(refusal_message(genomics.put_global(target, b"forged")), expected, "{transports} {what}");
            assert_eq!(refusal_message(genomics.get_global(target, &mut [0u8; 6])), expected, "{what}");
            assert_eq!(refusal_message(genomics.fetch_add_global(target, 1)), expected, "{what}");
        }
        let mut back = [0u8; 6];
        climate.get(&a, 0, &mut back).unwrap();
        assert_eq!(&back, b"secret", "{transports}: a refused access touched nothing");
        let other_server = GlobalAddress::new(address.server() ^ 1, address.domain(), address.handle(), 0).unwrap();
        assert!(matches!(climate.get_global(other_server, &mut back), Err(Error::UnknownServer { .. })));
        // Past the end, and a freed allocation.
        let beyond = address.offset_by(256).unwrap();
        assert_eq!(refusal(as_tenant("climate", "c").get_global(beyond, &mut back)), Status::OutOfBounds);
        climate.free(&a).unwrap();
        let late = as_tenant("climate", "c");
        assert_eq!(refusal(late.get_global(address, &mut back)), Status::FreedHandle, "{transports}");
        // Freed by climate: genomics, forging it into its own domain, is told only "unknown".
        let e = refusal_message(as_tenant("genomics", "g").get_global(forged, &mut back));
        assert_eq!(e, as_never(forged.handle()), "{transports}: another tenant's freed handle");
    }
}

#[test]
fn mailbox_keeps_each_senders_order_and_pushes_back_when_full() {
    for transports in TRANSPORTS {
        let server = ServerProcess::start(transports, &["--capacity", "8MiB"]);
        let owner = server.client();
        let mut mailbox = Mailbox::create(&owner, 4, 64, None).unwrap();
        let address = mailbox.address();
        let senders: Vec<Client> = (0..2).map(|_| server.client()).collect();
        let mut ends: Vec<MailboxSender> = senders.iter().map(|c| MailboxSender::open(c, address).unwrap()).collect();
        // Back-pressure: four fit, the fifth is refused and overwrites nothing.
        for i in 0..4u8 {
            ends[i as usize % 2].send(&senders[i as usize % 2], &[i; 64]).unwrap();
        }
        assert!(matches!(ends[0].send(&senders[0], &[9; 64]), Err(Error::MailboxFull { slots: 4 })), "{transports}");
        let first = mailbox.recv(&owner, Duration::from_secs(5)).unwrap();
        assert_eq!(first.data, vec![0; 64]);
        ends[0].send(&senders[0], b"after").unwrap();
        for want in [vec![1u8; 64], vec![2; 64], vec![3; 64], b"after".to_vec()] {
            assert_eq!(mailbox.recv(&owner, Duration::from_secs(5)).unwrap().data, want, "{transports}");
        }
        assert!(mailbox.try_recv(&owner).unwrap().is_none());
        assert!(matches!(ends[0].send(&senders[0], &[0; 65]), Err(Error::InvalidArgument(_))));
        // Many messages from two senders at once, retrying on back-pressure: per-sender order.
        const N: u32 = 300;
        std::thread::scope(|s| {
            for (k, (client, end)) in senders.iter().zip(ends.iter_mut()).enumerate() {
                s.spawn(move || {
                    for i in 0..N {
                        let message = [k as u32, i].map(u32::to_le_bytes).concat();
                        let deadline = Instant::now() + Duration::from_secs(10);
                        loop {
                            match end.send(client, &message) {
                                Ok(()) => break,
                                Err(Error::MailboxFull { .. }) if Instant::now() < deadline => std::thread::yield_now(),
                                Err(e) => panic!("send: {e}"),
                            }
                        }
                    }
                });
            }
            let mut next = [0u32; 2];
            for _ in 0..2 * N {
                let m = mailbox.recv(&owner, Duration::from_secs(10)).unwrap();
                let (k, i) = (
                    u32::from_le_bytes(m.data[0..4].try_into().unwrap()),
                    u32::from_le_bytes(m.data[4..8].try_into().unwrap()),
                );
                assert_eq!(i, next[k as usize], "{transports}: sender {k} out of order");
                next[k as usize] += 1;
            }
        });
        // Its memory lives while a sender holds it; once all let go it cannot be opened.
        for (client, end) in senders.iter().zip(ends) {
            end.close(client).unwrap();
        }
        mailbox.destroy(&owner).unwrap();
        assert_eq!(refusal(MailboxSender::open(&server.client(), address)), Status::FreedHandle);
    }
}

fn bytes_of(dtype: DataType, values: &[f64]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|&v| match dtype {
            DataType::I32 => (v as i32).to_le_bytes().to_vec(),
            DataType::I64 => (v as i64).to_le_bytes().to_vec(),
            DataType::F32 => (v as f32).to_le_bytes().to_vec(),
            DataType::F64 => v.to_le_bytes().to_vec(),
        })
        .collect()
}

/// Every op and type over 3 ranks, 100 elements through 256-byte chunks (several rounds),
/// against `nam_proto::reduce::combine` applied locally in rank order.
#[test]
fn allreduce_matches_a_local_reduction_for_every_op_and_type() {
    const RANKS: usize = 3;
    for transports in TRANSPORTS {
        let server = ServerProcess::start(transports, &["--capacity", "8MiB"]);
        let clients: Vec<Client> = (0..RANKS).map(|_| server.client()).collect();
        let inputs: Vec<Vec<f64>> =
            (0..RANKS).map(|r| (0..100).map(|i| ((i * 37 + r * 101) % 199) as f64 - 99.5).collect()).collect();
        std::thread::scope(|s| {
            for (rank, client) in clients.iter().enumerate() {
                let inputs = &inputs;
                s.spawn(move || {
                    let mut group = ReduceGroup::attach(client, "every-op", RANKS as u32, rank as u32, 256, 0).unwrap();
                    for op in ReduceOp::ALL {
                        for dtype in DataType::ALL {
                            let send = bytes_of(dtype, &inputs[rank]);
                            let mut want = bytes_of(dtype, &inputs[0]);
                            for other in &inputs[1..] {
                                nam_proto::reduce::combine(op, dtype, &mut want, &bytes_of(dtype, other));
                            }
                            let mut got = vec![0u8; send.len()];
                            group.allreduce(client, op, dtype, &send, &mut got).unwrap();
                            assert_eq!(got, want, "{transports}: {op:?} {dtype:?} rank {rank}");
                        }
                    }
                });
            }
        });
    }
}

#[test]
fn allreduce_fails_every_rank_on_mismatch_and_when_a_rank_dies() {
    for transports in TRANSPORTS {
        let server = ServerProcess::start(transports, &["--capacity", "8MiB"]);
        let clients: Vec<Client> = (0..3).map(|_| server.client()).collect();
        // Rank 2 sends one element more than the others, then the same bytes as another type,
        // then another operation: each time all three are refused and nothing is written. The
        // vectors span several 16-byte chunks, so a late disagreement would be too late.
        let statuses: Vec<Vec<Status>> = std::thread::scope(|s| {
            let handles: Vec<_> = clients
                .iter()
                .enumerate()
                .map(|(rank, client)| {
                    s.spawn(move || {
                        let mut group = ReduceGroup::attach(client, "mismatch", 3, rank as u32, 16, 0).unwrap();
                        let odd = rank == 2;
                        let cases = [
                            (if odd { 36 } else { 32 }, DataType::I32, ReduceOp::Sum),
                            (32, if odd { DataType::F32 } else { DataType::I32 }, ReduceOp::Sum),
                            (32, DataType::I64, if odd { ReduceOp::Max } else { ReduceOp::Min }),
                        ];
                        let mut statuses = Vec::new();
                        for (len, dtype, op) in cases {
                            let send = vec![1u8; len];
                            let mut recv = vec![0xEEu8; len];
                            statuses.push(refusal(group.allreduce(client, op, dtype, &send, &mut recv)));
                            assert!(recv.iter().all(|&b| b == 0xEE), "no partial result");
                        }
                        statuses
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(statuses, vec![vec![Status::ReduceMismatch; 3]; 3], "{transports}");
        // Rank 2 is another process, killed after attaching: ranks 0 and 1 fail well within
        // their deadline.
        let mut rank2 = child(&server, "attach-and-hang", &[]).spawn().unwrap();
        let mut child_out = BufReader::new(rank2.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("attached") {
            line.clear();
            assert!(child_out.read_line(&mut line).unwrap() > 0, "rank 2 exited before attaching");
        }
        let started = Instant::now();
        let attached = std::sync::atomic::AtomicUsize::new(0);
        let statuses: Vec<Status> = std::thread::scope(|s| {
            let handles: Vec<_> = clients[..2]
                .iter()
                .enumerate()
                .map(|(rank, client)| {
                    let attached = &attached;
                    s.spawn(move || {
                        let mut group = ReduceGroup::attach(client, "doomed", 3, rank as u32, 1024, 0).unwrap();
                        attached.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                        let mut recv = [0u8; 8];
                        refusal(group.allreduce(client, ReduceOp::Max, DataType::F64, &[0u8; 8], &mut recv))
                    })
                })
                .collect();
            // Kill rank 2 once both others are in the group.
            let both = common::eventually(Duration::from_secs(20), || {
                attached.load(std::sync::atomic::Ordering::Acquire) == 2
            });
            assert!(both, "ranks 0 and 1 never attached over {transports}");
            rank2.kill().unwrap();
            rank2.wait().unwrap();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(statuses, vec![Status::ReduceAborted; 2], "{transports}");
        assert!(started.elapsed() < Duration::from_secs(5), "{transports}: took {:?}", started.elapsed());
    }
}

/// Deposits above the direct path's crossover go by UCX RMA; the round must still see them
/// whole (3 ranks, 64 KiB vectors, crossover 64 bytes, several rounds).
#[test]
fn allreduce_is_exact_when_deposits_take_the_rma_path() {
    let server = ServerProcess::start("sm,self,tcp", &["--capacity", "16MiB"]);
    let clients: Vec<Client> = (0..3)
        .map(|_| {
            let mut config = server.config();
            config.direct_max_bytes = Some(64);
            Client::connect(config).unwrap()
        })
        .collect();
    let count: usize = 16 * 1024;
    std::thread::scope(|s| {
        for (rank, client) in clients.iter().enumerate() {
            s.spawn(move || {
                let mut group = ReduceGroup::attach(client, "rma-deposits", 3, rank as u32, 1 << 16, 0).unwrap();
                for round in 0..4i32 {
                    let send: Vec<u8> =
                        (0..count).flat_map(|i| (i as i32 * (rank as i32 + 1) + round).to_le_bytes()).collect();
                    let mut recv = vec![0u8; send.len()];
                    group.allreduce(client, ReduceOp::Sum, DataType::I32, &send, &mut recv).unwrap();
                    for (i, got) in recv.chunks(4).enumerate() {
                        let want = 6 * i as i32 + 3 * round;
                        assert_eq!(i32::from_le_bytes(got.try_into().unwrap()), want, "round {round} element {i}");
                    }
                }
            });
        }
    });
}
