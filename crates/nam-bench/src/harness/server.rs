//! The server side of a benchmark run: a local `nam serve` child process, the many-clients
//! check and the idle-CPU measurement.

use crate::gas::Transport;
use anyhow::{bail, Context, Result};
use nam_cli::local::{banner_addr, spawn_serve};
use nam_client::{AllocOptions, Client, ClientConfig};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `nam serve` started by the benchmark, stopped when dropped.
pub struct LocalServer {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl LocalServer {
    /// Starts `nam serve` on a free loopback port with `capacity` bytes.
    pub fn start(transport: Transport, capacity: u64) -> Result<LocalServer> {
        Self::start_named(transport.ucx_tls(), capacity, "bench")
    }

    /// Starts `nam serve` named `name` over the UCX transports `ucx_tls` on a free loopback
    /// port with `capacity` bytes.
    pub fn start_named(ucx_tls: &str, capacity: u64, name: &str) -> Result<LocalServer> {
        let capacity = capacity.to_string();
        let (mut child, line) = spawn_serve(&["--capacity", &capacity, "--name", name], Some(ucx_tls))?;
        match banner_addr(&line) {
            Some(addr) => Ok(LocalServer { child, addr }),
            None => {
                let _ = child.kill();
                bail!("local nam serve did not start: {line:?}")
            }
        }
    }

    /// CPU share of one core the idle server used over `secs` seconds.
    pub fn idle_cpu(&self, secs: u64) -> Result<String> {
        std::thread::sleep(Duration::from_millis(200));
        let (t0, c0) = (Instant::now(), cpu_ticks(self.child.id())?);
        std::thread::sleep(Duration::from_secs(secs));
        let (t1, c1) = (Instant::now(), cpu_ticks(self.child.id())?);
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let pct = 100.0 * (c1 - c0) as f64 / hz / (t1 - t0).as_secs_f64();
        let verdict = if pct < 2.0 { "met" } else { "MISSED" };
        Ok(format!("idle server: {pct:.2}% of one core over {secs} s (target < 2%: {verdict})"))
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let fields: Vec<&str> = stat.rsplit_once(')').context("malformed /proc stat")?.1.split_whitespace().collect();
    Ok(fields[11].parse::<u64>()? + fields[12].parse::<u64>()?)
}

/// Starts `n` client processes at once, each doing puts, gets and fetch-adds on its own and
/// on one shared allocation; checks that all succeed, that the shared counter saw every
/// increment and that `nam status` shows nothing left once they have exited.
pub fn many_clients(addr: SocketAddr, transport: Transport, n: usize) -> Result<String> {
    let mut config = ClientConfig::new(vec![addr]);
    config.transports = Some(transport.ucx_tls().to_string());
    let owner = Client::connect(config)?;
    let counter = owner.alloc(64, &AllocOptions::shared("bench-shared-counter"))?;
    let started = Instant::now();
    let children: Vec<Child> = (0..n)
        .map(|_| {
            Command::new(std::env::current_exe()?)
                .args(["gas", "--child", "--server", &addr.to_string(), "--op", "put,get,fadd"])
                .args(["--transport", if transport == Transport::Shm { "shm" } else { "tcp" }])
                .stdout(Stdio::null())
                .spawn()
                .context("cannot start a client process")
        })
        .collect::<Result<_>>()?;
    let failed = children.into_iter().map(|mut c| c.wait()).filter(|s| !matches!(s, Ok(s) if s.success())).count();
    let elapsed = started.elapsed();
    let increments = owner.fetch(&counter, 0)?;
    owner.free(&counter)?;
    drop(owner);
    // As much as this process's credentials may see (NAM_ADMIN_TOKEN: the whole server; else
    // the clients' own tenant, whose clients are the ones counted). A tenant's query is
    // itself a connected client of that tenant, not counted below.
    let who = nam_client::StatusCredentials::from_env();
    let s = nam_client::server_status_as(addr, &who, crate::limits::STATUS_TIMEOUT)?;
    let query = u64::from(matches!(who, nam_client::StatusCredentials::Tenant { .. }));
    let clients = s.clients.saturating_sub(query);
    let line = format!(
        "{n} concurrent client processes: {} failed, {increments} of {} shared increments seen, {:.1} s; \
         after exit: {} allocations, {} bytes used, {} clients",
        failed,
        n * 200,
        elapsed.as_secs_f64(),
        s.allocations,
        s.used,
        clients
    );
    if failed > 0 || increments != (n * 200) as u64 || s.allocations != 0 || s.used != 0 || clients != 0 {
        bail!("{line}");
    }
    Ok(line)
}
