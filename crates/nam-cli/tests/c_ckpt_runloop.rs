//! The checkpoint library's job control from C under `mpirun` (4 ranks on 4 emulated nodes),
//! with the `nam ckpt` commands driving it from outside (issue 32, items 2-4):
//! - the run loop of docs/checkpoint.md (`examples/mpi/ckpt_runloop.c`, there verbatim):
//!   `nam_ckpt_need_checkpoint` by `runloop.interval` and by `runloop.overhead`,
//!   `nam_ckpt_should_exit` stopped by
//!   `nam ckpt halt` (and going on after `--clear`), by `runloop.end_time` and by
//!   `SLURM_JOB_END_TIME`; the restarted run ends with the same bytes as an uninterrupted one;
//! - datasets (`tests/ckpt_datasets.c`): `nam ckpt list` with level, descriptor, scheme and
//!   completeness; the version a restart uses chosen by `nam ckpt current`, by
//!   `datasets.current` and by `nam_ckpt_set_current`; forgotten, deleted and output datasets
//!   never restarted from; every restart checked byte by byte;
//! - redundancy descriptors: partner every checkpoint and XOR every third on the SSD level,
//!   one chosen by the call; a rank that lost its files of an XOR-protected version is rebuilt
//!   with XOR;
//! - bad input named: an unknown descriptor, a bad interval, a malformed index, a malformed
//!   `SLURM_JOB_END_TIME`.

mod common;

use common::{lib_dir, repo, temp_dir};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RANKS: usize = 4;

/// Compiles `source` (from the repository root) with mpicc against libnam into `program`.
fn compile(source: &str, program: &Path) -> PathBuf {
    let lib = lib_dir();
    assert!(lib.join("libnam.so").exists(), "run `cargo build --workspace` before `cargo test` (no libnam.so)");
    let out = Command::new("mpicc")
        .args(["-O2", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(program)
        .arg(repo().join(source))
        .arg(format!("-I{}", repo().join("include").display()))
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lnam")
        .output()
        .expect("mpicc (Open MPI) is installed by scripts/setup.sh");
    assert!(out.status.success(), "mpicc {source} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    program.to_path_buf()
}

/// Runs `program args` under mpirun with the configuration `config` and `env`; (success, output).
fn run(program: &Path, config: &Path, env: &[(&str, String)], args: &[&str]) -> (bool, String) {
    let mut cmd = common::mpi::mpirun_command();
    cmd.args(["--oversubscribe", "--mca", "btl", "self,vader,tcp", "-np", &RANKS.to_string()])
        .args(["-x", &format!("NAM_EMULATE_NODES={RANKS}")])
        .args(["-x", &format!("NAM_CKPT_CONFIG={}", config.display())]);
    for (k, v) in env {
        cmd.args(["-x", &format!("{k}={v}")]);
    }
    let mut child = cmd.arg(program).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("mpirun");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("mpirun {args:?} did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Runs `nam ckpt args`; its output, after asserting it succeeded.
fn nam_ckpt(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_nam")).arg("ckpt").args(args).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "nam ckpt {args:?}:\n{text}");
    text
}

fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64()
}

/// The number after `key=` in the line starting with `prefix`.
fn field(out: &str, prefix: &str, key: &str) -> Option<String> {
    let line = out.lines().find(|l| l.starts_with(prefix))?;
    let at = line.find(&format!("{key}="))? + key.len() + 1;
    Some(line[at..].split([' ', ':']).next()?.to_string())
}

#[test]
fn the_run_loop_of_the_checkpoint_page_checkpoints_by_interval_and_stops_on_halt_and_time_limits() {
    let page = std::fs::read_to_string(repo().join("docs/checkpoint.md")).unwrap();
    let source = std::fs::read_to_string(repo().join("examples/mpi/ckpt_runloop.c")).unwrap();
    assert!(
        page.contains(&format!("```c\n{source}```")),
        "docs/checkpoint.md does not show examples/mpi/ckpt_runloop.c as it is"
    );
    let dir = temp_dir("c-ckpt-runloop");
    let program = compile("examples/mpi/ckpt_runloop.c", &dir.join("ckpt_runloop"));
    let config = |tag: &str| {
        let d = dir.join(tag);
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("ckpt.toml");
        let dd = d.display();
        std::fs::write(
            &path,
            format!(
                "[ram]\ndir = \"{dd}/ram\"\ncapacity = \"64MiB\"\n[ssd]\ndir = \"{dd}/ssd\"\nfsync = false\n\
                 [redundancy]\nscheme = \"xor\"\nset_size = 4\n[policy]\nkind = \"always-ram\"\n[runloop]\ninterval = 0.5\n"
            ),
        )
        .unwrap();
        (path, d)
    };
    // 150 steps of at least 10 ms each.
    let args = ["150", "10"];

    // Uninterrupted: checkpoints by the interval, not every step.
    let (whole, _) = config("whole");
    let (ok, out) = run(&program, &whole, &[], &args);
    assert!(ok && out.contains("final step=150 sum="), "{out}");
    let taken = out.lines().filter(|l| l.starts_with("checkpoint step=")).count();
    assert!((1..75).contains(&taken), "{taken} checkpoints in 150 steps of 10 ms at a 0.5 s interval:\n{out}");
    let sum = field(&out, "final ", "sum").unwrap();

    // The overhead rule instead: the first step checkpoints (the cost is not yet measured),
    // later ones only once 99 times the measured cost has passed (1 %).
    let (cost, _) = config("overhead");
    let env = [("NAM_CKPT_RUNLOOP_INTERVAL", "0".to_string()), ("NAM_CKPT_RUNLOOP_OVERHEAD", "0.01".to_string())];
    let (ok, out) = run(&program, &cost, &env, &args);
    assert!(ok && out.contains("checkpoint step=1 level=") && out.contains("final step=150 sum="), "{out}");
    let taken = out.lines().filter(|l| l.starts_with("checkpoint step=")).count();
    assert!(taken < 75, "{taken} checkpoints in 150 steps at a 1 % overhead:\n{out}");
    assert_eq!(field(&out, "final ", "sum").as_deref(), Some(sum.as_str()), "checkpoints do not change the result");

    // `nam ckpt halt` before the job: it stops once `--after` has passed, with a checkpoint.
    let (halted, hdir) = config("halted");
    let control = hdir.join("ssd");
    let said = nam_ckpt(&["halt", control.to_str().unwrap(), "--reason", "test-halt", "--after", "0.6"]);
    assert!(said.contains("halt requested from"), "{said}");
    let (ok, out) = run(&program, &halted, &[], &args);
    assert!(ok && out.contains("test-halt") && !out.contains("final step"), "{out}");
    let stopped_at = |out: &str| -> u64 {
        let step = out.lines().find_map(|l| l.strip_prefix("stopping at step ")?.split(':').next()?.parse().ok());
        step.unwrap_or_else(|| panic!("no stop in:\n{out}"))
    };
    let stopped = stopped_at(&out);
    assert!(stopped < 150, "{out}");
    let listed = nam_ckpt(&["list", hdir.join("ram").to_str().unwrap()]);
    let line = listed
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(&stopped.to_string()))
        .unwrap_or_else(|| panic!("{listed}"));
    for word in ["runloop", "ram", "default", "xor", "complete"] {
        assert!(line.split_whitespace().any(|w| w == word), "no {word} in {line:?}");
    }
    // Still halted: the next run stops at once, after restarting from the last checkpoint.
    let (ok, out) = run(&program, &halted, &[], &args);
    assert!(ok && out.contains(&format!("restarted from version {stopped} at step {stopped}")), "{out}");
    assert_eq!(stopped_at(&out), stopped + 1, "one step, then the checkpoint before stopping:\n{out}");
    assert!(nam_ckpt(&["halt", control.to_str().unwrap(), "--clear"]).contains("withdrawn"));
    let (ok, out) = run(&program, &halted, &[], &args);
    assert!(out.contains(&format!("restarted from version {} at step {0}", stopped + 1)), "{out}");
    assert!(
        ok && field(&out, "final ", "sum").as_deref() == Some(sum.as_str()),
        "restarted run ends elsewhere:\n{out}"
    );

    // The allocation's end: from the configuration's variable, then from Slurm's.
    for (tag, var) in [("end", "NAM_CKPT_RUNLOOP_END_TIME"), ("slurm", "SLURM_JOB_END_TIME")] {
        let (cfg, _) = config(tag);
        let end = format!("{:.0}", unix_now() + 2.0);
        let env = [(var, end), ("NAM_CKPT_RUNLOOP_EXIT_BEFORE", "1".to_string())];
        let (ok, out) = run(&program, &cfg, &env, &["100000", "10"]);
        assert!(ok && out.contains("stopping at step") && out.contains("the allocation ends at"), "{var}: {out}");
    }

    // Bad input is named.
    let (cfg, _) = config("bad");
    let (ok, out) = run(&program, &cfg, &[("SLURM_JOB_END_TIME", "soon".to_string())], &args);
    assert!(!ok && out.contains("SLURM_JOB_END_TIME = \"soon\" is not a Unix time"), "{out}");
    let (ok, out) = run(&program, &cfg, &[("NAM_CKPT_RUNLOOP_INTERVAL", "-1".to_string())], &args);
    assert!(!ok && out.contains("runloop.interval = -1 must be a finite number of seconds"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn datasets_are_listed_chosen_forgotten_deleted_and_protected_by_descriptors() {
    let dir = temp_dir("c-ckpt-datasets");
    let program = compile("crates/nam-cli/tests/ckpt_datasets.c", &dir.join("ckpt_datasets"));
    let d = dir.display();
    let config = dir.join("ckpt.toml");
    std::fs::write(
        &config,
        format!(
            "[ram]\ndir = \"{d}/ram\"\ncapacity = \"64MiB\"\nkeep = 8\n[ssd]\ndir = \"{d}/ssd\"\nfsync = false\n\
             keep = 3\n[flush]\ndir = \"{d}/pfs\"\nkeep = 4\n[policy]\nkind = \"always-ram\"\n\
             [redundancy]\nscheme = \"partner\"\n[descriptors.xor]\nscheme = \"xor\"\nset_size = 4\n\
             level = \"ssd\"\nevery = 3\n[descriptors.single]\nscheme = \"none\"\nevery = 0\n"
        ),
    )
    .unwrap();
    let (ram, ssd, pfs) = (dir.join("ram"), dir.join("ssd"), dir.join("pfs"));
    let go = |args: &[&str]| {
        let (ok, out) = run(&program, &config, &[], args);
        assert!(ok, "{args:?}: {out}");
        out
    };
    let restored = |out: &str| -> u64 {
        assert!(field(out, "restored ", "wrong_bytes").as_deref() == Some("0"), "{out}");
        field(out, "restored ", "version").unwrap().parse().unwrap()
    };

    // Partner every checkpoint, XOR on the SSD every third.
    let out = go(&["write", "6"]);
    for (v, level) in [(1, 1), (2, 1), (3, 2), (4, 1), (5, 1), (6, 2)] {
        assert!(out.contains(&format!("checkpoint version={v} level={level}")), "v{v}: {out}");
    }
    let out = go(&["descriptor", "single", "7"]);
    assert!(out.contains("descriptor single version=7 level=1"), "{out}");
    let listing = |dir: &Path| nam_ckpt(&["list", dir.to_str().unwrap()]);
    let row = |listed: &str, v: u64| -> Vec<String> {
        let line = listed.lines().find(|l| l.split_whitespace().nth(1) == Some(&v.to_string()));
        line.unwrap_or_else(|| panic!("no version {v} in:\n{listed}")).split_whitespace().map(String::from).collect()
    };
    let l = listing(&ram);
    for (v, descriptor, scheme) in [(1, "default", "partner"), (5, "default", "partner"), (7, "single", "none")] {
        let r = row(&l, v);
        assert_eq!(
            (r[0].as_str(), r[2].as_str(), r[3].as_str(), r[4].as_str()),
            ("data", "ram", descriptor, scheme),
            "{l}"
        );
        assert!(r.contains(&"complete".to_string()), "{l}");
    }
    let l = listing(&ssd);
    assert_eq!(&row(&l, 6)[2..5], ["ssd", "xor", "xor"], "{l}");

    // Rank 1 lost its files of v6 (and of v7, which nothing protects): XOR rebuilds v6.
    for v in [6u64, 7] {
        let level = if v == 6 { &ssd } else { &ram };
        let vdir = level.join("data").join(format!("v{v}"));
        for e in std::fs::read_dir(&vdir).unwrap() {
            let p = e.unwrap().path();
            if p.file_name().unwrap().to_str().unwrap().starts_with("rank-1.") {
                std::fs::remove_file(p).unwrap();
            }
        }
    }
    assert!(row(&listing(&ssd), 6).contains(&"3/4".to_string()));
    assert_eq!(restored(&go(&["restart"])), 6);

    // The version a restart uses: `nam ckpt current`, the configuration, the API.
    let control = pfs.to_str().unwrap();
    nam_ckpt(&["current", control, "data", "4"]);
    assert_eq!(restored(&go(&["restart"])), 4);
    let (ok, out) = run(&program, &config, &[("NAM_CKPT_DATASETS_CURRENT", "2".into())], &["restart"]);
    assert!(ok && restored(&out) == 2, "{out}");
    go(&["current", "5"]);
    assert_eq!(restored(&go(&["restart"])), 5);
    nam_ckpt(&["current", control, "data", "--clear"]);

    // Forgotten (CLI, API), output and deleted (API, CLI) datasets are never restarted from.
    nam_ckpt(&["forget", control, "data", "6"]);
    assert_eq!(restored(&go(&["restart"])), 5);
    let out = go(&["output", "8"]);
    assert!(out.contains("output status=success"), "{out}");
    assert!(row(&listing(&pfs), 8).contains(&"output".to_string()));
    assert_eq!(restored(&go(&["restart"])), 5);
    go(&["forget", "5"]);
    assert!(ram.join("data/v5/rank-0.ckpt").exists(), "forget keeps the files");
    assert_eq!(restored(&go(&["restart"])), 4);
    go(&["delete", "4"]);
    assert!(!ram.join("data/v4").exists(), "delete removes every rank's files");
    assert_eq!(restored(&go(&["restart"])), 3);
    nam_ckpt(&["delete", ssd.to_str().unwrap(), "data", "3"]);
    assert_eq!(restored(&go(&["restart"])), 2);

    // Bad input is named.
    let out = go(&["descriptor", "nope", "9"]);
    assert!(out.contains("unknown redundancy descriptor `nope` (configured: default, single, xor)"), "{out}");
    std::fs::write(pfs.join("data/index.json"), b"{\"current\": \"two\"}").unwrap();
    let out = go(&["restart"]);
    assert!(out.contains("restart status=checkpoint data corrupted") && out.contains("index.json"), "{out}");
    let failed = Command::new(env!("CARGO_BIN_EXE_nam")).args(["ckpt", "list", control]).output().unwrap();
    assert!(!failed.status.success() && String::from_utf8_lossy(&failed.stderr).contains("invalid type"));
    let _ = std::fs::remove_dir_all(&dir);
}
