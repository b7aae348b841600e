//! Where checkpoints live, under `mpirun` with `nam-bench ckpt-check app` (4 ranks, node-local
//! directories per emulated node, `{node}` in `ram.dir`/`ssd.dir`), every restored byte compared
//! with an uninterrupted run's:
//! - failure groups: with two racks in `[failure_groups] map` (or in each rank's
//!   `NAM_FAILURE_GROUP`), every scheme (XOR, RS, partner,
//!   NAM-XOR) keeps the members of a set (a rank and its partner) in different racks, so a
//!   whole rack lost is rebuilt; an unknown group, a malformed map and a placement the groups
//!   do not allow are typed errors naming the groups, and leave the stored files as they were;
//! - restart elsewhere: ranks restarted on a shifted mapping with a spare node, or on fewer
//!   nodes, get their files moved to them and the rank whose node is gone rebuilt (XOR over
//!   the recorded layout, NAM-XOR by its server), or only moved (partner on a permutation);
//! - scavenge: `nam ckpt scavenge` run by `mpirun` once per node copies the node-local
//!   checkpoints to the file-system level; with every node's storage gone a restart takes
//!   them; a missing dataset and a truncated rank file are typed errors that write nothing.

mod ckpt_support;
#[path = "../../nam-cli/tests/common/mod.rs"]
mod common;

use ckpt_support::{run, temp_dir, text};
use common::ServerProcess;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const RANKS: usize = 4;
const RACKS: &str = "map = [\"rackA: emu-0 emu-1\", \"rackB: emu-2 emu-3\"]";

/// A configuration with node-local directories per node, the file-system level under `pfs`
/// (never flushed to by the job itself), and `extra` TOML appended.
fn config(dir: &Path, redundancy: &str, extra: &str) -> PathBuf {
    config_as(dir, "ckpt.toml", redundancy, extra)
}

/// [`config`] in the file `file` of `dir`.
fn config_as(dir: &Path, file: &str, redundancy: &str, extra: &str) -> PathBuf {
    let d = dir.display();
    let text = format!(
        "name = \"app\"\n[ram]\ndir = \"{d}/ram/{{node}}\"\ncapacity = \"64MiB\"\n[ssd]\ndir = \"{d}/ssd/{{node}}\"\n\
         fsync = false\n[redundancy]\n{redundancy}\n[policy]\nkind = \"always-ram\"\n\
         [flush]\ndir = \"{d}/pfs\"\nevery = 0\n{extra}"
    );
    let path = dir.join(file);
    std::fs::write(&path, text).unwrap();
    path
}

/// `mpirun -np 4 <program> <args>` with `NAM_EMULATE_NODES=<nodes>` and `env` exported.
fn mpirun(program: &Path, nodes: &str, env: &[(&str, &str)], args: &[&str]) -> Command {
    let mut cmd = ckpt_support::mpi::mpirun_command();
    cmd.args(["--oversubscribe", "--mca", "btl", "self,vader,tcp", "-np", &RANKS.to_string()]);
    cmd.env("NAM_EMULATE_NODES", nodes).args(["-x", "NAM_EMULATE_NODES"]);
    for (k, v) in env {
        cmd.env(k, v).args(["-x", k]);
    }
    cmd.arg(program).args(args).env("OMPI_MCA_rmaps_base_oversubscribe", "1");
    cmd
}

/// Runs the app for 10 steps (checkpoints every 2), dumping every rank's final state to `dump`.
fn app(cfg: &Path, nodes: &str, env: &[(&str, &str)], dump: &Path, extra: &[&str]) -> (bool, String) {
    let mut args = vec!["ckpt-check", "app", "--config", cfg.to_str().unwrap(), "--steps", "10", "--every", "2"];
    args.extend(["--dump-state", dump.to_str().unwrap()]);
    args.extend(extra);
    let out = run(mpirun(Path::new(env!("CARGO_BIN_EXE_nam-bench")), nodes, env, &args));
    (out.status.success(), text(&out))
}

/// Every rank's restored state equals the uninterrupted run's, byte by byte.
fn same_state(clean: &Path, restored: &Path) {
    for rank in 0..RANKS {
        let name = format!("rank-{rank}.state");
        let (a, b) = (std::fs::read(clean.join(&name)).unwrap(), std::fs::read(restored.join(&name)).unwrap());
        assert_eq!(a.len(), b.len(), "rank {rank}: state length");
        if let Some(i) = (0..a.len()).find(|&i| a[i] != b[i]) {
            panic!("rank {rank}: byte {i} differs ({} != {})", a[i], b[i]);
        }
    }
}

/// Every file under `dir` with its bytes (what "stored data as it was" compares).
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().map(|e| e.unwrap()) {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// The `set` of a redundancy file's header (`NAMRED01`, u32 length, JSON).
fn red_set(path: &Path) -> Vec<usize> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&bytes[..8], b"NAMRED01");
    let len = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[12..12 + len]).unwrap();
    header["set"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect()
}

fn rack(rank: usize) -> char {
    if rank < 2 {
        'A'
    } else {
        'B'
    }
}

#[test]
fn sets_span_failure_groups_for_every_scheme_so_a_whole_rack_is_rebuilt() {
    let server = ServerProcess::start("sm,self,tcp", &["--capacity", "64MiB"]);
    let nam_xor = format!("scheme = \"nam-xor\"\nservers = [\"{}\"]", server.addr);
    for (scheme, redundancy) in [
        ("xor", "scheme = \"xor\"".to_string()),
        ("rs", "scheme = \"rs\"\nrs_parity = 1".to_string()),
        ("partner", "scheme = \"partner\"".to_string()),
        ("nam-xor", nam_xor.clone()),
    ] {
        let dir = temp_dir(&format!("racks-{scheme}"));
        let cfg = config(&dir, &redundancy, &format!("[failure_groups]\n{RACKS}\n"));
        let group = [("NAM_CKPT_GROUP", &*format!("racks-{scheme}-{}", std::process::id()))];
        let (ok, out) = app(&cfg, "4", &group, &dir.join("clean"), &[]);
        assert!(ok, "{scheme}:\n{out}");
        let v10 = |rank: usize| dir.join(format!("ram/emu-{rank}/app/v10"));
        for rank in 0..RANKS {
            // What each scheme stores says who it is shared with: never a rank of the same rack.
            let with: Vec<usize> = match scheme {
                "xor" | "rs" => red_set(&v10(rank).join(format!("rank-{rank}.{scheme}"))),
                "partner" => std::fs::read_dir(v10(rank))
                    .unwrap()
                    .filter_map(|e| {
                        let name = e.unwrap().file_name().into_string().unwrap();
                        name.strip_prefix(&format!("rank-{rank}.partner-"))?.parse().ok()
                    })
                    .chain([rank])
                    .collect(),
                _ => Vec::new(),
            };
            let racks: Vec<char> = with.iter().map(|&r| rack(r)).collect();
            assert!(scheme == "nam-xor" || racks.contains(&'A') && racks.contains(&'B'), "{scheme} {with:?}");
        }
        // Rack A (nodes emu-0 and emu-1) is lost whole.
        std::fs::remove_dir_all(dir.join("ram/emu-0")).unwrap();
        std::fs::remove_dir_all(dir.join("ram/emu-1")).unwrap();
        let (ok, out) = app(&cfg, "4", &group, &dir.join("restored"), &["--restart"]);
        assert!(ok && out.contains("restart version=10 level=ram rebuilt=[0, 1]"), "{scheme}:\n{out}");
        same_state(&dir.join("clean"), &dir.join("restored"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// `NAM_FAILURE_GROUP` from each rank's environment (ranks 0 and 1 in rackA, 2 and 3 in rackB,
/// one emulated node each): XOR, RS and partner lose the whole rackA and rebuild every byte
/// (`ckpt-check redundancy` compares them); without the groups the same loss is two members of
/// one XOR set, which XOR cannot rebuild.
#[test]
fn groups_from_each_ranks_environment_let_a_lost_rack_be_rebuilt() {
    let check = |scheme: &str, grouped: bool, extra: &[&str]| {
        let dir = temp_dir(&format!("env-racks-{scheme}-{grouped}"));
        let mut cmd = ckpt_support::mpi::mpirun_command();
        cmd.args(["--oversubscribe", "--mca", "btl", "self,vader,tcp"]);
        cmd.env("NAM_EMULATE_NODES", "4").args(["-x", "NAM_EMULATE_NODES"]);
        cmd.env("OMPI_MCA_rmaps_base_oversubscribe", "1");
        let mut args = vec!["ckpt-check", "redundancy", "--scheme", scheme, "--uneven", "--size-per-rank", "300KiB"];
        args.extend(["--block", "64KiB", "--lose", "0,1", "--dir", dir.to_str().unwrap()]);
        args.extend(extra);
        for (i, rack) in ["rackA", "rackB"].iter().enumerate() {
            if i > 0 {
                cmd.arg(":");
            }
            cmd.args(["-np", "2", "env"]);
            if grouped {
                cmd.arg(format!("NAM_FAILURE_GROUP={rack}"));
            }
            cmd.arg(env!("CARGO_BIN_EXE_nam-bench")).args(&args);
        }
        let out = run(cmd);
        let _ = std::fs::remove_dir_all(&dir);
        (out.status.success(), text(&out))
    };
    for (scheme, extra) in [("xor", &[][..]), ("rs", &["--rs-parity", "1"][..]), ("partner", &[][..])] {
        let (ok, out) = check(scheme, true, extra);
        assert!(ok && out.contains("bytes_match=true"), "{scheme}:\n{out}");
    }
    let (ok, out) = check("xor", false, &[]);
    assert!(!ok && out.contains("lost ranks [0, 1]"), "{out}");
}

/// What is wrong, the configuration, the environment, and what the error must say.
type BadCase<'a> = (&'a str, PathBuf, Vec<(&'a str, &'a str)>, Vec<&'a str>);

#[test]
fn unknown_groups_malformed_maps_and_impossible_placements_are_named_and_change_nothing() {
    let dir = temp_dir("racks-bad");
    let cfg = config(&dir, "scheme = \"xor\"", &format!("[failure_groups]\n{RACKS}\n"));
    let (ok, out) = app(&cfg, "4", &[], &dir.join("clean"), &[]);
    assert!(ok, "{out}");
    let stored = || tree(&dir.join("ram"));
    let before = stored();
    let one_rack = "[failure_groups]\nmap = [\"rackA: emu-0 emu-1 emu-2 emu-3\"]\n";
    let cases: [BadCase; 3] = [
        (
            "one rack",
            config_as(&dir, "one-rack.toml", "scheme = \"xor\"", one_rack),
            vec![],
            vec![
                "failure groups: scheme xor cannot keep the members of a set in different failure groups",
                "all 4 rank(s) are in failure group rackA",
                "rackA = node(s) emu-0, emu-1, emu-2, emu-3 (rank(s) 0, 1, 2, 3)",
            ],
        ),
        (
            "unknown group",
            config_as(&dir, "racks.toml", "scheme = \"xor\"", &format!("[failure_groups]\n{RACKS}\n")),
            vec![("NAM_FAILURE_GROUP", "rackZ")],
            vec!["names failure group `rackZ` (NAM_FAILURE_GROUP)", "(it defines: rackA, rackB)"],
        ),
        (
            "malformed map",
            config_as(&dir, "no-map.toml", "scheme = \"partner\"", ""),
            vec![("NAM_CKPT_FAILURE_GROUPS_MAP", "[\"rackA emu-0\"]")],
            vec!["failure_groups.map entry `rackA emu-0`: expected `<group>: <node> <node> ...`"],
        ),
    ];
    for (what, bad, env, words) in cases {
        let (ok, out) = app(&bad, "4", &env, &dir.join("bad"), &["--restart"]);
        assert!(!ok, "{what}:\n{out}");
        for w in words {
            assert!(out.contains(w), "{what}: no {w:?} in:\n{out}");
        }
        assert!(before == stored(), "{what}: the stored files changed");
    }
    let cfg = config(&dir, "scheme = \"xor\"", &format!("[failure_groups]\n{RACKS}\n"));
    let (ok, out) = app(&cfg, "4", &[], &dir.join("restored"), &["--restart"]);
    assert!(ok && out.contains("restart version=10 level=ram rebuilt=[]"), "{out}");
    same_state(&dir.join("clean"), &dir.join("restored"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn ranks_restarted_on_other_or_spare_nodes_get_their_files_and_the_gone_node_is_rebuilt() {
    let server = ServerProcess::start("sm,self,tcp", &["--capacity", "64MiB"]);
    let nam_xor = format!("scheme = \"nam-xor\"\nservers = [\"{}\"]", server.addr);
    // (scheme, restart mapping, rebuilt): a spare node emu-4, emu-0 gone; three nodes with two
    // ranks on emu-1, emu-0 gone (other sets now: the rebuild uses the recorded ones); a
    // permutation, nothing gone.
    for (i, (scheme, redundancy, nodes, rebuilt)) in [
        ("xor", "scheme = \"xor\"", "emu-1,emu-2,emu-3,emu-4", "[0]"),
        ("xor", "scheme = \"xor\"", "emu-1,emu-2,emu-3,emu-1", "[0]"),
        ("nam-xor", nam_xor.as_str(), "emu-1,emu-2,emu-3,emu-1", "[0]"),
        ("partner", "scheme = \"partner\"", "emu-3,emu-2,emu-1,emu-0", "[]"),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = temp_dir(&format!("elsewhere-{scheme}-{i}"));
        let cfg = config(&dir, redundancy, "");
        let group = [("NAM_CKPT_GROUP", &*format!("elsewhere-{i}-{}", std::process::id()))];
        let (ok, out) = app(&cfg, "4", &group, &dir.join("clean"), &[]);
        assert!(ok, "{scheme}:\n{out}");
        let (ok, out) = app(&cfg, nodes, &group, &dir.join("restored"), &["--print-latest", "--restart"]);
        assert!(
            ok && out.contains(&format!("restart version=10 level=ram rebuilt={rebuilt}")),
            "{scheme} {nodes}:\n{out}"
        );
        // `latest` judged the rebuild with the sets of the layout version 10 was written with.
        assert!(out.contains("latest version=10 level=ram skipped=0"), "{scheme} {nodes}:\n{out}");
        same_state(&dir.join("clean"), &dir.join("restored"));
        // Each rank's file is now on the node it runs on, and only there.
        let names: Vec<&str> = nodes.split(',').collect();
        for rank in 0..RANKS {
            let file = |node: &str| dir.join(format!("ram/{node}/app/v10/rank-{rank}.ckpt"));
            let now = names[rank % names.len()];
            assert!(file(now).exists(), "{scheme} {nodes}: rank {rank} has no file on {now}");
            let before = format!("emu-{rank}");
            if before != now && names.contains(&before.as_str()) {
                assert!(!file(&before).exists(), "{scheme} {nodes}: rank {rank}'s file stayed on {before}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

fn nam() -> PathBuf {
    let nam = Path::new(env!("CARGO_BIN_EXE_nam-bench")).with_file_name("nam");
    assert!(nam.exists(), "run `cargo build --workspace` before `cargo test` (no {})", nam.display());
    nam
}

#[test]
fn scavenged_node_local_checkpoints_serve_a_restart_after_every_node_lost_its_storage() {
    let dir = temp_dir("scavenge");
    let cfg = config(&dir, "scheme = \"xor\"", "");
    let (ok, out) = app(&cfg, "4", &[], &dir.join("clean"), &[]);
    assert!(ok, "{out}");
    let scavenge = |extra: &[&str]| {
        let mut args = vec!["ckpt", "scavenge", "--config", cfg.to_str().unwrap()];
        args.extend(extra);
        let out = run(mpirun(&nam(), "4", &[], &args));
        (out.status.success(), text(&out))
    };
    // A dataset that does not exist: every node says so, and nothing is written.
    let local = tree(&dir.join("ram"));
    let (ok, out) = scavenge(&["--name", "nothing"]);
    assert!(!ok && out.contains("no restartable checkpoint of `nothing` on node emu-"), "{out}");
    assert!(out.contains("no committed rank file in"), "{out}");
    assert!(!dir.join("pfs/nothing").exists() && !dir.join("pfs/app").exists(), "{out}");
    assert!(local == tree(&dir.join("ram")));

    // A truncated rank file: its node refuses it, copies nothing, and says why.
    let file = dir.join("ram/emu-2/app/v10/rank-2.ckpt");
    let good = std::fs::read(&file).unwrap();
    std::fs::write(&file, &good[..good.len() / 2]).unwrap();
    let out = Command::new(nam())
        .args(["ckpt", "scavenge", "--config", cfg.to_str().unwrap(), "--node", "emu-2"])
        .output()
        .unwrap();
    let said = text(&out);
    assert!(!out.status.success() && said.contains("corrupt checkpoint data") && said.contains("truncated"), "{said}");
    assert!(!dir.join("pfs/app/v10/rank-2.ckpt").exists() && !dir.join("pfs/app/v10/rank-2.done").exists());
    std::fs::write(&file, &good).unwrap();

    let (ok, out) = scavenge(&[]);
    assert!(ok, "{out}");
    for rank in 0..RANKS {
        assert!(
            out.contains(&format!("scavenged node=emu-{rank} name=app version=10 copied=[{rank}] already=[]")),
            "{out}"
        );
        let record = dir.join(format!("pfs/app/v10/scavenged-emu-{rank}.json"));
        assert!(std::fs::read_to_string(&record).unwrap().contains("\"copied\""), "{}", record.display());
    }
    // Run again (a job script that retries): nothing is copied twice.
    let (ok, again) = scavenge(&[]);
    assert!(ok && again.contains("copied=[] already=[0]"), "{again}");

    std::fs::remove_dir_all(dir.join("ram")).unwrap();
    std::fs::remove_dir_all(dir.join("ssd")).unwrap();
    let (ok, out) = app(&cfg, "4", &[], &dir.join("restored"), &["--restart", "--expect-level", "pfs"]);
    assert!(ok && out.contains("restart version=10 level=pfs"), "{out}");
    same_state(&dir.join("clean"), &dir.join("restored"));
    std::fs::remove_dir_all(&dir).unwrap();
}
