//! The server's checkpoint-parity engine (NAM-XOR) against real `nam serve` processes: ranks
//! are clients in this process, each playing its own node. Checkpoint, lose one rank's data,
//! restore it from the parity and the survivors, compare bytes; and the faults of issue 3.

mod common;

use common::{ServerProcess, TRANSPORTS};
use nam_client::{CkptMember, Client, GroupSpec, Status};
use rand::{Rng, SeedableRng};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

fn spec(name: &str, ranks: u32, rank: u32) -> GroupSpec {
    let mut spec = GroupSpec::new(name, ranks);
    spec.node = format!("node{rank}");
    spec.segment_bytes = 4096;
    spec.in_flight = 4;
    spec.timeout = Duration::from_secs(3);
    spec
}

fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.gen()).collect()
}

/// Joins `sizes.len()` ranks, fills each buffer with `data(epoch * 100 + r)`, checkpoints.
fn checkpoint_all(members: &mut [CkptMember<'_>], epoch_seed: u64) -> u64 {
    for (r, m) in members.iter_mut().enumerate() {
        let len = m.buffer().len();
        m.buffer_mut().unwrap().copy_from_slice(&data(epoch_seed * 100 + r as u64, len));
    }
    let epochs: Vec<u64> = members.iter_mut().map(|m| m.ready().unwrap()).collect();
    for m in members.iter_mut() {
        m.wait(WAIT).unwrap();
    }
    members[0].wait_complete(epochs[0], WAIT).unwrap();
    epochs[0]
}

/// Rank `lost` restarts with no data: a fresh client joins with an empty buffer, asks for
/// the restore, and fetches the rebuilt bytes. The survivors wait for the restore too, as
/// the MPI layer has them do (over TCP, UCX emulates the server's GETs with messages that
/// only a progressing rank answers).
fn restore_rank(server: &ServerProcess, survivors: &[CkptMember<'_>], name: &str, ranks: u32, lost: u32) -> Vec<u8> {
    let client = server.client();
    let mut replacement = client.ckpt_join(&spec(name, ranks, lost), lost, 0).unwrap();
    let len = replacement.recorded_len();
    let restored = replacement.restore(lost, 0).unwrap();
    std::thread::scope(|scope| {
        for s in survivors {
            scope.spawn(move || s.wait_restore(WAIT).unwrap());
        }
        replacement.wait_restore(WAIT).unwrap();
    });
    replacement.fetch_restored(&restored, len).unwrap();
    replacement.buffer().to_vec()
}

#[test]
fn uneven_buffers_are_rebuilt_byte_for_byte_on_both_transports() {
    for transports in TRANSPORTS {
        let server = ServerProcess::start(transports, &["--capacity", "64MiB"]);
        let sizes = [100_000usize, 4096 * 7 + 5, 1, 65_536];
        let clients: Vec<Client> = sizes.iter().map(|_| server.client()).collect();
        let ranks = sizes.len() as u32;
        let mut members: Vec<CkptMember<'_>> = clients
            .iter()
            .zip(sizes)
            .enumerate()
            .map(|(r, (c, len))| c.ckpt_join(&spec("uneven", ranks, r as u32), r as u32, len).unwrap())
            .collect();
        assert_eq!(checkpoint_all(&mut members, 1), 1);
        assert_eq!(checkpoint_all(&mut members, 2), 2);
        for lost in [0u32, 1, 3] {
            // The lost rank's process is gone: its client disconnects.
            let rebuilt = {
                let expected = data(200 + lost as u64, sizes[lost as usize]);
                let mut gone = members.remove(lost as usize);
                gone.buffer_mut().unwrap().fill(0);
                drop(gone);
                let rebuilt = restore_rank(&server, &members, "uneven", ranks, lost);
                assert_eq!(rebuilt, expected, "rank {lost} over {transports}");
                rebuilt
            };
            let rejoined = clients[lost as usize].ckpt_join(&spec("uneven", ranks, lost), lost, rebuilt.len()).unwrap();
            members.insert(lost as usize, rejoined);
            members[lost as usize].buffer_mut().unwrap().copy_from_slice(&rebuilt);
        }
    }
}
