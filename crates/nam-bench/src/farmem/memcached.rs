//! memcached (Debian's package) on local memory and through the `LD_PRELOAD` far-memory
//! library, under the same load: a small load generator speaking memcached's text
//! protocol from several connections, a mix of 90% gets and 10% sets on uniformly random
//! keys, every value checked (each key's value is a function of the key).
//!
//! The local-memory budget is a fraction of the data set the load generator stores (keys
//! times the size of one item in memcached's slab class), so at `--local-fraction 0.25` the
//! data set is four times what may stay resident: most of memcached's memory is remote.
//! memcached's own limit (`-m`) is twice the data set, so its LRU evicts nothing and every
//! get is a hit whose value is checked.
//!
//! Both memcacheds run with the same LRU ([`Lru`]). By default the classic one: memcached
//! 1.5's segmented LRU has a maintainer thread that moves items between its hot, warm and
//! cold lists in the background, touching items (and their neighbours in the lists) that
//! no request asked for. On local memory that costs little; on far memory every such touch
//! of a non-resident page is a fault that also evicts a page a request wanted. At 50% local
//! it added about a third of a miss per request (docs/farmem.md, memcached).

use super::{Run, Transport, WorkloadKind};
use crate::limits::{MEMCACHED_READ_TIMEOUT, MEMCACHED_START_DEADLINE};
use anyhow::{bail, ensure, Context, Result};
use rand::{Rng, SeedableRng};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Data set at scale 1, MiB.
const DATA_MIB: u64 = 40;
const VALUE_BYTES: usize = 1000;
/// Bytes one item takes in memcached: its 1184-byte slab class holds the 1000-byte value,
/// the key and the item header.
const ITEM_BYTES: u64 = 1184;
const CONNECTIONS: usize = 4;

fn value_of(key: u64) -> Vec<u8> {
    let seed = format!("{key:016x}");
    seed.as_bytes().iter().cycle().take(VALUE_BYTES).copied().collect()
}

struct Memcached {
    child: Child,
    addr: SocketAddr,
}

/// memcached's LRU (`--memcached-lru`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lru {
    /// One LRU per slab class (`-o no_lru_maintainer`): memcached 1.4's, the one Mao 2020 measured.
    Classic,
    /// memcached 1.5's default: hot, warm and cold lists kept by a maintainer thread.
    Segmented,
}

impl Lru {
    /// The name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Lru::Classic => "classic",
            Lru::Segmented => "segmented",
        }
    }
}

impl Memcached {
    fn start(memory_mib: u64, lru: Lru, env: &[(&str, String)]) -> Result<Memcached> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut cmd = Command::new("memcached");
        cmd.args(["-m", &memory_mib.to_string(), "-p", &port.to_string(), "-U", "0", "-l", "127.0.0.1", "-t", "2"]);
        if lru == Lru::Classic {
            cmd.args(["-o", "no_lru_maintainer"]);
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            cmd.args(["-u", "root"]);
        }
        let child = cmd
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start memcached (Debian: apt-get install memcached)")?;
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let deadline = Instant::now() + MEMCACHED_START_DEADLINE;
        while TcpStream::connect(addr).is_err() {
            ensure!(
                Instant::now() < deadline,
                "memcached did not listen on {addr} within {MEMCACHED_START_DEADLINE:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Memcached { child, addr })
    }

    fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        let kib = status.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1));
        kib.and_then(|k| k.parse::<u64>().ok()).unwrap_or(0) * 1024
    }

    /// Stops memcached and returns its stderr.
    fn stop(mut self) -> String {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let _ = self.child.wait();
        err
    }
}

impl Drop for Memcached {
    /// A run that fails midway does not leave memcached behind (a no-op after `stop`,
    /// whose exit status the child keeps).
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Connection {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Connection {
    fn open(addr: SocketAddr) -> Result<Connection> {
        let s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(MEMCACHED_READ_TIMEOUT))?;
        s.set_nodelay(true)?;
        Ok(Connection { reader: BufReader::new(s.try_clone()?), writer: s })
    }

    fn set(&mut self, key: u64) -> Result<()> {
        let v = value_of(key);
        write!(self.writer, "set k{key} 0 0 {}\r\n", v.len())?;
        self.writer.write_all(&v)?;
        self.writer.write_all(b"\r\n")?;
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        ensure!(line == "STORED\r\n", "set k{key}: memcached answered {line:?}");
        Ok(())
    }

    /// Gets `key`; true on a hit with the right value, false on a miss (evicted by
    /// memcached's own LRU); an error on a wrong value.
    fn get(&mut self, key: u64) -> Result<bool> {
        write!(self.writer, "get k{key}\r\n")?;
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        if line == "END\r\n" {
            return Ok(false);
        }
        let len: usize = line.split_whitespace().nth(3).and_then(|n| n.parse().ok()).context("bad VALUE line")?;
        let mut data = vec![0u8; len + 2];
        self.reader.read_exact(&mut data)?;
        line.clear();
        self.reader.read_line(&mut line)?;
        if data[..len] != value_of(key)[..] || line != "END\r\n" {
            bail!("get k{key}: memcached returned a wrong value");
        }
        Ok(true)
    }
}

/// Stores keys `0..keys`.
fn fill(addr: SocketAddr, keys: u64) -> Result<()> {
    let mut c = Connection::open(addr)?;
    for k in 0..keys {
        c.set(k)?;
    }
    Ok(())
}

/// Runs the timed mix over keys `0..keys`; returns (requests per second, hits, gets).
fn mix(addr: SocketAddr, keys: u64, requests: usize) -> Result<(f64, u64, u64)> {
    let t = Instant::now();
    let results: Vec<Result<(u64, u64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CONNECTIONS)
            .map(|i| {
                s.spawn(move || -> Result<(u64, u64)> {
                    let mut c = Connection::open(addr)?;
                    let mut rng = rand::rngs::StdRng::seed_from_u64(i as u64);
                    let (mut hits, mut gets) = (0, 0);
                    for _ in 0..requests / CONNECTIONS {
                        let key = rng.gen_range(0..keys);
                        if rng.gen_bool(0.1) {
                            c.set(key)?;
                        } else {
                            gets += 1;
                            hits += c.get(key)? as u64;
                        }
                    }
                    Ok((hits, gets))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("load thread")).collect()
    });
    let secs = t.elapsed().as_secs_f64();
    let (mut hits, mut gets) = (0, 0);
    for r in results {
        let (h, g) = r?;
        hits += h;
        gets += g;
    }
    Ok((requests as f64 / secs, hits, gets))
}

/// The preload library beside the running `nam` binary.
pub fn preload_path() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().context("nam has no directory")?;
    let dir = if dir.ends_with("deps") { dir.parent().unwrap_or(dir) } else { dir };
    let path = dir.join("libnam_farmem_preload.so");
    ensure!(path.exists(), "{} not found: build it with cargo build -p nam-farmem-preload", path.display());
    Ok(path)
}

/// What the far run needs to know.
pub struct FarSide<'a> {
    /// Memory servers.
    pub servers: &'a [SocketAddr],
    /// Their transport.
    pub transport: Transport,
    /// Local share of memcached's memory.
    pub fraction: f64,
    /// Prefetcher.
    pub prefetch: bool,
    /// Who serves memcached's far-memory page faults (`NAM_FARMEM_FAULT_MODE`).
    pub mode: nam_farmem::FaultMode,
    /// Prefetch throttling (`NAM_FARMEM_THROTTLE`).
    pub throttle: bool,
    /// The preload library.
    pub preload: &'a Path,
    /// The pager's busy-poll, if not its default.
    pub spin_us: Option<u64>,
}

/// Measures memcached locally and through far memory, one far memcached per setting of
/// `fars` (the same servers, transport and fraction; prefetch or fault mode differ), all in
/// the same paired rounds; one row per setting.
pub fn measure(fars: &[FarSide<'_>], scale: f64, repeat: usize, lru: Lru) -> Result<Vec<Run>> {
    let keys = (((DATA_MIB << 20) as f64 * scale.min(1.0)) as u64 / ITEM_BYTES).max(1000);
    let data_bytes = keys * ITEM_BYTES;
    let memory_mib = (2 * data_bytes).div_ceil(1 << 20).max(16);
    let requests = ((40_000.0 * scale) as usize).max(2_000);
    let local = Memcached::start(memory_mib, lru, &[])?;
    fill(local.addr, keys).context("memcached on local memory")?;
    let mut remotes = Vec::new();
    for far in fars {
        let remote = Memcached::start(memory_mib, lru, &far_env(far, data_bytes, memory_mib))?;
        // A far memcached that died (a fatal page fault) says why on its stderr.
        if let Err(e) = fill(remote.addr, keys) {
            let stderr = remote.stop();
            return Err(e.context(format!("memcached under the LD_PRELOAD library, its stderr: {stderr}")));
        }
        remotes.push(remote);
    }
    let addrs: Vec<SocketAddr> = remotes.iter().map(|r| r.addr).collect();
    let rounds = paired_rounds(local.addr, &addrs, keys, requests, repeat);
    local.stop();
    let ends: Vec<(u64, String)> = remotes.into_iter().map(|r| (r.rss_bytes(), r.stop())).collect();
    // A far memcached that died (a fatal page fault) says why on its stderr.
    let rounds = rounds.with_context(|| {
        let stderrs: Vec<&str> = ends.iter().map(|(_, e)| e.as_str()).collect();
        format!("memcached under the LD_PRELOAD library, stderr: {}", stderrs.join(" | "))
    })?;
    fars.iter()
        .zip(&rounds)
        .zip(&ends)
        .map(|((far, r), (rss, stderr))| row(far, lru, r, stderr, *rss, requests))
        .collect()
}

/// The environment of a far memcached: the preload library and the pager's settings.
fn far_env(far: &FarSide<'_>, data_bytes: u64, memory_mib: u64) -> Vec<(&'static str, String)> {
    let list: Vec<String> = far.servers.iter().map(|a| a.to_string()).collect();
    let budget = ((data_bytes as f64 * far.fraction) as u64).max(1 << 20);
    let mut env = vec![
        ("LD_PRELOAD", far.preload.display().to_string()),
        ("NAM_SERVERS", list.join(",")),
        ("NAM_TRANSPORTS", far.transport.ucx_tls().to_string()),
        ("NAM_FARMEM_BYTES", format!("{}", 8 * (memory_mib << 20))),
        ("NAM_FARMEM_LOCAL_BYTES", budget.to_string()),
        ("NAM_FARMEM_PREFETCH", if far.prefetch { "on" } else { "off" }.to_string()),
        ("NAM_FARMEM_STATS", "1".to_string()),
        ("NAM_FARMEM_FAULT_MODE", super::mode_name(far.mode).to_string()),
        ("NAM_FARMEM_THROTTLE", if far.throttle { "on" } else { "off" }.to_string()),
    ];
    if let Some(us) = far.spin_us {
        env.push(("NAM_FARMEM_SPIN_US", us.to_string()));
    }
    env
}

/// One far side's row from its rounds and the statistics on its stderr.
fn row(far: &FarSide<'_>, lru: Lru, rounds: &Rounds, stderr: &str, rss: u64, requests: usize) -> Result<Run> {
    let (local_rps, far_rps) = (super::paired::median(rounds.local.clone()), super::paired::median(rounds.far.clone()));
    let throughput_ratio = super::paired::median(rounds.ratios.clone());
    let (hits, gets) = (rounds.hits, rounds.gets);
    let numbers = preload_stats(stderr)?;
    let (far_bytes, resident_pages) = (numbers[0], numbers[1]);
    // memcached's limit is twice the data set: a miss would mean a lost item.
    ensure!(hits == gets, "memcached under far memory lost items: {hits} hits out of {gets} gets");
    let basic = Run::basic(
        WorkloadKind::Memcached,
        far.fraction,
        far.prefetch,
        far.servers.len(),
        far.transport,
        1e3 * requests as f64 / local_rps,
        1e3 * requests as f64 / far_rps,
        requests as f64,
    );
    Ok(Run {
        round_slowdowns: rounds.ratios.iter().map(|r| 1.0 / r).collect(),
        slowdown: 1.0 / throughput_ratio,
        throughput_ratio,
        misses: numbers[2],
        prefetches: numbers[3],
        evictions: numbers[4],
        far_bytes: Some(far_bytes),
        far_resident_bytes: Some(resident_pages * 4096),
        rss_bytes: Some(rss),
        values_checked: Some(hits),
        write_faults: Some(numbers[6]),
        predicted_writes: Some(numbers[7]),
        fault_mode: Some(super::mode_name(far.mode)),
        memcached_lru: Some(lru.name()),
        ..basic
    })
}

/// Requests per second of the local side and one far side in each round, their ratios, and
/// the far side's hits and gets.
struct Rounds {
    local: Vec<f64>,
    far: Vec<f64>,
    ratios: Vec<f64>,
    hits: u64,
    gets: u64,
}

/// Every round runs the mix on the local memcached and then on each far one (taking turns
/// going first); one [`Rounds`] per far side, sharing the local runs.
fn paired_rounds(
    local: SocketAddr,
    fars: &[SocketAddr],
    keys: u64,
    requests: usize,
    repeat: usize,
) -> Result<Vec<Rounds>> {
    let mut all: Vec<Rounds> = (0..fars.len())
        .map(|_| Rounds { local: Vec::new(), far: Vec::new(), ratios: Vec::new(), hits: 0, gets: 0 })
        .collect();
    for round in 0..repeat.max(1) {
        let (local_rps, _, _) = mix(local, keys, requests).context("memcached on local memory")?;
        for k in 0..fars.len() {
            let i = (k + round) % fars.len();
            let (far_rps, h, g) = mix(fars[i], keys, requests)?;
            let r = &mut all[i];
            r.local.push(local_rps);
            r.far.push(far_rps);
            r.ratios.push(far_rps / local_rps);
            r.hits += h;
            r.gets += g;
        }
    }
    Ok(all)
}

/// The numbers of the preload library's statistics line on memcached's stderr:
/// "nam-farmem-preload: B bytes allocated in far memory, R resident pages, misses M,
/// prefetches P, evictions E, write-backs W, write faults F, predicted writes D".
fn preload_stats(stderr: &str) -> Result<Vec<u64>> {
    let numbers: Vec<u64> = stderr
        .lines()
        .find(|l| l.starts_with("nam-farmem-preload: ") && l.contains("bytes allocated"))
        .map(|l| l.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect())
        .with_context(|| format!("memcached did not put memory in far memory: {stderr}"))?;
    ensure!(numbers.len() >= 8, "unexpected preload statistics: {stderr}");
    Ok(numbers)
}
