//! `nam status HOST:PORT`: capacity, usage, clients and traffic of a server, as much as the
//! credentials in the environment may see: everything with the server's admin token
//! (`NAM_ADMIN_TOKEN`), a tenant's own figures with `NAM_TENANT`/`NAM_TOKEN` (the default
//! tenant when unset), and only that the server is alive without valid credentials.

use nam_client::{Status, StatusCredentials};
use nam_proto::size::format_size;
use std::time::Duration;

/// Arguments of `nam status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// The server, HOST:PORT.
    server: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Deadline in milliseconds.
    #[arg(long, default_value_t = 5000)]
    timeout_ms: u64,
}

/// Runs `nam status`.
pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    let addr = nam_client::config::parse_servers(&args.server)?[0];
    let timeout = Duration::from_millis(args.timeout_ms);
    let who = StatusCredentials::from_env();
    let implicit =
        ["NAM_TENANT", "NAM_TOKEN", nam_client::config::ADMIN_TOKEN_VAR].iter().all(|v| std::env::var_os(v).is_none());
    let (s, who) = match nam_client::server_status_as(addr, &who, timeout) {
        // No credentials given, and the server has no open default tenant: ask as a stranger.
        Err(e) if implicit && e.server_status() == Some(Status::AuthFailed) => {
            (nam_client::server_status(addr, timeout)?, StatusCredentials::Stranger)
        }
        result => (result?, who),
    };
    let view = match &who {
        StatusCredentials::Admin { .. } => "admin".to_string(),
        StatusCredentials::Tenant { tenant, .. } => format!("tenant {tenant}"),
        StatusCredentials::Stranger => "stranger".to_string(),
    };
    if who == StatusCredentials::Stranger {
        if args.json {
            let value = serde_json::json!({"address": addr.to_string(), "alive": true, "view": view,
                "protocol_version": nam_proto::limits::PROTOCOL_VERSION});
            println!("{}", serde_json::to_string_pretty(&value)?);
        } else {
            println!("server       at {addr}: alive, protocol version {}", nam_proto::limits::PROTOCOL_VERSION);
            println!(
                "view         none: set NAM_TENANT and NAM_TOKEN for a tenant's figures, {} for the whole server's",
                nam_client::config::ADMIN_TOKEN_VAR
            );
        }
        return Ok(());
    }
    let (path_lines, path_json, path_table) = crate::status_path::report(addr, Duration::from_millis(args.timeout_ms));
    if args.json {
        let tenants: Vec<_> = s
            .tenants
            .iter()
            .map(
                |t| serde_json::json!({"name": t.name, "used": t.used, "quota": t.quota, "allocations": t.allocations}),
            )
            .collect();
        let value = serde_json::json!({
            "server": s.server_name, "address": addr.to_string(), "view": view,
            "capacity": s.capacity, "used": s.used, "allocations": s.allocations,
            "clients": s.clients, "clients_lingering": s.clients_lingering, "clients_total": s.clients_total,
            "requests": s.requests, "request_errors": s.request_errors,
            "bytes_in": s.bytes_in, "bytes_out": s.bytes_out, "leases_reclaimed": s.leases_reclaimed,
            "reported": {"puts": s.reported.puts, "gets": s.reported.gets, "atomics": s.reported.atomics,
                          "bytes_put": s.reported.bytes_put, "bytes_got": s.reported.bytes_got},
            "tenants": tenants,
            "resources": {"reply_bytes_max": s.resources.reply_bytes_max,
                          "client_reply_bytes_max": s.resources.client_reply_bytes_max,
                          "reply_bytes_queued": s.resources.reply_bytes_queued,
                          "reply_bytes_high": s.resources.reply_bytes_high,
                          "connections_max": s.resources.connections_max,
                          "clients_cut_off": s.resources.clients_cut_off,
                          "connections_refused": s.resources.connections_refused,
                          "sockets_reaped": s.resources.sockets_reaped},
            "ckpt_groups": groups_json(&s),
            "transfer_path": path_json,
            "path_table": path_table,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    let pct = if s.capacity > 0 { 100.0 * s.used as f64 / s.capacity as f64 } else { 0.0 };
    println!("server       {} at {addr}", s.server_name);
    let own = if matches!(who, StatusCredentials::Admin { .. }) { "" } else { " (its own figures only)" };
    println!("view         {view}{own}");
    println!("capacity     {}", format_size(s.capacity));
    println!("used         {} ({pct:.1}%) in {} allocations", format_size(s.used), s.allocations);
    let admin = matches!(who, StatusCredentials::Admin { .. });
    if !admin {
        // A tenant sees its own connected clients; the server-wide counters are the admin's.
        println!("clients      {} connected (this query included)", s.clients);
    } else {
        println!(
            "clients      {} connected, {} lingering (lease), {} since start",
            s.clients, s.clients_lingering, s.clients_total
        );
        println!(
            "control      {} requests ({} refused), {} in, {} out",
            s.requests,
            s.request_errors,
            format_size(s.bytes_in),
            format_size(s.bytes_out)
        );
        println!("leases       {} allocations reclaimed", s.leases_reclaimed);
        let res = &s.resources;
        println!(
            "replies      {} held of {} bound ({} per client), {} at most; {} clients cut off",
            format_size(res.reply_bytes_queued),
            format_size(res.reply_bytes_max),
            format_size(res.client_reply_bytes_max),
            format_size(res.reply_bytes_high),
            res.clients_cut_off
        );
        println!(
            "connections  at most {}; {} refused or timed out, {} unfinished sockets closed",
            res.connections_max, res.connections_refused, res.sockets_reaped
        );
        let r = s.reported;
        println!(
            "one-sided    {} puts ({}), {} gets ({}), {} atomics  [reported by departed clients]",
            r.puts,
            format_size(r.bytes_put),
            r.gets,
            format_size(r.bytes_got),
            r.atomics
        );
    }
    for (i, line) in path_lines.iter().enumerate() {
        println!("{}{line}", if i == 0 { "path         " } else { "             " });
    }
    for t in &s.tenants {
        let quota = if t.quota == u64::MAX { "unlimited".to_string() } else { format_size(t.quota) };
        println!("tenant       {:<16} {} of {quota} in {} allocations", t.name, format_size(t.used), t.allocations);
    }
    for g in &s.ckpt_groups {
        println!(
            "ckpt group   {} (tenant {}): {}, {} of {} ranks joined, last complete epoch {}",
            g.name,
            g.tenant,
            format_size(g.bytes),
            g.joined,
            g.ranks,
            g.complete_epoch
        );
    }
    if s.ckpt_groups_total > s.ckpt_groups.len() as u64 {
        println!("ckpt group   ... {} more not listed", s.ckpt_groups_total - s.ckpt_groups.len() as u64);
    }
    Ok(())
}

/// The checkpoint groups of a Status reply as JSON: what finished jobs left on the server.
fn groups_json(s: &nam_proto::StatusReply) -> serde_json::Value {
    let groups: Vec<_> = s
        .ckpt_groups
        .iter()
        .map(|g| {
            serde_json::json!({"name": g.name, "tenant": g.tenant, "bytes": g.bytes, "ranks": g.ranks,
                               "joined": g.joined, "complete_epoch": g.complete_epoch})
        })
        .collect();
    serde_json::json!({"total": s.ckpt_groups_total, "listed": groups})
}
