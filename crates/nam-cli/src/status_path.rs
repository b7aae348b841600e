//! The transfer-path part of `nam status`: connects as a client of the server (the `NAM_*`
//! variables apply: tenant, token, transports, the crossover override `NAM_DIRECT_MAX`) and reports how this host reaches it: the data path, and
//! for a same-host server the direct/RMA crossover the client measured on connecting.

use nam_client::{Client, ClientConfig, DataPath};
use nam_proto::size::format_size;
use std::net::SocketAddr;
use std::time::Duration;

/// The report as (text line, JSON value).
pub fn report(addr: SocketAddr, timeout: Duration) -> (String, serde_json::Value) {
    let mut config = ClientConfig::new(vec![addr]);
    config.name = "nam status".into();
    config.timeout = timeout;
    config.connect_timeout = timeout;
    if let Err(e) = config.apply_env() {
        return (format!("unknown ({e})"), serde_json::json!({"error": e.to_string()}));
    }
    let client = match Client::connect(config) {
        Ok(c) => c,
        Err(e) => return (format!("unknown from this host ({e})"), serde_json::json!({"error": e.to_string()})),
    };
    let path = client.data_path(0);
    let name = match path {
        Some(DataPath::SharedMemory) => "shared memory",
        Some(DataPath::Rdma) => "RDMA",
        Some(DataPath::Messages) | None => "messages executed by the server",
    };
    let Some(split) = client.transfer_path(0) else {
        return (name.to_string(), serde_json::json!({"data_path": name}));
    };
    let limit = match split.direct_max_bytes {
        u64::MAX => "direct (load/store) at every size".to_string(),
        0 => "UCX RMA at every size".to_string(),
        b => format!("direct (load/store) up to {}, UCX RMA above", format_size(b)),
    };
    let source = if split.measured { "measured on connecting" } else { "configured" };
    let json = serde_json::json!({
        "data_path": name,
        "direct_max_bytes": (split.direct_max_bytes != u64::MAX).then_some(split.direct_max_bytes),
        "crossover_source": if split.measured { "measured" } else { "config" },
        "probes": split.probes.iter().map(|(b, d, r)| serde_json::json!({"bytes": b, "direct_ns": d, "rma_ns": r})).collect::<Vec<_>>(),
    });
    (format!("{name}: {limit} ({source})"), json)
}
