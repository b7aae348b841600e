//! Server configuration: a TOML file, overridden by command-line flags.
//!
//! ```toml
//! name = "nam0"              # shown by `nam status`
//! listen = "0.0.0.0:13337"
//! capacity = "4GiB"
//! backing = "/var/lib/nam/pool"   # optional: file-backed pool that survives restarts
//! lease_ms = 10000           # keep a vanished client's allocations this long
//! idle_spin_us = 2000        # busy-poll this long after the last event before sleeping
//! admin_token = "adm1n"      # optional: `nam status` with NAM_ADMIN_TOKEN set to this sees
//!                            # every tenant and counter; without it nobody does
//!
//! [limits]                   # bounded resources whatever clients do (all optional)
//! client_reply_bytes = "8MiB"  # replies held for one client; asking beyond it disconnects
//! client_requests = 1024     # replies held for one client, counted
//! reply_bytes = "256MiB"     # replies held for all clients together
//! reply_timeout_ms = 10000   # a reply not taken by then is dropped, its client disconnected
//! handshake_timeout_ms = 5000  # connections still anonymous after this are closed
//! connections = 1024         # connections, every source
//! connections_per_source = 512
//! pending_per_source = 128   # connections not yet authenticated, per source address
//!
//! [[tenant]]                 # without any [[tenant]], one tenant "default" with an
//! name = "climate"           # empty token and the whole pool as quota
//! token = "s3cret"
//! quota = "1GiB"
//! ```

use crate::constants::{
    DEFAULT_CAPACITY_BYTES, DEFAULT_CLIENT_REPLY_BYTES_MAX, DEFAULT_CLIENT_REQUESTS_MAX, DEFAULT_CONNECTIONS_MAX,
    DEFAULT_CONNECTIONS_PER_SOURCE_MAX, DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_IDLE_SPIN, DEFAULT_LEASE,
    DEFAULT_PENDING_PER_SOURCE_MAX, DEFAULT_PORT, DEFAULT_REPLY_BYTES_MAX, DEFAULT_REPLY_TIMEOUT, DEFAULT_TENANT,
};
use crate::manager::TenantConfig;
use nam_proto::limits::{CLIENTS_MAX, TENANTS_MAX, TENANT_NAME_LEN_MAX, TOKEN_LEN_MAX};
use nam_proto::size::{parse_size, SizeError};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (names the key and line).
        message: String,
    },
    /// A size field is invalid.
    #[error("config field `{field}`: {source}")]
    Size {
        /// The field.
        field: String,
        /// Why.
        source: SizeError,
    },
    /// Any other invalid value.
    #[error("config field `{field}`: {message}")]
    Invalid {
        /// The field.
        field: String,
        /// Why.
        message: String,
    },
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    name: Option<String>,
    listen: Option<String>,
    capacity: Option<String>,
    backing: Option<PathBuf>,
    lease_ms: Option<u64>,
    idle_spin_us: Option<u64>,
    admin_token: Option<String>,
    #[serde(default)]
    limits: FileLimits,
    #[serde(default)]
    tenant: Vec<FileTenant>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLimits {
    client_reply_bytes: Option<String>,
    client_requests: Option<u32>,
    reply_bytes: Option<String>,
    reply_timeout_ms: Option<u64>,
    handshake_timeout_ms: Option<u64>,
    connections: Option<usize>,
    connections_per_source: Option<usize>,
    pending_per_source: Option<usize>,
}

/// What the server holds for its clients at most, and how long it waits for them: its
/// memory stays bounded whatever clients do. Replies a client has not taken are the only
/// per-request memory the server keeps (a request is answered as it arrives), so the bound
/// is on them: per client (its credit, in bytes and replies; O(1) to check per request) and
/// in total; a client past its credit, or one that leaves a reply untaken past the deadline,
/// is disconnected, which frees its replies at once. `nam status` shows the bounds and use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Reply bytes held for one client (its credit). A request that arrives while the
    /// client's replies exceed it disconnects the client.
    pub client_reply_bytes: u64,
    /// Replies held for one client, counted.
    pub client_requests: u32,
    /// Reply bytes held for all clients together; a client that holds some when a reply
    /// would pass it is disconnected.
    pub reply_bytes: u64,
    /// A reply not taken within this is dropped and its client disconnected.
    pub reply_timeout: Duration,
    /// A connection that has not authenticated within this is closed, and so is an accepted
    /// socket that sent nothing.
    pub handshake_timeout: Duration,
    /// Connections, every source together.
    pub connections: usize,
    /// Connections from one IP address.
    pub connections_per_source: usize,
    /// Connections not yet authenticated (and silent sockets) from one IP address.
    pub pending_per_source: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            client_reply_bytes: DEFAULT_CLIENT_REPLY_BYTES_MAX,
            client_requests: DEFAULT_CLIENT_REQUESTS_MAX,
            reply_bytes: DEFAULT_REPLY_BYTES_MAX,
            reply_timeout: DEFAULT_REPLY_TIMEOUT,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            connections: DEFAULT_CONNECTIONS_MAX,
            connections_per_source: DEFAULT_CONNECTIONS_PER_SOURCE_MAX,
            pending_per_source: DEFAULT_PENDING_PER_SOURCE_MAX,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTenant {
    name: String,
    #[serde(default)]
    token: String,
    quota: Option<String>,
}

/// Everything a server needs to start.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Name shown by `nam status`.
    pub name: String,
    /// Address to listen on (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Pool size in bytes.
    pub capacity_bytes: u64,
    /// File that backs the pool, if any.
    pub backing: Option<PathBuf>,
    /// Start a file-backed pool empty, discarding what its backing file and manifest hold.
    /// Only this starts a server on a non-empty backing file that has no manifest (a
    /// deliberate choice: without the manifest the allocations in it cannot be found).
    pub reinit_pool: bool,
    /// How long a vanished client's allocations are kept.
    pub lease: Duration,
    /// Busy-poll window before sleeping.
    pub idle_spin: Duration,
    /// Tenants; never empty.
    pub tenants: Vec<TenantConfig>,
    /// Bounds on what clients can make the server hold.
    pub limits: Limits,
    /// The administrator's token: a Hello with tenant [`nam_proto::ADMIN_TENANT`] and this
    /// token may read the whole server's status. `None`: no administrator; status answers
    /// each tenant with its own figures only.
    pub admin_token: Option<String>,
}

impl ServerConfig {
    /// A configuration with defaults and the single default tenant.
    pub fn new(listen: SocketAddr, capacity_bytes: u64) -> ServerConfig {
        ServerConfig {
            name: default_name(),
            listen,
            capacity_bytes,
            backing: None,
            reinit_pool: false,
            lease: DEFAULT_LEASE,
            idle_spin: DEFAULT_IDLE_SPIN,
            tenants: vec![TenantConfig { name: DEFAULT_TENANT.into(), token: String::new(), quota_bytes: u64::MAX }],
            limits: Limits::default(),
            admin_token: None,
        }
    }

    /// Reads a TOML file on top of the defaults.
    pub fn load(path: &Path) -> Result<ServerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.into(), source })?;
        Self::from_toml(&text, path)
    }

    /// Parses TOML text (`origin` names it in errors).
    pub fn from_toml(text: &str, origin: &Path) -> Result<ServerConfig, ConfigError> {
        let file: FileConfig =
            toml::from_str(text).map_err(|e| ConfigError::Parse { path: origin.into(), message: e.to_string() })?;
        let listen = match &file.listen {
            Some(l) => parse_listen(l)?,
            None => SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT)),
        };
        let capacity = match &file.capacity {
            Some(c) => parse_size(c).map_err(|source| ConfigError::Size { field: "capacity".into(), source })?,
            None => DEFAULT_CAPACITY_BYTES,
        };
        let mut config = ServerConfig::new(listen, capacity);
        if let Some(name) = file.name {
            config.name = name;
        }
        config.backing = file.backing;
        if let Some(ms) = file.lease_ms {
            config.lease = Duration::from_millis(ms);
        }
        if let Some(us) = file.idle_spin_us {
            config.idle_spin = Duration::from_micros(us);
        }
        if !file.tenant.is_empty() {
            config.tenants = tenants_from_file(file.tenant)?;
        }
        config.limits = limits_from_file(file.limits)?;
        config.admin_token = file.admin_token;
        config.validate()?;
        Ok(config)
    }

    /// Checks the values that flags may have changed.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.capacity_bytes == 0 {
            return Err(ConfigError::Invalid { field: "capacity".into(), message: "must be at least 1 byte".into() });
        }
        let l = &self.limits;
        let invalid =
            |field: &str, message: &str| ConfigError::Invalid { field: field.into(), message: message.into() };
        if l.client_reply_bytes == 0 || l.client_requests == 0 || l.reply_bytes < l.client_reply_bytes {
            return Err(invalid(
                "limits",
                "client_reply_bytes and client_requests must be at least 1, reply_bytes at least client_reply_bytes",
            ));
        }
        if l.reply_timeout.is_zero() || l.handshake_timeout.is_zero() {
            return Err(invalid("limits", "reply_timeout_ms and handshake_timeout_ms must be at least 1"));
        }
        if l.pending_per_source == 0
            || l.pending_per_source > l.connections_per_source
            || l.connections_per_source > l.connections
            || l.connections > CLIENTS_MAX
        {
            return Err(invalid(
                "limits",
                &format!("need 1 <= pending_per_source <= connections_per_source <= connections <= {CLIENTS_MAX}"),
            ));
        }
        // An empty admin token would make anyone who says Hello with an empty one the admin.
        if let Some(token) = &self.admin_token {
            if token.is_empty() || token.len() > TOKEN_LEN_MAX {
                return Err(ConfigError::Invalid {
                    field: "admin_token".into(),
                    message: format!("must be 1..={TOKEN_LEN_MAX} bytes"),
                });
            }
        }
        Ok(())
    }
}

/// Parses `HOST:PORT` (a name such as `localhost` is resolved).
pub fn parse_listen(text: &str) -> Result<SocketAddr, ConfigError> {
    use std::net::ToSocketAddrs;
    let invalid = |message: String| ConfigError::Invalid { field: "listen".into(), message };
    let mut addrs = text.to_socket_addrs().map_err(|e| invalid(format!("{text:?} is not HOST:PORT ({e})")))?;
    addrs
        .find(|a| a.is_ipv4())
        .or_else(|| text.to_socket_addrs().ok()?.next())
        .ok_or_else(|| invalid(format!("{text:?} resolves to nothing")))
}

fn limits_from_file(file: FileLimits) -> Result<Limits, ConfigError> {
    let mut limits = Limits::default();
    let size = |field: &str, text: &str| {
        parse_size(text).map_err(|source| ConfigError::Size { field: format!("limits.{field}"), source })
    };
    if let Some(s) = &file.client_reply_bytes {
        limits.client_reply_bytes = size("client_reply_bytes", s)?;
    }
    if let Some(s) = &file.reply_bytes {
        limits.reply_bytes = size("reply_bytes", s)?;
    }
    if let Some(n) = file.client_requests {
        limits.client_requests = n;
    }
    if let Some(ms) = file.reply_timeout_ms {
        limits.reply_timeout = Duration::from_millis(ms);
    }
    if let Some(ms) = file.handshake_timeout_ms {
        limits.handshake_timeout = Duration::from_millis(ms);
    }
    if let Some(n) = file.connections {
        limits.connections = n;
    }
    if let Some(n) = file.connections_per_source {
        limits.connections_per_source = n;
    }
    if let Some(n) = file.pending_per_source {
        limits.pending_per_source = n;
    }
    Ok(limits)
}

fn tenants_from_file(entries: Vec<FileTenant>) -> Result<Vec<TenantConfig>, ConfigError> {
    if entries.len() > TENANTS_MAX {
        return Err(ConfigError::Invalid { field: "tenant".into(), message: format!("at most {TENANTS_MAX} tenants") });
    }
    let mut tenants: Vec<TenantConfig> = Vec::new();
    for t in entries {
        let field = format!("tenant.{}", t.name);
        if t.name.is_empty() || t.name.len() > TENANT_NAME_LEN_MAX {
            return Err(ConfigError::Invalid {
                field,
                message: format!("name must be 1..={TENANT_NAME_LEN_MAX} bytes"),
            });
        }
        if t.token.len() > TOKEN_LEN_MAX {
            return Err(ConfigError::Invalid { field, message: format!("token longer than {TOKEN_LEN_MAX} bytes") });
        }
        if tenants.iter().any(|x| x.name == t.name) {
            return Err(ConfigError::Invalid { field, message: "declared twice".into() });
        }
        let quota_bytes = match &t.quota {
            Some(q) => parse_size(q).map_err(|source| ConfigError::Size { field: format!("{field}.quota"), source })?,
            None => u64::MAX,
        };
        tenants.push(TenantConfig { name: t.name, token: t.token, quota_bytes });
    }
    Ok(tenants)
}

fn default_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    let host = if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "nam".into()
    };
    format!("{host}:{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_file() {
        let text = r#"
            name = "n0"
            listen = "127.0.0.1:4000"
            capacity = "64MiB"
            lease_ms = 250
            [[tenant]]
            name = "a"
            token = "x"
            quota = "1MiB"
        "#;
        let c = ServerConfig::from_toml(text, Path::new("t.toml")).unwrap();
        assert_eq!(c.capacity_bytes, 64 << 20);
        assert_eq!(c.lease, Duration::from_millis(250));
        assert_eq!(c.tenants, vec![TenantConfig { name: "a".into(), token: "x".into(), quota_bytes: 1 << 20 }]);
    }

    #[test]
    fn admin_token_is_read_and_an_empty_one_refused() {
        let c = ServerConfig::from_toml("admin_token = \"adm\"", Path::new("t.toml")).unwrap();
        assert_eq!(c.admin_token.as_deref(), Some("adm"));
        assert_eq!(ServerConfig::from_toml("", Path::new("t.toml")).unwrap().admin_token, None);
        let e = ServerConfig::from_toml("admin_token = \"\"", Path::new("t.toml")).unwrap_err();
        assert!(e.to_string().contains("admin_token"), "{e}");
    }

    #[test]
    fn names_the_bad_field() {
        let e = ServerConfig::from_toml("capcity = \"1GiB\"", Path::new("t.toml")).unwrap_err();
        assert!(e.to_string().contains("capcity"), "{e}");
        let e = ServerConfig::from_toml("capacity = \"1 parsec\"", Path::new("t.toml")).unwrap_err();
        assert!(e.to_string().contains("capacity"), "{e}");
        let e =
            ServerConfig::from_toml("[[tenant]]\nname=\"a\"\n[[tenant]]\nname=\"a\"", Path::new("t.toml")).unwrap_err();
        assert!(e.to_string().contains("declared twice"), "{e}");
    }
}
