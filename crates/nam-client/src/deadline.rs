//! One deadline per public call. `nam.h` promises that a blocking call returns within the
//! client's timeout; a call made of several steps (a put then a flush, a put then its
//! signal, a flush that collects replies from several servers) must share that timeout
//! instead of giving each step a whole one. The outermost such call on a thread begins a
//! [`CallDeadline`]; every step asks [`time_left`] for what remains of it. A thread-local
//! keeps the paths' signatures as they are: a step that runs outside any composite call
//! gets the whole timeout, as before.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The least a step is given even when its call's time is up: one look at whether its
/// operation completed meanwhile, so a call whose last step is already done still succeeds.
const LAST_LOOK: Duration = Duration::from_millis(1);

thread_local! {
    /// The deadline of the composite call this thread is in, if any.
    static CALL_DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// While it lives, this thread's steps share one deadline (the outermost call's: a nested
/// call keeps it).
pub(crate) struct CallDeadline {
    outer: Option<Instant>,
}

impl CallDeadline {
    /// Begins a call that must end within `timeout` from now, unless this thread is already
    /// inside one (whose earlier deadline then holds).
    pub(crate) fn begin(timeout: Duration) -> CallDeadline {
        let outer = CALL_DEADLINE.get();
        if outer.is_none() {
            CALL_DEADLINE.set(Some(Instant::now() + timeout));
        }
        CallDeadline { outer }
    }
}

impl Drop for CallDeadline {
    fn drop(&mut self) {
        CALL_DEADLINE.set(self.outer);
    }
}

/// What a step may wait: the rest of this thread's call deadline, at most `timeout` (all of
/// it outside a composite call), at least [`LAST_LOOK`].
pub(crate) fn time_left(timeout: Duration) -> Duration {
    match CALL_DEADLINE.get() {
        Some(deadline) => deadline.saturating_duration_since(Instant::now()).clamp(LAST_LOOK, timeout.max(LAST_LOOK)),
        None => timeout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_share_the_outermost_deadline() {
        let timeout = Duration::from_secs(10);
        assert_eq!(time_left(timeout), timeout, "outside a call a step gets the whole timeout");
        let outer = CallDeadline::begin(Duration::from_millis(200));
        assert!(time_left(timeout) <= Duration::from_millis(200));
        {
            let _inner = CallDeadline::begin(Duration::from_secs(60));
            assert!(time_left(timeout) <= Duration::from_millis(200), "a nested call keeps the outer deadline");
        }
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(time_left(timeout), LAST_LOOK, "a step after the deadline gets one last look");
        drop(outer);
        assert_eq!(time_left(timeout), timeout, "the deadline ends with its call");
    }
}
