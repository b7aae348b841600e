//! What became of the pager's prefetches, for the throttle (`crate::throttle`).
//!
//! The pager sees faults, not accesses: a prefetched page installed in the program's
//! mapping is read without the pager knowing. So a prefetched page counts as **used** when
//! the demand shows it went through it: a demand miss of the page right after it (a stream
//! reads through its window and misses at the window's end, or overtakes the prefetches),
//! or a write fault on it. It counts as **wasted** when it is evicted first. A page of a
//! window the throttle did not let through is a **shadow** page: a demand miss on it counts
//! as used (it would have been a hit), and a shadow window that ages out of the last
//! [`SHADOW_WINDOWS`] with pages unreached counts them as wasted. Pages neither reached nor
//! evicted (resident at the end) are not counted.

use crate::constants::{SHADOW_WINDOWS, WALK_MAX};
use crate::throttle::{Throttle, ThrottleConfig};
use std::collections::VecDeque;
use std::ops::Range;

const NONE: u8 = 0;
const PREFETCHED: u8 = 1;
const SHADOW: u8 = 2;

/// Per-page tags and the throttle they feed.
pub(super) struct Accuracy {
    tags: Vec<u8>,
    shadow: VecDeque<Range<u64>>,
    pub throttle: Throttle,
}

impl Accuracy {
    pub fn new(pages: u64, config: ThrottleConfig) -> Accuracy {
        Accuracy { tags: vec![NONE; pages as usize], shadow: VecDeque::new(), throttle: Throttle::new(config) }
    }

    /// A demand miss of `page`: a shadow page reached, and the prefetched pages right
    /// before it, which the demand went through.
    pub fn demand_miss(&mut self, page: u64) {
        let mut used = 0;
        if self.tags[page as usize] == SHADOW {
            self.tags[page as usize] = NONE;
            used += 1;
        }
        let mut q = page;
        while q > 0 && page - q < WALK_MAX && self.tags[q as usize - 1] == PREFETCHED {
            q -= 1;
            self.tags[q as usize] = NONE;
            used += 1;
        }
        if used > 0 {
            self.throttle.used(used);
        }
    }

    /// A write fault on the clean resident `page`.
    pub fn written(&mut self, page: u64) {
        if self.tags[page as usize] == PREFETCHED {
            self.tags[page as usize] = NONE;
            self.throttle.used(1);
        }
    }

    /// `page` left local memory.
    pub fn evicted(&mut self, page: u64) {
        if self.tags[page as usize] == PREFETCHED {
            self.tags[page as usize] = NONE;
            self.throttle.wasted(1);
        }
    }

    /// The prefetcher's window `window`: returns the part to fetch now and shadows the rest
    /// (its pages that are missing, per `missing`).
    pub fn admit(&mut self, window: Range<u64>, missing: impl Fn(u64) -> bool) -> Range<u64> {
        let issue = self.throttle.issue(window.end - window.start);
        let split = window.start + issue;
        if split < window.end {
            for p in split..window.end {
                if missing(p) && self.tags[p as usize] == NONE {
                    self.tags[p as usize] = SHADOW;
                }
            }
            self.shadow.push_back(split..window.end);
            if self.shadow.len() > SHADOW_WINDOWS {
                let old = self.shadow.pop_front().expect("more than zero windows");
                self.age_out(old);
            }
        }
        window.start..split
    }

    fn age_out(&mut self, window: Range<u64>) {
        let mut wasted = 0;
        for p in window {
            if self.tags[p as usize] == SHADOW {
                self.tags[p as usize] = NONE;
                wasted += 1;
            }
        }
        if wasted > 0 {
            self.throttle.wasted(wasted);
        }
    }

    /// Whether `page` was prefetched and the demand has not been seen to reach it yet.
    pub fn awaiting_use(&self, page: u64) -> bool {
        self.tags[page as usize] == PREFETCHED
    }

    /// `page` was installed by a prefetch.
    pub fn prefetched(&mut self, page: u64) {
        self.tags[page as usize] = PREFETCHED;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accuracy() -> Accuracy {
        Accuracy::new(1000, ThrottleConfig { enabled: true, interval: 8, low_percent: 40, high_percent: 60 })
    }

    #[test]
    fn a_stream_that_reads_its_window_counts_it_used() {
        let mut a = accuracy();
        assert_eq!(a.admit(10..20, |_| true), 10..20, "whole windows at first");
        for p in 10..20 {
            a.prefetched(p);
        }
        a.demand_miss(20); // the demand went through 10..20 and missed at the window's end
        assert_eq!((a.throttle.totals.used, a.throttle.totals.wasted), (10, 0));
        a.evicted(15); // already counted: nothing more
        assert_eq!(a.throttle.totals.wasted, 0);
    }

    #[test]
    fn evicted_prefetches_throttle_down_and_shadow_hits_bring_it_back() {
        let mut a = accuracy();
        let mut next = 0;
        while a.throttle.level() > 0 {
            let w = a.admit(next..next + 8, |_| true);
            for p in w.clone() {
                a.prefetched(p);
                a.evicted(p);
            }
            next += 8;
            assert!(next < 1000, "never throttled down");
        }
        assert!(a.throttle.totals.downs >= 4 && a.throttle.totals.used == 0);
        // Level 0: windows are only shadowed; the demand now misses on them, in order.
        for _ in 0..6 {
            assert!(a.admit(next..next + 8, |_| true).is_empty() || a.throttle.level() > 0);
            for p in next..next + 8 {
                a.demand_miss(p);
            }
            next += 8;
        }
        assert!(a.throttle.level() > 0, "shadow hits re-enable the prefetcher: {:?}", a.throttle.totals);
    }

    #[test]
    fn unreached_shadow_windows_age_out_as_wasted() {
        let mut a = accuracy();
        for _ in 0..4 {
            for p in 0..8 {
                a.prefetched(p);
                a.evicted(p);
            }
        }
        assert_eq!(a.throttle.level(), 1, "accuracy 50, 25, 12: three steps down");
        let level = a.throttle.level();
        for w in 0..SHADOW_WINDOWS as u64 + 2 {
            let start = 100 + 10 * w;
            let live = a.admit(start..start + 8, |_| true);
            assert_eq!(live, start..start + 1, "an eighth of 8 at level {level}");
        }
        // Two windows aged out, 7 shadow pages each, none reached.
        assert_eq!(a.throttle.totals.wasted, 32 + 14);
    }
}
