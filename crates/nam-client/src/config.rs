//! Client configuration: servers, tenant credentials and deadlines.

use crate::error::{Error, Result};
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

pub use crate::constants::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT};

/// The environment variable with the server administrator's token: `nam status` (and
/// [`crate::StatusCredentials::from_env`]) authenticate with it; `nam serve` takes it as its
/// admin token when neither `--admin-token-file` nor its config file gives one.
pub const ADMIN_TOKEN_VAR: &str = "NAM_ADMIN_TOKEN";

/// How a [`crate::Client`] connects.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Servers to connect to, in order; allocations are spread over them.
    pub servers: Vec<SocketAddr>,
    /// Tenant to act for.
    pub tenant: String,
    /// The tenant's token.
    pub token: String,
    /// Label shown by `nam status`.
    pub name: String,
    /// Deadline of each operation.
    pub timeout: Duration,
    /// Deadline for connecting.
    pub connect_timeout: Duration,
    /// UCX transports (`UCX_TLS`) for this client, e.g. `"tcp"`; `None` keeps the
    /// environment's choice. From `NAM_TRANSPORTS`.
    pub transports: Option<String>,
    /// Force a data path instead of choosing per server (`NAM_DATA_PATH=shm|rdma|messages`).
    pub data_path: Option<crate::link::DataPath>,
    /// Transfers up to this many bytes to a same-host server take the direct path, larger
    /// ones UCX RMA; `None` measures the crossover when connecting ([`crate::path`]).
    /// From `NAM_DIRECT_MAX` (a size like `64KiB`, or `max`).
    pub direct_max_bytes: Option<u64>,
    /// How long a wait ([`crate::Client::wait_until`] and its kin) spins on its word before
    /// it sleeps on a wake-up (a futex on the direct path, a server notification elsewhere).
    /// From `NAM_WAIT_SPIN_US` (microseconds); default
    /// [`crate::constants::WAIT_SPIN_DEFAULT`].
    pub wait_spin: Duration,
}

impl ClientConfig {
    /// A configuration for `servers` with the default tenant and deadlines.
    pub fn new(servers: Vec<SocketAddr>) -> ClientConfig {
        ClientConfig {
            servers,
            tenant: "default".into(),
            token: String::new(),
            name: std::env::args().next().unwrap_or_else(|| "client".into()),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            transports: None,
            data_path: None,
            direct_max_bytes: None,
            wait_spin: crate::constants::WAIT_SPIN_DEFAULT,
        }
    }

    /// Reads `NAM_SERVERS` (comma-separated `host:port`), `NAM_TENANT`, `NAM_TOKEN`,
    /// `NAM_TRANSPORTS`, `NAM_TIMEOUT_MS`, `NAM_CONNECT_TIMEOUT_MS` and `NAM_WAIT_SPIN_US`.
    pub fn from_env() -> Result<ClientConfig> {
        let servers = std::env::var("NAM_SERVERS").map_err(|_| Error::NoServers)?;
        let mut config = ClientConfig::new(parse_servers(&servers)?);
        config.apply_env()?;
        Ok(config)
    }

    /// Overrides fields with the `NAM_*` variables that are set, `NAM_SERVERS` aside.
    pub fn apply_env(&mut self) -> Result<()> {
        let config = self;
        if let Ok(t) = std::env::var("NAM_TENANT") {
            config.tenant = t;
        }
        if let Ok(t) = std::env::var("NAM_TOKEN") {
            config.token = t;
        }
        if let Some(ms) = env_ms("NAM_TIMEOUT_MS")? {
            config.timeout = ms;
        }
        if let Ok(t) = std::env::var("NAM_TRANSPORTS") {
            config.transports = Some(t);
        }
        if let Ok(path) = std::env::var("NAM_DATA_PATH") {
            config.data_path = Some(match path.as_str() {
                "shm" => crate::link::DataPath::SharedMemory,
                "rdma" => crate::link::DataPath::Rdma,
                "messages" => crate::link::DataPath::Messages,
                other => return Err(Error::Config(format!("NAM_DATA_PATH={other:?}: expected shm, rdma or messages"))),
            });
        }
        if let Ok(v) = std::env::var("NAM_DIRECT_MAX") {
            config.direct_max_bytes = Some(match v.trim() {
                "max" => u64::MAX,
                text => nam_proto::size::parse_size(text)
                    .map_err(|e| Error::Config(format!("NAM_DIRECT_MAX={v:?}: {e} (a size, or max)")))?,
            });
        }
        if let Ok(v) = std::env::var("NAM_WAIT_SPIN_US") {
            let us: u64 =
                v.trim().parse().map_err(|e| Error::Config(format!("NAM_WAIT_SPIN_US={v:?}: {e} (microseconds)")))?;
            config.wait_spin = Duration::from_micros(us);
        }
        if let Some(ms) = env_ms("NAM_CONNECT_TIMEOUT_MS")? {
            config.connect_timeout = ms;
        }
        Ok(())
    }
}

fn env_ms(name: &str) -> Result<Option<Duration>> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse::<u64>()
            .map(|ms| Some(Duration::from_millis(ms)))
            .map_err(|_| Error::Config(format!("{name}={v:?} is not a number of milliseconds"))),
        Err(_) => Ok(None),
    }
}

/// Parses `host:port[,host:port...]`.
pub fn parse_servers(list: &str) -> Result<Vec<SocketAddr>> {
    let mut servers = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let addr = item
            .to_socket_addrs()
            .map_err(|e| Error::Config(format!("server {item:?} is not host:port ({e})")))?
            .find(|a| a.is_ipv4())
            .ok_or_else(|| Error::Config(format!("server {item:?} resolves to no IPv4 address")))?;
        servers.push(addr);
    }
    if servers.is_empty() {
        return Err(Error::NoServers);
    }
    Ok(servers)
}
