//! BookSim2-style configuration files: `key = value;` statements, `//` comments, vectors as
//! `{a, b}`. Every BookSim2 key the simulator supports maps onto [`SimConfig`] and
//! [`TopologyParams`] (the table in docs/netsim.md lists them); nam-netsim's own options use
//! their `SimConfig` field names. An unknown key, or a BookSim2 key this simulator does not
//! model, is an error naming it and its line.

use crate::alloc::AllocatorKind;
use crate::builders::{build, TopologyParams};
use crate::config::{Injection, InjectionProcess, SimConfig};
use crate::constants::{
    BOOKSIM_K_DEFAULT, BOOKSIM_MAX_SAMPLES_DEFAULT, BOOKSIM_SAMPLE_PERIOD_DEFAULT, BOOKSIM_WARMUP_PERIODS_DEFAULT,
};
use crate::error::{NetsimError, Result};
use crate::routing;
use crate::topology::{CubeAlgo, Topology};
use crate::traffic::TrafficPattern;

/// What a configuration file sets: the run's parameters and the topology to build.
#[derive(Debug, Clone)]
pub struct FileConfig {
    /// The run's parameters (defaults where the file is silent).
    pub sim: SimConfig,
    /// Topology name (BookSim2 `topology`; `None` when the file does not say).
    pub topology: Option<String>,
    /// Parameters of the topology (`k` is the tile grid's edge).
    pub params: TopologyParams,
    /// Routing to select after building (`None`: the topology's own).
    pub routing: Option<String>,
}

impl FileConfig {
    /// Builds the named topology with the file's routing.
    pub fn build_topology(&self) -> Result<Topology> {
        let name = self.topology.as_deref().ok_or_else(|| parse_err(0, "topology", "the file names no topology"))?;
        let mut t = build(name, &self.params)?;
        if let Some(r) = &self.routing {
            routing::select(&mut t, r)?;
        }
        Ok(t)
    }
}

/// Keys read; BookSim2's names first, then nam-netsim's own.
pub const KEYS: [&str; 42] = [
    "topology",
    "k",
    "n",
    "use_noc_latency",
    "routing_function",
    "num_vcs",
    "vc_buf_size",
    "packet_size",
    "packet_size_rate",
    "traffic",
    "perm_seed",
    "injection_rate",
    "injection_rate_uses_flits",
    "injection_process",
    "burst_alpha",
    "burst_beta",
    "vc_allocator",
    "sw_allocator",
    "alloc_iters",
    "speculative",
    "routing_delay",
    "vc_alloc_delay",
    "sw_alloc_delay",
    "st_prepare_delay",
    "st_final_delay",
    "credit_delay",
    "warmup_periods",
    "sample_period",
    "max_samples",
    "sim_type",
    "seed",
    // nam-netsim's own.
    "dims",
    "link_cycles",
    "terminal_delay_cycles",
    "latency_bound_factor",
    "deadlock_cycles",
    "drain_cycles_max",
    "generate_during_drain",
    "freq_ghz",
    "concentration",
    "global_routers",
    "hotspot_fraction",
];

/// The `--routing` name of a cube routing algorithm.
fn algo_name(algo: CubeAlgo) -> &'static str {
    match algo {
        CubeAlgo::Dor => "dor",
        CubeAlgo::Romm => "romm",
        CubeAlgo::Valiant => "valiant",
        CubeAlgo::MinAdaptive => "min-adaptive",
    }
}

fn parse_err(line: usize, field: &str, reason: impl Into<String>) -> NetsimError {
    NetsimError::Parse { file: "config file".into(), line, field: field.into(), reason: reason.into() }
}

/// One `key = value;` statement with the line it starts on.
struct Statement {
    line: usize,
    key: String,
    value: String,
}

fn statements(text: &str) -> Result<Vec<Statement>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut start = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split("//").next().unwrap_or("");
        for ch in line.chars() {
            if ch == ';' {
                let stmt = std::mem::take(&mut cur);
                let Some((k, v)) = stmt.split_once('=') else {
                    return Err(parse_err(
                        start + 1,
                        "statement",
                        format!("expected `key = value;`, got `{}`", stmt.trim()),
                    ));
                };
                out.push(Statement { line: start + 1, key: k.trim().to_string(), value: v.trim().to_string() });
            } else {
                if cur.trim().is_empty() {
                    start = i;
                }
                cur.push(ch);
            }
        }
        cur.push(' ');
    }
    if !cur.trim().is_empty() {
        return Err(parse_err(start + 1, "statement", format!("`{}` lacks its closing `;`", cur.trim())));
    }
    Ok(out)
}

/// Splits `{a, b}` (or a single value) into its elements.
fn vector(v: &str) -> Vec<String> {
    let inner = v.strip_prefix('{').and_then(|x| x.strip_suffix('}')).unwrap_or(v);
    inner.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect()
}

/// Reads and parses the configuration file at `path`.
pub fn read(path: &std::path::Path) -> Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| NetsimError::Io { path: path.display().to_string(), reason: e.to_string() })?;
    parse(&text)
}

/// Parses a configuration file onto the defaults.
pub fn parse(text: &str) -> Result<FileConfig> {
    let mut fc =
        FileConfig { sim: SimConfig::default(), topology: None, params: TopologyParams::default(), routing: None };
    let (mut rate, mut rate_in_flits) = (None, false);
    let (mut alpha, mut beta, mut on_off) = (None, None, false);
    let (mut sizes, mut size_rates): (Vec<usize>, Vec<f64>) = (Vec::new(), Vec::new());
    let (mut warmup_periods, mut sample_period, mut max_samples) = (None, None, None);
    let mut switch_extra = 0u64;
    let (mut k, mut dims_n, mut noc_latency) = (None, None, true);
    let mut hotspot_fraction = None;
    for st in statements(text)? {
        let (line, key, v) = (st.line, st.key.as_str(), st.value.as_str());
        let num = |v: &str| -> Result<f64> {
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| parse_err(line, key, format!("`{v}` is not a number")))
        };
        let int = |v: &str| -> Result<u64> {
            v.parse::<u64>().map_err(|_| parse_err(line, key, format!("`{v}` is not a whole number >= 0")))
        };
        let flag = |v: &str| -> Result<bool> {
            match v {
                "0" | "false" => Ok(false),
                "1" | "true" => Ok(true),
                _ => Err(parse_err(line, key, format!("`{v}` is not 0 or 1"))),
            }
        };
        let alloc = |v: &str| -> Result<AllocatorKind> {
            AllocatorKind::from_name(v).ok_or_else(|| {
                parse_err(
                    line,
                    key,
                    format!("unknown allocator `{v}` (known: {})", crate::alloc::ALLOCATOR_NAMES.join(", ")),
                )
            })
        };
        let unsupported = |what: &str| parse_err(line, key, format!("`{v}`: {what}"));
        match key {
            "topology" => fc.topology = Some(v.to_string()),
            "k" => k = Some(int(v)? as usize),
            "n" => match int(v)? {
                n @ 1..=3 => dims_n = Some(n as usize),
                _ => return Err(unsupported("k-ary n-cubes of 1 to 3 dimensions are modelled")),
            },
            "dims" => {
                fc.params.dims = Some(vector(v).iter().map(|x| int(x).map(|x| x as usize)).collect::<Result<_>>()?)
            }
            "use_noc_latency" => noc_latency = flag(v)?,
            "link_cycles" => fc.params.link_cycles = Some(int(v)?),
            "routing_function" => match v {
                "dor" | "dim_order" | "dor_mesh" | "dim_order_mesh" | "dim_order_torus" => fc.routing = None,
                "min" | "shortest" => fc.routing = Some("shortest".into()),
                // BookSim2's dragonfly (`ugal_dragonflynew`); `select` rejects it elsewhere.
                "ugal" => fc.routing = Some("ugal".into()),
                _ => match CubeAlgo::from_name(v) {
                    Some(algo) => fc.routing = Some(algo_name(algo).into()),
                    None => {
                        return Err(unsupported(
                            "routing functions modelled: dor, dim_order, romm, valiant, min_adapt, min, ugal",
                        ))
                    }
                },
            },
            "num_vcs" => fc.sim.vcs = int(v)? as usize,
            "vc_buf_size" => fc.sim.vc_depth_flits = int(v)? as usize,
            "packet_size" => sizes = vector(v).iter().map(|x| int(x).map(|x| x as usize)).collect::<Result<_>>()?,
            "packet_size_rate" => size_rates = vector(v).iter().map(|x| num(x)).collect::<Result<_>>()?,
            "traffic" => {
                let (name, args) = match v.split_once('(') {
                    Some((n, a)) => (n.trim(), Some(a.trim_end_matches(')'))),
                    None => (v, None),
                };
                let mut pattern = TrafficPattern::from_name(name)?;
                if let (TrafficPattern::HotSpot { nodes, .. }, Some(args)) = (&mut pattern, args) {
                    // BookSim2's hotspot({nodes}, {rates}): the nodes; equal rates assumed.
                    let first = args.split('}').next().unwrap_or("");
                    *nodes = vector(&format!("{first}}}"))
                        .iter()
                        .map(|x| int(x).map(|x| x as usize))
                        .collect::<Result<_>>()?;
                }
                fc.sim.traffic = pattern;
            }
            "perm_seed" => match &mut fc.sim.traffic {
                TrafficPattern::RandomPermutation { seed } => *seed = int(v)?,
                _ => return Err(parse_err(line, key, "needs `traffic = randperm;` before it")),
            },
            "hotspot_fraction" => hotspot_fraction = Some(num(v)?),
            "injection_rate" => rate = Some(num(v)?),
            "injection_rate_uses_flits" => rate_in_flits = flag(v)?,
            "injection_process" => match v {
                "bernoulli" => on_off = false,
                "on_off" => on_off = true,
                _ => return Err(unsupported("injection processes modelled: bernoulli, on_off")),
            },
            "burst_alpha" => alpha = Some(num(v)?),
            "burst_beta" => beta = Some(num(v)?),
            "vc_allocator" => fc.sim.vc_allocator = alloc(v)?,
            "sw_allocator" => fc.sim.sw_allocator = alloc(v)?,
            "alloc_iters" => fc.sim.alloc_iters = int(v)? as usize,
            "speculative" => fc.sim.speculative = v != "0",
            "routing_delay" => fc.sim.routing_delay_cycles = int(v)?,
            "vc_alloc_delay" if v != "1" => return Err(unsupported("VC allocation takes one cycle in this model")),
            "vc_alloc_delay" => {}
            "sw_alloc_delay" | "st_final_delay" => {
                let d = int(v)?;
                if d == 0 {
                    return Err(unsupported("the model has one cycle of each at least"));
                }
                switch_extra += d - 1;
            }
            "st_prepare_delay" => switch_extra += int(v)?,
            "credit_delay" => fc.sim.credit_delay_cycles = int(v)?,
            "warmup_periods" => warmup_periods = Some(int(v)?),
            "sample_period" => sample_period = Some(int(v)?),
            "max_samples" => max_samples = Some(int(v)?),
            "sim_type" if v != "latency" => return Err(unsupported("only latency runs are modelled")),
            "sim_type" => {}
            "seed" => fc.sim.seed = int(v)?,
            "terminal_delay_cycles" => fc.sim.terminal_delay_cycles = int(v)?,
            "latency_bound_factor" => fc.sim.latency_bound_factor = num(v)?,
            "deadlock_cycles" => fc.sim.deadlock_cycles = int(v)?,
            "drain_cycles_max" => fc.sim.drain_cycles_max = int(v)?,
            "generate_during_drain" => fc.sim.generate_during_drain = flag(v)?,
            "freq_ghz" => fc.params.freq_ghz = Some(num(v)?),
            "concentration" => fc.params.concentration = Some(int(v)? as usize),
            "global_routers" => fc.params.global_routers = Some(int(v)? as usize),
            _ => return Err(parse_err(line, key, format!("unknown key `{key}`"))),
        }
    }
    fc.sim.switch_delay_cycles = switch_extra;
    let cube = matches!(fc.topology.as_deref(), Some("mesh" | "torus"));
    if let Some(k) = k {
        fc.params.tiles = k;
    }
    if let (Some(n), true, None) = (dims_n, cube, &fc.params.dims) {
        // BookSim2's k-ary n-cube: n dimensions of k routers, one node each.
        fc.params.dims = Some(vec![k.unwrap_or(BOOKSIM_K_DEFAULT); n]);
    }
    if cube && fc.params.link_cycles.is_none() {
        // BookSim2's `use_noc_latency` (on by default): channels of one cycle on a mesh, two
        // on the folded torus; off, every channel takes one cycle.
        let torus = fc.topology.as_deref() == Some("torus");
        fc.params.link_cycles = Some(if noc_latency && torus { 2 } else { 1 });
    }
    if !sizes.is_empty() {
        if !size_rates.is_empty() && size_rates.len() != sizes.len() {
            return Err(parse_err(
                0,
                "packet_size_rate",
                format!("{} rates for {} sizes", size_rates.len(), sizes.len()),
            ));
        }
        if sizes.len() == 1 {
            fc.sim.packet_flits = sizes[0];
        } else {
            let rates = if size_rates.is_empty() { vec![1.0; sizes.len()] } else { size_rates };
            fc.sim.packet_size_mix = sizes.into_iter().zip(rates).collect();
        }
    }
    if on_off {
        let (Some(a), Some(b)) = (alpha, beta) else {
            return Err(parse_err(0, "injection_process", "on_off needs burst_alpha and burst_beta"));
        };
        fc.sim.injection_process = InjectionProcess::OnOff { alpha: a, beta: b };
    }
    if let (Some(f), TrafficPattern::HotSpot { fraction, .. }) = (hotspot_fraction, &mut fc.sim.traffic) {
        *fraction = f;
    }
    if let Some(r) = rate {
        // BookSim2's rate is per node per cycle, in packets unless injection_rate_uses_flits.
        let flits = if rate_in_flits { r } else { r * fc.sim.mean_packet_flits() };
        fc.sim.injection = Injection::FlitsPerNodePerCycle(flits);
    }
    let period = sample_period.unwrap_or(BOOKSIM_SAMPLE_PERIOD_DEFAULT);
    let warm = warmup_periods.unwrap_or(BOOKSIM_WARMUP_PERIODS_DEFAULT);
    if sample_period.is_some() || warmup_periods.is_some() || max_samples.is_some() {
        // Warm-up of `warmup_periods` samples; the window is what BookSim2 would measure at
        // most after it (`max_samples` in all).
        fc.sim.warmup_cycles = warm * period;
        fc.sim.measure_cycles = max_samples.unwrap_or(BOOKSIM_MAX_SAMPLES_DEFAULT).saturating_sub(warm).max(1) * period;
    }
    fc.sim.validate()?;
    Ok(fc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_booksim2_mesh_file() {
        let text = "// 8x8 mesh\ntopology = mesh;\nk = 8;\nn = 2;\nrouting_function = dor;\n\
                    num_vcs = 4; vc_buf_size = 5;\npacket_size = 4;\ntraffic = uniform;\n\
                    vc_allocator = separable_input_first;\nsw_allocator = islip; alloc_iters = 2;\n\
                    routing_delay = 1;\nsw_alloc_delay = 2;\ncredit_delay = 1;\nspeculative = 0;\n\
                    injection_rate = 0.1;\nwarmup_periods = 2; sample_period = 500; max_samples = 8;\n";
        let fc = parse(text).unwrap();
        assert_eq!(fc.topology.as_deref(), Some("mesh"));
        assert_eq!(fc.params.tiles, 8);
        assert_eq!((fc.sim.vcs, fc.sim.vc_depth_flits, fc.sim.packet_flits), (4, 5, 4));
        assert_eq!(fc.sim.sw_allocator, AllocatorKind::Islip);
        assert_eq!(fc.sim.alloc_iters, 2);
        assert_eq!((fc.sim.routing_delay_cycles, fc.sim.switch_delay_cycles, fc.sim.credit_delay_cycles), (1, 1, 1));
        assert!(!fc.sim.speculative);
        // 0.1 packets of 4 flits per node per cycle.
        assert_eq!(fc.sim.injection, Injection::FlitsPerNodePerCycle(0.4));
        assert_eq!((fc.sim.warmup_cycles, fc.sim.measure_cycles), (1000, 3000));
        assert_eq!(fc.build_topology().unwrap().node_count(), 64);
    }

    #[test]
    fn reads_ugal_and_valiant_on_a_dragonfly_and_rejects_ugal_elsewhere() {
        for (name, routing) in [("ugal", "ugal"), ("valiant", "valiant")] {
            let fc = parse(&format!("topology = dragonfly; routing_function = {name};\n")).unwrap();
            assert_eq!(fc.build_topology().unwrap().routing.name(), routing);
        }
        let fc = parse("topology = mesh; k = 4; n = 2; routing_function = ugal;\n").unwrap();
        let err = fc.build_topology().unwrap_err().to_string();
        assert!(err.contains("ugal") && err.contains("valiant"), "{err}");
    }

    #[test]
    fn reads_k_ary_n_cubes_routings_and_channel_latency() {
        let fc = parse("topology = torus; k = 4; n = 3; routing_function = valiant;\n").unwrap();
        assert_eq!(fc.params.dims, Some(vec![4, 4, 4]));
        // BookSim2's use_noc_latency (on by default): two-cycle channels on the folded torus.
        assert_eq!(fc.params.link_cycles, Some(2));
        let t = fc.build_topology().unwrap();
        assert_eq!((t.node_count(), t.routing.name()), (64, "valiant"));
        let fc = parse("topology = mesh; k = 5; n = 1; use_noc_latency = 0;\n").unwrap();
        assert_eq!((fc.params.dims, fc.params.link_cycles), (Some(vec![5]), Some(1)));
        let fc = parse("topology = mesh; dims = {8, 4}; routing_function = min_adapt;\n").unwrap();
        let t = fc.build_topology().unwrap();
        assert_eq!((t.node_count(), t.routing.name()), (32, "min-adaptive"));
    }

    #[test]
    fn reads_mixes_bursts_and_patterns() {
        let fc = parse(
            "packet_size = {1, 8}; packet_size_rate = {3, 1};\ninjection_process = on_off; burst_alpha = 0.1;\n\
             burst_beta = 0.3;\ntraffic = randperm; perm_seed = 5;\n",
        )
        .unwrap();
        assert_eq!(fc.sim.packet_size_mix, vec![(1, 3.0), (8, 1.0)]);
        assert_eq!(fc.sim.injection_process, InjectionProcess::OnOff { alpha: 0.1, beta: 0.3 });
        assert_eq!(fc.sim.traffic, TrafficPattern::RandomPermutation { seed: 5 });
        let hot = parse("traffic = hotspot({3, 9}, {1, 1});\nhotspot_fraction = 0.5;\n").unwrap();
        assert_eq!(hot.sim.traffic, TrafficPattern::HotSpot { nodes: vec![3, 9], fraction: 0.5 });
    }

    #[test]
    fn unknown_and_unsupported_keys_are_errors_naming_them() {
        let err = |text: &str| match parse(text).unwrap_err() {
            NetsimError::Parse { line, field, reason, .. } => (line, field, reason),
            other => panic!("unexpected {other:?}"),
        };
        let (line, field, reason) = err("k = 4;\nflit_colour = red;\n");
        assert_eq!((line, field.as_str()), (2, "flit_colour"));
        assert!(reason.contains("unknown key `flit_colour`"));
        assert_eq!(err("n = 4;").1, "n");
        assert_eq!(err("routing_function = planar_adapt;").1, "routing_function");
        assert_eq!(err("vc_allocator = wavefront;").1, "vc_allocator");
        assert_eq!(err("num_vcs = four;").1, "num_vcs");
        assert_eq!(err("k = 4").1, "statement");
        // Values the run rejects name their SimConfig field.
        assert!(matches!(parse("num_vcs = 0;"), Err(NetsimError::InvalidParameter { field, .. }) if field == "vcs"));
        // Every key in the list is read (none falls through to "unknown").
        for key in KEYS {
            if let Err(NetsimError::Parse { reason, .. }) = parse(&format!("{key} = 1;")) {
                assert!(!reason.starts_with("unknown key"), "{key}");
            }
        }
    }
}
