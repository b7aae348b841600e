//! Redis 7 (Debian's `redis-server`, linked with jemalloc) under the `LD_PRELOAD` library,
//! with its large values in far memory: it serves SET and GET of a few hundred keys, every
//! value checked, and shuts down cleanly; and when the memory server under its far values
//! dies while it serves them, it ends with the library's fatal message and
//! `nam_farmem::FATAL_EXIT_STATUS` within a deadline, although it has its own SIGABRT and
//! SIGSEGV handlers (a crash report that may read far memory the pager can no longer serve:
//! with `abort()` it has been seen to hang there; in this test's runs it ended by SIGABRT
//! after its report, which the status check tells apart). Before the library kept small
//! blocks with the program's own allocator, Redis crashed at startup (jemalloc's
//! `malloc_usable_size` was asked about a block glibc had made).
//!
//! Each test starts its own Redis on a Unix socket in a directory of its own (`--port 0`:
//! no TCP port to collide with anything), never the system's service.

mod common;

use common::ServerProcess;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const KEYS: usize = 300;
/// Redis must start, and must end after a fatal error, within this.
const DEADLINE: Duration = Duration::from_secs(20);

/// The value of key `i`: 64 to 160 KiB (all of them far: the threshold is 64 KiB), each
/// byte depending on the key and its position.
fn value(i: usize) -> Vec<u8> {
    let len = (64 << 10) + (i * 331) % (96 << 10);
    (0..len).map(|j| (i * 7 + j * 13 + (j >> 10)) as u8).collect()
}

/// A `redis-server` under the preload library, with its output drained by threads.
struct Redis {
    child: Child,
    socket: PathBuf,
    output: Vec<JoinHandle<String>>,
}

impl Redis {
    fn start(dir: &Path, server: &ServerProcess) -> Redis {
        let preload = common::lib_dir().join("libnam_farmem_preload.so");
        assert!(preload.exists(), "{} missing: run `cargo build --workspace` first", preload.display());
        let socket = dir.join("redis.sock");
        let mut child = Command::new("redis-server")
            .args(["--port", "0", "--unixsocket"])
            .arg(&socket)
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "", "--dir"])
            .arg(dir)
            .env("LD_PRELOAD", &preload)
            .env("NAM_SERVERS", server.addr.to_string())
            .env("NAM_TRANSPORTS", &server.transports)
            .env("NAM_FARMEM_THRESHOLD", "64KiB")
            .env("NAM_FARMEM_BYTES", "256MiB")
            .env("NAM_FARMEM_LOCAL_BYTES", "4MiB")
            .env("NAM_FARMEM_STATS", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run redis-server (scripts/setup.sh installs it)");
        let drain = |mut pipe: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut text = Vec::new();
                let _ = pipe.read_to_end(&mut text);
                String::from_utf8_lossy(&text).into_owned()
            })
        };
        let output = vec![drain(Box::new(child.stdout.take().unwrap())), drain(Box::new(child.stderr.take().unwrap()))];
        let mut redis = Redis { child, socket, output };
        let deadline = Instant::now() + DEADLINE;
        while UnixStream::connect(&redis.socket).is_err() {
            if let Some(status) = redis.child.try_wait().unwrap() {
                panic!("redis-server ended at startup with {status}: {}", redis.output());
            }
            assert!(Instant::now() < deadline, "redis-server did not listen within {DEADLINE:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }

    fn connect(&self) -> Resp {
        let stream = UnixStream::connect(&self.socket).expect("connect to redis-server");
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        Resp { reader: BufReader::new(stream.try_clone().unwrap()), writer: stream }
    }

    /// Its exit status, or `None` if it is still running at the deadline (then it is killed).
    fn wait(&mut self) -> Option<ExitStatus> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything it wrote, once it has ended.
    fn output(&mut self) -> String {
        self.output.drain(..).map(|t| t.join().unwrap()).collect::<Vec<_>>().join("")
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client of the Redis protocol (RESP 2), just enough for SET, GET, PING and SHUTDOWN.
struct Resp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Resp {
    /// Sends `args` as one command and reads its reply: `Ok(Some(bytes))` for a bulk or
    /// simple string, `Ok(None)` for a nil, `Err` for an error reply or a closed connection.
    fn call(&mut self, args: &[&[u8]]) -> Result<Option<Vec<u8>>, String> {
        let mut command = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            command.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            command.extend_from_slice(arg);
            command.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&command).map_err(|e| format!("send: {e}"))?;
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => return Err("connection closed".into()),
            Ok(_) => {}
            Err(e) => return Err(format!("receive: {e}")),
        }
        let line = line.trim_end();
        match line.split_at(1) {
            ("+", text) => Ok(Some(text.as_bytes().to_vec())),
            ("$", "-1") => Ok(None),
            ("$", len) => {
                let len: usize = len.parse().map_err(|_| format!("bad bulk length {line:?}"))?;
                let mut data = vec![0; len + 2];
                self.reader.read_exact(&mut data).map_err(|e| format!("receive: {e}"))?;
                data.truncate(len);
                Ok(Some(data))
            }
            _ => Err(format!("reply {line:?}")),
        }
    }

    fn set_all(&mut self) {
        for i in 0..KEYS {
            let reply = self.call(&[b"SET", format!("key:{i}").as_bytes(), &value(i)]);
            assert_eq!(reply, Ok(Some(b"OK".to_vec())), "SET key:{i}");
        }
    }
}

#[test]
fn redis_serves_checked_values_from_far_memory_and_shuts_down_cleanly() {
    let dir = common::temp_dir("redis");
    let server = ServerProcess::start("sm,self,tcp", &[]);
    let mut redis = Redis::start(&dir, &server);
    let mut client = redis.connect();
    assert_eq!(client.call(&[b"PING"]), Ok(Some(b"PONG".to_vec())));
    client.set_all();
    // Twice over, in an order other than the one they were written in: most values have
    // been evicted from the 4 MiB local budget and come back from the server.
    for round in 0..2 {
        for k in 0..KEYS {
            let i = (k * 97 + round * 13) % KEYS;
            let got = client.call(&[b"GET", format!("key:{i}").as_bytes()]).expect("GET");
            assert!(got.as_deref() == Some(&value(i)[..]), "round {round}: key:{i}: wrong value");
        }
    }
    let _ = client.call(&[b"SHUTDOWN", b"NOSAVE"]);
    let status = redis.wait();
    let output = redis.output();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.is_some_and(|s| s.success()), "redis-server ended with {status:?}: {output}");
    let evictions = output.split(" evictions ").nth(1).and_then(|t| t.split(',').next());
    let evictions: u64 = evictions.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no stats: {output}"));
    assert!(evictions > 0, "Redis's values did not go to far memory: {output}");
}

#[test]
fn redis_ends_with_the_fatal_status_when_its_memory_server_dies() {
    let dir = common::temp_dir("redis-fatal");
    // Over TCP the dead server's connection fails at once (a shared-memory segment could
    // still be read after its owner died).
    let mut server = ServerProcess::start("tcp", &[]);
    let mut redis = Redis::start(&dir, &server);
    let mut client = redis.connect();
    client.set_all();
    let dead = server.addr;
    server.kill();
    // Redis fetches evicted values for these GETs; the first that needs the dead server
    // is fatal. Their replies, if any, are not looked at: the process must end.
    let started = Instant::now();
    let reader = std::thread::spawn(move || {
        for i in 0..KEYS {
            if client.call(&[b"GET", format!("key:{i}").as_bytes()]).is_err() {
                return;
            }
        }
    });
    let status = redis.wait();
    let output = redis.output();
    let _ = reader.join();
    let _ = std::fs::remove_dir_all(&dir);
    let status =
        status.unwrap_or_else(|| panic!("redis-server still running {DEADLINE:?} after its server died: {output}"));
    assert_eq!(status.code(), Some(nam_farmem::FATAL_EXIT_STATUS), "{status}: {output}");
    assert!(output.contains("nam-farmem: fatal") && output.contains(&dead.to_string()), "{output}");
    eprintln!("redis-server ended {:?} after the first GET", started.elapsed());
}
