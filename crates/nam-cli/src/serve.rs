//! `nam serve`: run a memory server until SIGINT or SIGTERM.

use anyhow::Context as _;
use nam_proto::size::{format_size, parse_size};
use nam_server::{config::parse_listen, Server, ServerConfig};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// Arguments of `nam serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on, HOST:PORT (port 0 picks a free port and prints it).
    #[arg(long)]
    listen: Option<String>,
    /// Pool size, e.g. 512MiB or 4GiB.
    #[arg(long)]
    capacity: Option<String>,
    /// Back the pool with this file so its contents survive a restart.
    #[arg(long)]
    backing: Option<PathBuf>,
    /// Start the file-backed pool empty, discarding the backing file's contents and manifest
    /// (needed to start on a non-empty backing file whose manifest is lost).
    #[arg(long)]
    reinit_pool: bool,
    /// TOML configuration (tenants, quotas, lease); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Keep a vanished client's allocations this long before reclaiming them.
    #[arg(long)]
    lease_ms: Option<u64>,
    /// Name shown by `nam status`.
    #[arg(long)]
    name: Option<String>,
    /// Read the administrator's token from this file (its first line): `nam status` with
    /// NAM_ADMIN_TOKEN set to it sees every tenant and counter. Without this flag, the config
    /// file's `admin_token`, else the NAM_ADMIN_TOKEN variable; with none, there is no
    /// administrator and status shows each tenant only its own figures.
    #[arg(long, value_name = "PATH")]
    admin_token_file: Option<PathBuf>,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn install_signal_handlers() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(signal, on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t) };
    }
}

/// Builds the configuration from the file and the flags.
pub fn config_from_args(args: &ServeArgs) -> anyhow::Result<ServerConfig> {
    let mut config = match &args.config {
        Some(path) => ServerConfig::load(path)?,
        None => ServerConfig::new(parse_listen("0.0.0.0:13337")?, 1 << 30),
    };
    if let Some(listen) = &args.listen {
        config.listen = parse_listen(listen)?;
    }
    if let Some(capacity) = &args.capacity {
        config.capacity_bytes = parse_size(capacity).context("--capacity")?;
    }
    if let Some(backing) = &args.backing {
        config.backing = Some(backing.clone());
    }
    config.reinit_pool |= args.reinit_pool;
    if let Some(ms) = args.lease_ms {
        config.lease = std::time::Duration::from_millis(ms);
    }
    if let Some(name) = &args.name {
        config.name = name.clone();
    }
    if let Some(path) = &args.admin_token_file {
        let text = std::fs::read_to_string(path).with_context(|| format!("--admin-token-file {}", path.display()))?;
        config.admin_token = Some(text.lines().next().unwrap_or_default().to_string());
    } else if config.admin_token.is_none() {
        config.admin_token = std::env::var(nam_client::config::ADMIN_TOKEN_VAR).ok();
    }
    config.validate()?;
    Ok(config)
}

/// Runs `nam serve`.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = config_from_args(&args)?;
    let pool_kind = match &config.backing {
        Some(path) => format!("file {}", path.display()),
        None => "UCX-allocated".to_string(),
    };
    let capacity = config.capacity_bytes;
    let mut server = Server::bind(config)?;
    install_signal_handlers();
    println!("nam serve: listening on {} ({} pool, {})", server.address(), format_size(capacity), pool_kind);
    std::io::stdout().flush()?;
    server.run(&STOP)?;
    server.sync()?;
    // Whoever started us may have closed our stdout already; that is not an error.
    let _ = writeln!(std::io::stdout(), "nam serve: stopped");
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // End here rather than by dropping the server: UCX 1.22's teardown of a worker that has
    // seen many hostile connections can race its own async thread and crash it (a SIGSEGV in
    // `ucs_async_handler_get` after a connection flood, seen once in CI). Everything a restart
    // needs is on disk (`sync` above); the kernel closes the sockets and unmaps the shared
    // memory, whose files UCX has already unlinked.
    // SAFETY: `_exit` ends the process at once; no Rust state is observed afterwards.
    unsafe { libc::_exit(0) }
}
