//! Incremental checkpoints in the checkpoint library (`[incremental]`), under `mpirun`
//! through `nam-bench ckpt-check app`: a killed job restarts byte-exact from the RAM level, the SSD
//! level and a real `nam serve` memory server; a rank killed while its late copy was still
//! running restarts from the previous version complete on every rank; a corrupt increment
//! sends the restart to the next level, then to the previous version.

mod ckpt_support;
#[path = "../../nam-cli/tests/common/mod.rs"]
mod common;

use ckpt_support::{mpirun, run, temp_dir, text};
use common::ServerProcess;
use std::path::{Path, PathBuf};

const RANKS: usize = 2;

fn config(dir: &Path, mode: &str, levels: &str, servers: &str) -> PathBuf {
    let d = dir.display();
    let text = format!(
        "name = \"app\"\n[ram]\ndir = \"{d}/ram\"\n[ssd]\ndir = \"{d}/ssd\"\nfsync = false\n\
         [incremental]\nmode = \"{mode}\"\nlevels = {levels}\nservers = [{servers}]\n"
    );
    let path = dir.join("ckpt.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn app(cfg: &Path, extra: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut args = vec!["ckpt-check", "app", "--config", cfg.to_str().unwrap(), "--every", "2", "--steps", "10"];
    args.extend(extra);
    let mut cmd = mpirun(RANKS, RANKS, &args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(cmd);
    (out.status.success(), text(&out))
}

fn digest(out: &str) -> String {
    out.lines().find(|l| l.starts_with("final ")).unwrap_or_else(|| panic!("no final line in:\n{out}")).to_string()
}

fn clean_digest(tag: &str, size: &str) -> String {
    let dir = temp_dir(&format!("incr-clean-{tag}"));
    let (ok, out) = app(&config(&dir, "off", "[\"ssd\"]", ""), &["--size-per-rank", size], &[]);
    assert!(ok, "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
    digest(&out)
}

#[test]
fn killed_job_restarts_byte_exact_from_each_level() {
    let clean = clean_digest("level", "96KiB");
    // A short lease: the killed job's hold on its objects ends soon after it dies.
    let server_dir = temp_dir("incr-server");
    let server_cfg = common::write_config(&server_dir, "lease_ms = 300\n");
    let server = ServerProcess::start("tcp", &["--capacity", "64MiB", "--config", server_cfg.to_str().unwrap()]);
    let addr = format!("\"{}\"", server.addr);
    for (level, mode) in [("ram", "non-blocking"), ("ssd", "early-late"), ("nam", "incremental")] {
        let dir = temp_dir(&format!("incr-level-{level}"));
        let cfg = config(&dir, mode, &format!("[\"{level}\"]"), &addr);
        let env = [("NAM_TRANSPORTS", "tcp"), ("UCX_TLS", "tcp")];
        let size = ["--size-per-rank", "96KiB"];
        let (ok, killed) = app(&cfg, &[&size[..], &["--die-rank", "1", "--die-after", "7"]].concat(), &env);
        assert!(!ok, "{killed}");
        let (ok, out) = app(&cfg, &[&size[..], &["--restart", "--expect-level", level]].concat(), &env);
        // Version 6, or 4 when the background copy of 6 was still running at the kill.
        let at6 = out.contains(&format!("restart version=6 level={level}"));
        let at4 = out.contains(&format!("restart version=4 level={level}")) && out.contains("fell back from v6");
        assert!(ok && (at6 || at4), "{level}:\n{out}");
        assert_eq!(digest(&out), clean, "{level}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn rank_killed_while_its_late_copy_runs_restarts_from_the_previous_version() {
    let clean = clean_digest("late", "4MiB");
    let dir = temp_dir("incr-late");
    let cfg = config(&dir, "early-late", "[\"ssd\"]", "");
    let size = ["--size-per-rank", "4MiB"];
    let (ok, killed) = app(&cfg, &size, &[("NAM_FAULT_CKPT", "die-during-copy:6:1")]);
    assert!(!ok && killed.contains("rank 1 dies during the copy of version 6"), "{killed}");
    let (ok, out) = app(&cfg, &[&size[..], &["--restart"]].concat(), &[]);
    assert!(ok && out.contains("restart version=4 level=ssd"), "{out}");
    assert_eq!(digest(&out), clean);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Flips a byte in the middle of every data object of rank 1's checkpoint `interval`.
fn corrupt(dir: &Path, level: &str, interval: u32) {
    let objects = dir.join(level).join("app/incr-rank-1");
    let tag = format!("-{interval:010}-");
    let mut hit = 0;
    for e in std::fs::read_dir(&objects).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if name.contains(&tag) && !name.starts_with("commit") {
            let mut bytes = std::fs::read(&path).unwrap();
            let at = bytes.len() / 2;
            bytes[at] ^= 0xff;
            std::fs::write(&path, bytes).unwrap();
            hit += 1;
        }
    }
    assert!(hit > 0, "no object of interval {interval} in {}", objects.display());
}

#[test]
fn corrupt_increment_falls_back_to_the_next_level_then_the_previous_version() {
    let clean = clean_digest("corrupt", "96KiB");
    let dir = temp_dir("incr-corrupt");
    let cfg = config(&dir, "incremental", "[\"ram\", \"ssd\"]", "");
    let size = ["--size-per-rank", "96KiB"];
    let (ok, out) = app(&cfg, &size, &[]);
    assert!(ok && digest(&out) == clean, "{out}");
    // Version 10 is interval 5 of the chain.
    corrupt(&dir, "ram", 5);
    let (ok, out) = app(&cfg, &[&size[..], &["--restart"]].concat(), &[]);
    assert!(ok && out.contains("restart version=10 level=ssd"), "{out}");
    assert!(out.contains("fell_back=1"), "{out}");
    assert_eq!(digest(&out), clean);
    corrupt(&dir, "ssd", 5);
    let (ok, out) = app(&cfg, &[&size[..], &["--restart", "--restart-version", "10"]].concat(), &[]);
    assert!(!ok && out.contains("CRC32C"), "both levels of version 10 are corrupt:\n{out}");
    let (ok, out) = app(&cfg, &[&size[..], &["--restart"]].concat(), &[]);
    assert!(ok && out.contains("restart version=8 level=ram"), "{out}");
    assert_eq!(digest(&out), clean);
    std::fs::remove_dir_all(&dir).unwrap();
}
