//! The server's checkpoint-parity engine (NAM-XOR) against real `nam serve` processes: ranks
//! are clients in this process, each playing its own node. Checkpoint, lose one rank's data,
//! restore it from the parity and the survivors, compare bytes; and the faults of issue 3.

mod ckpt_support;
#[path = "../../nam-cli/tests/common/mod.rs"]
mod common;

use common::{ServerProcess, TRANSPORTS};
use nam_client::{CkptMember, Client, GroupSpec, Restoring, Status};
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

/// Rank `lost` restarts with no data: a fresh client joins, learns its recorded size, asks
/// for the restore and gets the rebuilt bytes. `own`: the replacement asks for its own
/// restore into its buffer (in place when the server maps it), else for an allocation it
/// fetches from. The survivors wait for the restore too, as the MPI layer has them do (over
/// TCP, UCX emulates the server's GETs with messages that only a progressing rank answers).
/// Returns the bytes and whether the server wrote them straight into the buffer.
fn restore_rank(
    server: &ServerProcess,
    survivors: &[CkptMember<'_>],
    name: &str,
    ranks: u32,
    lost: u32,
    own: bool,
) -> (Vec<u8>, bool) {
    let client = server.client();
    let mut replacement = client.ckpt_join(&spec(name, ranks, lost), lost, 0).unwrap();
    let len = replacement.recorded_len();
    let restoring = if own {
        replacement.resize(len as usize).unwrap();
        replacement.restore_own(0).unwrap()
    } else {
        Restoring::Allocation(replacement.restore(lost, 0).unwrap())
    };
    let in_place = matches!(restoring, Restoring::InBuffer);
    std::thread::scope(|scope| {
        for s in survivors {
            scope.spawn(move || s.wait_restore(WAIT).unwrap());
        }
        match restoring {
            Restoring::Allocation(restored) if !own => {
                replacement.wait_restore(WAIT).unwrap();
                replacement.fetch_restored(&restored, len).unwrap();
            }
            restoring => {
                replacement.finish_restore(restoring, WAIT).unwrap();
            }
        }
    });
    (replacement.buffer().to_vec(), in_place)
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
                // Rank 1 fetches from an allocation; the others ask for their own restore,
                // which lands in their buffer in place over shared memory.
                let own = lost != 1;
                let (rebuilt, in_place) = restore_rank(&server, &members, "uneven", ranks, lost, own);
                assert_eq!(rebuilt, expected, "rank {lost} over {transports}");
                // Its own restore lands in its buffer on every transport: mapped over shared
                // memory, PUT by the server over TCP (an empty buffer has nothing to receive).
                assert_eq!(
                    in_place,
                    own && sizes[lost as usize] > 0,
                    "rank {lost} over {transports}: restored in place"
                );
                rebuilt
            };
            let rejoined = clients[lost as usize].ckpt_join(&spec("uneven", ranks, lost), lost, rebuilt.len()).unwrap();
            members.insert(lost as usize, rejoined);
            members[lost as usize].buffer_mut().unwrap().copy_from_slice(&rebuilt);
        }
    }
}

/// An application's own arrays as checkpoint buffers (`Client::ckpt_join_in`, the way FTI
/// and VeloC protect arrays in place): the server pulls them where they are (over shared
/// memory with CMA or GETs emulated by messages, since it cannot map them), writes go to the application's memory, a lost
/// rank is rebuilt into its replacement's own array, and such a buffer keeps its size.
#[test]
fn applications_arrays_registered_in_place_are_pulled_and_rebuilt_on_both_transports() {
    for transports in TRANSPORTS {
        let server = ServerProcess::start(transports, &["--capacity", "64MiB"]);
        let sizes = [100_000usize, 4096 * 7 + 5, 65_536];
        let ranks = sizes.len() as u32;
        let clients: Vec<Client> = sizes.iter().map(|_| server.client()).collect();
        let empty = clients[0].ckpt_join_in(&spec("in-place", ranks, 0), 0, &mut []).map(drop).unwrap_err();
        assert!(matches!(empty, nam_client::Error::InvalidArgument(m) if m.contains("must not be empty")), "{empty}");
        let mut arrays: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
        let mut members: Vec<CkptMember<'_>> = clients
            .iter()
            .zip(arrays.iter_mut())
            .enumerate()
            .map(|(r, (c, a))| c.ckpt_join_in(&spec("in-place", ranks, r as u32), r as u32, a).unwrap())
            .collect();
        assert!(members.iter().all(|m| m.in_place() && !m.served_in_place()));
        let resized = members[0].resize(10).unwrap_err();
        assert!(matches!(resized, nam_client::Error::InvalidArgument(m) if m.contains("keeps its size")), "{resized}");
        assert_eq!(checkpoint_all(&mut members, 1), 1);
        assert_eq!(checkpoint_all(&mut members, 2), 2);

        // Rank 1's process is gone; its replacement joins with a zeroed array of its own.
        drop(members.remove(1));
        let replacement_client = server.client();
        let mut replacement_array = vec![0u8; sizes[1]];
        {
            let mut replacement =
                replacement_client.ckpt_join_in(&spec("in-place", ranks, 1), 1, &mut replacement_array).unwrap();
            assert_eq!(replacement.recorded_len(), sizes[1] as u64);
            let restoring = replacement.restore_own(0).unwrap();
            // The server cannot map an application's array, but the array is registered with a
            // key: the server PUTs the rebuilt bytes into it, nothing to fetch.
            assert!(matches!(restoring, Restoring::InBuffer), "over {transports}: not restored into the array");
            std::thread::scope(|scope| {
                for s in &members {
                    scope.spawn(move || s.wait_restore(WAIT).unwrap());
                }
                replacement.finish_restore(restoring, WAIT).unwrap();
            });
        }
        assert_eq!(replacement_array, data(201, sizes[1]), "rank 1 over {transports}");
        drop(members);
        // The members wrote the applications' own memory, not a copy of it.
        assert_eq!(arrays[0], data(200, sizes[0]));
        assert_eq!(arrays[2], data(202, sizes[2]));
    }
}

fn status_of<T: std::fmt::Debug>(result: Result<T, nam_client::Error>) -> (Status, String) {
    let e = result.expect_err("expected an error");
    (e.server_status().unwrap_or_else(|| panic!("not a server status: {e}")), e.to_string())
}

/// Joins one client per rank, each with `len` bytes.
fn join_all<'c>(clients: &'c [Client], ranks: u32, name: &str, len: usize) -> Vec<CkptMember<'c>> {
    clients.iter().enumerate().map(|(r, c)| c.ckpt_join(&spec(name, ranks, r as u32), r as u32, len).unwrap()).collect()
}

/// Puts epoch `seed`'s data back into every member's buffer (what ranks do after a restart:
/// reload their checkpoint from local storage).
fn reload(members: &mut [CkptMember<'_>], seed: u64) {
    for m in members.iter_mut() {
        let len = m.buffer().len();
        let r = m.rank() as u64;
        m.buffer_mut().unwrap().copy_from_slice(&data(seed * 100 + r, len));
    }
}

#[test]
fn a_rank_that_never_flags_ready_fails_the_epoch_by_name_and_the_previous_one_survives() {
    let server = ServerProcess::start("sm,self,tcp", &["--capacity", "16MiB"]);
    let clients: Vec<Client> = (0..3).map(|_| server.client()).collect();
    let mut members = join_all(&clients, 3, "straggler", 50_000);
    assert_eq!(checkpoint_all(&mut members, 1), 1);
    reload(&mut members[..2], 2);
    for m in &mut members[..2] {
        assert_eq!(m.ready().unwrap(), 2);
    }
    // Each flagged rank is released once its own buffer is folded in; the epoch then fails.
    assert_eq!(members[0].wait(WAIT).unwrap(), 2);
    let (status, message) = status_of(members[0].wait_complete(2, WAIT));
    assert_eq!(status, Status::CkptTimeout, "{message}");
    assert!(message.contains("ranks [2] did not flag ready"), "{message}");
    assert_eq!(members[0].complete_epoch().unwrap(), 1);
    // The late rank is refused for the failed epoch and catches up with the group's next one.
    assert_eq!(status_of(members[2].ready_epoch(2)).0, Status::CkptBusy);
    let lost = members.remove(1);
    drop(lost);
    reload(&mut members, 1);
    let rebuilt = restore_rank(&server, &members, "straggler", 3, 1, true).0;
    assert_eq!(rebuilt, data(101, 50_000));
}

#[test]
fn a_rank_that_disconnects_during_generation_leaves_the_previous_epoch_restorable() {
    let server = ServerProcess::start("sm,self,tcp", &["--capacity", "16MiB"]);
    let mut clients: Vec<Client> = (0..3).map(|_| server.client()).collect();
    let dying = clients.pop().unwrap();
    let mut members = join_all(&clients, 3, "dying", 30_000);
    let mut last = dying.ckpt_join(&spec("dying", 3, 2), 2, 30_000).unwrap();
    reload(&mut members, 1);
    last.buffer_mut().unwrap().copy_from_slice(&data(102, 30_000));
    for m in &mut members {
        assert_eq!(m.ready().unwrap(), 1);
    }
    assert_eq!(last.ready().unwrap(), 1);
    last.wait(WAIT).unwrap();
    members[0].wait_complete(1, WAIT).unwrap();
    for m in &mut members {
        m.wait(WAIT).unwrap();
    }
    reload(&mut members, 2);
    for m in &mut members {
        m.ready().unwrap();
    }
    drop(last);
    drop(dying);
    let (status, message) = status_of(members[0].wait_complete(2, WAIT));
    assert_eq!(status, Status::CkptRankFailed, "{message}");
    assert!(message.contains("rank 2"), "{message}");
    for m in &mut members {
        m.wait(WAIT).unwrap();
    }
    // No further epoch starts without rank 2, and the refusal names it as failed, not as a
    // rank that never joined.
    let (status, message) = status_of(members[0].ready());
    assert_eq!(status, Status::CkptRankFailed, "{message}");
    assert!(message.contains("rank 2's process disconnected"), "{message}");
    reload(&mut members, 1);
    let rebuilt = restore_rank(&server, &members, "dying", 3, 2, true).0;
    assert_eq!(rebuilt, data(102, 30_000));
}

#[test]
fn two_lost_ranks_are_unrecoverable_and_oversized_buffers_are_refused() {
    let server = ServerProcess::start("sm,self,tcp", &["--capacity", "1MiB"]);
    let clients: Vec<Client> = (0..3).map(|_| server.client()).collect();
    let mut members = join_all(&clients[..2], 3, "two", 10_000);
    let third = clients[2].ckpt_join(&spec("two", 3, 2), 2, 10_000).unwrap();
    members.push(third);
    assert_eq!(checkpoint_all(&mut members, 1), 1);
    drop(members.split_off(1));
    drop(clients.into_iter().skip(1).collect::<Vec<_>>());
    let client = server.client();
    let replacement = client.ckpt_join(&spec("two", 3, 1), 1, 0).unwrap();
    let outcome = common::eventually(Duration::from_secs(5), || {
        replacement.restore(1, 0).is_err_and(|e| e.server_status() == Some(Status::CkptUnrecoverable))
    });
    assert!(outcome, "restoring with two ranks gone must be refused as unrecoverable");
    let (status, message) = status_of(replacement.restore(1, 0));
    assert_eq!(status, Status::CkptUnrecoverable, "{message}");
    assert!(message.contains("XOR parity rebuilds only one rank"), "{message}");

    // Parity for two 2 MiB buffers cannot fit a 1 MiB pool: refused at ready, nothing changes.
    let big: Vec<Client> = (0..2).map(|_| server.client()).collect();
    let mut members = join_all(&big, 2, "big", 2 << 20);
    let (status, message) = status_of(members[0].ready());
    assert_eq!(status, Status::PoolExhausted, "{message}");
    assert!(message.contains("parity slot"), "{message}");
}

/// Where the engine keeps `name`'s allocation in a file-backed pool, from the manifest.
fn slot_offsets(backing: &std::path::Path, name: &str) -> Vec<(String, u64)> {
    let manifest: nam_server::manager::Manifest =
        serde_json::from_slice(&std::fs::read(nam_server::manifest_path_for(backing)).unwrap()).unwrap();
    manifest
        .allocations
        .into_iter()
        .filter_map(|a| a.name.filter(|n| n.starts_with(&format!("ckpt:{name}:parity"))).map(|n| (n, a.offset)))
        .collect()
}

#[test]
fn server_killed_during_generation_restarts_with_the_last_epoch_and_detects_corrupted_parity() {
    let dir = common::temp_dir("ckpt-backing");
    let backing = dir.join("pool.bin");
    let args = ["--capacity", "16MiB", "--backing", backing.to_str().unwrap()];
    let mut server = ServerProcess::start("sm,self,tcp", &args);
    {
        let clients: Vec<Client> = (0..3).map(|_| server.client()).collect();
        let mut members = join_all(&clients, 3, "persist", 40_000);
        assert_eq!(checkpoint_all(&mut members, 1), 1);
        reload(&mut members, 2);
        members[0].ready().unwrap();
        server.kill();
        assert!(members[0].wait(Duration::from_secs(5)).is_err(), "a dead server must give an error");
    }
    let mut server = ServerProcess::start("sm,self,tcp", &args);
    {
        let clients: Vec<Client> = (0..3).map(|_| server.client()).collect();
        let mut members = join_all(&clients, 3, "persist", 40_000);
        assert_eq!(members[0].complete_epoch_at_join(), 1);
        let lost = members.remove(2);
        drop(lost);
        reload(&mut members, 1);
        assert_eq!(restore_rank(&server, &members, "persist", 3, 2, false).0, data(102, 40_000));
    }
    server.terminate();
    // Flip one parity byte of every slot: a restore must refuse, never hand out wrong data.
    let mut pool = std::fs::read(&backing).unwrap();
    for (_, offset) in slot_offsets(&backing, "persist") {
        pool[(offset + 4096 + 7) as usize] ^= 0x40;
    }
    std::fs::write(&backing, &pool).unwrap();
    let server = ServerProcess::start("sm,self,tcp", &args);
    let clients: Vec<Client> = (0..3).map(|_| server.client()).collect();
    let mut members = join_all(&clients, 3, "persist", 40_000);
    let lost = members.remove(2);
    drop(lost);
    reload(&mut members, 1);
    let replacement_client = server.client();
    let replacement = replacement_client.ckpt_join(&spec("persist", 3, 2), 2, 0).unwrap();
    // A restore with every survivor mapped checks each parity segment as it folds it, so the
    // refusal comes with the request or with the wait.
    let (status, message) = status_of(replacement.restore(2, 0).and_then(|_| replacement.wait_restore(WAIT)));
    assert_eq!(status, Status::CkptCorrupted, "{message}");
    assert!(message.contains("fails its checksum"), "{message}");
}

/// NAM-XOR as an L2 scheme of nam-ckpt under `mpirun`: sets on distinct emulated nodes
/// spread over two servers, uneven sizes, one lost rank per set rebuilt by its server, two
/// lost in a set refused.
#[test]
fn nam_xor_under_mpirun_rebuilds_lost_ranks_and_refuses_two_per_set() {
    for transports in TRANSPORTS {
        let first = ServerProcess::start(transports, &["--capacity", "64MiB"]);
        let second = ServerProcess::start(transports, &["--capacity", "64MiB"]);
        let servers = format!("{},{}", first.addr, second.addr);
        for (ranks, lose, set, ok) in [(3, "1", "8", true), (5, "0,4", "3", true), (4, "1,2", "8", false)] {
            let dir = ckpt_support::temp_dir(&format!("namxor-{ranks}-{}", lose.replace(',', "_")));
            let args = [
                "ckpt-check",
                "redundancy",
                "--scheme",
                "nam-xor",
                "--uneven",
                "--size-per-rank",
                "300KiB",
                "--lose",
                lose,
                "--set-size",
                set,
                "--servers",
                &servers,
                "--dir",
                dir.to_str().unwrap(),
            ];
            let mut cmd = ckpt_support::mpirun(ranks, ranks, &args);
            cmd.env("NAM_TRANSPORTS", transports).env("UCX_TLS", transports);
            cmd.env("NAM_CKPT_GROUP", format!("t{ranks}-{}", lose.replace(',', "_")));
            let out = ckpt_support::run(cmd);
            let text = ckpt_support::text(&out);
            let _ = std::fs::remove_dir_all(&dir);
            if ok {
                assert!(out.status.success() && text.contains("bytes_match=true"), "{ranks} lose {lose}:\n{text}");
                if ranks == 5 {
                    // Two sets of 5 ranks (set size 3): one on each server, each keeping parity.
                    for server in [&first, &second] {
                        let status = server.admin_status();
                        assert!(status.allocations >= 2, "{} holds no parity: {status:?}", server.addr);
                    }
                }
            } else {
                assert!(!out.status.success() && text.contains("rebuilds one rank per set"), "{text}");
            }
        }
    }
}

/// The checkpoint library with `redundancy.scheme = "nam-xor"` (fsynced SSD level): each rank
/// writes its file while the server pulls its buffer. A rank whose file write fails fails the
/// checkpoint on every rank and leaves the previous version; so does a rank killed before
/// the protect of version 6; a job killed after step 7 that also lost one rank's files
/// restarts from version 6, the server rebuilding that rank, to the uninterrupted answer.
#[test]
fn the_library_with_nam_xor_survives_a_failed_write_and_a_killed_rank_and_rebuilds_a_lost_rank() {
    let server = ServerProcess::start("sm,self,tcp", &["--capacity", "64MiB"]);
    let dir = ckpt_support::temp_dir("lib-namxor");
    let d = dir.display();
    let cfg = dir.join("ckpt.toml");
    std::fs::write(
        &cfg,
        format!(
            "name = \"app\"\n[ram]\ndir = \"{d}/ram\"\ncapacity = \"64MiB\"\n[ssd]\ndir = \"{d}/ssd\"\nfsync = true\n\
             [redundancy]\nscheme = \"nam-xor\"\nservers = [\"{}\"]\n[policy]\nkind = \"always-ssd\"\n",
            server.addr
        ),
    )
    .unwrap();
    let app = |group: &str, extra: &[&str]| {
        let mut args = vec!["ckpt-check", "app", "--config", cfg.to_str().unwrap(), "--steps", "10", "--every", "2"];
        args.extend(extra);
        let mut cmd = ckpt_support::mpirun(3, 3, &args);
        cmd.env("NAM_CKPT_GROUP", group);
        let out = ckpt_support::run(cmd);
        (out.status.success(), ckpt_support::text(&out))
    };
    let final_line = |out: &str| out.lines().find(|l| l.starts_with("final ")).map(str::to_string);
    let (ok, clean) = app("lib-clean", &[]);
    assert!(ok && final_line(&clean).is_some(), "{clean}");
    std::fs::remove_dir_all(dir.join("ssd")).unwrap();

    // Rank 1's file of version 4 is /dev/full: its write fails while the server pulls.
    let v4 = dir.join("ssd/app/v4");
    std::fs::create_dir_all(&v4).unwrap();
    std::os::unix::fs::symlink("/dev/full", v4.join("rank-1.tmp")).unwrap();
    let (ok, full) = app("lib-full", &[]);
    assert!(!ok && full.contains("No space left on device"), "{full}");
    assert!(full.contains("the NAM-XOR checkpoint failed on rank 1 of the set"), "{full}");
    assert!(full.contains("checkpoint version=2") && !full.contains("checkpoint version=4"), "{full}");
    std::fs::remove_file(v4.join("rank-1.tmp")).unwrap();
    let (ok, out) = app("lib-full", &["--restart"]);
    assert!(ok && out.contains("restart version=2 level=ssd"), "{out}");
    std::fs::remove_dir_all(dir.join("ssd")).unwrap();

    let mut cmd = ckpt_support::mpirun(3, 3, &["ckpt-check", "app", "--config", cfg.to_str().unwrap()]);
    cmd.args(["--steps", "10", "--every", "2"]).env("NAM_CKPT_GROUP", "lib-fault");
    cmd.env("NAM_FAULT_CKPT", "die-before-protect:6:1");
    let died = ckpt_support::run(cmd);
    assert!(!died.status.success(), "{}", ckpt_support::text(&died));
    let (ok, out) = app("lib-fault", &["--restart"]);
    assert!(ok && out.contains("restart version=4 level=ssd"), "{out}");
    std::fs::remove_dir_all(dir.join("ssd")).unwrap();

    let (ok, killed) = app("lib-lost", &["--die-rank", "1", "--die-after", "7"]);
    assert!(!ok, "{killed}");
    let v6 = dir.join("ssd/app/v6");
    for e in std::fs::read_dir(&v6).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap().to_str().unwrap().starts_with("rank-2.") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let (ok, restarted) = app("lib-lost", &["--restart"]);
    assert!(ok && restarted.contains("restart version=6 level=ssd rebuilt=[2]"), "{restarted}");
    assert_eq!(final_line(&restarted), final_line(&clean), "{restarted}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `examples/mpi/heat_namxor.c`, built against libnam with mpicc: an uninterrupted run, a run
/// that dies after a checkpoint, one rank's local checkpoint deleted, and a restart that has
/// the server rebuild it: the restarted run ends with the uninterrupted run's answer. Those
/// through library buffers; a rank killed during a checkpoint and the restart after it with
/// the ranks' own arrays registered in place (`nam_ckpt_group_join_in`).
#[test]
fn the_c_heat_stencil_restarts_after_a_lost_rank_with_the_same_answer() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().to_path_buf();
    assert!(target.join("libnam.so").exists(), "run `cargo build --workspace` before `cargo test`");
    let dir = common::temp_dir("heat-namxor");
    let run = |what: &str, cmd: &mut std::process::Command| -> (bool, String) {
        let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    };
    let pc = std::process::Command::new("sh")
        .arg(repo.join("scripts/gen-pc.sh"))
        .args(["--libdir", target.to_str().unwrap(), "--includedir", repo.join("include").to_str().unwrap()])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(pc.success());
    let built = std::process::Command::new("make")
        .arg("-C")
        .arg(repo.join("examples/mpi"))
        .arg(format!("OUT={}", dir.display()))
        .arg("CFLAGS=-O2 -g -Wall -Wextra -Werror -std=c11")
        .env("PKG_CONFIG_PATH", &dir)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let server = ServerProcess::start("sm,self,tcp", &["--capacity", "64MiB"]);
    // `buffer`: HEAT_BUFFER, the example's checkpoint buffer (its own array registered in
    // place, or a library buffer it copies into).
    let heat_on = |server: std::net::SocketAddr, phase: &str, buffer: &str, local: &std::path::Path, extra: &[&str]| {
        std::fs::create_dir_all(local).unwrap();
        // The harness's mpirun command line for `nam`, with the example as the program instead.
        let cmd = ckpt_support::mpirun(4, 4, &[]);
        let mut args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        args.pop();
        let mut c = ckpt_support::mpi::mpirun_command();
        c.args(&args[..])
            .args([
                "-x",
                &format!("NAM_SERVERS={server}"),
                "-x",
                &format!("LD_LIBRARY_PATH={}", target.display()),
                "-x",
                &format!("HEAT_BUFFER={buffer}"),
            ])
            .arg(dir.join("heat_namxor"))
            .args([phase, local.to_str().unwrap(), "60", "10"])
            .args(extra);
        for (k, v) in cmd.get_envs() {
            c.env(k, v.unwrap());
        }
        run(phase, &mut c)
    };
    let heat = |phase: &str, buffer: &str, local: &std::path::Path, extra: &[&str]| {
        heat_on(server.addr, phase, buffer, local, extra)
    };
    // Crash and restart with library buffers; the killed rank below with arrays in place.
    let (ok, whole) = heat("run", "library", &dir.join("whole"), &[]);
    assert!(ok, "{whole}");
    let answer = whole.lines().find(|l| l.starts_with("final checksum")).unwrap_or_else(|| panic!("{whole}"));
    let (died, crashed) = heat("crash", "library", &dir.join("failed"), &["30"]);
    assert!(!died, "the crash run must fail: {crashed}");
    assert!(crashed.contains("crashing after the checkpoint of step 30"), "{crashed}");
    std::fs::remove_file(dir.join("failed/rank-2.ckpt")).unwrap();
    let (ok, restarted) = heat("restart", "library", &dir.join("failed"), &[]);
    assert!(ok, "{restarted}");
    assert!(
        restarted.contains("rank 2: checkpoint of epoch ")
            && restarted.contains("rebuilt by the memory server (")
            && restarted.contains("library buffer)"),
        "{restarted}"
    );
    assert!(restarted.contains("restarting from step 30"), "{restarted}");
    assert!(restarted.contains(answer), "restart must end with {answer:?}:\n{restarted}");

    // Rank 1 is killed (SIGKILL) during the checkpoint of step 40: the others' epoch fails
    // with an error naming it, and the previous epoch (step 30) is still restorable.
    let (died, killed) = heat("die", "in-place", &dir.join("killed"), &["40"]);
    assert!(!died && killed.contains("rank 1: killed before flagging step 40 ready"), "{killed}");
    assert!(killed.contains("checkpoint rank failed") || killed.contains("checkpoint deadline passed"), "{killed}");
    std::fs::remove_file(dir.join("killed/rank-2.ckpt")).unwrap();
    let (ok, restarted) = heat("restart", "in-place", &dir.join("killed"), &[]);
    assert!(ok, "{restarted}");
    assert!(restarted.contains("rank 2: checkpoint of epoch ") && restarted.contains("in place)"), "{restarted}");
    assert!(restarted.contains("restarting from step 30"), "{restarted}");
    assert!(restarted.contains(answer), "restart must end with {answer:?}:\n{restarted}");

    // A restart against a server that holds no parity (a fresh one): the lost rank's restore
    // request is refused, and the ranks told of it by that rank print its reason.
    std::fs::remove_file(dir.join("failed/rank-2.ckpt")).unwrap();
    let empty = ServerProcess::start("sm,self,tcp", &["--capacity", "64MiB"]);
    let (ok, refused) = heat_on(empty.addr, "restart", "in-place", &dir.join("failed"), &[]);
    assert!(!ok, "{refused}");
    let told: Vec<&str> = refused.lines().filter(|l| l.contains("restore request of rank 2 failed there")).collect();
    assert!(!told.is_empty() && told.iter().all(|l| l.contains("no complete parity")), "{refused}");
    assert!(!refused.contains("(no error)"), "{refused}");
}

/// `nam-bench ckpt` under `mpirun`, at a test's size: every scheme of the comparison
/// (partner, XOR, NAM-XOR writing while the server pulls, and NAM-XOR writing first)
/// checkpoints, restarts after one rank's data is erased, and gives its bytes back.
#[test]
fn ckpt_bench_compares_every_scheme_and_restores_the_lost_rank() {
    let dir = ckpt_support::temp_dir("bench-all");
    let args = [
        "ckpt",
        "--size-per-rank",
        "2MiB",
        "--checkpoints",
        "1",
        "--restores",
        "1",
        "--compute-ms",
        "1",
        "--json",
        "--dir",
        dir.to_str().unwrap(),
    ];
    let out = ckpt_support::run(ckpt_support::mpirun(3, 3, &args));
    let text = ckpt_support::text(&out);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{text}");
    let all: Vec<serde_json::Value> =
        text.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).expect("json")).collect();
    let (library, rows): (Vec<_>, Vec<_>) = all.into_iter().partition(|r| r["row"] == "library");
    let schemes: Vec<&str> = rows.iter().map(|r| r["scheme"].as_str().unwrap()).collect();
    assert_eq!(schemes, ["partner", "xor", "nam-xor", "nam-xor-write-first"], "{text}");
    // The same run restarts through the checkpoint library with every scheme (Reed-Solomon
    // beside XOR), with nothing lost and with one rank's files erased, beside a plain read of
    // each rank's file, and every restart gives back every byte.
    let library_schemes: Vec<&str> = library.iter().map(|r| r["scheme"].as_str().unwrap()).collect();
    assert_eq!(library_schemes, ["partner", "xor", "rs", "nam-xor"], "{text}");
    for row in &library {
        assert_eq!(row["bytes_match"], true, "{row}");
        assert_eq!(row["bytes_per_rank"], 2 << 20, "{row}");
        for key in ["plain_read_s", "restart_noloss_s", "restart_loss_s"] {
            assert!(row[key].as_f64().unwrap() > 0.0, "{key}: {row}");
        }
    }
    for row in &rows {
        assert_eq!(row["ranks"], 3, "{row}");
        assert_eq!(row["bytes_per_rank"], 2 << 20, "{row}");
        assert_eq!(row["bytes_match"], true, "{row}");
        assert!(row["checkpoint_s"].as_f64().unwrap() > 0.0, "{row}");
        // Restore bandwidth with a rank lost and with nothing lost, for every scheme; NAM-XOR
        // also says where its lost rank's restore spent the time.
        assert!(row["restore_gbps"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["restore_noloss_gbps"].as_f64().unwrap() > 0.0, "{row}");
        let profile = row["restore_profile_s"].as_array();
        let nam_xor = row["scheme"].as_str().unwrap().starts_with("nam-xor");
        assert_eq!(profile.map(Vec::len), nam_xor.then_some(4), "{row}");
    }
}

/// `nam-bench ckpt` against a given memory server leaves nothing there by default (it drops
/// NAM-XOR's group when the run ends) and, with `--keep-groups`, leaves the group listed.
#[test]
fn the_ckpt_bench_drops_its_groups_unless_told_to_keep_them() {
    let server = ServerProcess::start("sm,self,tcp", &["--capacity", "64MiB"]);
    let dir = ckpt_support::temp_dir("bench-job-end");
    let bench = |extra: &[&str]| {
        let mut args = vec!["ckpt", "--scheme", "nam-xor", "--size-per-rank", "1MiB", "--checkpoints", "1"];
        args.extend(["--restores", "1", "--compute-ms", "1", "--no-fsync", "--json"]);
        let servers = server.addr.to_string();
        args.extend(["--dir", dir.to_str().unwrap(), "--servers", &servers]);
        args.extend(extra);
        let out = ckpt_support::run(ckpt_support::mpirun(3, 3, &args));
        assert!(out.status.success(), "{}", ckpt_support::text(&out));
        let status = server.client().status(0).unwrap();
        (status.ckpt_groups, status.used)
    };
    let (groups, used) = bench(&[]);
    assert!(groups.is_empty() && used == 0, "{groups:?}, {used} bytes used");
    let (groups, used) = bench(&["--keep-groups"]);
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert!(groups[0].complete_epoch >= 1 && groups[0].bytes > 0 && used >= groups[0].bytes, "{groups:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
