//! A `nam serve` on this host, started by a command that needs a server of its own
//! (`nam demo`, the `nam-bench` suites): one place that knows how to start it and read the
//! address it listens on from its banner.

use crate::child::DieWithParent;
use anyhow::{Context, Result};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

/// Starts this binary's `serve --listen 127.0.0.1:0` followed by `extra`, over the UCX
/// transports `ucx_tls` (or the inherited `UCX_TLS` when `None`), as a child that dies with
/// this process; returns it with the banner line it printed. The binary must have a `serve`
/// command (`nam` and `nam-bench` do).
pub fn spawn_serve(extra: &[&str], ucx_tls: Option<&str>) -> Result<(Child, String)> {
    let mut command = Command::new(std::env::current_exe()?);
    command.args(["serve", "--listen", "127.0.0.1:0"]).args(extra).stdout(Stdio::piped());
    if let Some(tls) = ucx_tls {
        command.env("UCX_TLS", tls);
    }
    let mut child = command.die_with_parent().spawn().context("cannot start a local nam serve")?;
    let mut banner = String::new();
    let read = BufReader::new(child.stdout.take().expect("piped")).read_line(&mut banner);
    if let Err(e) = read {
        let _ = child.kill();
        return Err(e).context("reading the local nam serve's banner");
    }
    Ok((child, banner))
}

/// The address a `nam serve` banner names (its first word that parses as one).
pub fn banner_addr(banner: &str) -> Option<SocketAddr> {
    banner.split_whitespace().find_map(|w| w.parse().ok())
}
