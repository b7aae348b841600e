//! The checkpoint library under `mpirun`, through `nam-bench ckpt-check app`: every level and L2
//! scheme, a killed job restarting to the same final answer as an uninterrupted run, restart
//! from each level, rebuild of a rank that lost its data, repair and fallback on corrupted
//! or truncated files, a rank killed during a checkpoint, and the async flush.

mod ckpt_support;

use ckpt_support::{mpirun, run, temp_dir, text};
use std::path::{Path, PathBuf};

const RANKS: usize = 3;

fn config(dir: &Path, scheme: &str, policy: &str, flush_every: u64) -> PathBuf {
    let d = dir.display();
    let text = format!(
        "name = \"app\"\n[ram]\ndir = \"{d}/ram\"\ncapacity = \"64MiB\"\n[ssd]\ndir = \"{d}/ssd\"\nfsync = false\n\
         [redundancy]\nscheme = \"{scheme}\"\n[policy]\nkind = \"{policy}\"\nratio = 1\n\
         [flush]\ndir = \"{d}/pfs\"\nevery = {flush_every}\n"
    );
    let path = dir.join("ckpt.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn app(cfg: &Path, extra: &[&str]) -> (bool, String) {
    let mut args = vec!["ckpt-check", "app", "--config", cfg.to_str().unwrap()];
    if !extra.contains(&"--every") {
        args.extend(["--every", "2"]);
    }
    if !extra.contains(&"--steps") {
        args.extend(["--steps", "10"]);
    }
    args.extend(extra);
    let out = run(mpirun(RANKS, RANKS, &args));
    (out.status.success(), text(&out))
}

fn digest(out: &str) -> String {
    out.lines().find(|l| l.starts_with("final ")).unwrap_or_else(|| panic!("no final line in:\n{out}")).to_string()
}

fn rank_file(dir: &Path, level: &str, version: u64, rank: usize) -> PathBuf {
    dir.join(level).join("app").join(format!("v{version}")).join(format!("rank-{rank}.ckpt"))
}

#[test]
fn killed_job_restarts_to_the_uninterrupted_answer_with_every_scheme() {
    for scheme in ["none", "partner", "xor"] {
        let dir = temp_dir(&format!("kill-{scheme}"));
        let cfg = config(&dir, scheme, "ratio", 2);
        let (ok, clean) = app(&cfg, &[]);
        assert!(ok, "{clean}");
        std::fs::remove_dir_all(dir.join("ram")).unwrap();
        std::fs::remove_dir_all(dir.join("ssd")).unwrap();
        std::fs::remove_dir_all(dir.join("pfs")).unwrap();
        let (ok, killed) = app(&cfg, &["--die-rank", "1", "--die-after", "7"]);
        assert!(!ok, "{killed}");
        let (ok, restarted) = app(&cfg, &["--restart"]);
        assert!(ok && restarted.contains("restart version=6"), "{scheme}:\n{restarted}");
        assert_eq!(digest(&restarted), digest(&clean), "{scheme}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn routed_files_are_checkpointed_and_restored() {
    let dir = temp_dir("routed");
    let cfg = config(&dir, "xor", "ratio", 0);
    let (ok, out) = app(&cfg, &["--routed-file", "--die-rank", "2", "--die-after", "7"]);
    assert!(!ok, "{out}");
    let (ok, out) = app(&cfg, &["--routed-file", "--restart"]);
    assert!(ok && out.contains("restart version=6"), "{out}");
    for rank in 0..RANKS {
        assert!(out.contains(&format!("routed rank {rank}: step 6 of rank {rank}")), "{out}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn restart_comes_from_each_level() {
    for (policy, level) in [("always-ram", "ram"), ("always-ssd", "ssd")] {
        let dir = temp_dir(&format!("level-{level}"));
        let cfg = config(&dir, "none", policy, 0);
        assert!(app(&cfg, &["--steps", "4"]).0);
        let (ok, out) = app(&cfg, &["--restart", "--expect-level", level]);
        assert!(ok && out.contains(&format!("restart version=4 level={level}")), "{out}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // L3: the flushed copy serves once both node-local levels are gone.
    let dir = temp_dir("level-pfs");
    let cfg = config(&dir, "none", "ratio", 1);
    let (ok, first) = app(&cfg, &["--steps", "6"]);
    assert!(ok, "{first}");
    std::fs::remove_dir_all(dir.join("ram")).unwrap();
    std::fs::remove_dir_all(dir.join("ssd")).unwrap();
    let (ok, out) = app(&cfg, &["--restart", "--expect-level", "pfs"]);
    assert!(ok && out.contains("restart version=6 level=pfs"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn lost_rank_is_rebuilt_by_l2_and_selected_regions_restore() {
    for scheme in ["partner", "xor", "rs"] {
        let dir = temp_dir(&format!("lost-{scheme}"));
        let cfg = config(&dir, scheme, "always-ram", 0);
        let (ok, clean) = app(&cfg, &[]);
        assert!(ok, "{clean}");
        let vdir = dir.join("ram/app/v10");
        for e in std::fs::read_dir(&vdir).unwrap() {
            let p = e.unwrap().path();
            if p.file_name().unwrap().to_str().unwrap().starts_with("rank-2.") {
                std::fs::remove_file(p).unwrap();
            }
        }
        let (ok, out) = app(&cfg, &["--restart", "--restart-version", "10", "--restart-state-only"]);
        assert!(ok && out.contains("restart version=10 level=ram rebuilt=[2]"), "{scheme}:\n{out}");
        assert_eq!(digest(&out), digest(&clean), "{scheme}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A job that protects other regions than a version was written with: the rank rebuilt by
/// L2 (its file and footer gone) cuts its data by the region layout recorded with the
/// version, so every rank refuses the restart with the same typed error naming the region
/// and both sizes, and restores no wrong bytes; with the layout of the checkpoint the same
/// version restores every byte.
#[test]
fn a_rebuilt_rank_uses_the_region_layout_recorded_with_its_version() {
    let dir = temp_dir("layout-change");
    let cfg = config(&dir, "xor", "always-ram", 0);
    let (ok, clean) = app(&cfg, &["--size-per-rank", "64KiB"]);
    assert!(ok, "{clean}");
    for e in std::fs::read_dir(dir.join("ram/app/v10")).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap().to_str().unwrap().starts_with("rank-1.") {
            std::fs::remove_file(p).unwrap();
        }
    }
    // Region 1 of rank r was 64 KiB + 8r bytes; now it is 32 KiB + 8r.
    let (ok, out) = app(&cfg, &["--size-per-rank", "32KiB", "--print-latest", "--restart-version", "10"]);
    assert!(!ok, "a restart into regions of other sizes succeeded:\n{out}");
    assert!(out.contains("latest version=10 level=ram skipped=0"), "{out}");
    for rank in 0..RANKS {
        let mismatch = format!("region 1: stored {} bytes, protected {} bytes", 65536 + 8 * rank, 32768 + 8 * rank);
        assert!(out.contains(&mismatch), "rank {rank} does not name the layout mismatch:\n{out}");
    }
    assert!(!out.contains("restart version="), "{out}");
    let (ok, out) = app(&cfg, &["--size-per-rank", "64KiB", "--restart-version", "10"]);
    assert!(ok && out.contains("restart version=10 level=ram rebuilt=[1]"), "{out}");
    assert_eq!(digest(&out), digest(&clean));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn reserved_ram_files_take_every_checkpoint_and_restart_matches() {
    use std::os::unix::fs::MetadataExt;
    let dir = temp_dir("reserve");
    let cfg = config(&dir, "none", "always-ram", 0);
    let (ok, clean) = app(&cfg, &[]);
    assert!(ok, "{clean}");
    std::fs::remove_dir_all(dir.join("ram")).unwrap();
    let (ok, out) = app(&cfg, &["--reserve"]);
    assert!(ok, "{out}");
    for rank in 0..RANKS {
        // keep = 2: the two versions kept and the one being written, all reserved up front.
        let line = out.lines().find(|l| l.starts_with(&format!("reserved rank={rank} "))).expect("reserve line");
        let reserved: Vec<u64> = line
            .split("inodes=[")
            .nth(1)
            .unwrap()
            .trim_end_matches(']')
            .split(", ")
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(reserved.len(), 3, "{line}");
        // After five checkpoints, the files of this rank (versions 8 and 10 and the spare)
        // are the reserved ones: no checkpoint allocated a file of its own.
        let mut now: Vec<u64> = [rank_file(&dir, "ram", 8, rank), rank_file(&dir, "ram", 10, rank)]
            .iter()
            .chain(&(0..3).map(|i| dir.join(format!("ram/app/spare-rank-{rank}.{i}.ckpt"))).collect::<Vec<_>>())
            .filter_map(|p| std::fs::metadata(p).ok().map(|m| m.ino()))
            .collect();
        now.sort_unstable();
        assert_eq!(now, reserved, "rank {rank}:\n{out}");
    }
    assert_eq!(digest(&out), digest(&clean));
    let (ok, restarted) = app(&cfg, &["--restart", "--expect-level", "ram"]);
    assert!(ok && restarted.contains("restart version=10 level=ram"), "{restarted}");
    assert_eq!(digest(&restarted), digest(&clean));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn flip(path: &Path, offsets: &[usize]) {
    let mut bytes = std::fs::read(path).unwrap();
    for &o in offsets {
        bytes[o] ^= 0xff;
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn corruption_is_repaired_or_falls_back_never_returned() {
    let dir = temp_dir("corrupt");
    let cfg = config(&dir, "none", "ratio", 0);
    let (ok, clean) = app(&cfg, &[]);
    assert!(ok, "{clean}");
    // v10 is in RAM (ratio 1:1 → RAM, SSD, RAM, ...), v8 on the SSD.
    let ram10 = rank_file(&dir, "ram", 10, 1);
    flip(&ram10, &[100]);
    let (ok, out) = app(&cfg, &["--restart"]);
    assert!(ok && out.contains("restart version=10 level=ram rebuilt=[] repaired_chunks=1"), "{out}");
    assert_eq!(digest(&out), digest(&clean));
    // With chunk 0 still bad, three bad chunks in one stripe exceed its two parity chunks:
    // fall back to v8 on the SSD.
    flip(&ram10, &[70_000, 140_000]);
    // (--every 100: the restarted runs write no new versions over the damaged ones.)
    let (ok, out) = app(&cfg, &["--restart", "--every", "100"]);
    assert!(ok && out.contains("restart version=8 level=ssd") && out.contains("CRC32C"), "{out}");
    assert_eq!(digest(&out), digest(&clean));
    // A truncated SSD file: fall back further, to the older RAM version v6.
    let ssd8 = rank_file(&dir, "ssd", 8, 0);
    let len = std::fs::metadata(&ssd8).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&ssd8).unwrap().set_len(len / 2).unwrap();
    let (ok, out) = app(&cfg, &["--restart", "--every", "100"]);
    assert!(ok && out.contains("restart version=6 level=ram") && out.contains("truncated"), "{out}");
    assert_eq!(digest(&out), digest(&clean));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn app_with_fault(cfg: &Path, fault: &str) -> String {
    let mut cmd = ckpt_support::mpi::mpirun_command();
    cmd.args(["--oversubscribe", "--mca", "btl", "self,vader,tcp", "-np", &RANKS.to_string()])
        .args(["-x", &format!("NAM_EMULATE_NODES={RANKS}"), "-x", &format!("NAM_FAULT_CKPT={fault}")])
        .arg(env!("CARGO_BIN_EXE_nam-bench"))
        .args(["ckpt-check", "app", "--config", cfg.to_str().unwrap(), "--steps", "10", "--every", "2"]);
    let out = run(cmd);
    assert!(!out.status.success(), "{}", text(&out));
    text(&out)
}

#[test]
fn rank_killed_during_checkpoint_leaves_the_previous_version() {
    // Killed after writing its file, before the L2 protect: no rank commits version 6.
    let dir = temp_dir("die-in-ckpt");
    let cfg = config(&dir, "xor", "always-ssd", 0);
    app_with_fault(&cfg, "die-before-protect:6:1");
    let (ok, out) = app(&cfg, &["--restart"]);
    assert!(ok && out.contains("restart version=4 level=ssd"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
    // Killed after the protect, before its commit marker: version 6 is complete on every
    // rank but one marker is missing; that rank counts as lost and L2 rebuilds it.
    let dir = temp_dir("die-before-commit");
    let cfg = config(&dir, "xor", "always-ssd", 0);
    app_with_fault(&cfg, "die-before-commit:6:1");
    let (ok, out) = app(&cfg, &["--restart"]);
    assert!(ok && out.contains("restart version=6 level=ssd rebuilt=[1]"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// LE+PLE with the SSD probe knows an SSD checkpoint's cost before the first one: under a
/// bound no SSD checkpoint can meet, the first checkpoint goes to RAM. Without the probe
/// (`ssd_probe = 0`, Abeyratne 2017's test) the first one goes to the SSD blind, and only the
/// measured cost keeps the next ones in RAM.
#[test]
fn le_ple_first_checkpoint_is_placed_with_the_probed_ssd_cost() {
    for (probe, first_level) in [("\"1MiB\"", "ram"), ("0", "ssd")] {
        let dir = temp_dir(&format!("probe-{first_level}"));
        let d = dir.display();
        let text = format!(
            "name = \"app\"\n[ram]\ndir = \"{d}/ram\"\ncapacity = \"64MiB\"\n[ssd]\ndir = \"{d}/ssd\"\nfsync = true\n\
             [policy]\nkind = \"le-ple\"\nbound = 1e-9\nssd_probe = {probe}\n"
        );
        let cfg = dir.join("ckpt.toml");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&cfg, text).unwrap();
        let (ok, out) = app(&cfg, &["--steps", "4"]);
        assert!(ok, "{out}");
        assert!(out.contains(&format!("checkpoint version=2 level={first_level}")), "probe {probe}:\n{out}");
        assert!(out.contains("checkpoint version=4 level=ram"), "probe {probe}:\n{out}");
        let leftovers: Vec<_> = std::fs::read_dir(dir.join("ssd"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains("probe"))
            .collect();
        assert!(leftovers.is_empty(), "the probe files were not removed");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
