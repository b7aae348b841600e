//! The cycle-level engine: input-queued VC routers with a two-stage pipeline (stage 1: buffer
//! write, route computation, VC and switch allocation; stage 2: switch traversal), wormhole
//! switching, credit flow control, per-router clocks and pipelined links.
//!
//! Time is kept in picoseconds. Each router ticks on its own clock (period rounded to 1 ps, all
//! clocks start in phase at t = 0). A flit that wins switch allocation at tick `t` (stage 1)
//! crosses the switch in the next cycle (stage 2) and is written into the downstream dual-clock
//! buffer at `t + P_up * (2 + L)`, where `L = max(1, ceil(wire_delay /
//! P_up))` is the link's pipeline depth at the upstream clock; the downstream router sees it at
//! its first own tick at or after that time. Credits travel back the same way, pipelined at the
//! downstream clock. Because every transfer takes at least one period, the order in which
//! routers tick within one instant does not matter, which makes runs deterministic.

use crate::alloc::{allocate, AllocatorKind, Pointers, Request};
use crate::analytic::analyze_config;
use crate::config::{Energy, Injection, InjectionProcess, RunStatus, SimConfig, SimResult};
use crate::constants::{ACCEPTED_RATE_SIGMAS, ACCEPTED_RATE_TOLERANCE, LATENCY_BATCHES, LATENCY_DRIFT_TOLERANCE};
use crate::error::{invalid, Result};
use crate::physical;
use crate::routing::{Hop, RouteState, Router};
use crate::topology::{RoutingKind, Topology};
use crate::traffic::TrafficPattern;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

const EJECT_CREDITS: u32 = u32::MAX / 2;

#[derive(Debug, Clone, Copy)]
struct Flit {
    pkt: u32,
    vc: u8,
    head: bool,
    tail: bool,
}

/// A unidirectional pipelined wire with its reverse credit wire.
struct Wire {
    flit_offset_ps: u64,
    credit_offset_ps: u64,
    flits: VecDeque<(u64, Flit)>,
    credits: VecDeque<(u64, u8)>,
    length_mm: f64,
    window_flits: u64,
}

struct InVc {
    buf: VecDeque<Flit>,
    hop: Option<Hop>,
    out_vc: Option<u8>,
    /// Earliest time (ps) of the head's next pipeline step (VC allocation after routing,
    /// switch allocation after VC allocation).
    ready_ps: u64,
    /// Time (ps) the head won its output VC: a switch request in that same cycle is
    /// speculative.
    va_ps: u64,
    /// The head's routing state as it arrived, from which an adaptive routing routes it
    /// again while it waits for an output VC.
    route_in: RouteState,
    /// Route computations of the waiting head (adaptive routing alternates on it).
    attempts: u32,
}

struct RouterState {
    period_ps: u64,
    in_wires: Vec<usize>,
    out_wires: Vec<usize>,
    ivc: Vec<InVc>,
    credits: Vec<u32>,
    ovc_busy: Vec<bool>,
    /// Round-robin pointers of the VC allocator (groups: input VCs; outputs: output VCs).
    va_ptr: Pointers,
    /// Round-robin pointers of the switch allocator (groups: input ports; outputs: ports).
    sa_ptr: Pointers,
    /// Per output port: the index-preferred VC allocator's round-robin pointer.
    va_out_rr: Vec<usize>,
    pick: usize,
    buffered: u32,
    /// Flits buffered per input port (the switch allocator skips empty ports).
    port_flits: Vec<u32>,
    /// Head flits at the front of a VC without a route (route computation skips the router
    /// when there are none).
    unrouted: u32,
    /// Routed heads without an output VC (VC allocation skips the router when there are none).
    awaiting_va: u32,
    window_flits: u64,
    energy_pj_per_flit: f64,
}

struct Ni {
    /// Packets this node generated inside the window.
    window_generated: u64,
    /// Packets delivered to this node inside the window.
    window_accepted: u64,
    inj_wire: usize,
    ej_wire: usize,
    /// Probability of a new packet per cycle while on (always on for Bernoulli injection).
    p_packet: f64,
    /// Whether an on/off source is on.
    on: bool,
    queue: VecDeque<u32>,
    cur: Option<(u32, usize, u8)>,
    credits: Vec<u32>,
    next_vc: usize,
    rng: ChaCha8Rng,
    trace: VecDeque<(u64, usize)>,
}

struct Packet {
    dst: u32,
    gen_ps: u64,
    /// Time the head flit entered the injection link (network latency starts here).
    inj_ps: u64,
    measured: bool,
    rs: RouteState,
    received: u16,
    routers: u16,
    flits: u16,
    /// Source node.
    src: u32,
    /// Whether this packet is a reply (a delivered request draws one when replies are on).
    reply: bool,
    /// Random number the routing draws the packet's choices from (intermediate router,
    /// tie-breaks) at its source router.
    draw: u32,
}

impl Packet {
    /// A packet from `src` to `dst` generated at `t` (ps), not yet injected.
    fn new(src: usize, dst: usize, flits: u16, t: u64, measured: bool, draw: u32, reply: bool) -> Self {
        Packet {
            dst: dst as u32,
            gen_ps: t,
            inj_ps: t,
            measured,
            rs: RouteState::new(),
            received: 0,
            routers: 0,
            flits,
            draw,
            src: src as u32,
            reply,
        }
    }
}

struct Domain {
    period_ps: u64,
    next_ps: u64,
    routers: Vec<usize>,
}

/// Scratch requests of the allocators: (output key, requester).
type Requests = Vec<(usize, usize)>;

/// One simulation of one topology at one load.
pub struct Simulation<'a> {
    topo: &'a Topology,
    cfg: SimConfig,
    routing: Router,
    routers: Vec<RouterState>,
    wires: Vec<Wire>,
    nis: Vec<Ni>,
    packets: Vec<Packet>,
    domains: Vec<Domain>,
    router_nis: Vec<Vec<usize>>,
    ref_period_ps: u64,
    warm_end_ps: u64,
    measure_end_ps: u64,
    gen_end_ps: u64,
    latencies_ps: Vec<u64>,
    measured_generated: u64,
    measured_delivered: u64,
    window_packets_ejected: u64,
    window_bits_delivered: f64,
    flits_injected: u64,
    flits_ejected: u64,
    packets_malformed: u64,
    max_occupancy: usize,
    last_progress_ps: u64,
    router_ticks: u64,
    routers_sum: u64,
    scratch: Requests,
    reqs: Vec<Request>,
    spec_reqs: Vec<Request>,
    grants: Vec<Request>,
    /// Output VCs granted by the VC allocation of the router ticking now.
    va_granted: usize,
    alloc_tmp: Vec<Request>,
    /// Per batch of the window (equal spans of generation time): count and sum of the
    /// latencies (ps) of measured packets, for the latency-drift test.
    batches: Vec<(u64, f64)>,
    /// Windows added by the adaptive measurement window.
    extensions: u32,
    /// Sum of the network latencies (head injection to tail delivery) of measured packets.
    network_latency_sum_ps: u64,
    /// Zero-load latency (ps) the latency bound is relative to (`None` for traces).
    zero_load_ps: Option<f64>,
    /// Cumulative probabilities of the packet sizes (flits), when there is more than one.
    size_cdf: Vec<(u16, f64)>,
    /// Every source's destination, for patterns that fix it.
    fixed_dst: Option<Vec<Option<usize>>>,
    /// Whether the routing draws per-packet choices (then each packet carries a random
    /// draw from its source's stream; a router's rotating pick would correlate them).
    draws: bool,
}

fn period_ps(freq_ghz: f64) -> u64 {
    ((1000.0 / freq_ghz).round() as u64).max(1)
}

fn pipeline_cycles(delay_ps: f64, period: u64) -> u64 {
    ((delay_ps / period as f64).ceil() as u64).max(1)
}

/// Runs one simulation.
pub fn run(topo: &Topology, cfg: &SimConfig) -> Result<SimResult> {
    let mut sim = Simulation::new(topo, cfg.clone())?;
    Ok(sim.run())
}

impl<'a> Simulation<'a> {
    /// Builds the runtime state; validates the configuration against the topology.
    pub fn new(topo: &'a Topology, cfg: SimConfig) -> Result<Self> {
        cfg.validate()?;
        cfg.traffic.validate(topo)?;
        let routing = Router::new(topo, cfg.vcs)?;
        let ref_period_ps = period_ps(topo.reference_freq_ghz());
        let mut sim = Simulation {
            topo,
            routing,
            routers: Vec::new(),
            wires: Vec::new(),
            nis: Vec::new(),
            packets: Vec::new(),
            domains: Vec::new(),
            router_nis: vec![Vec::new(); topo.router_count()],
            ref_period_ps,
            warm_end_ps: cfg.warmup_cycles * ref_period_ps,
            measure_end_ps: (cfg.warmup_cycles + cfg.measure_cycles) * ref_period_ps,
            gen_end_ps: u64::MAX,
            latencies_ps: Vec::new(),
            measured_generated: 0,
            measured_delivered: 0,
            window_packets_ejected: 0,
            window_bits_delivered: 0.0,
            flits_injected: 0,
            flits_ejected: 0,
            packets_malformed: 0,
            max_occupancy: 0,
            last_progress_ps: 0,
            router_ticks: 0,
            routers_sum: 0,
            scratch: Vec::new(),
            reqs: Vec::new(),
            spec_reqs: Vec::new(),
            grants: Vec::new(),
            va_granted: 0,
            alloc_tmp: Vec::new(),
            batches: vec![(0, 0.0); LATENCY_BATCHES],
            extensions: 0,
            zero_load_ps: None,
            network_latency_sum_ps: 0,
            size_cdf: Vec::new(),
            fixed_dst: cfg.traffic.is_fixed().then(|| cfg.traffic.fixed_destinations(topo)),
            draws: match &topo.routing {
                RoutingKind::Cube { wrap, algo, .. } => *wrap || algo.two_phase(),
                RoutingKind::FatTree { .. } => true,
                RoutingKind::Dragonfly { algo, .. } => algo.non_minimal(),
                _ => false,
            },
            cfg,
        };
        let sizes = sim.cfg.packet_sizes();
        if sizes.len() > 1 {
            let mut acc = 0.0;
            sim.size_cdf = sizes
                .iter()
                .map(|&(f, p)| {
                    acc += p;
                    (f as u16, acc)
                })
                .collect();
        }
        if !matches!(sim.cfg.traffic, TrafficPattern::Trace(_)) {
            let z = match sim.cfg.zero_load_latency_ns {
                Some(z) => z,
                None => analyze_config(topo, &sim.cfg)?.zero_load_latency_ns,
            };
            sim.zero_load_ps = Some(z * 1000.0);
        }
        if !sim.cfg.generate_during_drain {
            sim.gen_end_ps = sim.measure_end_ps;
        }
        sim.build_wires_and_routers();
        sim.build_nis()?;
        sim.build_domains();
        Ok(sim)
    }

    fn new_wire(&mut self, delay_ps: f64, up_period: u64, up_is_router: bool, down_period: u64, len: f64) -> usize {
        let up_cycles = pipeline_cycles(delay_ps, up_period);
        // A router's flit spends the switch-traversal cycle after allocation before the link; a
        // network interface's flit spends the terminal delay before it.
        let stage = if up_is_router { 2 + self.cfg.switch_delay_cycles } else { self.cfg.terminal_delay_cycles };
        let credit_cycles = pipeline_cycles(delay_ps, down_period) + self.cfg.credit_delay_cycles;
        self.wires.push(Wire {
            flit_offset_ps: up_period * (stage + up_cycles),
            credit_offset_ps: down_period * credit_cycles,
            flits: VecDeque::new(),
            credits: VecDeque::new(),
            length_mm: len,
            window_flits: 0,
        });
        self.wires.len() - 1
    }

    fn build_wires_and_routers(&mut self) {
        let topo = self.topo;
        let v = self.cfg.vcs;
        let periods: Vec<u64> = topo.routers.iter().map(|r| period_ps(r.freq_ghz)).collect();
        for (r, &period) in periods.iter().enumerate() {
            let ports_in = topo.router_nodes(r).len() + topo.in_channels(r).len();
            let ports_out = topo.router_nodes(r).len() + topo.out_channels(r).len();
            let bits = physical::FLIT_BITS as f64;
            self.routers.push(RouterState {
                period_ps: period,
                in_wires: Vec::with_capacity(ports_in),
                out_wires: Vec::with_capacity(ports_out),
                ivc: (0..ports_in * v)
                    .map(|_| InVc {
                        buf: VecDeque::with_capacity(self.cfg.vc_depth_flits),
                        hop: None,
                        out_vc: None,
                        ready_ps: 0,
                        va_ps: u64::MAX,
                        route_in: RouteState::new(),
                        attempts: 0,
                    })
                    .collect(),
                credits: vec![self.cfg.vc_depth_flits as u32; ports_out * v],
                ovc_busy: vec![false; ports_out * v],
                va_ptr: Pointers::new(ports_in * v, v, ports_out * v),
                sa_ptr: Pointers::new(ports_in, v, ports_out),
                va_out_rr: vec![0; ports_out],
                pick: 0,
                buffered: 0,
                port_flits: vec![0; ports_in],
                unrouted: 0,
                awaiting_va: 0,
                window_flits: 0,
                energy_pj_per_flit: bits * physical::router_energy_pj_per_bit(topo.radix(r)),
            });
        }
        // Terminal ports first (injection inputs, ejection outputs).
        for (n, node) in topo.nodes.iter().enumerate() {
            let r = node.router;
            let p = periods[r];
            let delay = physical::wire_delay_ps(node.link_length_mm);
            let inj = self.new_wire(delay, p, false, p, node.link_length_mm);
            let ej = self.new_wire(delay, p, true, p, node.link_length_mm);
            debug_assert_eq!(self.routers[r].in_wires.len(), topo.node_port(n));
            self.routers[r].in_wires.push(inj);
            self.routers[r].out_wires.push(ej);
            let port = topo.node_port(n);
            for vc in 0..v {
                self.routers[r].credits[port * v + vc] = EJECT_CREDITS;
            }
        }
        let mut chan_wire = vec![0usize; topo.channels.len()];
        for (c, ch) in topo.channels.iter().enumerate() {
            let delay = topo.channel_delay_ps(c);
            chan_wire[c] = self.new_wire(delay, periods[ch.from], true, periods[ch.to], ch.length_mm);
        }
        for r in 0..topo.router_count() {
            for &c in topo.out_channels(r) {
                self.routers[r].out_wires.push(chan_wire[c]);
            }
            for &c in topo.in_channels(r) {
                self.routers[r].in_wires.push(chan_wire[c]);
            }
        }
    }

    fn build_nis(&mut self) -> Result<()> {
        let topo = self.topo;
        let f = self.cfg.mean_packet_flits();
        let on_share = self.cfg.injection_process.on_share();
        let mut traces: Vec<VecDeque<(u64, usize)>> = vec![VecDeque::new(); topo.node_count()];
        if let TrafficPattern::Trace(events) = &self.cfg.traffic {
            for e in events {
                traces[e.src].push_back(((e.time_ns * 1000.0).round() as u64, e.dst));
            }
        }
        for (n, node) in topo.nodes.iter().enumerate() {
            let r = node.router;
            let period_ns = self.routers[r].period_ps as f64 / 1000.0;
            let p_packet = match self.cfg.injection {
                Injection::PacketsPerNsPerNode(x) => x * period_ns,
                Injection::FlitsPerNodePerCycle(x) => x / f * period_ns * 1000.0 / self.ref_period_ps as f64,
            } / on_share;
            if matches!(self.cfg.traffic, TrafficPattern::Trace(_)) {
                // Injection rate is not used for traces.
            } else if p_packet * f > 1.0 + 1e-9 {
                return Err(invalid(
                    "injection_rate",
                    format!("{:.3} flits/node/cycle at router {} is outside 0-1", p_packet * f, topo.routers[r].label),
                ));
            }
            let seed = self.cfg.seed ^ (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let on = match self.cfg.injection_process {
                InjectionProcess::Bernoulli => true,
                InjectionProcess::OnOff { .. } => rng.gen::<f64>() < on_share,
            };
            self.router_nis[r].push(n);
            self.nis.push(Ni {
                inj_wire: self.routers[r].in_wires[topo.node_port(n)],
                ej_wire: self.routers[r].out_wires[topo.node_port(n)],
                p_packet,
                on,
                queue: VecDeque::new(),
                cur: None,
                credits: vec![self.cfg.vc_depth_flits as u32; self.cfg.vcs],
                next_vc: 0,
                window_generated: 0,
                window_accepted: 0,
                rng,
                trace: std::mem::take(&mut traces[n]),
            });
        }
        if let TrafficPattern::Trace(events) = &self.cfg.traffic {
            // A trace is measured whole: no warm-up, the window covers the last packet.
            let last_ps = (events.last().map(|e| e.time_ns).unwrap_or(0.0) * 1000.0) as u64;
            self.warm_end_ps = 0;
            self.measure_end_ps = last_ps + self.ref_period_ps;
            self.gen_end_ps = u64::MAX;
        }
        Ok(())
    }

    fn build_domains(&mut self) {
        for (r, rs) in self.routers.iter().enumerate() {
            match self.domains.iter_mut().find(|d| d.period_ps == rs.period_ps) {
                Some(d) => d.routers.push(r),
                None => self.domains.push(Domain { period_ps: rs.period_ps, next_ps: 0, routers: vec![r] }),
            }
        }
        self.domains.sort_by_key(|d| d.period_ps);
    }

    /// Runs warm-up, window and drain; returns the measured result.
    pub fn run(&mut self) -> SimResult {
        let mut drain_end = self.measure_end_ps + self.cfg.drain_cycles_max * self.ref_period_ps;
        let adaptive = !matches!(self.cfg.traffic, TrafficPattern::Trace(_));
        let deadlock_ps = self.cfg.deadlock_cycles * self.ref_period_ps;
        let mut status = RunStatus::Stable;
        let mut now;
        loop {
            now = self.domains.iter().map(|d| d.next_ps).min().expect("at least one router");
            for di in 0..self.domains.len() {
                if self.domains[di].next_ps != now {
                    continue;
                }
                for i in 0..self.domains[di].routers.len() {
                    let r = self.domains[di].routers[i];
                    self.tick_router(r, now);
                    for k in 0..self.router_nis[r].len() {
                        let n = self.router_nis[r][k];
                        self.tick_ni(n, now);
                    }
                }
                self.domains[di].next_ps += self.domains[di].period_ps;
            }
            if adaptive
                && now >= self.measure_end_ps
                && now < self.measure_end_ps + self.ref_period_ps
                && self.extensions < self.cfg.max_window_extensions
                && !self.window_converged()
            {
                // Adaptive window: one more window until the statistics converge.
                let w = self.cfg.measure_cycles * self.ref_period_ps;
                self.measure_end_ps += w;
                drain_end += w;
                if !self.cfg.generate_during_drain {
                    self.gen_end_ps = self.measure_end_ps;
                }
                self.batches.extend(std::iter::repeat_n((0, 0.0), LATENCY_BATCHES));
                self.extensions += 1;
            }
            let in_flight = self.flits_injected - self.flits_ejected;
            if in_flight > 0 && now > self.last_progress_ps + deadlock_ps {
                status = RunStatus::Deadlock;
                break;
            }
            if self.cfg.generate_during_drain && now >= self.measure_end_ps && !self.accepted_rate_stable() {
                status = RunStatus::Unstable;
                break;
            }
            if now >= self.measure_end_ps {
                let drained = self.measured_delivered == self.measured_generated;
                let empty = self.cfg.generate_during_drain || (in_flight == 0 && self.queues_empty());
                if drained && empty {
                    break;
                }
                if now >= drain_end {
                    status = RunStatus::Unstable;
                    break;
                }
            }
        }
        self.result(status, now)
    }

    /// Whether the window's accepted rate matched the offered load: the packets delivered in
    /// the window fall short of those generated in it by at most [`ACCEPTED_RATE_TOLERANCE`]
    /// plus [`ACCEPTED_RATE_SIGMAS`] Poisson standard deviations (the packets in flight at the
    /// window's two ends differ by that much in steady state). A saturated network, whose
    /// source queues grow, fails it at the window's end without draining.
    fn accepted_rate_stable(&self) -> bool {
        if matches!(self.cfg.traffic, TrafficPattern::Trace(_)) {
            return true;
        }
        let generated = self.measured_generated as f64;
        let backlog = generated - self.window_packets_ejected as f64;
        backlog <= ACCEPTED_RATE_TOLERANCE * generated + ACCEPTED_RATE_SIGMAS * generated.sqrt()
    }

    /// Whether the measured latency converged under its bound: the average stays within
    /// `latency_bound_factor` times the zero-load latency, and the packets generated in the
    /// window's second half waited at most [`LATENCY_DRIFT_TOLERANCE`] (plus the noise
    /// allowance) longer than those of the first half. The noise is estimated from the means
    /// of [`LATENCY_BATCHES`] batches by generation time (batch means), not from single
    /// packets: near saturation consecutive packets' latencies are strongly correlated, and a
    /// per-packet standard error would call a steady but noisy point drifting.
    fn latency_converged(&self) -> bool {
        let Some(zero) = self.zero_load_ps else {
            return true;
        };
        let b = &self.batches;
        let half = b.len() / 2;
        let sum = |r: std::ops::Range<usize>| b[r].iter().fold((0u64, 0.0), |a, x| (a.0 + x.0, a.1 + x.1));
        let ((n0, s0), (n1, s1)) = (sum(0..half), sum(half..b.len()));
        let n = n0 + n1;
        if n == 0 {
            return true;
        }
        if (s0 + s1) / n as f64 > self.cfg.latency_bound_factor * zero {
            return false;
        }
        if n0 < 2 || n1 < 2 || b.iter().any(|x| x.0 == 0) {
            return true;
        }
        let (m0, m1) = (s0 / n0 as f64, s1 / n1 as f64);
        // Pooled variance of the batch means around their half's mean.
        let dev: f64 = b
            .iter()
            .enumerate()
            .map(|(i, x)| {
                let m = if i < half { m0 } else { m1 };
                (x.1 / x.0 as f64 - m).powi(2)
            })
            .sum();
        let var = dev / (b.len() - 2) as f64;
        let se = (2.0 * var / half as f64).sqrt();
        m1 - m0 <= LATENCY_DRIFT_TOLERANCE * m0 + ACCEPTED_RATE_SIGMAS * se
    }

    fn queues_empty(&self) -> bool {
        self.nis.iter().all(|ni| ni.queue.is_empty() && ni.cur.is_none())
    }

    /// Batch of the window a packet generated at `gen_ps` belongs to ([`LATENCY_BATCHES`]
    /// per window length; an extended window adds as many).
    fn batch_of(&self, gen_ps: u64) -> usize {
        let span = (self.cfg.measure_cycles * self.ref_period_ps).max(1);
        ((gen_ps.saturating_sub(self.warm_end_ps) as u128 * LATENCY_BATCHES as u128 / span as u128) as usize)
            .min(self.batches.len() - 1)
    }

    /// Whether the window's statistics converged: the relative standard error of the average
    /// latency, from the batch means, is at most `converge_tolerance`, and the latency does
    /// not drift.
    fn window_converged(&self) -> bool {
        let means: Vec<f64> = self.batches.iter().filter(|b| b.0 > 0).map(|b| b.1 / b.0 as f64).collect();
        if means.len() < 2 {
            return false;
        }
        let k = means.len() as f64;
        let m = means.iter().sum::<f64>() / k;
        let var = means.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (k - 1.0);
        (var / k).sqrt() <= self.cfg.converge_tolerance * m && self.latency_converged()
    }

    fn in_window(&self, t: u64) -> bool {
        t >= self.warm_end_ps && t < self.measure_end_ps
    }

    fn tick_router(&mut self, r: usize, t: u64) {
        self.router_ticks += 1;
        let v = self.cfg.vcs;
        let depth = self.cfg.vc_depth_flits;
        let rs = &mut self.routers[r];
        for (p, &w) in rs.in_wires.iter().enumerate() {
            let wire = &mut self.wires[w];
            while wire.flits.front().is_some_and(|f| f.0 <= t) {
                let (_, flit) = wire.flits.pop_front().expect("front exists");
                let ivc = &mut rs.ivc[p * v + flit.vc as usize];
                assert!(ivc.buf.len() < depth, "credit flow control overflowed a buffer");
                if ivc.buf.is_empty() && ivc.hop.is_none() {
                    rs.unrouted += 1;
                }
                ivc.buf.push_back(flit);
                rs.port_flits[p] += 1;
                self.max_occupancy = self.max_occupancy.max(ivc.buf.len());
                rs.buffered += 1;
            }
        }
        for (p, &w) in rs.out_wires.iter().enumerate() {
            let wire = &mut self.wires[w];
            while wire.credits.front().is_some_and(|c| c.0 <= t) {
                let (_, vc) = wire.credits.pop_front().expect("front exists");
                rs.credits[p * v + vc as usize] += 1;
            }
        }
        if rs.buffered == 0 {
            return;
        }
        self.route_heads(r, t);
        self.allocate_vcs(r, t);
        self.allocate_switch(r, t);
    }

    /// Route computation for head flits at the front of idle VCs.
    fn route_heads(&mut self, r: usize, t: u64) {
        let v = self.cfg.vcs;
        let va_at = t + self.cfg.routing_delay_cycles * self.routers[r].period_ps;
        let cap = (v * self.cfg.vc_depth_flits) as u32;
        let RouterState { ivc, credits, pick, unrouted, awaiting_va, .. } = &mut self.routers[r];
        let occupancy = |port: usize| {
            let free: u32 = credits[port * v..(port + 1) * v].iter().map(|&c| c.min(cap)).sum();
            cap.saturating_sub(free)
        };
        let reroutes = self.topo.routing.reroutes();
        if *unrouted == 0 && !reroutes {
            return;
        }
        for vc in ivc.iter_mut() {
            if *unrouted == 0 && !reroutes {
                break;
            }
            if vc.hop.is_some() {
                // An adaptive routing routes a head still waiting for its output VC again,
                // from the state it arrived with (Duato's condition: it keeps asking for the
                // escape VCs too).
                if reroutes && vc.out_vc.is_none() && vc.ready_ps <= t {
                    let front = vc.buf.front().expect("a routed VC holds its head");
                    let pkt = &mut self.packets[front.pkt as usize];
                    pkt.rs = vc.route_in;
                    vc.attempts = vc.attempts.wrapping_add(1);
                    let hop = self.routing.route(
                        self.topo,
                        r,
                        pkt.dst as usize,
                        &mut pkt.rs,
                        vc.attempts as usize,
                        &occupancy,
                    );
                    vc.hop = Some(hop);
                }
                continue;
            }
            let Some(front) = vc.buf.front() else {
                continue;
            };
            assert!(front.head, "a body flit reached the front of an idle VC");
            let pkt = &mut self.packets[front.pkt as usize];
            if reroutes {
                vc.route_in = pkt.rs;
                vc.attempts = 0;
            }
            let p = if self.draws && !pkt.rs.chosen { pkt.draw as usize } else { *pick };
            let hop = self.routing.route(self.topo, r, pkt.dst as usize, &mut pkt.rs, p, &occupancy);
            *pick = pick.wrapping_add(1);
            pkt.routers += 1;
            vc.hop = Some(hop);
            vc.ready_ps = va_at;
            *unrouted -= 1;
            *awaiting_va += 1;
        }
    }

    /// VC allocation: each input VC holding a routed head asks for every free output VC of its
    /// range on its output port; the configured allocator picks at most one per input VC and
    /// one input VC per output VC.
    fn allocate_vcs(&mut self, r: usize, t: u64) {
        if self.routers[r].awaiting_va == 0 {
            self.va_granted = 0;
            return;
        }
        if self.cfg.vc_allocator == AllocatorKind::IndexPreferred {
            return self.allocate_vcs_index_preferred(r, t);
        }
        let sa_at = t + if self.cfg.speculative { 0 } else { self.routers[r].period_ps };
        let input_first = self.cfg.vc_allocator == AllocatorKind::SeparableInputFirst;
        let v = self.cfg.vcs;
        let mut reqs = std::mem::take(&mut self.reqs);
        let mut grants = std::mem::take(&mut self.grants);
        reqs.clear();
        grants.clear();
        let rs = &mut self.routers[r];
        let (waiting, mut seen) = (rs.awaiting_va, 0);
        for (i, vc) in rs.ivc.iter().enumerate() {
            if seen == waiting {
                break;
            }
            let (Some(hop), None) = (vc.hop, vc.out_vc) else {
                continue;
            };
            seen += 1;
            if vc.ready_ps > t {
                continue;
            }
            // Input-first: the input VC's arbiter picks here, the first free output VC from
            // its pointer; the other allocators see every free output VC.
            let (lo, width) = (hop.vc_lo as usize, (hop.vc_hi - hop.vc_lo) as usize);
            let start = rs.va_ptr.input[i] as usize;
            for k in 0..width {
                let ov = lo + (start + k) % width;
                let o = hop.port * v + ov;
                if !rs.ovc_busy[o] {
                    reqs.push(Request { group: i as u32, key: ov as u32, out: o as u32 });
                    if input_first {
                        break;
                    }
                }
            }
        }
        allocate(
            self.cfg.vc_allocator,
            self.cfg.alloc_iters,
            &mut reqs,
            &mut rs.va_ptr,
            &mut grants,
            &mut self.alloc_tmp,
        );
        self.va_granted = grants.len();
        rs.awaiting_va -= grants.len() as u32;
        for g in &grants {
            rs.ovc_busy[g.out as usize] = true;
            let ivc = &mut rs.ivc[g.group as usize];
            ivc.out_vc = Some(g.key as u8);
            ivc.ready_ps = sa_at;
            ivc.va_ps = t;
        }
        self.reqs = reqs;
        self.grants = grants;
    }

    /// The index-preferred VC allocator ([`AllocatorKind::IndexPreferred`]): each input VC
    /// requests one free output VC in its range, the first from its own index, each output
    /// port grants round-robin among requesters.
    fn allocate_vcs_index_preferred(&mut self, r: usize, t: u64) {
        self.va_granted = 0;
        let v = self.cfg.vcs;
        let sa_at = t + if self.cfg.speculative { 0 } else { self.routers[r].period_ps };
        let mut req = std::mem::take(&mut self.scratch);
        req.clear();
        let rs = &mut self.routers[r];
        let n_ivc = rs.ivc.len();
        let (waiting, mut seen) = (rs.awaiting_va, 0);
        for (i, vc) in rs.ivc.iter().enumerate() {
            if seen == waiting {
                break;
            }
            let (Some(hop), None) = (vc.hop, vc.out_vc) else {
                continue;
            };
            seen += 1;
            if vc.ready_ps > t {
                continue;
            }
            let width = (hop.vc_hi - hop.vc_lo) as usize;
            let start = i % width.max(1);
            for k in 0..width {
                let ov = hop.vc_lo as usize + (start + k) % width;
                if !rs.ovc_busy[hop.port * v + ov] {
                    req.push((hop.port * v + ov, i));
                    break;
                }
            }
        }
        if !req.is_empty() {
            let rr = &rs.va_out_rr;
            req.sort_unstable_by_key(|&(o, i)| (o, (i + n_ivc - rr[o / v] % n_ivc) % n_ivc));
            let mut last = usize::MAX;
            for &(o, i) in req.iter() {
                if o == last {
                    continue;
                }
                last = o;
                rs.ovc_busy[o] = true;
                rs.ivc[i].out_vc = Some((o % v) as u8);
                rs.ivc[i].ready_ps = sa_at;
                rs.ivc[i].va_ps = t;
                self.va_granted += 1;
                rs.awaiting_va -= 1;
                rs.va_out_rr[o / v] = i + 1;
            }
        }
        self.scratch = req;
    }

    /// Switch allocation (every input VC with a flit, an output VC and a credit asks for its
    /// output port; the configured allocator grants at most one VC per input port and one
    /// input port per output port) and switch traversal of the winners onto their output wires.
    fn allocate_switch(&mut self, r: usize, t: u64) {
        let v = self.cfg.vcs;
        let window = self.in_window(t);
        let mut reqs = std::mem::take(&mut self.reqs);
        let mut grants = std::mem::take(&mut self.grants);
        reqs.clear();
        grants.clear();
        let mut spec = std::mem::take(&mut self.spec_reqs);
        spec.clear();
        let rs = &mut self.routers[r];
        let (kind, iters) = (self.cfg.sw_allocator, self.cfg.alloc_iters);
        // With an input-first allocator each input port's arbiter is applied here, while
        // collecting (the first eligible VC from its pointer), which keeps the hot loop short.
        let input_first = kind == AllocatorKind::SeparableInputFirst;
        // Speculative requests exist only when this router's VC allocation granted some in
        // this cycle; otherwise an input-first port stops at its first request.
        let any_spec = self.cfg.speculative && self.va_granted > 0;
        // Speculative requests (heads whose VC was allocated in this same cycle) go second,
        // to the input and output ports the others left free.
        for p in 0..rs.in_wires.len() {
            if rs.port_flits[p] == 0 {
                continue;
            }
            let start = rs.sa_ptr.input[p] as usize;
            let (mut found, mut found_spec) = (false, false);
            for k in 0..v {
                let vc = if start + k >= v { start + k - v } else { start + k };
                let i = p * v + vc;
                let ivc = &rs.ivc[i];
                let (Some(hop), Some(ov)) = (ivc.hop, ivc.out_vc) else {
                    continue;
                };
                if ivc.buf.is_empty() || rs.credits[hop.port * v + ov as usize] == 0 || ivc.ready_ps > t {
                    continue;
                }
                let req = Request { group: p as u32, key: vc as u32, out: hop.port as u32 };
                if ivc.va_ps == t && self.cfg.speculative {
                    if !(input_first && found_spec) {
                        spec.push(req);
                        found_spec = true;
                    }
                } else if !(input_first && found) {
                    reqs.push(req);
                    found = true;
                }
                if input_first && found && (!any_spec || found_spec) {
                    break;
                }
            }
        }
        allocate(kind, iters, &mut reqs, &mut rs.sa_ptr, &mut grants, &mut self.alloc_tmp);
        if !spec.is_empty() {
            spec.retain(|s| !grants.iter().any(|g| g.group == s.group || g.out == s.out));
            allocate(kind, iters, &mut spec, &mut rs.sa_ptr, &mut grants, &mut self.alloc_tmp);
        }
        self.spec_reqs = spec;
        for g in &grants {
            let (o, p, vc) = (g.out as usize, g.group as usize, g.key as usize);
            let ivc = &mut rs.ivc[p * v + vc];
            let ov = ivc.out_vc.expect("allocated");
            let mut flit = ivc.buf.pop_front().expect("non-empty");
            if flit.tail {
                ivc.hop = None;
                ivc.out_vc = None;
                rs.ovc_busy[o * v + ov as usize] = false;
                if !ivc.buf.is_empty() {
                    // The next packet's head is at the front now.
                    rs.unrouted += 1;
                }
            }
            rs.buffered -= 1;
            rs.port_flits[p] -= 1;
            rs.credits[o * v + ov as usize] -= 1;
            flit.vc = ov;
            let out = &mut self.wires[rs.out_wires[o]];
            out.flits.push_back((t + out.flit_offset_ps, flit));
            if window {
                out.window_flits += 1;
                rs.window_flits += 1;
            }
            let inw = &mut self.wires[rs.in_wires[p]];
            inw.credits.push_back((t + inw.credit_offset_ps, vc as u8));
            self.last_progress_ps = t;
        }
        self.reqs = reqs;
        self.grants = grants;
    }

    fn tick_ni(&mut self, n: usize, t: u64) {
        self.eject(n, t);
        let window = self.in_window(t);
        let ni = &mut self.nis[n];
        let inj = &mut self.wires[ni.inj_wire];
        while inj.credits.front().is_some_and(|c| c.0 <= t) {
            let (_, vc) = inj.credits.pop_front().expect("front exists");
            ni.credits[vc as usize] += 1;
        }
        self.generate(n, t);
        let ni = &mut self.nis[n];
        if ni.cur.is_none() {
            if let Some(&pkt) = ni.queue.front() {
                let v = ni.credits.len();
                if let Some(k) = (0..v).find(|k| ni.credits[(ni.next_vc + k) % v] > 0) {
                    let vc = (ni.next_vc + k) % v;
                    ni.next_vc = vc + 1;
                    ni.queue.pop_front();
                    ni.cur = Some((pkt, 0, vc as u8));
                }
            }
        }
        if let Some((pkt, sent, vc)) = ni.cur {
            let f = self.packets[pkt as usize].flits as usize;
            if ni.credits[vc as usize] > 0 {
                ni.credits[vc as usize] -= 1;
                let flit = Flit { pkt, vc, head: sent == 0, tail: sent + 1 == f };
                if sent == 0 {
                    self.packets[pkt as usize].inj_ps = t;
                }
                let w = &mut self.wires[ni.inj_wire];
                w.flits.push_back((t + w.flit_offset_ps, flit));
                if window {
                    w.window_flits += 1;
                }
                self.flits_injected += 1;
                ni.cur = if sent + 1 == f { None } else { Some((pkt, sent + 1, vc)) };
            }
        }
    }

    fn generate(&mut self, n: usize, t: u64) {
        let topo = self.topo;
        let measured = self.in_window(t);
        let ni = &mut self.nis[n];
        let mut new_dsts: [Option<usize>; 1] = [None];
        let mut trace_dsts = Vec::new();
        if !ni.trace.is_empty() {
            while ni.trace.front().is_some_and(|e| e.0 <= t) {
                trace_dsts.push(ni.trace.pop_front().expect("front exists").1);
            }
        } else if t < self.gen_end_ps && ni.p_packet > 0.0 {
            if let InjectionProcess::OnOff { alpha, beta } = self.cfg.injection_process {
                let flip = if ni.on { beta } else { alpha };
                if ni.rng.gen::<f64>() < flip {
                    ni.on = !ni.on;
                }
            }
            if ni.on && ni.rng.gen::<f64>() < ni.p_packet {
                new_dsts[0] = match &self.fixed_dst {
                    Some(fixed) => fixed[n],
                    None => self.cfg.traffic.dest(topo, n, &mut ni.rng),
                };
            }
        }
        let ni = &mut self.nis[n];
        let default_flits = self.cfg.packet_flits as u16;
        for dst in new_dsts.into_iter().flatten().chain(trace_dsts) {
            let flits = if self.size_cdf.is_empty() {
                default_flits
            } else {
                let u = ni.rng.gen::<f64>();
                self.size_cdf.iter().find(|x| u < x.1).unwrap_or(self.size_cdf.last().expect("sizes")).0
            };
            let draw = if self.draws { ni.rng.gen::<u32>() } else { 0 };
            let id = self.packets.len() as u32;
            self.packets.push(Packet::new(n, dst, flits, t, measured, draw, false));
            if measured {
                self.measured_generated += 1;
                ni.window_generated += 1;
            }
            ni.queue.push_back(id);
        }
    }

    /// Request/reply traffic: node `n`, having received a request from `src`, queues a reply
    /// of `flits` flits back to it, generated now.
    fn send_reply(&mut self, n: usize, src: usize, flits: usize, t: u64) {
        let measured = self.in_window(t);
        let draw = if self.draws { self.nis[n].rng.gen::<u32>() } else { 0 };
        let id = self.packets.len() as u32;
        self.packets.push(Packet::new(n, src, flits as u16, t, measured, draw, true));
        if measured {
            self.measured_generated += 1;
            self.nis[n].window_generated += 1;
        }
        self.nis[n].queue.push_back(id);
    }

    fn eject(&mut self, n: usize, t: u64) {
        loop {
            let w = &mut self.wires[self.nis[n].ej_wire];
            let Some(&(arrival, flit)) = w.flits.front().filter(|x| x.0 <= t) else {
                break;
            };
            w.flits.pop_front();
            self.flits_ejected += 1;
            self.last_progress_ps = self.last_progress_ps.max(t);
            let pkt = &mut self.packets[flit.pkt as usize];
            assert_eq!(pkt.dst as usize, n, "flit delivered to the wrong node");
            pkt.received += 1;
            if !flit.tail {
                continue;
            }
            let f = pkt.flits;
            if pkt.received != f {
                self.packets_malformed += 1;
            }
            let (src, reply) = (pkt.src, pkt.reply);
            if let (Some(flits), false) = (self.cfg.reply_flits, reply) {
                self.send_reply(n, src as usize, flits, t);
            }
            let pkt = &mut self.packets[flit.pkt as usize];
            if arrival >= self.warm_end_ps && arrival < self.measure_end_ps {
                self.nis[n].window_accepted += 1;
                self.window_packets_ejected += 1;
                self.window_bits_delivered += (f as u32 * physical::FLIT_BITS) as f64;
            }
            if pkt.measured {
                self.measured_delivered += 1;
                let lat = arrival - pkt.gen_ps;
                self.latencies_ps.push(lat);
                self.network_latency_sum_ps += arrival - pkt.inj_ps;
                let (gen_ps, routers) = (pkt.gen_ps, pkt.routers);
                self.routers_sum += routers as u64;
                let b = self.batch_of(gen_ps);
                self.batches[b].0 += 1;
                self.batches[b].1 += lat as f64;
            }
        }
    }

    fn result(&mut self, status: RunStatus, end_ps: u64) -> SimResult {
        let topo = self.topo;
        let nodes = topo.node_count() as f64;
        let window_ns = (self.measure_end_ps - self.warm_end_ps) as f64 / 1000.0;
        let accepted = self.window_packets_ejected as f64 / nodes / window_ns;
        let offered = match (&self.cfg.traffic, self.cfg.injection) {
            (TrafficPattern::Trace(ev), _) => ev.len() as f64 / nodes / window_ns,
            (_, Injection::PacketsPerNsPerNode(x)) => x,
            (_, Injection::FlitsPerNodePerCycle(x)) => {
                x / self.cfg.mean_packet_flits() * 1000.0 / self.ref_period_ps as f64
            }
        };
        let steady = self.accepted_rate_stable() && self.latency_converged();
        let status = if status == RunStatus::Stable && !steady { RunStatus::Unstable } else { status };
        self.latencies_ps.sort_unstable();
        let lat = &self.latencies_ps;
        let stable = status == RunStatus::Stable && !lat.is_empty();
        let ref_ghz = 1000.0 / self.ref_period_ps as f64;
        let avg_ns = stable.then(|| lat.iter().sum::<u64>() as f64 / lat.len() as f64 / 1000.0);
        let pct = |q: f64| {
            stable.then(|| lat[((lat.len() as f64 * q).ceil() as usize).clamp(1, lat.len()) - 1] as f64 / 1000.0)
        };
        let p99_ns = pct(0.99);
        let net_ns = stable.then(|| self.network_latency_sum_ps as f64 / lat.len() as f64 / 1000.0);
        let router_pj: f64 = self.routers.iter().map(|r| r.window_flits as f64 * r.energy_pj_per_flit).sum();
        let link_pj: f64 =
            self.wires.iter().map(|w| w.window_flits as f64 * physical::link_energy_pj_per_flit(w.length_mm)).sum();
        let total = router_pj + link_pj;
        SimResult {
            topology: topo.name.clone(),
            traffic: self.cfg.traffic.name().to_string(),
            offered_packets_per_ns_per_node: offered,
            accepted_packets_per_ns_per_node: accepted,
            status,
            avg_latency_ns: avg_ns,
            p99_latency_ns: p99_ns,
            avg_latency_cycles: avg_ns.map(|x| x * ref_ghz),
            p99_latency_cycles: p99_ns.map(|x| x * ref_ghz),
            avg_network_latency_ns: net_ns,
            min_latency_ns: pct(0.0),
            p50_latency_ns: pct(0.5),
            p95_latency_ns: pct(0.95),
            max_latency_ns: pct(1.0),
            reference_freq_ghz: ref_ghz,
            avg_routers_traversed: self.routers_sum as f64 / lat.len().max(1) as f64,
            packets_measured: self.measured_generated,
            packets_measured_delivered: self.measured_delivered,
            flits_injected: self.flits_injected,
            flits_ejected: self.flits_ejected,
            packets_malformed: self.packets_malformed,
            max_vc_occupancy_flits: self.max_occupancy,
            energy: Energy {
                router_pj,
                link_pj,
                power_w: total / window_ns / 1000.0,
                pj_per_bit: if self.window_bits_delivered > 0.0 { total / self.window_bits_delivered } else { 0.0 },
            },
            simulated_cycles: end_ps / self.ref_period_ps,
            per_node_injected_packets_per_ns: self.nis.iter().map(|x| x.window_generated as f64 / window_ns).collect(),
            per_node_accepted_packets_per_ns: self.nis.iter().map(|x| x.window_accepted as f64 / window_ns).collect(),
            window_extensions: self.extensions,
            router_ticks: self.router_ticks,
        }
    }
}
