//! Stored structures a peer or a local user can corrupt (issue 25, item 5): a checkpoint
//! group's parity-slot header, written into the pool while the server runs (through the
//! backing file, as any process mapping the pool could), and the manifest of a file-backed
//! pool, edited on disk. Each corruption must give a typed error
//! for that group or allocation while the server keeps serving everything else.

mod ckpt_support;
#[path = "../../nam-cli/tests/common/mod.rs"]
mod common;

use common::ServerProcess;
use nam_client::{AllocOptions, CkptMember, Client, GroupSpec, Status};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);
const RANKS: u32 = 2;
const LEN: usize = 20_000;

fn spec(name: &str, rank: u32) -> GroupSpec {
    let mut spec = GroupSpec::new(name, RANKS);
    spec.node = format!("node{rank}");
    spec.segment_bytes = 4096;
    spec.timeout = Duration::from_secs(15);
    spec
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn join_all<'c>(clients: &'c [Client], name: &str) -> Vec<CkptMember<'c>> {
    clients.iter().enumerate().map(|(r, c)| c.ckpt_join(&spec(name, r as u32), r as u32, LEN).unwrap()).collect()
}

/// Fills every buffer with its pattern and completes one epoch.
fn checkpoint(members: &mut [CkptMember<'_>]) -> u64 {
    for m in members.iter_mut() {
        let seed = m.rank() as u8;
        m.buffer_mut().unwrap().copy_from_slice(&pattern(seed, LEN));
    }
    let epochs: Vec<u64> = members.iter_mut().map(|m| m.ready().unwrap()).collect();
    // Every rank waits at once: over TCP a rank's buffer is pulled only while it progresses.
    std::thread::scope(|scope| {
        for m in members.iter_mut() {
            scope.spawn(move || m.wait(WAIT).unwrap());
        }
    });
    members[0].wait_complete(epochs[0], WAIT).unwrap();
    epochs[0]
}

/// A replacement for rank 1 of `group` asks for a restore: the rebuilt bytes, or the
/// server's refusal. The survivors wait for the restore too (over TCP, UCX emulates the
/// server's GETs with messages that only a progressing rank answers).
fn restore_rank_1(
    server: &ServerProcess,
    survivors: &[CkptMember<'_>],
    group: &str,
) -> Result<Vec<u8>, (Status, String)> {
    let client = server.client();
    let mut replacement = client.ckpt_join(&spec(group, 1), 1, 0).unwrap();
    let len = replacement.recorded_len();
    let refusal = |e: nam_client::Error| (e.server_status().unwrap_or(Status::Ok), e.to_string());
    let restored = replacement.restore(1, 0).map_err(refusal)?;
    std::thread::scope(|scope| {
        for s in survivors {
            scope.spawn(move || s.wait_restore(WAIT).unwrap());
        }
        replacement.wait_restore(WAIT).map_err(refusal)?;
        replacement.fetch_restored(&restored, len).map_err(refusal)
    })?;
    Ok(replacement.buffer().to_vec())
}

/// The well-behaved work a bystander does: allocate, write, read back, free.
fn still_served(client: &Client) {
    let a = client.alloc(4096, &AllocOptions::default()).expect("a bystander's allocation");
    client.put(&a, 100, b"still served").unwrap();
    let mut back = [0u8; 12];
    client.get(&a, 100, &mut back).unwrap();
    assert_eq!(&back, b"still served");
    client.free(&a).unwrap();
}

/// A parity slot in a file-backed pool, read and written through the backing file.
struct Slot {
    file: std::fs::File,
    offset: u64,
}

impl Slot {
    /// The allocation named `name`, found in the manifest (which the server writes soon after
    /// an allocation changes).
    fn find(backing: &std::path::Path, name: &str) -> Slot {
        let path = nam_server::manifest_path_for(backing);
        let mut offset = None;
        assert!(
            common::eventually(WAIT, || {
                let Ok(bytes) = std::fs::read(&path) else { return false };
                let manifest: nam_server::manager::Manifest = serde_json::from_slice(&bytes).unwrap();
                offset = manifest.allocations.iter().find(|a| a.name.as_deref() == Some(name)).map(|a| a.offset);
                offset.is_some()
            }),
            "{name} never appeared in {}",
            path.display()
        );
        let file = std::fs::OpenOptions::new().read(true).write(true).open(backing).unwrap();
        Slot { file, offset: offset.unwrap() }
    }

    fn read(&self, at: usize, len: usize) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let mut bytes = vec![0u8; len];
        self.file.read_exact_at(&mut bytes, self.offset + at as u64).unwrap();
        bytes
    }

    fn write(&self, at: usize, bytes: &[u8]) {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(bytes, self.offset + at as u64).unwrap();
    }
}

/// Byte offset and new bytes of one corruption of a slot header (layout: docs/protocol.md).
fn header_corruptions() -> Vec<(&'static str, usize, Vec<u8>)> {
    vec![
        ("rank count beyond the group", 24, 7u32.to_le_bytes().to_vec()),
        ("rank count of the most ranks", 24, 1024u32.to_le_bytes().to_vec()),
        ("zero segment", 28, 0u32.to_le_bytes().to_vec()),
        ("odd segment", 28, 4097u32.to_le_bytes().to_vec()),
        ("unknown state", 16, 9u64.to_le_bytes().to_vec()),
        ("epoch past the epoch field", 8, u64::MAX.to_le_bytes().to_vec()),
        ("rank size past the allocation limit", 64 + 8, u64::MAX.to_le_bytes().to_vec()),
        ("rank size past the slot", 64 + 8, (1u64 << 30).to_le_bytes().to_vec()),
    ]
}

#[test]
fn a_corrupt_parity_slot_header_fails_its_group_only_and_a_restart_keeps_the_group_usable() {
    let dir = common::temp_dir("slot-header");
    let backing = dir.join("pool.bin");
    let args = ["--capacity", "32MiB", "--backing", backing.to_str().unwrap()];
    let mut server = ServerProcess::start("tcp", &args);
    let bystander = server.client();
    {
        let clients: Vec<Client> = (0..4).map(|_| server.client()).collect();
        let mut victim = join_all(&clients[..2], "victim");
        let mut other = join_all(&clients[2..], "other");
        checkpoint(&mut victim);
        checkpoint(&mut other);
        // The slot lives in the pool's backing file, which the server maps shared: bytes
        // written into the file are what the server reads next (as bytes written by any
        // process that maps the pool would be).
        let slot = Slot::find(&backing, "ckpt:victim:parity0");
        let original = slot.read(0, 64 + 8 * RANKS as usize);
        drop(victim.remove(1)); // rank 1 is lost
        for (what, at, bytes) in header_corruptions() {
            slot.write(at, &bytes);
            let refusal = restore_rank_1(&server, &victim, "victim").expect_err(what);
            assert_eq!(refusal.0, Status::CkptCorrupted, "{what}: {}", refusal.1);
            assert!(refusal.1.contains("victim") && refusal.1.contains("corrupt"), "{what}: {}", refusal.1);
            assert!(server.child.try_wait().unwrap().is_none(), "the server died on a header with {what}");
            still_served(&bystander);
            slot.write(0, &original);
        }
        // The header put back, the same group restores byte for byte: it was the header alone.
        assert_eq!(restore_rank_1(&server, &victim, "victim").unwrap(), pattern(1, LEN));
        // The other group of the same tenant was never affected.
        drop(other.remove(1));
        assert_eq!(restore_rank_1(&server, &other, "other").unwrap(), pattern(1, LEN));
        // An epoch record past any real epoch, left in the pool for the next start.
        slot.write(8, &u64::MAX.to_le_bytes());
        slot.write(16, &1u64.to_le_bytes()); // "writing"
    }
    drop(bystander);
    server.terminate();
    let server = ServerProcess::start("tcp", &args);
    let clients: Vec<Client> = (0..2).map(|_| server.client()).collect();
    let mut victim = join_all(&clients, "victim");
    // The corrupt slot is left out: the group starts over, completes an epoch and restores it.
    let epoch = checkpoint(&mut victim);
    assert!(epoch >= 1);
    drop(victim.remove(1));
    assert_eq!(restore_rank_1(&server, &victim, "victim").unwrap(), pattern(1, LEN));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// One manifest edit: what it does to the record of `"bad"` (or to the whole manifest).
type Edit = (&'static str, fn(&mut serde_json::Value));

fn record<'v>(manifest: &'v mut serde_json::Value, name: &str) -> &'v mut serde_json::Value {
    let all = manifest["allocations"].as_array_mut().unwrap();
    all.iter_mut().find(|r| r["name"] == name).unwrap()
}

fn manifest_edits() -> Vec<Edit> {
    vec![
        ("a size past the allocation limit", |m| record(m, "bad")["size"] = u64::MAX.into()),
        ("a zero size", |m| record(m, "bad")["size"] = 0.into()),
        ("a range past the pool", |m| record(m, "bad")["offset"] = (u64::MAX - 10).into()),
        ("a misaligned offset", |m| {
            let at = record(m, "bad")["offset"].as_u64().unwrap();
            record(m, "bad")["offset"] = (at + 8).into();
        }),
        ("a range over another record's", |m| {
            let at = record(m, "good")["offset"].clone();
            record(m, "bad")["offset"] = at;
        }),
        ("another record's handle", |m| {
            let handle = record(m, "good")["handle"].clone();
            record(m, "bad")["handle"] = handle;
        }),
        ("handle zero", |m| record(m, "bad")["handle"] = 0.into()),
        ("a handle past global addresses", |m| record(m, "bad")["handle"] = u64::MAX.into()),
        ("unknown flags", |m| record(m, "bad")["flags"] = 0xffff_fff0u32.into()),
        ("flags of a non-persistent allocation", |m| record(m, "bad")["flags"] = 1.into()),
        ("a name past the limit", |m| record(m, "bad")["name"] = "n".repeat(300).into()),
        ("an empty tenant", |m| record(m, "bad")["tenant"] = "".into()),
    ]
}

#[test]
fn a_corrupt_manifest_record_fails_that_allocation_only() {
    let dir = common::temp_dir("manifest-records");
    let backing = dir.join("pool.bin");
    let args = ["--capacity", "8MiB", "--backing", backing.to_str().unwrap()];
    let mut server = ServerProcess::start("tcp", &args);
    {
        let client = server.client();
        for name in ["good", "bad"] {
            let a = client.alloc(8192, &AllocOptions { persistent: true, ..AllocOptions::shared(name) }).unwrap();
            client.put(&a, 0, name.as_bytes()).unwrap();
        }
    }
    server.terminate();
    let manifest_path = nam_server::manifest_path_for(&backing);
    let original: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    let mut edits = manifest_edits();
    edits.push(("a next handle that cannot grow", |m| m["next_handle"] = u64::MAX.into()));
    for (what, edit) in edits {
        let mut manifest = original.clone();
        edit(&mut manifest);
        std::fs::write(&manifest_path, serde_json::to_vec(&manifest).unwrap()).unwrap();
        let mut server = ServerProcess::start("tcp", &args);
        let client = server.client();
        let good = client.open("good").unwrap_or_else(|e| panic!("{what}: the sound record is lost: {e}"));
        let mut back = [0u8; 4];
        client.get(&good, 0, &mut back).unwrap();
        assert_eq!(&back, b"good", "{what}");
        let bad_kept = manifest["next_handle"] == u64::MAX;
        match client.open("bad") {
            Ok(_) => assert!(bad_kept, "{what}: the corrupt record was restored"),
            Err(e) if !bad_kept => {
                // A record whose name is not the one asked for answers as a missing one.
                let expected = if what.contains("name") || what.contains("tenant") {
                    Status::NameNotFound
                } else {
                    Status::Internal
                };
                assert_eq!(e.server_status(), Some(expected), "{what}: {e}");
                if expected == Status::Internal {
                    assert!(e.to_string().contains("corrupt"), "{what}: {e}");
                }
                let mut rejected = manifest_path.as_os_str().to_owned();
                rejected.push(".rejected");
                assert!(std::path::Path::new(&rejected).exists(), "{what}: no copy of the rejected manifest");
            }
            Err(e) => panic!("{what}: {e}"),
        }
        // New allocations get handles above every record and work.
        let fresh = client.alloc(4096, &AllocOptions::default()).unwrap();
        assert!(fresh.handle() > good.handle() && fresh.handle() < 1 << 40, "{what}: handle {}", fresh.handle());
        client.put(&fresh, 0, b"fresh").unwrap();
        client.free(&fresh).unwrap();
        assert!(server.child.try_wait().unwrap().is_none(), "{what}: the server died");
        drop(client);
        server.terminate();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
