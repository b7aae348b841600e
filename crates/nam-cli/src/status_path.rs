//! The path part of `nam status`: connects as a client of the server (the `NAM_*` variables
//! apply: tenant, token, transports, the crossover override `NAM_DIRECT_MAX`) and reports
//! how this host reaches it: the client's path table (`Client::path_table`): the data path,
//! which path small and large transfers and atomics take, and for a same-host server the
//! direct/RMA crossover the client measured on connecting.

use nam_client::{Client, ClientConfig, DataPath, ServerPaths};
use nam_proto::size::format_size;
use std::net::SocketAddr;
use std::time::Duration;

/// The report as (text lines, JSON value of the old `transfer_path` key, JSON path table).
pub fn report(addr: SocketAddr, timeout: Duration) -> (Vec<String>, serde_json::Value, serde_json::Value) {
    let mut config = ClientConfig::new(vec![addr]);
    config.name = "nam status".into();
    config.timeout = timeout;
    config.connect_timeout = timeout;
    let failed = |line: String, e: String| (vec![line], serde_json::json!({"error": e}), serde_json::Value::Null);
    if let Err(e) = config.apply_env() {
        return failed(format!("unknown ({e})"), e.to_string());
    }
    let client = match Client::connect(config) {
        Ok(c) => c,
        Err(e) => return failed(format!("unknown from this host ({e})"), e.to_string()),
    };
    let Some(row) = client.path_table().first() else {
        return failed("unknown (no path table)".into(), "no path table".into());
    };
    let name = match row.data_path {
        DataPath::SharedMemory => "shared memory",
        DataPath::Rdma => "RDMA",
        DataPath::Messages => "messages executed by the server",
    };
    let table = table_json(row);
    let mut lines = vec![];
    let Some(split) = &row.transfer else {
        // Messages name their path already; RDMA says which one-sided path it takes.
        lines.push(match row.data_path {
            DataPath::Messages => name.to_string(),
            _ => format!("{name}: {} for every operation", row.large.name()),
        });
        return (lines, serde_json::json!({"data_path": name}), table);
    };
    let limit = match split.direct_max_bytes {
        u64::MAX => "direct (load/store) at every size".to_string(),
        0 => "UCX RMA at every size".to_string(),
        b => format!("direct (load/store) up to {}, UCX RMA above", format_size(b)),
    };
    let source = if split.measured { "measured on connecting" } else { "configured" };
    lines.push(format!("{name}: {limit} ({source})"));
    lines.push(format!("atomics and signals: {}", row.words.name()));
    let json = serde_json::json!({
        "data_path": name,
        "direct_max_bytes": (split.direct_max_bytes != u64::MAX).then_some(split.direct_max_bytes),
        "crossover_source": if split.measured { "measured" } else { "config" },
        "probes": split.probes.iter().map(|(b, d, r)| serde_json::json!({"bytes": b, "direct_ns": d, "rma_ns": r})).collect::<Vec<_>>(),
    });
    (lines, json, table)
}

/// One row of the client's path table as JSON (`small_max_bytes` null: every size).
fn table_json(row: &ServerPaths) -> serde_json::Value {
    serde_json::json!({
        "address": row.addr.to_string(),
        "data_path": format!("{:?}", row.data_path),
        "small": format!("{:?}", row.small),
        "small_max_bytes": (row.small_max_bytes != u64::MAX).then_some(row.small_max_bytes),
        "large": format!("{:?}", row.large),
        "atomics": format!("{:?}", row.words),
    })
}
