//! Shared harness of the system tests: real `nam serve` processes and real clients.
#![allow(dead_code)]

pub mod fds;
pub mod mpi;
pub mod probe;
pub mod raw;
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

/// The binary whose `serve` the tests start: `nam` in nam-cli's tests, `nam-bench` (whose
/// hidden `serve` is the same `nam_cli::serve`) in nam-bench's, which share this module.
pub fn server_bin() -> &'static str {
    option_env!("CARGO_BIN_EXE_nam")
        .or(option_env!("CARGO_BIN_EXE_nam-bench"))
        .expect("these tests run in nam-cli or nam-bench, whose binaries serve")
}

/// The two transports every behaviour is checked on: UCX over TCP, and UCX shared memory
/// (the sockaddr connection manager needs `tcp` listed; the data lanes use shared memory).
pub const TRANSPORTS: [&str; 2] = ["tcp", "sm,self,tcp"];

/// The admin token every test server gets (through `NAM_ADMIN_TOKEN`): tests that read the
/// whole server's status authenticate with it, as an operator's `nam status` does.
pub const ADMIN_TOKEN: &str = "nam-test-admin-token";

/// The whole server's status, asked with the admin token.
pub fn admin_status(addr: SocketAddr) -> nam_client::StatusReply {
    let admin = nam_client::StatusCredentials::Admin { token: ADMIN_TOKEN.into() };
    nam_client::server_status_as(addr, &admin, Duration::from_secs(5)).expect("admin status")
}

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
        let mut child = Command::new(server_bin())
            .args(["serve", "--listen", listen])
            .args(extra)
            .env("UCX_TLS", transports)
            .env(nam_client::config::ADMIN_TOKEN_VAR, ADMIN_TOKEN)
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

    /// The whole server's status, asked with the admin token.
    pub fn admin_status(&self) -> nam_client::StatusReply {
        admin_status(self.addr)
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

/// `needed` free huge pages held for one test, returned when dropped.
///
/// Tests in other binaries run at the same time, so the reservation holds an exclusive lock
/// (one huge-page test at a time on this machine) from before it reads `vm.nr_hugepages`
/// until it has put the old value back. UCX is kept off huge pages in every test process
/// (`.cargo/config.toml`), so nothing but the test's own regions takes the pages reserved.
pub struct HugePageReservation {
    /// The locked file; the lock goes with it.
    _lock: std::fs::File,
    /// `vm.nr_hugepages` before the reservation, restored on drop.
    restore_to: u64,
}

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

fn nr_hugepages() -> u64 {
    let text = std::fs::read_to_string(NR_HUGEPAGES).expect("read /proc/sys/vm/nr_hugepages");
    text.trim().parse().expect("vm.nr_hugepages is a number")
}

/// Makes `needed` huge pages free for this test by raising `vm.nr_hugepages` (as root), or
/// fails the test saying why it could not.
pub fn reserve_huge_pages(needed: u64) -> HugePageReservation {
    use std::os::unix::io::AsRawFd;
    if nam_farmem::huge_page_bytes().is_none() {
        panic!("this test needs huge pages, and this kernel has none (no Hugepagesize in /proc/meminfo)");
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(std::env::temp_dir().join("nam-test-huge-pages.lock"))
        .expect("open the huge-page lock file");
    let deadline = Instant::now() + Duration::from_secs(600);
    // SAFETY: flock on a descriptor this function owns.
    while unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        assert!(Instant::now() < deadline, "another test held the huge-page lock for 10 minutes");
        std::thread::sleep(Duration::from_millis(20));
    }
    let restore_to = nr_hugepages();
    let reservation = HugePageReservation { _lock: lock, restore_to };
    let free = nam_farmem::free_huge_pages();
    if free < needed {
        let want = restore_to + needed - free;
        if let Err(e) = std::fs::write(NR_HUGEPAGES, want.to_string()) {
            panic!("this test needs {needed} free huge pages and {free} are; raising vm.nr_hugepages to {want} failed: {e} (run as root, or reserve them: sysctl -w vm.nr_hugepages={want})");
        }
    }
    let free = nam_farmem::free_huge_pages();
    assert!(
        free >= needed,
        "this test needs {needed} free huge pages; after raising vm.nr_hugepages to {} only {free} are free (memory too fragmented?)",
        nr_hugepages()
    );
    reservation
}

impl Drop for HugePageReservation {
    fn drop(&mut self) {
        // Pages still mapped stay until unmapped (the kernel makes them surplus), so this
        // never takes memory from under a region.
        if let Err(e) = std::fs::write(NR_HUGEPAGES, self.restore_to.to_string()) {
            eprintln!("could not restore vm.nr_hugepages to {}: {e}", self.restore_to);
        }
    }
}
