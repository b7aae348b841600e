//! The compatibility suite of the `LD_PRELOAD` library: real, unmodified programs with the
//! library's default settings (only `NAM_SERVERS` and a local budget smaller than the
//! program's heap, so that far memory is really used), each compared with a run on local
//! memory, and each again with its memory server killed mid-run (it must end with the
//! library's fatal message and `nam_farmem::FATAL_EXIT_STATUS` within a deadline):
//!
//! - `farmem_calls.c`: every memory call a program may make on far memory (madvise with
//!   every advice, mprotect, munmap of parts, mremap, mlock, file I/O, fork);
//! - a numpy script (the project's `.venv`, made by `scripts/setup.sh`), whose printed
//!   results must equal a local run's;
//! - GNU sort, whose output's hash must equal a local run's;
//! - Redis (Debian's, on jemalloc, whose heap mappings are far) under `redis-benchmark`,
//!   with every value checked by a client of the test's own (redis-benchmark checks none).
//!
//! - memcached (its slab pages far), every value checked over its text protocol (the
//!   benchmark's run of it is nam-bench's `farmem_memcached.rs`).
//!
//! The region's address space is set to 256 MiB (`NAM_FARMEM_BYTES`) only because the test
//! server's pool is small.

mod common;

use common::ServerProcess;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A program must end, normally or after its server died, within this.
const DEADLINE: Duration = Duration::from_secs(90);
/// The local budget: smaller than every program's heap here.
const BUDGET: &str = "4MiB";

fn preload() -> PathBuf {
    let lib = common::lib_dir().join("libnam_farmem_preload.so");
    assert!(lib.exists(), "{} missing: run `cargo build -p nam-farmem-preload` first", lib.display());
    lib
}

/// `command` set up to run on far memory from `server`, with default settings.
fn on_far_memory(command: &mut Command, server: &ServerProcess) {
    command
        .env("LD_PRELOAD", preload())
        .env("NAM_SERVERS", server.addr.to_string())
        .env("NAM_TRANSPORTS", &server.transports)
        .env("NAM_FARMEM_LOCAL_BYTES", BUDGET)
        .env("NAM_FARMEM_BYTES", "256MiB")
        .env("NAM_FARMEM_STATS", "1");
}

/// A running program whose stdout and stderr are collected line by line.
struct Program {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Program {
    fn start(mut command: Command) -> Program {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("run {command:?} (scripts/setup.sh installs it): {e}"));
        let (tx, lines) = mpsc::channel();
        let pipes: [Box<dyn Read + Send>; 2] =
            [Box::new(child.stdout.take().unwrap()), Box::new(child.stderr.take().unwrap())];
        for pipe in pipes {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Program { child, lines, seen: Vec::new() }
    }

    /// Waits for a line containing `text` (panics at the deadline or if the program ends).
    fn wait_for(&mut self, text: &str) {
        let deadline = Instant::now() + DEADLINE;
        while !self.seen.iter().any(|l| l.contains(text)) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!("no line with {text:?} within {DEADLINE:?}: {}", self.seen.join("\n")),
            }
        }
    }

    /// The exit status (killed at the deadline: `None`) and everything it printed.
    fn finish(mut self) -> (Option<ExitStatus>, String) {
        let deadline = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(line);
        }
        (status, self.seen.join("\n"))
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `command` to its end.
fn run(command: Command) -> (Option<ExitStatus>, String) {
    Program::start(command).finish()
}

/// The bytes the library says it placed in far memory since the start (blocks and
/// mappings), from its `NAM_FARMEM_STATS` lines, and its evictions.
fn far_use(output: &str) -> (u64, u64) {
    let number_after = |marker: &str| -> u64 {
        let rest = output.split(marker).nth(1).unwrap_or_else(|| panic!("no {marker:?} in: {output}"));
        rest.split(|c: char| !c.is_ascii_digit()).find(|s| !s.is_empty()).and_then(|n| n.parse().ok()).unwrap()
    };
    let mapped = number_after("anonymous mappings in far memory (");
    let blocks = number_after("blocks in far memory (");
    (mapped + blocks, number_after(" evictions "))
}

/// Asserts that a run ended with the library's fatal status and message, in time.
fn assert_fatal(status: Option<ExitStatus>, output: &str, what: &str) {
    let status =
        status.unwrap_or_else(|| panic!("{what} did not end within {DEADLINE:?} after its server died: {output}"));
    assert_eq!(status.code(), Some(nam_farmem::FATAL_EXIT_STATUS), "{what} ended with {status}: {output}");
    assert!(output.contains("nam-farmem: fatal:"), "{what}: no fatal message: {output}");
}

#[test]
fn every_memory_call_behaves_on_far_memory_as_on_local_memory() {
    let dir = common::temp_dir("farmem-calls");
    let program = dir.join("calls");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/farmem_calls.c");
    let cc = Command::new("cc").arg(&source).args(["-O2", "-o"]).arg(&program).output().expect("run cc");
    assert!(cc.status.success(), "cc failed: {}", String::from_utf8_lossy(&cc.stderr));

    let (status, local) = run(Command::new(&program));
    assert!(status.is_some_and(|s| s.success()) && local.contains("ok all"), "on local memory: {local}");
    assert!(local.contains("forked child status 0"), "a forked child reads its data locally: {local}");

    let server = ServerProcess::start("tcp", &["--capacity", "1GiB"]);
    let mut command = Command::new(&program);
    on_far_memory(&mut command, &server);
    let (status, far) = run(command);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.is_some_and(|s| s.success()) && far.contains("ok all"), "on far memory ({status:?}): {far}");
    // A forked child that touches far pages the parent had evicted ends with the fatal
    // status, never reading zeros; its parent carries on.
    let child = format!("forked child status {}", nam_farmem::FATAL_EXIT_STATUS);
    assert!(far.contains(&child) && far.contains("does not follow fork"), "{far}");
    let (bytes, evictions) = far_use(&far);
    assert!(bytes >= 16 << 20 && evictions > 0, "the mappings were not far: {far}");
}

/// The numpy job: matrix products, a sort and reductions over arrays of about 20 MiB in
/// all, results printed exactly (hashes of the arrays' bytes). With `forever`, it prints
/// "ready" and then keeps reading its arrays until it is ended.
fn numpy_script(forever: bool) -> String {
    let tail =
        if forever { "print('ready', flush=True)\nwhile True:\n    s = float(b.sum()) + float(d.sum())\n" } else { "" };
    format!(
        "import hashlib, numpy as np\n\
         rng = np.random.default_rng(7)\n\
         a = rng.random((360, 360)); b = rng.random((360, 360))\n\
         c = a @ b @ a\n\
         d = np.sort(rng.random(1_500_000))\n\
         e = np.cumsum(rng.integers(0, 1000, 1_000_000))\n\
         h = lambda x: hashlib.sha256(x.tobytes()).hexdigest()\n\
         print('c', h(c)); print('d', h(d), repr(float(d[::997].sum()))); print('e', h(e), int(e[-1]))\n\
         {tail}"
    )
}

fn python() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    assert!(venv.exists(), "{} missing: run scripts/setup.sh", venv.display());
    venv
}

#[test]
fn numpy_results_on_far_memory_equal_a_local_run() {
    let mut local = Command::new(python());
    local.args(["-c", &numpy_script(false)]);
    let (status, expected) = run(local);
    assert!(status.is_some_and(|s| s.success()), "numpy on local memory: {expected}");

    let server = ServerProcess::start("tcp", &["--capacity", "1GiB"]);
    let mut far = Command::new(python());
    far.args(["-c", &numpy_script(false)]);
    on_far_memory(&mut far, &server);
    let (status, output) = run(far);
    assert!(status.is_some_and(|s| s.success()), "numpy on far memory ended with {status:?}: {output}");
    for line in expected.lines() {
        assert!(output.lines().any(|l| l == line), "result {line:?} differs on far memory: {output}");
    }
    let (bytes, evictions) = far_use(&output);
    assert!(bytes > 8 << 20 && evictions > 0, "numpy's arrays were not far: {output}");
}

#[test]
fn numpy_ends_with_the_fatal_status_when_its_server_dies() {
    let mut server = ServerProcess::start("tcp", &["--capacity", "1GiB"]);
    let mut far = Command::new(python());
    far.args(["-c", &numpy_script(true)]);
    on_far_memory(&mut far, &server);
    let mut program = Program::start(far);
    program.wait_for("ready");
    server.child.kill().unwrap();
    let _ = server.child.wait();
    let (status, output) = program.finish();
    assert_fatal(status, &output, "numpy");
}

/// Lines for sort: 120 000 of them, about 7 MiB, in a scrambled order.
fn sort_input() -> Vec<u8> {
    let mut text = Vec::with_capacity(8 << 20);
    for i in 0u64..120_000 {
        let k = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20;
        writeln!(text, "{k:016x} line {i} {}", "abcdefghij".repeat((i % 5) as usize + 1)).unwrap();
    }
    text
}

fn sha256_hex(bytes: &[u8]) -> String {
    let mut child = Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("sha256sum");
    let mut stdin = child.stdin.take().unwrap();
    let data = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or_default().to_string()
}

#[test]
fn gnu_sort_output_on_far_memory_hashes_as_a_local_run() {
    let dir = common::temp_dir("farmem-sort");
    let input = dir.join("input");
    std::fs::write(&input, sort_input()).unwrap();
    let sort = |far: Option<&ServerProcess>| {
        let mut command = Command::new("sort");
        // One thread, and a buffer as large as the input: the whole input is in sort's heap.
        command.args(["--parallel=1", "-S", "64M"]).arg(&input).env("LC_ALL", "C");
        if let Some(server) = far {
            on_far_memory(&mut command, server);
        }
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let out = command.output().expect("run sort");
        assert!(out.status.success(), "sort ended with {}: {}", out.status, String::from_utf8_lossy(&out.stderr));
        (sha256_hex(&out.stdout), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (local_hash, _) = sort(None);
    let server = ServerProcess::start("tcp", &["--capacity", "1GiB"]);
    let (far_hash, stderr) = sort(Some(&server));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(far_hash, local_hash, "sort's output differs on far memory: {stderr}");
    let (bytes, evictions) = far_use(&stderr);
    assert!(bytes > 7 << 20 && evictions > 0, "sort's buffer was not far: {stderr}");
}

#[test]
fn gnu_sort_with_its_default_buffer_and_the_default_address_space_is_far() {
    // No `-S` and no `NAM_FARMEM_BYTES`: sort sizes its buffer by the machine's memory
    // (2.6 GB at once on a 23 GB machine), which the 2 GiB heap half of the old 4 GiB
    // default address space could not take, so the whole buffer stayed local.
    let dir = common::temp_dir("farmem-sort-default");
    let input = dir.join("input");
    let input_bytes = sort_input();
    std::fs::write(&input, &input_bytes).unwrap();
    let server = ServerProcess::start("tcp", &[]);
    let mut command = Command::new("sort");
    command.args(["--parallel=1"]).arg(&input).env("LC_ALL", "C");
    command
        .env("LD_PRELOAD", preload())
        .env("NAM_SERVERS", server.addr.to_string())
        .env("NAM_TRANSPORTS", &server.transports)
        .env("NAM_FARMEM_LOCAL_BYTES", BUDGET)
        .env_remove("NAM_FARMEM_BYTES")
        .env("NAM_FARMEM_STATS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = command.output().expect("run sort");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "sort ended with {}: {stderr}", out.status);
    let mut lines: Vec<&[u8]> = input_bytes.split_inclusive(|&b| b == b'\n').collect();
    lines.sort(); // LC_ALL=C: byte order
    assert!(out.stdout == lines.concat(), "sort's output is not its input sorted: {stderr}");
    assert!(stderr.contains(" 0 requests far memory could not take"), "a request stayed local: {stderr}");
    let (bytes, evictions) = far_use(&stderr);
    assert!(bytes > 7 << 20 && evictions > 0, "sort's buffer was not far: {stderr}");
}

#[test]
fn gnu_sort_ends_with_the_fatal_status_when_its_server_dies() {
    let mut server = ServerProcess::start("tcp", &["--capacity", "1GiB"]);
    let mut command = Command::new("sort");
    command.args(["--parallel=1", "-S", "64M"]).env("LC_ALL", "C").stdin(Stdio::piped());
    on_far_memory(&mut command, &server);
    let mut program = Program::start(command);
    let mut stdin = program.child.stdin.take().unwrap();
    let input = sort_input();
    // Half the input first: more than the budget, so sort's buffer holds far pages. The
    // rest after the server died: sort must touch its far buffer again to take it.
    let half = input.len() * 3 / 4;
    stdin.write_all(&input[..half]).unwrap();
    program.wait_for("far memory in use");
    std::thread::sleep(Duration::from_millis(500));
    server.child.kill().unwrap();
    let _ = server.child.wait();
    let _ = stdin.write_all(&input[half..]); // fails once sort has ended
    drop(stdin);
    let (status, output) = program.finish();
    assert_fatal(status, &output, "sort");
}

/// Redis's values in this suite: 16 KiB each (small objects, in jemalloc's heap), each byte
/// depending on the key.
const VALUE: usize = 16 << 10;
const OWN_KEYS: usize = 400;

fn own_value(i: usize) -> Vec<u8> {
    (0..VALUE).map(|j| (i * 7 + j * 13 + (j >> 9)) as u8).collect()
}

/// A `redis-server` on far memory, on a Unix socket in `dir`.
fn start_redis(dir: &Path, server: &ServerProcess) -> (Program, PathBuf) {
    let socket = dir.join("redis.sock");
    let mut command = Command::new("redis-server");
    command
        .args(["--port", "0", "--unixsocket"])
        .arg(&socket)
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "", "--dir"])
        .arg(dir)
        .stdin(Stdio::null());
    on_far_memory(&mut command, server);
    (listening(Program::start(command), &socket, "redis-server"), socket)
}

/// `program` once it listens on `socket` (panics if it ends first, or at the deadline).
fn listening(mut program: Program, socket: &Path, what: &str) -> Program {
    let deadline = Instant::now() + DEADLINE;
    while UnixStream::connect(socket).is_err() {
        if let Some(status) = program.child.try_wait().unwrap() {
            panic!("{what} ended at startup with {status}: {}", program.finish().1);
        }
        assert!(Instant::now() < deadline, "{what} did not listen within {DEADLINE:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    program
}

/// A client of the Redis protocol (RESP 2): one command, one reply.
struct Resp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Resp {
    fn connect(socket: &Path) -> Resp {
        let stream = UnixStream::connect(socket).expect("connect to redis-server");
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        Resp { reader: BufReader::new(stream.try_clone().unwrap()), writer: stream }
    }

    /// The reply: `Some(bytes)` for a bulk or simple string, `None` for nil, and for an
    /// array its elements joined by newlines (enough for KEYS).
    fn call(&mut self, args: &[&[u8]]) -> Option<Vec<u8>> {
        let mut command = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            command.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            command.extend_from_slice(arg);
            command.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&command).expect("send to redis-server");
        self.reply()
    }

    fn reply(&mut self) -> Option<Vec<u8>> {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("reply from redis-server");
        let line = line.trim_end();
        assert!(!line.is_empty(), "redis-server closed the connection");
        let (kind, rest) = line.split_at(1);
        match kind {
            "+" | ":" => Some(rest.as_bytes().to_vec()),
            "$" if rest == "-1" => None,
            "$" => {
                let mut data = vec![0; rest.parse::<usize>().unwrap() + 2];
                self.reader.read_exact(&mut data).unwrap();
                data.truncate(data.len() - 2);
                Some(data)
            }
            "*" => {
                let items: Vec<Vec<u8>> = (0..rest.parse::<usize>().unwrap()).filter_map(|_| self.reply()).collect();
                Some(items.join(&b'\n'))
            }
            _ => panic!("redis-server replied {line:?}"),
        }
    }
}

/// `redis-benchmark` on `socket`: `args` are its test selection or its own command.
fn redis_benchmark(socket: &Path, requests: u32, args: &[&str]) -> Command {
    let mut command = Command::new("redis-benchmark");
    command.arg("-s").arg(socket).args(["-r", "2000", "-d", &VALUE.to_string(), "-c", "4", "-q"]);
    command.args(["-n", &requests.to_string()]).args(args);
    command
}

/// The value redis-benchmark's SETs write in the checked run (its own `-d` values are
/// random, so they could not be checked): printable, every byte depending on its place.
fn bench_value() -> String {
    (0..VALUE).map(|j| char::from(b'!' + ((j * 7 + j / 64) % 94) as u8)).collect()
}

#[test]
fn redis_under_redis_benchmark_keeps_every_value_on_far_memory() {
    let dir = common::temp_dir("farmem-redis-bench");
    let server = ServerProcess::start("tcp", &["--capacity", "1GiB"]);
    let (redis, socket) = start_redis(&dir, &server);
    let mut client = Resp::connect(&socket);
    let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for i in 0..OWN_KEYS {
            assert_eq!(client.call(&[b"SET", format!("own:{i}").as_bytes(), &own_value(i)]), Some(b"OK".to_vec()));
        }
        let value = bench_value();
        for args in [&["SET", "key:__rand_int__", &value][..], &["-t", "get"][..]] {
            let bench = redis_benchmark(&socket, 3000, args).output().expect("run redis-benchmark (redis-tools)");
            assert!(bench.status.success(), "redis-benchmark: {}", String::from_utf8_lossy(&bench.stderr));
        }
        // redis-benchmark wrote `value` under key:<12 digits> and read them back, checking
        // nothing: every key it wrote is read back here, and every key of the test's own.
        let keys = client.call(&[b"KEYS", b"key:*"]).unwrap_or_default();
        let keys: Vec<&[u8]> = keys.split(|&b| b == b'\n').filter(|k| !k.is_empty()).collect();
        assert!(keys.len() > 100, "redis-benchmark wrote {} keys", keys.len());
        for key in &keys {
            let got = client.call(&[b"GET", key]);
            assert!(got.as_deref() == Some(value.as_bytes()), "{}: wrong value", String::from_utf8_lossy(key));
        }
        for i in (0..OWN_KEYS).rev() {
            let got = client.call(&[b"GET", format!("own:{i}").as_bytes()]);
            assert!(got.as_deref() == Some(&own_value(i)[..]), "own:{i}: wrong value");
        }
    }));
    if let Err(panic) = checked {
        // What Redis said (the library's messages among it) explains a failed check.
        eprintln!("redis-server's output: {}", redis.finish().1);
        std::panic::resume_unwind(panic);
    }
    // No reply: Redis closes the connection as it shuts down.
    client.writer.write_all(b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n").unwrap();
    let (status, output) = redis.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.is_some_and(|s| s.success()), "redis-server ended with {status:?}: {output}");
    let (bytes, evictions) = far_use(&output);
    assert!(bytes > 16 << 20 && evictions > 0, "Redis's heap was not far: {output}");
}

#[test]
fn redis_under_redis_benchmark_ends_with_the_fatal_status_when_its_server_dies() {
    let dir = common::temp_dir("farmem-redis-bench-fatal");
    let mut server = ServerProcess::start("tcp", &["--capacity", "1GiB"]);
    let (redis, socket) = start_redis(&dir, &server);
    let mut bench = redis_benchmark(&socket, 1_000_000, &["-t", "set,get"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Until Redis's heap is larger than the budget.
    let mut client = Resp::connect(&socket);
    let deadline = Instant::now() + DEADLINE;
    loop {
        let info = client.call(&[b"INFO", b"memory"]).unwrap_or_default();
        let info = String::from_utf8_lossy(&info);
        let used: u64 =
            info.lines().find_map(|l| l.strip_prefix("used_memory:")).and_then(|n| n.trim().parse().ok()).unwrap_or(0);
        if used > 16 << 20 {
            break;
        }
        assert!(Instant::now() < deadline, "Redis's heap did not grow: {info}");
        std::thread::sleep(Duration::from_millis(100));
    }
    server.child.kill().unwrap();
    let _ = server.child.wait();
    let (status, output) = redis.finish();
    let _ = bench.kill();
    let _ = bench.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert_fatal(status, &output, "redis-server");
}

/// memcached's values in this suite: 16 KiB each, 1 600 of them (25 MiB, in its slab pages).
const MEMCACHED_KEYS: usize = 1600;

/// A memcached on far memory, on a Unix socket in `dir`, with the `shutdown` command on.
fn start_memcached(dir: &Path, server: &ServerProcess) -> (Program, PathBuf) {
    let socket = dir.join("memcached.sock");
    let mut command = Command::new("memcached");
    command.arg("-s").arg(&socket).args(["-A", "-m", "64", "-t", "2"]).stdin(Stdio::null());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        command.args(["-u", "root"]); // memcached refuses root otherwise
    }
    on_far_memory(&mut command, server);
    (listening(Program::start(command), &socket, "memcached"), socket)
}

/// Sets every key over memcached's text protocol, then gets and checks each; `Err` says
/// what went wrong (a closed connection when memcached ended).
fn memcached_round(socket: &Path) -> Result<(), String> {
    let stream = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    for i in 0..MEMCACHED_KEYS {
        let value = own_value(i);
        writer.write_all(format!("set mc:{i} 0 0 {}\r\n", value.len()).as_bytes()).map_err(|e| e.to_string())?;
        writer.write_all(&value).and_then(|()| writer.write_all(b"\r\n")).map_err(|e| e.to_string())?;
        line.clear();
        reader.read_line(&mut line).map_err(|e| e.to_string())?;
        if line.trim_end() != "STORED" {
            return Err(format!("set mc:{i}: {line:?}"));
        }
    }
    for i in (0..MEMCACHED_KEYS).rev() {
        writer.write_all(format!("get mc:{i}\r\n").as_bytes()).map_err(|e| e.to_string())?;
        line.clear();
        reader.read_line(&mut line).map_err(|e| e.to_string())?;
        if !line.starts_with(&format!("VALUE mc:{i} 0 {VALUE}")) {
            return Err(format!("get mc:{i}: {line:?}"));
        }
        let mut data = vec![0; VALUE + 2 + 5]; // the value, CRLF, "END\r\n"
        reader.read_exact(&mut data).map_err(|e| e.to_string())?;
        if data[..VALUE] != own_value(i)[..] || &data[VALUE..] != b"\r\nEND\r\n" {
            return Err(format!("mc:{i}: wrong value"));
        }
    }
    Ok(())
}

#[test]
fn memcached_keeps_every_value_on_far_memory() {
    let dir = common::temp_dir("farmem-memcached");
    let server = ServerProcess::start("tcp", &["--capacity", "1GiB"]);
    let (memcached, socket) = start_memcached(&dir, &server);
    let checked = memcached_round(&socket);
    if let Ok(mut stream) = UnixStream::connect(&socket) {
        let _ = stream.write_all(b"shutdown\r\n");
    }
    let (status, output) = memcached.finish();
    let _ = std::fs::remove_dir_all(&dir);
    checked.unwrap_or_else(|e| panic!("{e}: {output}"));
    assert!(status.is_some(), "memcached did not shut down: {output}");
    let (bytes, evictions) = far_use(&output);
    assert!(bytes > 16 << 20 && evictions > 0, "memcached's slabs were not far: {output}");
}

#[test]
fn memcached_ends_with_the_fatal_status_when_its_server_dies() {
    let dir = common::temp_dir("farmem-memcached-fatal");
    let mut server = ServerProcess::start("tcp", &["--capacity", "1GiB"]);
    let (memcached, socket) = start_memcached(&dir, &server);
    memcached_round(&socket).unwrap();
    server.child.kill().unwrap();
    let _ = server.child.wait();
    // Its items are mostly evicted: the gets fault on the dead server.
    let round = memcached_round(&socket);
    let (status, output) = memcached.finish();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(round.is_err(), "memcached served every value with its server dead: {output}");
    assert_fatal(status, &output, "memcached");
}
