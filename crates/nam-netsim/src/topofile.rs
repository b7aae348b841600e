//! A text format for arbitrary topologies.
//!
//! One directive per line; `#` starts a comment; fields are separated by white space and
//! options are `key=value`:
//!
//! ```text
//! name ring4                      # topology name (optional)
//! router a freq_ghz=2.0 x_mm=0 y_mm=0 [global]
//! router b                        # frequency from the radix model when omitted
//! link a b length_mm=1.8 [delay_ns=0.5] [oneway]
//! node a [length_mm=0.5] [count=4]  # attach nodes to a router, in node-id order
//! grid 2 2                        # optional: node grid (cols rows) for transpose/clustered
//! cluster 1                       # optional: cluster edge in nodes for clustered traffic
//! ```
//!
//! `link` is bidirectional (two channels) unless `oneway`. Routing is `shortest` (minimum hops,
//! lowest port first); the simulator reports a deadlock if the graph and routing allow one.

pub use crate::constants::{FILE_NODES_MAX, FILE_ROUTERS_MAX};
use crate::error::{NetsimError, Result};
use crate::topology::{RoutingKind, Topology};
use std::collections::HashMap;

struct Line<'a> {
    no: usize,
    words: Vec<&'a str>,
}

impl Line<'_> {
    fn err(&self, field: &str, reason: impl Into<String>) -> NetsimError {
        NetsimError::Parse { file: "topology file".into(), line: self.no, field: field.into(), reason: reason.into() }
    }

    fn positional(&self, i: usize, field: &str) -> Result<&str> {
        self.words.get(i).copied().filter(|w| !w.contains('=')).ok_or_else(|| self.err(field, "missing"))
    }

    fn options(&self, from: usize, allowed: &[&str]) -> Result<HashMap<String, String>> {
        let mut out = HashMap::new();
        for w in &self.words[from.min(self.words.len())..] {
            let (k, v) = w.split_once('=').unwrap_or((w, ""));
            if !allowed.contains(&k) {
                return Err(self.err(k, format!("unknown option (allowed: {})", allowed.join(", "))));
            }
            out.insert(k.to_string(), v.to_string());
        }
        Ok(out)
    }

    fn number(&self, opts: &HashMap<String, String>, key: &str) -> Result<Option<f64>> {
        match opts.get(key) {
            None => Ok(None),
            Some(v) => {
                let x: f64 = v.parse().map_err(|_| self.err(key, format!("`{v}` is not a number")))?;
                if !x.is_finite() || x < 0.0 {
                    return Err(self.err(key, format!("{x} must be a finite number >= 0")));
                }
                Ok(Some(x))
            }
        }
    }

    fn count(&self, i: usize, field: &str) -> Result<usize> {
        let w = self.positional(i, field)?;
        w.parse().map_err(|_| self.err(field, format!("`{w}` is not a count")))
    }
}

/// Parses a topology file (see the module docs for the format).
pub fn parse(text: &str) -> Result<Topology> {
    let mut t = Topology::new("custom", RoutingKind::Shortest);
    let mut ids: HashMap<String, usize> = HashMap::new();
    let mut freqs: Vec<Option<f64>> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let line = Line { no: i + 1, words: content.split_whitespace().collect() };
        match line.words[0] {
            "name" => t.name = line.positional(1, "name")?.to_string(),
            "router" => {
                let id = line.positional(1, "router")?;
                if ids.contains_key(id) {
                    return Err(line.err("router", format!("`{id}` is defined twice")));
                }
                if ids.len() >= FILE_ROUTERS_MAX {
                    return Err(line.err("router", format!("more than {FILE_ROUTERS_MAX} routers")));
                }
                let o = line.options(2, &["freq_ghz", "x_mm", "y_mm", "global"])?;
                let f = line.number(&o, "freq_ghz")?;
                if f == Some(0.0) || f.is_some_and(|f| f > 100.0) {
                    return Err(line.err("freq_ghz", "must be in (0, 100]"));
                }
                let x = line.number(&o, "x_mm")?.unwrap_or(0.0);
                let y = line.number(&o, "y_mm")?.unwrap_or(0.0);
                let r = t.add_router(id, x, y, o.contains_key("global"));
                ids.insert(id.to_string(), r);
                freqs.push(f);
            }
            "link" => {
                let a = *ids
                    .get(line.positional(1, "a")?)
                    .ok_or_else(|| line.err("a", format!("unknown router `{}`", line.words[1])))?;
                let b = *ids
                    .get(line.positional(2, "b")?)
                    .ok_or_else(|| line.err("b", format!("unknown router `{}`", line.words[2])))?;
                if a == b {
                    return Err(line.err("b", "a link must join two different routers"));
                }
                let o = line.options(3, &["length_mm", "delay_ns", "oneway"])?;
                let len = line.number(&o, "length_mm")?.ok_or_else(|| line.err("length_mm", "missing"))?;
                let delay = line.number(&o, "delay_ns")?.map(|d| d * 1000.0);
                let pairs: &[(usize, usize)] = if o.contains_key("oneway") { &[(a, b)] } else { &[(a, b), (b, a)] };
                for &(from, to) in pairs {
                    t.channels.push(crate::topology::ChannelSpec { from, to, length_mm: len, delay_ps: delay });
                }
            }
            "node" => {
                let name = line.positional(1, "router")?;
                let r = *ids.get(name).ok_or_else(|| line.err("router", format!("unknown router `{name}`")))?;
                let o = line.options(2, &["length_mm", "count"])?;
                let len = line.number(&o, "length_mm")?.unwrap_or(0.0);
                let count = line.number(&o, "count")?.unwrap_or(1.0);
                if count < 1.0 || count.fract() != 0.0 {
                    return Err(line.err("count", format!("{count} is not a count >= 1")));
                }
                if t.nodes.len() + count as usize > FILE_NODES_MAX {
                    return Err(line.err("count", format!("more than {FILE_NODES_MAX} nodes")));
                }
                for _ in 0..count as usize {
                    let (x, y) = (t.routers[r].x_mm, t.routers[r].y_mm);
                    t.add_node(r, x, y, len);
                }
            }
            "grid" => {
                let c = line.count(1, "cols")?;
                let r = line.count(2, "rows")?;
                t.node_grid = Some((c, r));
            }
            "cluster" => t.cluster_edge_nodes = Some(line.count(1, "cluster")?),
            other => return Err(line.err("directive", format!("unknown directive `{other}`"))),
        }
    }
    for (r, f) in freqs.iter().enumerate() {
        if let Some(f) = f {
            t.routers[r].freq_ghz = *f;
        }
    }
    let t = t.finish()?;
    crate::routing::Router::new(&t, 4)?;
    Ok(t)
}

/// Reads and parses a topology file.
pub fn load(path: &std::path::Path) -> Result<Topology> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| NetsimError::Io { path: path.display().to_string(), reason: e.to_string() })?;
    parse(&text)
}
