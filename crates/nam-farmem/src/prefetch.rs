//! The stream prefetcher of Mao 2020 §7.3: a small fully associative table of streams,
//! trained on demand misses. Each entry remembers where its stream goes next, a counter of
//! matches, and an idle timer; once the counter reaches the threshold, a match asks for the
//! units (lines or pages) ahead of the demand, never more than `depth` beyond it.
//!
//! A stream must be confirmed before it prefetches anything: `threshold` misses each at
//! exactly the unit after the previous one. Once confirmed, a match is a miss anywhere
//! between the stream's next unit and the end of what it already prefetched (the demand
//! stops missing inside the prefetched window, and its next miss is at the window's end,
//! or inside it when the demand overtakes the prefetches). A stream that goes
//! `timeout_misses` misses without a match is dropped with its window: its prefetches went
//! unused, and a later miss in that old window must confirm a stream anew. A confirmed
//! stream's window starts at four units and doubles with each match up to `depth` (as
//! Linux's readahead grows its window), so short streams, like the short neighbour lists of
//! a graph, prefetch little past their end.

use crate::config::PrefetchConfig;
use crate::constants::WINDOW_START;
use std::ops::Range;

/// One entry of the table: 32 bytes, so that the eight entries of the default table span
/// four cache lines. The table is read on every demand miss, right after the kernel's fault
/// path has evicted it from the caches: with 48-byte entries, three passes and an idle
/// counter written in every entry on every miss, training took about 0.1 us per miss of
/// the paged pointer chase, which has no streams at all (its share of `perf` samples), and
/// about half of that since.
#[derive(Debug, Clone, Copy, Default)]
struct Stream {
    /// Next unit the stream expects.
    next: u64,
    /// First unit not yet prefetched.
    frontier: u64,
    /// The miss clock when the stream last matched or had a prefetch hit; 0 for an empty
    /// entry. A stream is alive while fewer than `timeout_misses` misses have passed since:
    /// its idle time is the clock minus this, computed rather than counted in every entry.
    last_use: u64,
    /// Matches since the stream was (re)trained.
    count: u32,
    /// Units it asks for ahead of the demand now: starts at [`WINDOW_START`] and doubles
    /// with every match up to the depth, so a short stream (a short list) wastes little.
    window: u32,
}

impl Stream {
    /// Whether the stream is alive at miss clock `clock`.
    fn alive(&self, clock: u64, timeout: u64) -> bool {
        self.last_use != 0 && clock - self.last_use <= timeout
    }
}

/// A stream table; see the module documentation.
#[derive(Debug, Clone)]
pub struct StreamPrefetcher {
    config: PrefetchConfig,
    streams: Vec<Stream>,
    clock: u64,
}

impl StreamPrefetcher {
    /// An empty table.
    pub fn new(config: PrefetchConfig) -> StreamPrefetcher {
        StreamPrefetcher { config, streams: vec![Stream::default(); config.streams.max(1)], clock: 0 }
    }

    /// The configuration.
    pub fn config(&self) -> &PrefetchConfig {
        &self.config
    }

    /// Trains on a demand miss of `unit` (below `limit`, the number of units) and returns
    /// the units to prefetch (possibly empty).
    pub fn on_miss(&mut self, unit: u64, limit: u64) -> Range<u64> {
        if !self.config.enabled {
            return 0..0;
        }
        let before = self.clock;
        self.clock += 1;
        let clock = self.clock;
        let (threshold, timeout, depth) =
            (self.config.threshold, self.config.timeout_misses as u64, self.config.depth as u64);
        // One pass: the first stream this miss continues (alive before this miss), or else
        // the entry to replace: a dead one, or the least recently used.
        let mut hit = None;
        let mut victim = 0;
        let mut victim_key = (true, u64::MAX);
        for (i, s) in self.streams.iter().enumerate() {
            let alive = s.alive(before, timeout);
            if alive && (unit == s.next || (s.count >= threshold && unit > s.next && unit <= s.frontier)) {
                hit = Some(i);
                break;
            }
            let key = (s.alive(clock, timeout), s.last_use);
            if key < victim_key {
                (victim, victim_key) = (i, key);
            }
        }
        let Some(i) = hit else {
            self.streams[victim] = Stream { next: unit + 1, frontier: unit + 1, last_use: clock, count: 0, window: 0 };
            return 0..0;
        };
        let s = &mut self.streams[i];
        s.next = unit + 1;
        s.count = s.count.saturating_add(1);
        s.last_use = clock;
        if s.count < threshold {
            s.frontier = s.frontier.max(s.next);
            return 0..0;
        }
        s.window = if s.window == 0 { WINDOW_START.min(depth) as u32 } else { (s.window as u64 * 2).min(depth) as u32 };
        let start = s.frontier.max(unit + 1).min(limit);
        let end = (unit + 1 + s.window as u64).min(limit);
        s.frontier = s.frontier.max(end);
        start..end.max(start)
    }
}

impl StreamPrefetcher {
    /// A demand access hit a prefetched unit: when the stream's window ahead of it has
    /// shrunk to half the depth, returns the units that refill it to `depth` ahead.
    pub fn on_prefetch_hit(&mut self, unit: u64, limit: u64) -> Range<u64> {
        let depth = self.config.depth as u64;
        let (clock, timeout) = (self.clock, self.config.timeout_misses as u64);
        let Some(s) = self
            .streams
            .iter_mut()
            .find(|s| s.alive(clock, timeout) && unit >= s.next.saturating_sub(1) && unit < s.frontier)
        else {
            return 0..0;
        };
        s.next = unit + 1;
        s.last_use = clock;
        if s.frontier - unit > depth / 2 {
            return 0..0;
        }
        let start = s.frontier.min(limit);
        let end = (unit + 1 + depth).min(limit);
        s.frontier = s.frontier.max(end);
        start..end.max(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequential_stream_trains_then_prefetches_a_bounded_window() {
        let mut p = StreamPrefetcher::new(PrefetchConfig { depth: 4, threshold: 2, ..Default::default() });
        assert!(p.on_miss(10, 1000).is_empty());
        assert!(p.on_miss(11, 1000).is_empty());
        assert_eq!(p.on_miss(12, 1000), 13..17);
        // The demand now hits the window; its next miss is at the frontier.
        assert_eq!(p.on_miss(17, 1000), 18..22);
        // Bounded by the end of the address space.
        assert_eq!(p.on_miss(21, 23), 22..23);
    }

    #[test]
    fn the_window_grows_with_the_stream() {
        let mut p = StreamPrefetcher::new(PrefetchConfig { depth: 64, threshold: 2, ..Default::default() });
        p.on_miss(0, 1000);
        p.on_miss(1, 1000);
        assert_eq!(p.on_miss(2, 1000), 3..7);
        assert_eq!(p.on_miss(7, 1000), 8..16);
        assert_eq!(p.on_miss(16, 1000), 17..33);
        assert_eq!(p.on_miss(33, 1000), 34..66);
        assert_eq!(p.on_miss(66, 1000), 67..131);
    }

    #[test]
    fn a_stream_whose_prefetches_go_unused_is_dropped() {
        let mut p = StreamPrefetcher::new(PrefetchConfig {
            depth: 8,
            threshold: 2,
            timeout_misses: 3,
            streams: 2,
            ..Default::default()
        });
        p.on_miss(100, 1000);
        p.on_miss(101, 1000);
        assert_eq!(p.on_miss(102, 1000), 103..107);
        // The demand goes elsewhere (random misses) past the timeout...
        for u in [500u64, 7, 900, 300] {
            assert!(p.on_miss(u, 1000).is_empty());
        }
        // ...so a miss inside the old window does not prefetch without a new confirmation.
        assert!(p.on_miss(105, 1000).is_empty());
        assert!(p.on_miss(107, 1000).is_empty());
    }

    #[test]
    fn random_misses_never_prefetch_and_disabled_never_does() {
        let mut p = StreamPrefetcher::new(PrefetchConfig::default());
        for u in [5u64, 900, 77, 4000, 13, 2500, 600, 31] {
            assert!(p.on_miss(u, 10_000).is_empty());
        }
        let mut off = StreamPrefetcher::new(PrefetchConfig { enabled: false, ..Default::default() });
        for u in 0..10 {
            assert!(off.on_miss(u, 100).is_empty());
        }
    }
}
