//! Allocators of the router model: separable input-first, separable output-first and iSLIP,
//! working on sparse request lists so that one routine serves VC allocation (an input VC asks
//! for output VCs) and switch allocation (the VCs of an input port ask for output ports).
//!
//! A [`Request`] names its *group* (the input arbiter it goes through: an input VC for VC
//! allocation, an input port for switch allocation), its *key* inside that group (the output VC
//! index, or the input VC index) and the *output* it wants. Each group receives at most one
//! grant and each output grants at most one request. Arbiters are round-robin: an input arbiter
//! prefers the key at or after its pointer, an output arbiter the group at or after its
//! pointer; a pointer moves one past the winner only when the grant is final, as in Dally and
//! Towles's separable allocators and McKeown's iSLIP (the names of BookSim2's
//! `separable_input_first`, `separable_output_first` and `islip`).

use serde::Serialize;

/// Which allocator a router stage uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum AllocatorKind {
    /// Separable, input first: each input arbiter picks one of its requests, then each output
    /// arbiter grants one of the groups that picked it (BookSim2 `separable_input_first`).
    #[default]
    SeparableInputFirst,
    /// Separable, output first: each output arbiter grants one of all requests for it, then
    /// each group accepts one of its grants (BookSim2 `separable_output_first`).
    SeparableOutputFirst,
    /// iSLIP: output-first request/grant/accept repeated `alloc_iters` times over the
    /// still-unmatched groups and outputs, pointers moved only by first-iteration accepts
    /// (BookSim2 `islip`).
    Islip,
    /// VC allocation only, nam-netsim's allocator before the separable one became the default:
    /// each input VC asks for a single output VC, the first free one from the VC index it sits
    /// in, and each output VC grants one asker. It models a router whose VC allocator has no
    /// input-side arbiter (a fixed preference per VC index): heads on the same VC index of
    /// different ports ask for the same output VC while others stay free, so it saturates
    /// earlier than a separable allocator.
    IndexPreferred,
}

/// Names accepted by [`AllocatorKind::from_name`], with BookSim2's spelling first.
pub const ALLOCATOR_NAMES: [&str; 4] = ["separable_input_first", "separable_output_first", "islip", "index_preferred"];

impl AllocatorKind {
    /// Looks an allocator up by BookSim2's name (`separable_input_first`, ...) or ours
    /// (`input-first`, `output-first`, `islip`, `index-preferred`).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "separable_input_first" | "input-first" | "input_first" => Some(AllocatorKind::SeparableInputFirst),
            "separable_output_first" | "output-first" | "output_first" => Some(AllocatorKind::SeparableOutputFirst),
            "islip" => Some(AllocatorKind::Islip),
            "index_preferred" | "index-preferred" => Some(AllocatorKind::IndexPreferred),
            _ => None,
        }
    }

    /// BookSim2-style name.
    pub fn name(self) -> &'static str {
        match self {
            AllocatorKind::SeparableInputFirst => "separable_input_first",
            AllocatorKind::SeparableOutputFirst => "separable_output_first",
            AllocatorKind::Islip => "islip",
            AllocatorKind::IndexPreferred => "index_preferred",
        }
    }
}

/// One request: `group` asks for `out`; `key` orders the requests inside the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Input arbiter the request goes through.
    pub group: u32,
    /// Position in that arbiter's round robin (unique per group and output).
    pub key: u32,
    /// Output the request asks for.
    pub out: u32,
}

/// Round-robin pointers of one allocator.
#[derive(Debug, Clone, Default)]
pub struct Pointers {
    /// Per group: the key the input arbiter prefers next.
    pub input: Vec<u32>,
    /// Per output: the group the output arbiter prefers next.
    pub output: Vec<u32>,
    /// Number of keys per group (the input arbiters' width).
    pub keys: u32,
    /// Number of groups (the output arbiters' width).
    pub groups: u32,
}

impl Pointers {
    /// Pointers for `groups` input arbiters over `keys` keys and `outputs` output arbiters.
    pub fn new(groups: usize, keys: usize, outputs: usize) -> Self {
        Pointers { input: vec![0; groups], output: vec![0; outputs], keys: keys as u32, groups: groups as u32 }
    }

    // Pointers stay below their width (`commit` wraps them), so a rank is one comparison
    // away, without a division in the allocators' inner loops.
    fn key_rank(&self, r: &Request) -> u32 {
        let p = self.input[r.group as usize];
        if r.key >= p {
            r.key - p
        } else {
            r.key + self.keys - p
        }
    }

    fn group_rank(&self, r: &Request) -> u32 {
        let p = self.output[r.out as usize];
        if r.group >= p {
            r.group - p
        } else {
            r.group + self.groups - p
        }
    }

    fn commit(&mut self, r: &Request) {
        let (k, g) = (r.key + 1, r.group + 1);
        self.input[r.group as usize] = if k == self.keys { 0 } else { k };
        self.output[r.out as usize] = if g == self.groups { 0 } else { g };
    }
}

/// Allocates `reqs` (listed group by group, every group's requests contiguous) and appends the
/// grants to `grants`; `tmp` is scratch space. `iters` is used by iSLIP only. `reqs` is left
/// reordered (and, input first, cut to each group's pick).
#[inline]
pub fn allocate(
    kind: AllocatorKind,
    iters: usize,
    reqs: &mut Vec<Request>,
    ptr: &mut Pointers,
    grants: &mut Vec<Request>,
    tmp: &mut Vec<Request>,
) {
    if reqs.is_empty() {
        return;
    }
    match kind {
        AllocatorKind::SeparableInputFirst | AllocatorKind::IndexPreferred => input_first(reqs, ptr, grants),
        AllocatorKind::SeparableOutputFirst => output_first(reqs, ptr, grants, tmp, 1),
        AllocatorKind::Islip => output_first(reqs, ptr, grants, tmp, iters.max(1)),
    }
}

/// Input arbiters first (a linear pass in place, requests come grouped), then output arbiters.
fn input_first(reqs: &mut Vec<Request>, ptr: &mut Pointers, grants: &mut Vec<Request>) {
    if reqs.len() == 1 {
        // One request: both arbiters grant it (the common case at light load).
        ptr.commit(&reqs[0]);
        grants.push(reqs[0]);
        return;
    }
    let (mut i, mut w) = (0, 0);
    while i < reqs.len() {
        let g = reqs[i].group;
        let mut best = reqs[i];
        let mut best_rank = ptr.key_rank(&best);
        i += 1;
        while i < reqs.len() && reqs[i].group == g {
            let rank = ptr.key_rank(&reqs[i]);
            if rank < best_rank {
                best = reqs[i];
                best_rank = rank;
            }
            i += 1;
        }
        reqs[w] = best;
        w += 1;
    }
    reqs.truncate(w);
    if w > 1 {
        reqs.sort_unstable_by_key(|r| (r.out, ptr.group_rank(r)));
    }
    let mut last = u32::MAX;
    for r in reqs.iter() {
        if r.out == last {
            continue;
        }
        last = r.out;
        ptr.commit(r);
        grants.push(*r);
    }
}

/// Output arbiters first, then each group accepts one grant; repeated `iters` times over the
/// groups and outputs still unmatched (pointers move on the first iteration only when
/// `iters > 1`, as iSLIP does; with one iteration every accept moves them).
fn output_first(reqs: &[Request], ptr: &mut Pointers, grants: &mut Vec<Request>, tmp: &mut Vec<Request>, iters: usize) {
    let first = grants.len();
    for it in 0..iters {
        let matched = &grants[first..];
        let open = |r: &Request| !matched.iter().any(|m| m.group == r.group || m.out == r.out);
        // Grant: each output picks the request of the group nearest its pointer.
        tmp.clear();
        tmp.extend(reqs.iter().copied().filter(open));
        if tmp.is_empty() {
            break;
        }
        tmp.sort_unstable_by_key(|r| (r.out, ptr.group_rank(r), ptr.key_rank(r)));
        let mut w = 0;
        let mut last = u32::MAX;
        for k in 0..tmp.len() {
            if tmp[k].out != last {
                last = tmp[k].out;
                tmp[w] = tmp[k];
                w += 1;
            }
        }
        tmp.truncate(w);
        // Accept: each group takes the grant whose key is nearest its pointer.
        tmp.sort_unstable_by_key(|r| (r.group, ptr.key_rank(r)));
        let mut last = u32::MAX;
        let before = grants.len();
        for r in tmp.iter() {
            if r.group == last {
                continue;
            }
            last = r.group;
            grants.push(*r);
        }
        if it == 0 {
            for r in &grants[before..] {
                ptr.commit(r);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(group: u32, key: u32, out: u32) -> Request {
        Request { group, key, out }
    }

    fn run(kind: AllocatorKind, iters: usize, reqs: &[Request], ptr: &mut Pointers) -> Vec<(u32, u32)> {
        let mut reqs = reqs.to_vec();
        let (mut g, mut t) = (Vec::new(), Vec::new());
        allocate(kind, iters, &mut reqs, ptr, &mut g, &mut t);
        let mut out: Vec<(u32, u32)> = g.iter().map(|r| (r.group, r.out)).collect();
        out.sort_unstable();
        out
    }

    #[test]
    fn input_first_loses_a_match_output_first_finds_it() {
        // Group 0 may use outputs 0 or 1, group 1 only output 0. Input first with every
        // pointer at 0: group 0's arbiter picks output 0, group 1's too, output 0 grants
        // group 0: one grant although two were possible.
        let reqs = [req(0, 0, 0), req(0, 1, 1), req(1, 0, 0)];
        let mut p = Pointers::new(2, 2, 2);
        assert_eq!(run(AllocatorKind::SeparableInputFirst, 1, &reqs, &mut p), vec![(0, 0)]);
        // Pointers moved past the winner: group 0's input arbiter now prefers key 1, output 0
        // prefers group 1, so the next round gives both groups a grant.
        assert_eq!(run(AllocatorKind::SeparableInputFirst, 1, &reqs, &mut p), vec![(0, 1), (1, 0)]);
    }

    #[test]
    fn output_first_and_islip_on_a_two_by_two_conflict() {
        // Both groups ask for both outputs (keys = outputs). Output first with all pointers at
        // 0: both outputs grant group 0, which accepts output 0: one match. iSLIP with two
        // iterations then matches group 1 with output 1.
        let reqs = [req(0, 0, 0), req(0, 1, 1), req(1, 0, 0), req(1, 1, 1)];
        let mut p = Pointers::new(2, 2, 2);
        assert_eq!(run(AllocatorKind::SeparableOutputFirst, 1, &reqs, &mut p), vec![(0, 0)]);
        let mut p = Pointers::new(2, 2, 2);
        assert_eq!(run(AllocatorKind::Islip, 2, &reqs, &mut p), vec![(0, 0), (1, 1)]);
        // iSLIP's pointers moved only for the first-iteration accept (group 0 / output 0):
        // output 0 now prefers group 1, group 0 prefers key 1, and the next round desynchronises
        // into a full match in one iteration.
        assert_eq!(p.output, vec![1, 0]);
        assert_eq!(p.input, vec![1, 0]);
        assert_eq!(run(AllocatorKind::Islip, 1, &reqs, &mut p), vec![(0, 1), (1, 0)]);
    }

    #[test]
    fn every_output_and_group_gets_at_most_one_grant() {
        let mut reqs = Vec::new();
        for g in 0..5u32 {
            for o in 0..4u32 {
                if (g + o) % 3 != 0 {
                    reqs.push(req(g, o, o));
                }
            }
        }
        for kind in [AllocatorKind::SeparableInputFirst, AllocatorKind::SeparableOutputFirst, AllocatorKind::Islip] {
            let mut p = Pointers::new(5, 4, 4);
            for _ in 0..10 {
                let g = run(kind, 3, &reqs, &mut p);
                let mut groups: Vec<u32> = g.iter().map(|x| x.0).collect();
                let mut outs: Vec<u32> = g.iter().map(|x| x.1).collect();
                groups.dedup();
                outs.sort_unstable();
                outs.dedup();
                assert_eq!(groups.len(), g.len(), "{kind:?}");
                assert_eq!(outs.len(), g.len(), "{kind:?}");
                assert!(!g.is_empty());
            }
        }
        // iSLIP with as many iterations as outputs ends in a maximal match: no request is left
        // whose group and output are both unmatched.
        let mut p = Pointers::new(5, 4, 4);
        let g = run(AllocatorKind::Islip, 4, &reqs, &mut p);
        let free = |r: &&Request| g.iter().all(|m| m.0 != r.group && m.1 != r.out);
        assert_eq!(reqs.iter().filter(free).count(), 0);
    }
}
