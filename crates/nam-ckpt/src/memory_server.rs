//! How the ranks reach memory servers: the client of the NAM-XOR scheme
//! ([`crate::redundancy::NamXor`]) and of the incremental checkpoints' memory-server level.
//!
//! The settings are read from the environment once, when the checkpointer (or a scheme on its
//! own) is set up, by nam-client's own reader: every `NAM_*` variable of
//! [`ClientConfig::from_env`] is honoured (tenant, token, transports, deadlines, the forced
//! data path and the direct-path crossover), except `NAM_SERVERS`, because the checkpoint
//! configuration names the servers (`redundancy.servers`, `incremental.servers`).

use crate::constants::{CONNECT_ATTEMPTS, CONNECT_BACKOFF, GROUP_PREFIX_DEFAULT};
use crate::error::{CkptError, Result};
use nam_client::{Client, ClientConfig};
use std::net::SocketAddr;

/// Environment variable prefixing NAM-XOR's group names, so two jobs of one tenant can share
/// memory servers (default [`GROUP_PREFIX_DEFAULT`]).
pub const GROUP_ENV: &str = "NAM_CKPT_GROUP";

/// The memory-server client settings of one job.
#[derive(Debug, Clone)]
pub struct ServerClient {
    /// The client configuration every connection starts from (its `servers` are replaced by
    /// the one server connected to).
    pub base: ClientConfig,
    /// Prefix of NAM-XOR's group names on the servers.
    pub group_prefix: String,
}

impl ServerClient {
    /// The settings from the environment: the client variables of
    /// [`ClientConfig::from_env`] (`NAM_SERVERS` aside, see the module) and [`GROUP_ENV`].
    pub fn from_env() -> Result<ServerClient> {
        let mut base = ClientConfig::new(Vec::new());
        // `from_env` is `new` plus `apply_env` once NAM_SERVERS is parsed; the servers come
        // from the checkpoint configuration here, the rest exactly as `from_env` reads it.
        base.apply_env().map_err(|e| CkptError::Config(format!("memory-server client: {e}")))?;
        let group_prefix = std::env::var(GROUP_ENV).unwrap_or_else(|_| GROUP_PREFIX_DEFAULT.into());
        Ok(ServerClient { base, group_prefix })
    }

    /// A client of `server`, retrying a refused connection a few times.
    pub fn connect(&self, server: SocketAddr) -> Result<Client> {
        let mut config = self.base.clone();
        config.servers = vec![server];
        // A whole job connects at once; on a loaded server a connection request can be refused
        // (UCX: "Endpoint is not connected"). Try a few times before giving up.
        let mut attempt = 0;
        loop {
            match Client::connect(config.clone()) {
                Ok(client) => return Ok(client),
                Err(nam_client::Error::Connect { .. }) if attempt < CONNECT_ATTEMPTS => {
                    attempt += 1;
                    std::thread::sleep(CONNECT_BACKOFF * (1 << attempt));
                }
                Err(e) => return Err(CkptError::Unrecoverable(format!("NAM-XOR connecting: {e}"))),
            }
        }
    }
}
