//! Fault injection for tests: a rank kills itself (SIGKILL, as a crashed rank ends) at a
//! named point of one version's checkpoint, so the tests can show what a restart finds then.
//!
//! The hook exists only in test builds and with the `fault-injection` feature (which the
//! tests that drive a separately started `nam` enable through nam-cli's dev-dependencies):
//! a production build never reads [`FAULT_ENV`] and compiles every fault-point check to
//! nothing.

/// Environment variable that arms the hook: `<point>:<version>:<rank>` kills that rank at
/// `<point>` of that version's checkpoint: `die-before-protect` (its file is written, L2 has
/// not run), `die-before-commit` (data and redundancy stored on every rank, its commit marker
/// not) or `die-during-copy` (incremental: during the background copy). Read only with the
/// `fault-injection` feature.
pub const FAULT_ENV: &str = "NAM_FAULT_CKPT";

/// Where in a checkpoint a rank may be killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Point {
    /// Its file is written and L2 has not run (with NAM-XOR, which fsyncs the file while the
    /// server pulls, it is written but not fsynced, and its buffer not flagged).
    BeforeProtect,
    /// Data and redundancy are stored on every rank, its commit marker is not.
    BeforeCommit,
    /// Incremental checkpoints: right after the checkpoint returned, while its background copy
    /// runs (the engine holds that copy's commit, so the copy cannot win the race with the
    /// kill). The modes that copy inside the call have no background copy to die in.
    DuringCopy,
}

impl Point {
    /// The name in [`FAULT_ENV`].
    #[cfg(any(test, feature = "fault-injection"))]
    fn name(self) -> &'static str {
        match self {
            Point::BeforeProtect => "die-before-protect",
            Point::BeforeCommit => "die-before-commit",
            Point::DuringCopy => "die-during-copy",
        }
    }
}

/// Whether [`FAULT_ENV`] targets `point` of `version` on `rank`.
#[cfg(any(test, feature = "fault-injection"))]
pub(crate) fn armed(point: Point, version: u64, rank: usize) -> bool {
    std::env::var(FAULT_ENV).is_ok_and(|spec| matches(&spec, point, version, rank))
}

/// Without the feature no fault is ever armed.
#[cfg(not(any(test, feature = "fault-injection")))]
#[inline(always)]
pub(crate) fn armed(_point: Point, _version: u64, _rank: usize) -> bool {
    false
}

#[cfg(any(test, feature = "fault-injection"))]
fn matches(spec: &str, point: Point, version: u64, rank: usize) -> bool {
    let parts: Vec<&str> = spec.split(':').collect();
    parts.len() == 3 && parts[0] == point.name() && parts[1].parse() == Ok(version) && parts[2].parse() == Ok(rank)
}

/// Kills this rank at `point` when [`FAULT_ENV`] targets it.
pub(crate) fn inject(point: Point, version: u64, rank: usize) {
    if armed(point, version, rank) {
        kill();
    }
}

/// Ends this process as a crashed rank ends.
pub(crate) fn kill() {
    // SAFETY: raising SIGKILL on ourselves; the process ends here.
    unsafe { libc::raise(libc::SIGKILL) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_names_one_point_version_and_rank() {
        assert!(matches("die-before-protect:6:1", Point::BeforeProtect, 6, 1));
        assert!(!matches("die-before-protect:6:1", Point::BeforeCommit, 6, 1));
        assert!(!matches("die-before-protect:6:1", Point::BeforeProtect, 4, 1));
        assert!(!matches("die-before-protect:6:1", Point::BeforeProtect, 6, 0));
        assert!(matches("die-during-copy:6:1", Point::DuringCopy, 6, 1));
        assert!(!matches("die-during-copy:6", Point::DuringCopy, 6, 1));
    }
}
