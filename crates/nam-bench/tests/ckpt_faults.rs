//! Bad input and faults of the checkpoint library under `mpirun`: unusable directories, a
//! RAM level too small, unknown configuration keys, region misuse, a different rank count,
//! and a flush target that fills up mid-flush. Each gives a clear error naming the cause.

mod ckpt_support;

use ckpt_support::{mpirun, run, temp_dir, text};
use std::path::{Path, PathBuf};

fn write_config(dir: &Path, extra: &str) -> PathBuf {
    let d = dir.display();
    let text = format!("name = \"app\"\n[ram]\ndir = \"{d}/ram\"\n[ssd]\ndir = \"{d}/ssd\"\nfsync = false\n{extra}");
    let path = dir.join("ckpt.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn app(ranks: usize, cfg: &Path, extra: &[&str]) -> (bool, String) {
    let mut args = vec!["ckpt-check", "app", "--config", cfg.to_str().unwrap(), "--steps", "4", "--every", "2"];
    args.extend(extra);
    let out = run(mpirun(ranks, ranks, &args));
    (out.status.success(), text(&out))
}

#[test]
fn unusable_directories_are_named() {
    let dir = temp_dir("baddir");
    std::fs::write(dir.join("a-file"), b"x").unwrap();
    let cfg = write_config(&dir, "");
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace(&format!("{}/ram", dir.display()), &format!("{}/a-file/ram", dir.display()));
    std::fs::write(&cfg, text).unwrap();
    let (ok, out) = app(2, &cfg, &[]);
    assert!(!ok && out.contains("a-file/ram is not usable: cannot create"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn ram_level_too_small_for_one_checkpoint() {
    let dir = temp_dir("smallram");
    let cfg = write_config(&dir, "[policy]\nkind = \"always-ram\"\n");
    let text = std::fs::read_to_string(&cfg).unwrap().replace("[ssd]", "capacity = \"64KiB\"\n[ssd]");
    std::fs::write(&cfg, text).unwrap();
    let (ok, out) = app(2, &cfg, &[]);
    assert!(!ok && out.contains("exceeds the RAM level's per-rank limit of 65536 bytes"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unknown_keys_are_named_and_the_resolved_config_dumps() {
    let dir = temp_dir("badkey");
    let cfg = write_config(&dir, "[flush]\nevry = 3\n");
    let (ok, out) = app(1, &cfg, &[]);
    assert!(!ok && out.contains("unknown configuration key `flush.evry`"), "{out}");
    let cfg = write_config(&dir, "");
    let mut cmd = mpirun(1, 1, &["ckpt-check", "app", "--config", cfg.to_str().unwrap(), "--dump-config"]);
    cmd.env("NAM_CKPT_POLICY_KIND", "always-ssd").env("NAM_CKPT_REDUNDANCY_SET_SIZE", "4");
    let out = run(cmd);
    let dump = text(&out);
    assert!(out.status.success() && dump.contains("kind = \"always-ssd\"") && dump.contains("set_size = 4"), "{dump}");
    assert!(dump.contains("rated_pbw = 14.6") && dump.contains("bound = 0.1"), "{dump}");
    let mut cmd = mpirun(1, 1, &["ckpt-check", "app", "--config", cfg.to_str().unwrap(), "--dump-config"]);
    cmd.env("NAM_CKPT_RAM_SIZE", "1GiB");
    let out = run(cmd);
    assert!(!out.status.success() && text(&out).contains("unknown configuration key `NAM_CKPT_RAM_SIZE`"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn region_misuse_gets_typed_errors() {
    let dir = temp_dir("regions");
    let cfg = write_config(&dir, "");
    let (ok, out) = app(1, &cfg, &["--region-errors"]);
    assert!(ok, "{out}");
    assert!(out.contains("overlap: region 3: overlaps region 1"), "{out}");
    assert!(out.contains("twice: region 1: the id is already protected"), "{out}");
    assert!(out.contains("null: region 4: the pointer is NULL"), "{out}");
    assert!(out.contains("unprotect freed: region 2 is not protected"), "{out}");
    assert!(out.contains("restart freed: region 2 is not protected"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn restart_with_a_different_rank_count_is_refused() {
    let dir = temp_dir("ranks");
    let cfg = write_config(&dir, "");
    assert!(app(3, &cfg, &[]).0);
    let (ok, out) = app(2, &cfg, &["--restart"]);
    assert!(!ok && out.contains("checkpoint was written by 3 ranks, this job has 2"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A flush target of `bytes`: a size-limited tmpfs when this process may mount one, else a
/// directory whose temporary flush files are `/dev/full` (writes fail with ENOSPC).
fn small_target(dir: &Path, bytes: u64) -> (PathBuf, bool) {
    let target = dir.join("pfs");
    std::fs::create_dir_all(&target).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs", target.to_str().unwrap()])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    (target, mounted)
}

#[test]
fn flush_target_filling_up_is_reported_and_keeps_older_flushes() {
    let dir = temp_dir("fullflush");
    // Each version is 3 ranks x ~260 KiB: the first flush fits in 1 MiB, the second does not.
    let (target, mounted) = small_target(&dir, 1 << 20);
    if !mounted {
        let v4 = target.join("app/v4");
        std::fs::create_dir_all(&v4).unwrap();
        for r in 0..3 {
            std::os::unix::fs::symlink("/dev/full", v4.join(format!("rank-{r}.tmp"))).unwrap();
        }
    }
    let flush = format!("[flush]\ndir = \"{}\"\nevery = 1\nkeep = 4\n", target.display());
    let cfg = write_config(&dir, &flush);
    // Each rank waits for its flush after each checkpoint: otherwise a fast rank's flush of
    // v4 can fill the target before a slow rank's flush of v2 lands.
    let (ok, out) = app(3, &cfg, &["--size-per-rank", "256KiB", "--wait-flush"]);
    let kept: Vec<bool> = (0..3).map(|r| target.join(format!("app/v2/rank-{r}.done")).exists()).collect();
    let partial = std::fs::read_dir(target.join("app/v4")).map(|d| d.count()).unwrap_or(0);
    if mounted {
        let _ = std::process::Command::new("umount").arg(&target).status();
    }
    assert!(!ok && out.contains("No space left on device"), "{out}");
    assert!(out.contains("checkpoint version=4"), "checkpoints go on while the flush fails:\n{out}");
    assert_eq!(kept, vec![true; 3], "the earlier flushed version stays complete");
    if mounted {
        assert_eq!(partial, 0, "no partial file of the failed flush is left");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
