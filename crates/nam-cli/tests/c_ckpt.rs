//! The C checkpoint API from a program that includes `nam.h` before `mpi.h`
//! (`tests/ckpt_order.c`, built with `mpicc` against the workspace's libnam and run under
//! `mpirun`, 4 ranks on 4 emulated nodes, one XOR set):
//! - a level chosen per call (`nam_ckpt_checkpoint_level`: SSD, RAM, PFS) and refused levels;
//! - a snapshot (`nam_ckpt_snapshot`) that checkpoints only once `snapshot.interval` passed;
//! - `nam_ckpt_latest` reports only what a restart restores: a version one rank lost (XOR
//!   rebuilds it), not one two ranks of the set lost (the previous complete one instead, at
//!   another level), and `NAM_ERR_CKPT_UNRECOVERABLE` naming what is missing when no
//!   version can be restored.
//!
//! And the two programs of docs/c.md, which must be there verbatim: `examples/c/quickstart.c`
//! against a real `nam serve`, and `examples/mpi/ckpt_quickstart.c` under `mpirun`, run to its
//! end and then again, restarting from its last checkpoint.

mod common;

use common::{lib_dir, repo, temp_dir, ServerProcess};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RANKS: usize = 4;
/// Seconds of `snapshot.interval` (the program sleeps a little longer before its snapshot).
const INTERVAL: &str = "1.0";

fn build(dir: &Path) -> PathBuf {
    compile("mpicc", "crates/nam-cli/tests/ckpt_order.c", &dir.join("ckpt_order"))
}

/// Compiles `source` (from the repository root) with `compiler` against libnam into `program`.
fn compile(compiler: &str, source: &str, program: &Path) -> PathBuf {
    let lib = lib_dir();
    assert!(lib.join("libnam.so").exists(), "run `cargo build --workspace` before `cargo test` (no libnam.so)");
    let program = program.to_path_buf();
    let out = Command::new(compiler)
        .args(["-O2", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&program)
        .arg(repo().join(source))
        .arg(format!("-I{}", repo().join("include").display()))
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lnam")
        .output()
        .expect("cc and mpicc (Open MPI) are installed by scripts/setup.sh");
    assert!(out.status.success(), "{compiler} {source} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    program
}

/// Runs the program under mpirun with the configuration `config`; (success, output).
fn run(program: &Path, config: &Path, args: &[&str]) -> (bool, String) {
    let mut child = common::mpi::mpirun_command()
        .args(["--oversubscribe", "--mca", "btl", "self,vader,tcp", "-np", &RANKS.to_string()])
        .args(["-x", &format!("NAM_EMULATE_NODES={RANKS}")])
        .args(["-x", &format!("NAM_CKPT_CONFIG={}", config.display())])
        .arg(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun");
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

/// Deletes every file of `ranks` in `<dir>/<level>/order/v<version>`; returns how many.
fn delete(dir: &Path, level: &str, version: u64, ranks: &[usize]) -> usize {
    let vdir = dir.join(level).join("order").join(format!("v{version}"));
    let mut deleted = 0;
    for entry in std::fs::read_dir(&vdir).unwrap_or_else(|e| panic!("{}: {e}", vdir.display())) {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if ranks.iter().any(|r| name.starts_with(&format!("rank-{r}."))) {
            std::fs::remove_file(&path).unwrap();
            deleted += 1;
        }
    }
    deleted
}

fn latest(program: &Path, config: &Path) -> String {
    let (ok, out) = run(program, config, &["latest"]);
    assert!(ok, "{out}");
    out
}

#[test]
fn nam_h_before_mpi_h_checkpoints_per_call_levels_and_latest_reports_only_restorable_versions() {
    let dir = temp_dir("c-ckpt-order");
    let program = build(&dir);
    let d = dir.display();
    let config = dir.join("ckpt.toml");
    std::fs::write(
        &config,
        format!(
            "name = \"order\"\n[ram]\ndir = \"{d}/ram\"\ncapacity = \"64MiB\"\n[ssd]\ndir = \"{d}/ssd\"\n\
             fsync = false\n[redundancy]\nscheme = \"xor\"\nset_size = 4\n[policy]\nkind = \"always-ram\"\n\
             [flush]\ndir = \"{d}/pfs\"\n[snapshot]\ninterval = {INTERVAL}\n"
        ),
    )
    .unwrap();

    let (ok, wrote) = run(&program, &config, &["write", INTERVAL]);
    assert!(ok, "{wrote}");
    for line in [
        "checkpoint version=1 level=2",
        "checkpoint version=2 level=1",
        "checkpoint version=3 level=3",
        "snapshot version=4 level=1",
    ] {
        assert!(wrote.contains(line), "no {line:?} in:\n{wrote}");
    }
    // The PFS checkpoint was on the PFS level when its call returned.
    for r in 0..RANKS {
        assert!(dir.join(format!("pfs/order/v3/rank-{r}.ckpt")).exists(), "rank {r}'s v3 at the PFS level");
    }

    // One rank of the XOR set lost v4: XOR rebuilds it, so v4 is reported and restored.
    assert!(delete(&dir, "ram", 4, &[1]) >= 3, "rank 1's file, parity and marker of v4");
    let out = latest(&program, &config);
    assert!(out.contains("latest found=1 version=4 status=success") && out.contains("restored version=4"), "{out}");

    // Two ranks of the set lost v4: not restorable, the previous complete version is reported.
    assert!(delete(&dir, "ram", 4, &[1, 2]) >= 6);
    let out = latest(&program, &config);
    assert!(out.contains("latest found=1 version=3 status=success") && out.contains("restored version=3"), "{out}");

    // v3 lost on RAM too: its PFS copy is complete, and is what restart restores.
    assert!(delete(&dir, "ram", 3, &[1, 2]) >= 6);
    let out = latest(&program, &config);
    assert!(out.contains("latest found=1 version=3") && out.contains("restored version=3"), "{out}");

    // Without the PFS copy, v1 on the SSD level is the newest restorable one.
    std::fs::remove_dir_all(dir.join("pfs")).unwrap();
    let out = latest(&program, &config);
    assert!(out.contains("latest found=1 version=1") && out.contains("restored version=1"), "{out}");

    // Nothing restorable: a typed status, and the message says what is missing.
    assert!(delete(&dir, "ssd", 1, &[0, 3]) >= 6);
    let out = latest(&program, &config);
    assert!(out.contains("latest found=0 version=0 status=checkpoint unrecoverable"), "{out}");
    let message = out.lines().find(|l| l.starts_with("latest message: ")).unwrap_or_else(|| panic!("{out}"));
    for part in ["v1/ssd", "v4/ram", "XOR set [0, 1, 2, 3] lost ranks [0, 3]", "lost ranks [1, 2]"] {
        assert!(message.contains(part), "no {part:?} in {message}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_programs_of_the_c_page_are_there_verbatim_and_run() {
    let page = std::fs::read_to_string(repo().join("docs/c.md")).unwrap();
    for source in ["examples/c/quickstart.c", "examples/mpi/ckpt_quickstart.c"] {
        let text = std::fs::read_to_string(repo().join(source)).unwrap();
        assert!(page.contains(&format!("```c\n{text}```")), "docs/c.md does not show {source} as it is");
    }
    let dir = temp_dir("c-quickstart");

    let quickstart = compile("cc", "examples/c/quickstart.c", &dir.join("quickstart"));
    let server = ServerProcess::start("tcp", &["--capacity", "16MiB"]);
    let out = Command::new(&quickstart)
        .env("NAM_SERVERS", server.addr.to_string())
        .env("NAM_TRANSPORTS", "tcp")
        .env("NAM_TIMEOUT_MS", "10000")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    for line in [
        "array intact",
        "counter was 10 before the third add",
        "put past the end: offset or length out of bounds (nam_put_sync: ",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }

    let program = compile("mpicc", "examples/mpi/ckpt_quickstart.c", &dir.join("ckpt_quickstart"));
    let d = dir.display();
    let config = dir.join("ckpt.toml");
    std::fs::write(&config, format!("[ram]\ndir = \"{d}/ram\"\n[ssd]\ndir = \"{d}/ssd\"\nfsync = false\n")).unwrap();
    let (ok, first) = run(&program, &config, &[]);
    assert!(ok && !first.contains("restarted"), "{first}");
    for line in ["checkpoint step=100 level=2", "checkpoint step=400 level=2", "final step=400 sum="] {
        assert!(first.contains(line), "no {line:?} in:\n{first}");
    }
    let (ok, again) = run(&program, &config, &[]);
    assert!(ok && again.contains("restarted from version 400 at step 400"), "{again}");
    let sum = |out: &str| out.lines().find(|l| l.starts_with("final ")).map(str::to_string);
    assert_eq!(sum(&again), sum(&first));
    let _ = std::fs::remove_dir_all(&dir);
}
