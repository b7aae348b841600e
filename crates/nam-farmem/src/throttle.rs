//! Feedback-directed prefetch throttling (after Srinath et al., "Feedback Directed
//! Prefetching", HPCA 2007): the prefetcher's owner reports what became of each prefetched
//! unit, **used** (the demand reached it) or **wasted** (it left local memory untouched, or
//! the demand never came), and the throttle turns the share of each prefetch window that is
//! really fetched up or down with the measured accuracy.
//!
//! Accuracy is measured over intervals of [`ThrottleConfig::interval`] resolved units and
//! smoothed (half the last interval, half the history). Below `low_percent` the throttle
//! steps one level down, above `high_percent` one level up; the levels issue the whole
//! window, half, a quarter, an eighth, or nothing. At level 0 nothing is fetched, but the
//! owner still asks for the windows the stream table computes and keeps them as **shadow**
//! windows: a demand miss on a shadow unit counts as used (it would have been a hit), one
//! that ages out unreached as wasted, so accuracy keeps being measured and the prefetcher
//! comes back when the program turns to streams again, without paying for the probes.
//! The part of a window beyond the issued share is shadowed in the same way at every level.

use crate::constants::{
    LEVEL_MAX, THROTTLE_HIGH_PERCENT_DEFAULT, THROTTLE_INTERVAL_DEFAULT, THROTTLE_LOW_PERCENT_DEFAULT,
};

/// Knobs of the throttle (chosen by measurement: `docs/farmem.md`, "Prefetch throttling").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottleConfig {
    /// Whether the throttle runs (off: every window is fetched whole).
    pub enabled: bool,
    /// Resolved units (used plus wasted) per accuracy measurement.
    pub interval: u32,
    /// Accuracy (percent) below which the throttle steps down.
    pub low_percent: u32,
    /// Accuracy (percent) above which the throttle steps up.
    pub high_percent: u32,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            enabled: true,
            interval: THROTTLE_INTERVAL_DEFAULT,
            low_percent: THROTTLE_LOW_PERCENT_DEFAULT,
            high_percent: THROTTLE_HIGH_PERCENT_DEFAULT,
        }
    }
}

/// The throttle's state; see the module documentation.
#[derive(Debug, Clone)]
pub struct Throttle {
    config: ThrottleConfig,
    level: u32,
    used: u32,
    wasted: u32,
    /// Smoothed accuracy, percent.
    accuracy: u32,
    /// Counters over the whole run (used, wasted, level changes).
    pub totals: ThrottleTotals,
}

/// What the throttle saw over the whole run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThrottleTotals {
    /// Prefetched (or shadow) units the demand reached.
    pub used: u64,
    /// Prefetched (or shadow) units that left unreached.
    pub wasted: u64,
    /// Times the throttle stepped down.
    pub downs: u64,
    /// Times it stepped up.
    pub ups: u64,
}

impl Throttle {
    /// A throttle at the highest level, trusting the prefetcher until measured otherwise.
    pub fn new(config: ThrottleConfig) -> Throttle {
        Throttle { config, level: LEVEL_MAX, used: 0, wasted: 0, accuracy: 100, totals: ThrottleTotals::default() }
    }

    /// The level now: [`LEVEL_MAX`] issues whole windows, 0 none.
    pub fn level(&self) -> u32 {
        if self.config.enabled {
            self.level
        } else {
            LEVEL_MAX
        }
    }

    /// Smoothed accuracy, percent.
    pub fn accuracy_percent(&self) -> u32 {
        self.accuracy
    }

    /// How many of a window of `len` units to fetch now (the rest is shadowed).
    pub fn issue(&self, len: u64) -> u64 {
        match self.level() {
            0 => 0,
            l => len.div_ceil(1 << (LEVEL_MAX - l)),
        }
    }

    /// `n` prefetched or shadow units were reached by the demand.
    pub fn used(&mut self, n: u32) {
        self.used += n;
        self.totals.used += n as u64;
        self.step();
    }

    /// `n` prefetched or shadow units left without the demand reaching them.
    pub fn wasted(&mut self, n: u32) {
        self.wasted += n;
        self.totals.wasted += n as u64;
        self.step();
    }

    fn step(&mut self) {
        let resolved = self.used + self.wasted;
        if resolved < self.config.interval.max(1) {
            return;
        }
        let last = 100 * self.used / resolved;
        self.accuracy = (self.accuracy + last) / 2;
        (self.used, self.wasted) = (0, 0);
        if self.accuracy < self.config.low_percent && self.level > 0 {
            self.level -= 1;
            self.totals.downs += 1;
        } else if self.accuracy > self.config.high_percent && self.level < LEVEL_MAX {
            self.level += 1;
            self.totals.ups += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ThrottleConfig {
        ThrottleConfig { enabled: true, interval: 10, low_percent: 40, high_percent: 60 }
    }

    #[test]
    fn accurate_prefetches_keep_whole_windows() {
        let mut t = Throttle::new(config());
        for _ in 0..100 {
            t.used(1);
        }
        t.wasted(5);
        assert_eq!(t.level(), LEVEL_MAX);
        assert_eq!(t.issue(64), 64);
        assert_eq!(t.totals, ThrottleTotals { used: 100, wasted: 5, downs: 0, ups: 0 });
    }

    #[test]
    fn wasted_prefetches_step_down_to_nothing_then_recover() {
        let mut t = Throttle::new(config());
        let mut issued = Vec::new();
        for _ in 0..8 {
            t.wasted(10);
            issued.push(t.issue(64));
        }
        // Accuracy 50% after the first interval (smoothed from 100%), then 25%, 12%, ...
        assert_eq!(issued, vec![64, 32, 16, 8, 0, 0, 0, 0]);
        assert_eq!(t.totals.downs, 4);
        // Shadow windows that the demand reaches bring it back, one level per interval.
        let mut levels = Vec::new();
        for _ in 0..6 {
            t.used(10);
            levels.push(t.level());
        }
        assert_eq!(levels, vec![0, 1, 2, 3, 4, 4], "accuracy 50, 75, 87, ...: up once above 60");
        assert_eq!(t.issue(5), 5);
    }

    #[test]
    fn partial_levels_round_up_and_disabled_issues_everything() {
        let mut t = Throttle::new(config());
        for _ in 0..3 {
            t.wasted(10); // accuracy 50, 25, 12
        }
        assert_eq!(t.level(), 2);
        assert_eq!(t.issue(5), 2, "a quarter of 5, rounded up");
        assert_eq!(t.issue(0), 0);
        let mut off = Throttle::new(ThrottleConfig { enabled: false, ..config() });
        for _ in 0..10 {
            off.wasted(10);
        }
        assert_eq!(off.issue(64), 64);
    }
}
