//! The `[incremental]` section: which nam-incr mode checkpoints the protected regions, and
//! on which levels its chain of base and increments is kept.

use crate::config::Size;
use crate::error::{CkptError, Result};
use crate::level::LevelKind;
use nam_incr::Mode;
use serde::{Deserialize, Serialize};

/// Incremental checkpointing of the protected regions (`nam-incr`, docs/checkpoint.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IncrementalConfig {
    /// `off` (every checkpoint a full file, placed by the policy), or a nam-incr mode:
    /// `stop-and-copy`, `fork`, `incremental`, `non-blocking`, `early-late`.
    pub mode: String,
    /// Store only the changed 64-byte lines of a dirty page (else the whole page).
    pub consolidate: bool,
    /// Levels that each keep the whole chain (`ram`, `ssd`, `nam`), written in this order;
    /// restart tries them in this order too.
    pub levels: Vec<String>,
    /// Memory servers (`host:port`) of the `nam` level; rank r uses server r mod n.
    pub servers: Vec<String>,
    /// Complete versions kept per level (at least 2: ranks finish their background copies at
    /// different times, and a collective restart takes the newest version all of them have).
    pub keep: usize,
    /// Record bytes (changed lines of many pages packed together; the flash page of
    /// Abeyratne 2017, Ch. V).
    pub record: Size,
    /// Merge the increments backwards once the chain holds this many times the regions'
    /// bytes (0: never).
    pub merge_ratio: f64,
}

impl Default for IncrementalConfig {
    fn default() -> Self {
        let d = nam_incr::Config::new(Mode::EarlyLate);
        IncrementalConfig {
            mode: "off".into(),
            consolidate: d.consolidate,
            levels: vec!["ssd".into()],
            servers: Vec::new(),
            keep: 2,
            record: Size(d.record_bytes as u64),
            merge_ratio: d.merge_ratio,
        }
    }
}

impl IncrementalConfig {
    /// The nam-incr mode, `None` when off.
    pub fn mode(&self) -> Result<Option<Mode>> {
        if self.mode == "off" {
            return Ok(None);
        }
        let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
        Mode::parse(&self.mode).map(Some).ok_or_else(|| {
            CkptError::Config(format!(
                "incremental.mode = `{}`: expected `off` or one of {}",
                self.mode,
                names.join(", ")
            ))
        })
    }

    /// The levels, in order.
    pub fn level_kinds(&self) -> Result<Vec<LevelKind>> {
        let kinds = self.levels.iter().map(|l| match l.as_str() {
            "ram" => Ok(LevelKind::Ram),
            "ssd" => Ok(LevelKind::Ssd),
            "nam" => Ok(LevelKind::Nam),
            other => Err(CkptError::Config(format!("incremental.levels: `{other}` is not `ram`, `ssd` or `nam`"))),
        });
        kinds.collect()
    }

    /// Checks the section.
    pub fn validate(&self) -> Result<()> {
        let mode = self.mode()?;
        let kinds = self.level_kinds()?;
        let bad = |m: String| Err(CkptError::Config(m));
        if mode.is_none() {
            return Ok(());
        }
        if kinds.is_empty() {
            return bad("incremental.levels must name at least one level".into());
        }
        if self.keep < 2 {
            return bad(format!("incremental.keep = {} must be at least 2", self.keep));
        }
        if kinds.contains(&LevelKind::Nam) && self.servers.is_empty() {
            return bad("incremental.levels has `nam` but incremental.servers is empty".into());
        }
        if kinds.contains(&LevelKind::Nam) && mode == Some(Mode::Fork) {
            return bad("incremental.mode = `fork` cannot write to the `nam` level (a forked child cannot use the parent's UCX connection)".into());
        }
        if (self.record.0 as usize) < nam_incr::record::RECORD_BYTES_MIN {
            return bad(format!("incremental.record = {} must hold a whole page", self.record.0));
        }
        Ok(())
    }

    /// The engine configuration.
    pub fn engine_config(&self, mode: Mode) -> nam_incr::Config {
        let mut c = nam_incr::Config::new(mode);
        c.consolidate = self.consolidate;
        c.keep = self.keep;
        c.record_bytes = self.record.0 as usize;
        c.segment_bytes = c.segment_bytes.max(c.record_bytes);
        c.merge_ratio = self.merge_ratio;
        c
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::error::CkptError;
    use crate::level::LevelKind;
    use nam_incr::Mode;

    #[test]
    fn file_environment_and_validation() {
        let c = Config::parse("", &[]).unwrap();
        assert_eq!(c.incremental.mode().unwrap(), None);
        let text = "[incremental]\nmode = \"non-blocking\"\nlevels = [\"ram\"]\n";
        let env = vec![
            ("NAM_CKPT_INCREMENTAL_MODE".to_string(), "early-late".to_string()),
            ("NAM_CKPT_INCREMENTAL_LEVELS".to_string(), "[\"ram\", \"nam\"]".to_string()),
            ("NAM_CKPT_INCREMENTAL_SERVERS".to_string(), "[\"127.0.0.1:7000\"]".to_string()),
        ];
        let c = Config::parse(text, &env).unwrap();
        assert_eq!(c.incremental.mode().unwrap(), Some(Mode::EarlyLate));
        assert_eq!(c.incremental.level_kinds().unwrap(), vec![LevelKind::Ram, LevelKind::Nam]);
        assert!(Config::parse(&c.dump(), &[]).unwrap() == c);
        for (bad, names) in [
            ("mode = \"sometimes\"", "incremental.mode"),
            ("mode = \"incremental\"\nlevels = [\"tape\"]", "tape"),
            ("mode = \"incremental\"\nlevels = [\"nam\"]", "servers"),
            ("mode = \"fork\"\nlevels = [\"nam\"]\nservers = [\"h:1\"]", "fork"),
            ("mode = \"incremental\"\nkeep = 1", "keep"),
        ] {
            let e = Config::parse(&format!("[incremental]\n{bad}\n"), &[]).unwrap_err();
            assert!(matches!(&e, CkptError::Config(m) if m.contains(names)), "{bad}: {e}");
        }
        let e = Config::parse("[incremental]\nmodes = \"x\"\n", &[]).unwrap_err();
        assert!(matches!(&e, CkptError::UnknownKey(k) if k == "incremental.modes"), "{e}");
    }
}
