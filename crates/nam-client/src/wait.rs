//! Waiting on words (OpenSHMEM's point-to-point synchronization): [`Client::test`],
//! [`Client::wait_until`] and its typed form, [`Client::wait_until_all`],
//! [`Client::wait_until_any`] and [`Client::wait_until_some`].
//!
//! A wait reads its word for [`crate::ClientConfig::wait_spin`] (a signal that comes within
//! it is seen at once; after the first [`WAIT_SPIN_BUSY`] it yields its core between reads,
//! so a signaller waiting for that core runs), then sleeps on a wake-up that the signalling side triggers, as
//! [`crate::path::Path::sleep`] does it per path: a futex on the mapped word on the direct
//! path ([`crate::wake`]), a Watch the server answers when the word changes on the others.
//! After every wake-up it reads the word again, so spurious and missed wake-ups cost at most
//! one slice ([`WAIT_SLEEP_SLICE`]), and the deadline holds: the wait returns
//! [`Error::WaitTimeout`] with the last word seen.

use crate::allocation::Allocation;
use crate::amo::AtomicWord;
use crate::client::Client;
use crate::constants::{WAIT_SLEEP_SLICE, WAIT_SLEEP_UNREGISTERED, WAIT_SPIN_BUSY};
use crate::error::{Error, Result};
use crate::path::Path;
use crate::signal::Compare;
use nam_proto::watch::{WatchCompare, WATCH_SIGNED};
use std::time::{Duration, Instant};

/// What a sleeping waiter waits for: the word at its width against a value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WordWatch {
    /// 4 or 8.
    pub(crate) width_bytes: u8,
    /// [`WatchCompare`] code, plus [`WATCH_SIGNED`].
    pub(crate) code: u8,
    /// Compared with, zero-extended.
    pub(crate) value: u64,
}

impl WordWatch {
    fn new<T: AtomicWord>(compare: Compare, value: T) -> WordWatch {
        let compare = match compare {
            Compare::Eq => WatchCompare::Eq,
            Compare::Ne => WatchCompare::Ne,
            Compare::Ge => WatchCompare::Ge,
            Compare::Gt => WatchCompare::Gt,
            Compare::Le => WatchCompare::Le,
            Compare::Lt => WatchCompare::Lt,
        };
        let signed = if T::SIGNED { WATCH_SIGNED } else { 0 };
        WordWatch { width_bytes: T::WIDTH_BYTES as u8, code: compare as u8 | signed, value: value.to_bits() }
    }

    /// Whether `word` satisfies it.
    pub(crate) fn holds(self, word: u64) -> bool {
        nam_proto::watch::watch_holds(self.code, self.width_bytes, word, self.value).unwrap_or(false)
    }
}

/// The spinning phase of a wait: [`WAIT_SPIN_BUSY`] of busy polling, then polls that yield
/// the core between them, until the configured spin has passed.
struct Spin {
    busy_until: Instant,
    until: Instant,
}

impl Spin {
    fn new(spin: Duration) -> Spin {
        let now = Instant::now();
        Spin { busy_until: now + spin.min(WAIT_SPIN_BUSY), until: now + spin }
    }

    /// Pauses before the next poll and returns true while the spin lasts; false once the
    /// waiter should sleep.
    #[inline]
    fn pause(&self, now: Instant) -> bool {
        if now >= self.until {
            return false;
        }
        if now < self.busy_until {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
        true
    }
}

impl Client {
    /// Reads the word a wait watches (no read-modify-write: polling must not take the
    /// writer's cache line).
    fn read_watched(&self, path: Path, allocation: &Allocation, offset: u64, width_bytes: u8) -> Result<u64> {
        if width_bytes == 8 {
            return path.load(&self.session, allocation, offset);
        }
        let mut word = [0u8; 4];
        path.get(&self.session, allocation, offset, &mut word)?;
        Ok(u32::from_le_bytes(word).into())
    }

    /// Whether the 64-bit word at `offset` satisfies `compare` against `value` now
    /// (`shmem_test`); never sleeps.
    pub fn test(&self, allocation: &Allocation, offset: u64, compare: Compare, value: u64) -> Result<bool> {
        self.test_as(allocation, offset, compare, value)
    }

    /// [`Client::test`] on a word of type `T`.
    pub fn test_as<T: AtomicWord>(
        &self,
        allocation: &Allocation,
        offset: u64,
        compare: Compare,
        value: T,
    ) -> Result<bool> {
        self.word_of::<T>(allocation, offset)?;
        let watch = WordWatch::new(compare, value);
        let word = self.read_watched(self.paths.word(allocation), allocation, offset, watch.width_bytes)?;
        Ok(watch.holds(word))
    }

    /// Waits until the 64-bit word at `offset` satisfies `compare` against `value`, or
    /// `timeout` passes ([`Error::WaitTimeout`]). Returns the word's value
    /// (`shmem_wait_until`). Spins for the configured `wait_spin`, then sleeps until the
    /// signalling side wakes it (see the module docs); the client lock is not held while it
    /// sleeps on the direct path.
    pub fn wait_until(
        &self,
        allocation: &Allocation,
        offset: u64,
        compare: Compare,
        value: u64,
        timeout: Duration,
    ) -> Result<u64> {
        self.wait_until_as(allocation, offset, compare, value, timeout)
    }

    /// [`Client::wait_until`] on a word of type `T` (`u32`, `i32`, `u64`, `i64`; ordering
    /// comparisons are signed for the signed types).
    pub fn wait_until_as<T: AtomicWord>(
        &self,
        allocation: &Allocation,
        offset: u64,
        compare: Compare,
        value: T,
        timeout: Duration,
    ) -> Result<T> {
        self.word_of::<T>(allocation, offset)?;
        let deadline = Instant::now() + timeout;
        let word = self.wait_word(allocation, offset, WordWatch::new(compare, value), deadline, timeout)?;
        Ok(T::from_bits(word))
    }

    /// Spins, then sleeps, until `watch` holds of the word or `deadline` passes.
    fn wait_word(
        &self,
        allocation: &Allocation,
        offset: u64,
        watch: WordWatch,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<u64> {
        let path = self.paths.word(allocation);
        if path == Path::Messages {
            return self.watch_word(path, allocation, offset, watch, deadline, timeout);
        }
        let spin = Spin::new(self.session.wait_spin);
        loop {
            let word = self.read_watched(path, allocation, offset, watch.width_bytes)?;
            if watch.holds(word) {
                return Ok(word);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::WaitTimeout { timeout_ms: timeout.as_millis() as u64, last: word });
            }
            if spin.pause(now) {
                continue;
            }
            let until = deadline.min(now + WAIT_SLEEP_SLICE);
            if let Some(word) = path.sleep(&self.session, allocation, offset, watch, word, until)? {
                if watch.holds(word) {
                    return Ok(word);
                }
            }
        }
    }

    /// [`Client::wait_word`] on the message path, where the server executes every change of
    /// the word: no polling reads, each a round trip, before sleeping; a Watch at once, which the server answers
    /// at once when the word already holds (one round trip, as one read would) and otherwise
    /// as soon as it changes. The waiter spins on its replies for `wait_spin` before it
    /// sleeps on the worker ([`crate::path::messages`]).
    fn watch_word(
        &self,
        path: Path,
        allocation: &Allocation,
        offset: u64,
        watch: WordWatch,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<u64> {
        loop {
            let now = Instant::now();
            if now >= deadline {
                let last = self.read_watched(path, allocation, offset, watch.width_bytes)?;
                if watch.holds(last) {
                    return Ok(last);
                }
                return Err(Error::WaitTimeout { timeout_ms: timeout.as_millis() as u64, last });
            }
            let until = deadline.min(now + WAIT_SLEEP_SLICE);
            if let Some(word) = path.sleep(&self.session, allocation, offset, watch, 0, until)? {
                if watch.holds(word) {
                    return Ok(word);
                }
            }
        }
    }

    /// Waits until every word of `words` ((allocation, offset) of 64-bit words) satisfies
    /// `compare` against `value` (`shmem_wait_until_all`); the deadline is for all of them.
    pub fn wait_until_all(
        &self,
        words: &[(&Allocation, u64)],
        compare: Compare,
        value: u64,
        timeout: Duration,
    ) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let watch = WordWatch::new(compare, value);
        for &(allocation, offset) in words {
            self.word_of::<u64>(allocation, offset)?;
            self.wait_word(allocation, offset, watch, deadline, timeout)?;
        }
        Ok(())
    }

    /// Waits until at least one word of `words` satisfies `compare` against `value`, and
    /// returns the index of one that does (`shmem_wait_until_any`; the lowest index among
    /// those seen satisfied in the same pass).
    pub fn wait_until_any(
        &self,
        words: &[(&Allocation, u64)],
        compare: Compare,
        value: u64,
        timeout: Duration,
    ) -> Result<usize> {
        self.wait_until_some(words, compare, value, timeout).map(|ready| ready[0])
    }

    /// Waits until at least one word of `words` satisfies `compare` against `value`, and
    /// returns the indices of all that did in the pass that found them
    /// (`shmem_wait_until_some`). It sleeps on one word at a time, in short slices
    /// ([`WAIT_SLEEP_UNREGISTERED`]) while more than one is watched, so a signal on another
    /// word is seen within a slice.
    pub fn wait_until_some(
        &self,
        words: &[(&Allocation, u64)],
        compare: Compare,
        value: u64,
        timeout: Duration,
    ) -> Result<Vec<usize>> {
        if words.is_empty() {
            return Err(Error::InvalidArgument("wait on no words"));
        }
        for &(allocation, offset) in words {
            self.word_of::<u64>(allocation, offset)?;
        }
        let watch = WordWatch::new(compare, value);
        let deadline = Instant::now() + timeout;
        let spin = Spin::new(self.session.wait_spin);
        let mut turn = 0usize;
        loop {
            let mut ready = Vec::new();
            let mut last = 0;
            for (i, &(allocation, offset)) in words.iter().enumerate() {
                last = self.read_watched(self.paths.word(allocation), allocation, offset, 8)?;
                if watch.holds(last) {
                    ready.push(i);
                }
            }
            if !ready.is_empty() {
                return Ok(ready);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::WaitTimeout { timeout_ms: timeout.as_millis() as u64, last });
            }
            if spin.pause(now) {
                continue;
            }
            let (allocation, offset) = words[turn % words.len()];
            turn += 1;
            let slice = if words.len() == 1 { WAIT_SLEEP_SLICE } else { WAIT_SLEEP_UNREGISTERED };
            let path = self.paths.word(allocation);
            let seen = self.read_watched(path, allocation, offset, 8)?;
            path.sleep(&self.session, allocation, offset, watch, seen, deadline.min(now + slice))?;
        }
    }
}
