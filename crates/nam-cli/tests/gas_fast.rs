//! The same-host fast paths of the global address space against a real `nam serve`: mapped
//! mailboxes (one compare-and-swap and plain stores per message) shared with senders the
//! server delivers for (TCP), and allreduce rounds reduced by their last rank in the mapped
//! pool mixed with rounds the server reduces. Both paths of each run in one test, on one
//! mailbox or group, so they are checked to follow one protocol.

mod common;

use common::{temp_dir, write_config, ServerProcess};
use nam_client::{Client, DataType, Error, Mailbox, MailboxSender, ReduceGroup, ReduceOp, Status};
use std::time::{Duration, Instant};

/// A client of `server` that reaches it over UCX TCP (the server delivers its messages).
fn tcp_client(server: &ServerProcess) -> Client {
    let mut config = server.config();
    config.transports = Some("tcp".into());
    Client::connect(config).unwrap()
}

fn send_retrying(end: &mut MailboxSender, client: &Client, message: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match end.send(client, message) {
            Ok(()) => return,
            Err(Error::MailboxFull { .. }) if Instant::now() < deadline => std::thread::yield_now(),
            Err(e) => panic!("send: {e}"),
        }
    }
}

#[test]
fn mapped_and_tcp_senders_share_a_mailbox_in_order_with_back_pressure() {
    let server = ServerProcess::start("sm,self,tcp", &["--capacity", "8MiB"]);
    let owner = server.client();
    let mut mailbox = Mailbox::create(&owner, 4, 16, None).unwrap();
    assert!(mailbox.is_mapped(), "the owner on shared memory polls the mapping");
    let (near, far) = (server.client(), tcp_client(&server));
    let mut ends =
        [MailboxSender::open(&near, mailbox.address()).unwrap(), MailboxSender::open(&far, mailbox.address()).unwrap()];
    assert!(ends[0].is_mapped() && !ends[1].is_mapped());
    let clients = [&near, &far];
    // Back-pressure on the fast path: a full mailbox refuses and overwrites nothing.
    for i in 0..4u8 {
        ends[i as usize % 2].send(clients[i as usize % 2], &[i; 16]).unwrap();
    }
    for k in 0..2 {
        assert!(matches!(ends[k].send(clients[k], &[9; 16]), Err(Error::MailboxFull { slots: 4 })), "sender {k}");
    }
    assert!(matches!(ends[0].send(&near, &[0; 17]), Err(Error::InvalidArgument(_))));
    for i in 0..4u8 {
        let m = mailbox.recv(&owner, Duration::from_secs(5)).unwrap();
        assert_eq!((m.data, m.sender), (vec![i; 16], std::process::id()), "message {i}");
    }
    assert!(mailbox.try_recv(&owner).unwrap().is_none());
    // Both kinds at once, retrying on back-pressure: each sender's order holds.
    const N: u32 = 400;
    std::thread::scope(|s| {
        for (k, end) in ends.iter_mut().enumerate() {
            let client = clients[k];
            s.spawn(move || {
                for i in 0..N {
                    send_retrying(end, client, &[k as u32, i].map(u32::to_le_bytes).concat());
                }
            });
        }
        let mut next = [0u32; 2];
        let mut buffer = [0u8; 16];
        for _ in 0..2 * N {
            let deadline = Instant::now() + Duration::from_secs(10);
            let len = loop {
                if let Some((_, len)) = mailbox.try_recv_into(&owner, &mut buffer).unwrap() {
                    break len;
                }
                assert!(Instant::now() < deadline, "no message within 10 s");
                std::thread::yield_now();
            };
            assert_eq!(len, 8);
            let (k, i) = (
                u32::from_le_bytes(buffer[0..4].try_into().unwrap()),
                u32::from_le_bytes(buffer[4..8].try_into().unwrap()),
            );
            assert_eq!(i, next[k as usize], "sender {k} out of order");
            next[k as usize] += 1;
        }
        assert_eq!(next, [N, N]);
    });
}

#[test]
fn a_mapped_mailbox_is_opened_only_within_its_domain() {
    let dir = temp_dir("gas-fast-domains");
    let config = write_config(
        &dir,
        "[[tenant]]\nname = \"climate\"\ntoken = \"c\"\n[[tenant]]\nname = \"genomics\"\ntoken = \"g\"\n",
    );
    let server = ServerProcess::start("sm,self,tcp", &["--capacity", "8MiB", "--config", config.to_str().unwrap()]);
    let as_tenant = |tenant: &str, token: &str| {
        let mut c = server.config();
        c.tenant = tenant.into();
        c.token = token.into();
        Client::connect(c).unwrap()
    };
    let (climate, genomics) = (as_tenant("climate", "c"), as_tenant("genomics", "g"));
    let mut mailbox = Mailbox::create(&climate, 8, 64, None).unwrap();
    assert!(mailbox.is_mapped());
    // The check happens when the sender opens the mailbox, before any mapping is handed out.
    let refused = MailboxSender::open(&genomics, mailbox.address());
    // Another tenant's mailbox answers as one that does not exist (issue 25).
    assert!(matches!(refused, Err(Error::Refused { status: Status::UnknownHandle, .. })), "{refused:?}");
    let colleague = as_tenant("climate", "c");
    let mut end = MailboxSender::open(&colleague, mailbox.address()).unwrap();
    assert!(end.is_mapped());
    end.send(&colleague, b"same domain").unwrap();
    assert_eq!(mailbox.recv(&climate, Duration::from_secs(5)).unwrap().data, b"same domain");
    assert!(mailbox.try_recv(&climate).unwrap().is_none(), "the refused sender wrote nothing");
}

fn i32s(values: impl Iterator<Item = i32>) -> Vec<u8> {
    values.flat_map(i32::to_le_bytes).collect()
}

/// Three ranks (two on shared memory, one over TCP) alternate small rounds, which the last
/// rank reduces itself when it is a mapped one, with 128 KiB rounds the server reduces; then
/// a mismatch in a small round fails every rank with nothing written.
#[test]
fn rounds_reduced_by_a_rank_and_by_the_server_agree_and_mismatches_fail_everywhere() {
    let server = ServerProcess::start("sm,self,tcp", &["--capacity", "16MiB"]);
    let clients = [server.client(), server.client(), tcp_client(&server)];
    std::thread::scope(|s| {
        for (rank, client) in clients.iter().enumerate() {
            s.spawn(move || {
                let mut group = ReduceGroup::attach(client, "mixed", 3, rank as u32, 128 << 10, 0).unwrap();
                for round in 0..40i32 {
                    let count = if round % 4 == 3 { 32 << 10 } else { 1 + round as usize * 7 };
                    let send = i32s((0..count as i32).map(|i| i * (rank as i32 + 1) - round));
                    let mut recv = vec![0u8; send.len()];
                    group.allreduce(client, ReduceOp::Sum, DataType::I32, &send, &mut recv).unwrap();
                    assert_eq!(recv, i32s((0..count as i32).map(|i| 6 * i - 3 * round)), "round {round} rank {rank}");
                    let mut max = vec![0u8; send.len()];
                    group.allreduce(client, ReduceOp::Max, DataType::I32, &send, &mut max).unwrap();
                    assert_eq!(max, i32s((0..count as i32).map(|i| 3 * i - round)));
                }
                let len = if rank == 1 { 12 } else { 8 };
                let mut recv = vec![0xEEu8; len];
                let failed = group.allreduce(client, ReduceOp::Sum, DataType::I32, &vec![1u8; len], &mut recv);
                assert!(matches!(failed, Err(Error::Refused { status: Status::ReduceMismatch, .. })), "{failed:?}");
                assert!(recv.iter().all(|&b| b == 0xEE), "no partial result");
            });
        }
    });
}

/// A group whose ranks left has its memory freed and handed to other allocations; the
/// server must stop writing the group's words there (its "asleep" flag, set every time it
/// goes idle, once corrupted the next group's deposits: allreduce results differed from
/// MPI's). Fill every byte the server can give out, let it sleep and wake a few times, and
/// check that no byte moved.
#[test]
fn a_left_groups_memory_handed_to_others_is_not_written_by_the_server() {
    let server = ServerProcess::start("sm,self,tcp", &["--capacity", "4MiB"]);
    {
        let (a, b) = (server.client(), server.client());
        std::thread::scope(|s| {
            for (rank, client) in [&a, &b].into_iter().enumerate() {
                s.spawn(move || {
                    let mut group = ReduceGroup::attach(client, "left", 2, rank as u32, 256 << 10, 0).unwrap();
                    let mut recv = [0u8; 4];
                    group.allreduce(client, ReduceOp::Sum, DataType::I32, &i32s([1].into_iter()), &mut recv).unwrap();
                    assert_eq!(recv, i32s([2].into_iter())[..]);
                });
            }
        });
    } // both ranks leave: the group's allocation goes back to the pool
    let owner = server.client();
    let block = 64u64 << 10;
    let pattern: Vec<u8> = (0..block).map(|i| (i % 251) as u8 ^ 0x5A).collect();
    let mut blocks = Vec::new();
    while let Ok(allocation) = owner.alloc(block, &Default::default()) {
        owner.put_sync(&allocation, 0, &pattern).unwrap();
        blocks.push(allocation);
    }
    assert!(blocks.len() as u64 * block >= 2 << 20, "the pool gave out only {} blocks", blocks.len());
    // The server's progress loop (its main thread) sleeps in poll(2) on the worker's
    // event fd once idle past its spin.
    let wchan = format!("/proc/{0}/task/{0}/wchan", server.child.id());
    let asleep = || std::fs::read_to_string(&wchan).is_ok_and(|w| w.contains("poll"));
    for round in 0..5 {
        assert!(common::eventually(Duration::from_secs(10), asleep), "the server never slept (round {round})");
        owner.status(0).unwrap(); // and wakes
    }
    let mut back = vec![0u8; block as usize];
    for (k, allocation) in blocks.iter().enumerate() {
        owner.get(allocation, 0, &mut back).unwrap();
        assert!(back == pattern, "block {k} of the reused pool changed while the server slept");
    }
}
