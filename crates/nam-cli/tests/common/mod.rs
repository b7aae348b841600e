//! Shared harness of the system tests: real `nam serve` processes and real clients.
#![allow(dead_code)]

pub mod fds;
// The `nam` binary's own helper: a test process that crashes leaves no server behind holding
// its ports and output pipes.
#[path = "../../src/child.rs"]
mod child;

use child::DieWithParent;
use fds::NoInheritedFds;
use nam_client::{Client, ClientConfig};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The two transports every behaviour is checked on: UCX over TCP, and UCX shared memory
/// (the sockaddr connection manager needs `tcp` listed; the data lanes use shared memory).
pub const TRANSPORTS: [&str; 2] = ["tcp", "sm,self,tcp"];

/// A `nam serve` child process, killed when dropped.
pub struct ServerProcess {
    pub child: Child,
    pub addr: SocketAddr,
    pub transports: String,
}

impl ServerProcess {
    /// Starts `nam serve --listen 127.0.0.1:0` with `extra` flags and waits for its address.
    pub fn start(transports: &str, extra: &[&str]) -> ServerProcess {
        Self::start_on("127.0.0.1:0", transports, extra)
    }

    pub fn start_on(listen: &str, transports: &str, extra: &[&str]) -> ServerProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_nam"))
            .args(["serve", "--listen", listen])
            .args(extra)
            .env("UCX_TLS", transports)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .no_inherited_fds()
            .die_with_parent()
            .spawn()
            .expect("spawn nam serve");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).expect("read nam serve banner");
        let addr = line
            .split_whitespace()
            .find_map(|w| w.parse::<SocketAddr>().ok())
            .unwrap_or_else(|| panic!("nam serve did not print its address: {line:?}"));
        ServerProcess { child, addr, transports: transports.to_string() }
    }

    /// A client of this server with a short deadline.
    pub fn client(&self) -> Client {
        Client::connect(self.config()).expect("connect")
    }

    pub fn config(&self) -> ClientConfig {
        let mut config = ClientConfig::new(vec![self.addr]);
        config.transports = Some(self.transports.clone());
        config.timeout = Duration::from_secs(5);
        config.connect_timeout = Duration::from_secs(5);
        config
    }

    /// kill -9.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a clean exit.
    pub fn terminate(&mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                assert!(status.success(), "nam serve exited with {status}");
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("nam serve did not stop on SIGTERM");
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Writes a server config file into `dir` and returns its path.
pub fn write_config(dir: &Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("nam.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A fresh temporary directory for one test.
pub fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("nam-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Polls `f` until it returns true or `timeout` passes.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    f()
}

/// The repository root.
pub fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

/// `<target>/<profile>`, where `cargo build --workspace` puts libnam.so (the test binary
/// lives in its `deps/`).
pub fn lib_dir() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent().and_then(Path::parent).expect("test binary lives in <target>/<profile>/deps").to_path_buf()
}

/// Makes `needed` huge pages free if this process may (root): raises `vm.nr_hugepages` by
/// what is missing. Returns whether they are free now.
#[allow(dead_code)] // not every test binary has regions on huge pages
pub fn free_huge_pages_for(needed: u64) -> bool {
    let free = nam_farmem::free_huge_pages();
    if free < needed {
        let path = "/proc/sys/vm/nr_hugepages";
        let total: u64 = std::fs::read_to_string(path).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0);
        let _ = std::fs::write(path, (total + needed - free).to_string());
    }
    nam_farmem::free_huge_pages() >= needed
}
