//! The run loop's questions, asked every iteration and answered alike on every rank (SCR's
//! `SCR_Need_checkpoint` and `SCR_Should_exit`):
//!
//! - [`Checkpointer::need_checkpoint`]: is it time to checkpoint? From `runloop.interval`
//!   (seconds since the last checkpoint) or `runloop.overhead` (the largest fraction of run
//!   time spent checkpointing, judged from the measured cost of this job's checkpoints);
//!   with neither configured every call says yes, as SCR's does.
//! - [`Checkpointer::should_exit`]: should the job stop now? When a halt file is in the
//!   control directory (`nam ckpt halt DIR`, [`nam_ckpt_control::Halt`]), or the allocation
//!   ends within `runloop.exit_before` seconds: its end is `runloop.end_time` (Unix seconds;
//!   `NAM_CKPT_RUNLOOP_END_TIME`), else the resource manager's `SLURM_JOB_END_TIME`.
//!
//! One rank (0) reads the halt file and the clock for `should_exit` and broadcasts its
//! answer; `need_checkpoint` takes the slowest rank's elapsed time (one allreduce each).

use crate::checkpointer::Checkpointer;
use crate::comm::Comm;
use crate::error::{CkptError, Result};
use nam_ckpt_control::{unix_now, Halt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The resource manager's variable giving the Unix time at which the allocation ends
/// (Slurm sets it in a job's environment).
pub const SLURM_END_ENV: &str = "SLURM_JOB_END_TIME";

/// `[runloop]`: when the run loop checkpoints and when it stops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunloopConfig {
    /// Seconds from one checkpoint (or init) after which `need_checkpoint` says yes (0: no
    /// interval rule; SCR's `SCR_CHECKPOINT_SECONDS`).
    pub interval: f64,
    /// Largest fraction of run time spent checkpointing, in [0, 1) (0: no overhead rule;
    /// SCR's `SCR_CHECKPOINT_OVERHEAD`, there in percent).
    pub overhead: f64,
    /// Unix seconds at which the allocation ends (0: from `SLURM_JOB_END_TIME`, else none).
    pub end_time: f64,
    /// Seconds before the allocation's end from which `should_exit` says yes (SCR's
    /// `SCR_HALT_SECONDS`): room for a last checkpoint.
    pub exit_before: f64,
}

impl Default for RunloopConfig {
    fn default() -> Self {
        RunloopConfig { interval: 0.0, overhead: 0.0, end_time: 0.0, exit_before: 0.0 }
    }
}

impl RunloopConfig {
    /// Every key is a finite number in its range; Err([`CkptError::Config`]) names the key.
    pub(crate) fn validate(&self) -> Result<()> {
        let seconds = [
            ("runloop.interval", self.interval),
            ("runloop.end_time", self.end_time),
            ("runloop.exit_before", self.exit_before),
        ];
        for (key, value) in seconds {
            if !(value.is_finite() && value >= 0.0) {
                return Err(CkptError::Config(format!("{key} = {value} must be a finite number of seconds >= 0")));
            }
        }
        if !(self.overhead.is_finite() && (0.0..1.0).contains(&self.overhead)) {
            return Err(CkptError::Config(format!(
                "runloop.overhead = {} must be a fraction in [0, 1) (0.05 for 5 %)",
                self.overhead
            )));
        }
        Ok(())
    }
}

/// Why [`Checkpointer::should_exit`] says stop (the same on every rank).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ExitReason {
    /// A halt file asks the job to stop (`nam ckpt halt`).
    Halted {
        /// The halt file.
        path: PathBuf,
        /// Its reason.
        reason: String,
    },
    /// The allocation ends within `runloop.exit_before` seconds.
    TimeLimit {
        /// When it ends (Unix seconds).
        end_time: f64,
        /// Seconds left.
        left: f64,
    },
}

impl std::fmt::Display for ExitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitReason::Halted { path, reason } => write!(f, "halted by {}: {reason}", path.display()),
            ExitReason::TimeLimit { end_time, left } => {
                write!(
                    f,
                    "the allocation ends at {} UTC, {left:.0} s from now",
                    nam_ckpt_control::format_utc(*end_time)
                )
            }
        }
    }
}

/// What the run loop remembers between calls: this job's checkpoints and their cost.
#[derive(Debug, Default)]
pub(crate) struct RunState {
    /// Checkpoint calls of this job that succeeded (the descriptor rule counts them from 1).
    pub(crate) taken: u64,
    /// Of those, the ones that wrote data (the placement policy may skip one).
    pub(crate) written: u64,
    /// Wall seconds of the written ones (slowest rank), for the overhead rule.
    pub(crate) seconds: f64,
}

impl RunState {
    /// Records a checkpoint call that took `seconds` (the slowest rank's, so alike
    /// everywhere); `written`: it stored data (a skipped one says nothing of the cost).
    pub(crate) fn record(&mut self, seconds: f64, written: bool) {
        self.taken += 1;
        if written {
            self.written += 1;
            self.seconds += seconds;
        }
    }
}

/// The decision of `need_checkpoint` from the slowest rank's seconds since the last
/// checkpoint: the interval rule, or the overhead rule (a checkpoint of mean cost `c` after
/// `t` seconds of work costs `c / (t + c)` of the time, so the next one is due once
/// `t >= c (1 - f) / f`); either fires. Without a measured checkpoint the overhead rule says
/// yes (the cost must be measured first); with no rule configured the answer is yes.
pub(crate) fn need(config: &RunloopConfig, state: &RunState, elapsed: f64) -> bool {
    let interval = config.interval > 0.0;
    let overhead = config.overhead > 0.0;
    if !interval && !overhead {
        return true;
    }
    let by_interval = interval && elapsed >= config.interval;
    let by_overhead = overhead && {
        if state.written == 0 {
            true
        } else {
            let cost = state.seconds / state.written as f64;
            elapsed >= cost * (1.0 - config.overhead) / config.overhead
        }
    };
    by_interval || by_overhead
}

/// The allocation's end (Unix seconds): `runloop.end_time`, else `SLURM_JOB_END_TIME`
/// (`env` is its value); Err names a malformed variable.
pub(crate) fn end_time(config: &RunloopConfig, env: Option<&str>) -> Result<Option<f64>> {
    if config.end_time > 0.0 {
        return Ok(Some(config.end_time));
    }
    match env.map(str::trim) {
        None | Some("") => Ok(None),
        Some(text) => match text.parse::<f64>() {
            Ok(t) if t.is_finite() && t > 0.0 => Ok(Some(t)),
            _ => Err(CkptError::Config(format!("{SLURM_END_ENV} = {text:?} is not a Unix time in seconds"))),
        },
    }
}

/// Collective: `local` computed on rank 0 (`None` on the others), the same on every rank.
/// Rank 0 keeps its own error; the others get [`CkptError::Peer`] with its cause.
pub(crate) fn from_root<T: Serialize + DeserializeOwned>(
    comm: &Comm,
    local: Option<Result<T>>,
    what: &str,
) -> Result<T> {
    let (bytes, mine) = match local {
        Some(Ok(value)) => {
            let wire: std::result::Result<&T, String> = Ok(&value);
            (serde_json::to_vec(&wire).expect("serializes"), Some(Ok(value)))
        }
        Some(Err(e)) => {
            let wire: std::result::Result<(), String> = Err(e.to_string());
            (serde_json::to_vec(&wire).expect("serializes"), Some(Err(e)))
        }
        None => (Vec::new(), None),
    };
    let got = comm.broadcast_bytes(0, &bytes);
    if let Some(mine) = mine {
        return mine;
    }
    let wire: std::result::Result<T, String> = serde_json::from_slice(&got)
        .map_err(|e| CkptError::State(format!("{what}: rank 0's answer does not decode: {e}")))?;
    wire.map_err(|cause| {
        let node = comm.nodes().names[comm.nodes().node_of[0]].clone();
        CkptError::Peer { what: what.to_string(), rank: 0, node, cause }
    })
}

impl Checkpointer {
    /// The job's control directory: where the halt file and the dataset indexes are
    /// (`datasets.dir`; by default `flush.dir` when set, else `ssd.dir`).
    pub fn control_dir(&self) -> PathBuf {
        self.job.config.control_dir()
    }

    /// Collective, to call every iteration (SCR's `SCR_Need_checkpoint`): whether to
    /// checkpoint now, by `runloop.interval` or `runloop.overhead` measured against this
    /// job's checkpoints (always true when neither is set). The slowest rank's clock
    /// decides, so every rank gets the same answer; the cost is one allreduce.
    pub fn need_checkpoint(&self) -> Result<bool> {
        let elapsed = self.job.comm.max_f64(self.last_checkpoint.elapsed().as_secs_f64());
        Ok(need(&self.job.config.runloop, &self.run, elapsed))
    }

    /// Collective, to call every iteration (SCR's `SCR_Should_exit`): `Some(reason)` when the
    /// job should stop now (a halt file in [`Checkpointer::control_dir`], or the allocation
    /// ends within `runloop.exit_before` seconds), the same on every rank. Rank 0 reads the
    /// halt file and its clock and broadcasts the answer. A malformed halt file or
    /// `SLURM_JOB_END_TIME` is an error naming it, on every rank.
    pub fn should_exit(&self) -> Result<Option<ExitReason>> {
        let local = (self.job.comm.rank() == 0).then(|| self.exit_reason_here());
        from_root(&self.job.comm, local, "deciding whether to exit")
    }

    fn exit_reason_here(&self) -> Result<Option<ExitReason>> {
        let now = unix_now();
        let dir = self.control_dir();
        if let Some(halt) = Halt::read(&dir)?.filter(|h| h.active(now)) {
            return Ok(Some(ExitReason::Halted { path: Halt::path(&dir), reason: halt.reason }));
        }
        let config = &self.job.config.runloop;
        let env = std::env::var(SLURM_END_ENV).ok();
        Ok(end_time(config, env.as_deref())?
            .map(|end| (end, end - now))
            .filter(|&(_, left)| left <= config.exit_before)
            .map(|(end_time, left)| ExitReason::TimeLimit { end_time, left }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_and_overhead_rules() {
        let none = RunloopConfig::default();
        assert!(need(&none, &RunState::default(), 0.0), "no rule: always");
        let every = RunloopConfig { interval: 10.0, ..Default::default() };
        assert!(!need(&every, &RunState::default(), 9.9) && need(&every, &RunState::default(), 10.0));
        let five = RunloopConfig { overhead: 0.05, ..Default::default() };
        assert!(need(&five, &RunState::default(), 0.0), "the first checkpoint measures the cost");
        // 2 s per checkpoint at 5 %: one every 38 s of work.
        let state = RunState { taken: 3, written: 2, seconds: 4.0 };
        assert!(!need(&five, &state, 37.9) && need(&five, &state, 38.0));
        let both = RunloopConfig { interval: 20.0, overhead: 0.05, ..Default::default() };
        assert!(need(&both, &state, 20.0), "either rule fires");
    }

    #[test]
    fn bad_settings_are_named() {
        for (config, key) in [
            (RunloopConfig { interval: -1.0, ..Default::default() }, "runloop.interval"),
            (RunloopConfig { interval: f64::NAN, ..Default::default() }, "runloop.interval"),
            (RunloopConfig { overhead: 1.0, ..Default::default() }, "runloop.overhead"),
            (RunloopConfig { exit_before: f64::INFINITY, ..Default::default() }, "runloop.exit_before"),
        ] {
            let e = config.validate().unwrap_err();
            assert!(matches!(&e, CkptError::Config(m) if m.contains(key)), "{e}");
        }
    }

    #[test]
    fn the_end_time_comes_from_the_config_or_slurm() {
        let none = RunloopConfig::default();
        assert_eq!(end_time(&none, None).unwrap(), None);
        assert_eq!(end_time(&none, Some("1800000000")).unwrap(), Some(1.8e9));
        let set = RunloopConfig { end_time: 5.0, ..Default::default() };
        assert_eq!(end_time(&set, Some("1800000000")).unwrap(), Some(5.0));
        let e = end_time(&none, Some("tomorrow")).unwrap_err();
        assert!(matches!(&e, CkptError::Config(m) if m.contains(SLURM_END_ENV)), "{e}");
    }
}
