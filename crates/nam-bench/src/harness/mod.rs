//! What every benchmark shares: statistics ([`stats`]), PNG charts ([`plot`]), the local
//! `nam serve` a benchmark starts ([`server`]), the UCX transport choice ([`Transport`]),
//! the machine description of a report ([`machine`]) and the generated docs pages
//! ([`docs`]).

pub mod docs;
pub mod machine;
pub mod plot;
pub mod server;
pub mod stats;

/// UCX transport of a benchmark's clients, its local server and its baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// Shared memory (posix/sysv/cma); `tcp` is listed too, only for the connection manager.
    Shm,
    /// TCP over loopback or the network.
    Tcp,
}

impl Transport {
    /// The `UCX_TLS` value.
    pub fn ucx_tls(self) -> &'static str {
        match self {
            Transport::Shm => "sm,self,tcp",
            Transport::Tcp => "tcp",
        }
    }

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Shm => "shm",
            Transport::Tcp => "tcp",
        }
    }
}
