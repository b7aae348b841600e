//! Redundancy descriptors: several named L2 configurations, one chosen per checkpoint (SCR's
//! `CKPT` descriptors: partner every checkpoint and XOR every tenth, say).
//!
//! ```toml
//! [redundancy]            # the descriptor `default`, used every checkpoint
//! scheme = "partner"
//! [descriptors.xor]       # every 10th checkpoint of the job: XOR sets of 4, on the SSD
//! scheme = "xor"
//! set_size = 4
//! level = "ssd"
//! every = 10
//! ```
//!
//! Checkpoint `n` of the job (counted from 1) uses the descriptor with the largest `every`
//! that divides `n` (a named one before `default` on a tie, then by name); `every = 0` makes a
//! descriptor one that only a call chooses ([`Checkpointer::checkpoint_with`]). A descriptor's
//! `level` (`policy`, `ram`, `ssd`, `pfs`) replaces the placement policy's choice unless the
//! call names a level.
//!
//! Every descriptor's scheme is built once at init. They sit behind one [`Redundancy`]
//! (`Described`) that protects with the chosen one and records its name beside the data
//! (`rank-<r>.desc`); before `latest` and `restart` the ranks pool these records, so a
//! rank that lost its files rebuilds with the scheme that protected the version.

use crate::checkpointer::{Checkpointer, Strategy};
use crate::comm::Comm;
use crate::config::Config;
use crate::error::{CkptError, Result};
use crate::full::Full;
use crate::level::LevelKind;
use crate::memory_server::ServerClient;
use crate::redundancy::{
    self, Arrived, LocalWrite, ProtectStats, Rebuilt, Redundancy, RedundancyConfig, Scheme, Target,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The name of the descriptor that the `[redundancy]` section defines.
pub const DEFAULT_DESCRIPTOR: &str = "default";
/// Suffix of the file that records which descriptor protected a rank's data.
const RECORD_SUFFIX: &str = "desc";

/// One `[descriptors.<name>]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DescriptorConfig {
    /// L2 scheme: `none`, `partner`, `xor`, `rs`, `nam-xor`.
    pub scheme: String,
    /// Largest set (XOR, RS, NAM-XOR).
    pub set_size: usize,
    /// Parity segments per RS set.
    pub rs_parity: usize,
    /// Level: `policy` (the placement policy's), `ram`, `ssd` or `pfs`.
    pub level: String,
    /// Used by every `every`-th checkpoint of the job (0: only when a call names it).
    pub every: u64,
}

impl Default for DescriptorConfig {
    fn default() -> Self {
        let d = RedundancyConfig::default();
        DescriptorConfig {
            scheme: "xor".into(),
            set_size: d.set_size,
            rs_parity: d.rs_parity,
            level: "policy".into(),
            every: 1,
        }
    }
}

/// `policy` is `None`; the others a level.
fn parse_level(name: &str, level: &str) -> Result<Option<LevelKind>> {
    match level {
        "policy" => Ok(None),
        "ram" => Ok(Some(LevelKind::Ram)),
        "ssd" => Ok(Some(LevelKind::Ssd)),
        "pfs" => Ok(Some(LevelKind::Pfs)),
        other => {
            Err(CkptError::Config(format!("descriptors.{name}.level = `{other}` is not a level (policy|ram|ssd|pfs)")))
        }
    }
}

/// Checks the `[descriptors]` tables of a parsed file: every key of every descriptor exists
/// (Err([`CkptError::UnknownKey`]) naming it).
pub(crate) fn check_keys(table: &toml::Table) -> Result<()> {
    let defaults = toml::Table::try_from(DescriptorConfig::default()).expect("defaults serialize");
    for (name, value) in table {
        let toml::Value::Table(fields) = value else {
            return Err(CkptError::Config(format!("descriptors.{name} must be a table ([descriptors.{name}])")));
        };
        if let Some(key) = fields.keys().find(|k| !defaults.contains_key(*k)) {
            return Err(CkptError::UnknownKey(format!("descriptors.{name}.{key}")));
        }
    }
    Ok(())
}

/// Checks the descriptors against the rest of the configuration.
pub(crate) fn validate(config: &Config) -> Result<()> {
    let mut nam_xor = usize::from(config.redundancy.scheme == Scheme::NamXor.name());
    for (name, d) in &config.descriptors {
        let bad = |m: String| Err(CkptError::Config(m));
        if name == DEFAULT_DESCRIPTOR {
            return bad(format!("descriptors.{name}: `{DEFAULT_DESCRIPTOR}` is the [redundancy] section's descriptor"));
        }
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return bad(format!("descriptor name {name:?} must be letters, digits, `-` and `_`"));
        }
        let scheme = Scheme::parse(&d.scheme).map_err(|e| CkptError::Config(format!("descriptors.{name}: {e}")))?;
        nam_xor += usize::from(scheme == Scheme::NamXor);
        if parse_level(name, &d.level)? == Some(LevelKind::Pfs) && config.flush.dir.is_none() {
            return bad(format!("descriptors.{name}.level = \"pfs\" needs flush.dir"));
        }
    }
    if nam_xor > 1 {
        return Err(CkptError::Config(
            "at most one redundancy descriptor may use nam-xor (the memory server keeps one group per job)".into(),
        ));
    }
    if !config.descriptors.is_empty() && config.incremental.mode()?.is_some() {
        return Err(CkptError::Config(
            "redundancy descriptors protect full checkpoints; incremental.mode stores its chain on its own levels"
                .into(),
        ));
    }
    Ok(())
}

/// Which descriptor is in use, shared by the checkpointer (which chooses) and [`Described`]
/// (which protects and rebuilds with it).
#[derive(Debug, Default)]
struct Selection {
    /// The descriptor the next protect uses.
    active: usize,
    /// Version directory -> descriptor, pooled from every rank's records before a restart.
    known: BTreeMap<PathBuf, usize>,
    /// The descriptor of the version `missing_redundancy` looked at last (`can_rebuild`
    /// judges that version next).
    judging: Option<usize>,
}

/// The job's descriptors: index 0 is `default`, then the configured ones by name.
pub(crate) struct Plan {
    names: Vec<String>,
    every: Vec<u64>,
    levels: Vec<Option<LevelKind>>,
    schemes: Vec<Scheme>,
    /// `Some` when there are descriptors besides `default` ([`Described`] is installed).
    selection: Option<Arc<Mutex<Selection>>>,
}

impl Plan {
    fn new(config: &Config) -> Result<Plan> {
        let mut plan = Plan {
            names: vec![DEFAULT_DESCRIPTOR.into()],
            every: vec![1],
            levels: vec![None],
            schemes: vec![Scheme::parse(&config.redundancy.scheme)?],
            selection: None,
        };
        for (name, d) in &config.descriptors {
            plan.names.push(name.clone());
            plan.every.push(d.every);
            plan.levels.push(parse_level(name, &d.level)?);
            plan.schemes.push(Scheme::parse(&d.scheme)?);
        }
        Ok(plan)
    }

    /// The descriptor of checkpoint `count` (from 1), or the one `explicit` names.
    fn choose(&self, count: u64, explicit: Option<&str>) -> Result<usize> {
        if let Some(name) = explicit {
            return self
                .names
                .iter()
                .position(|n| n == name)
                .ok_or_else(|| CkptError::UnknownDescriptor { name: name.to_string(), known: self.names.join(", ") });
        }
        // Largest `every` dividing `count`; on a tie a named descriptor over `default`, and
        // the first by name among named ones (they are sorted).
        let mut best = 0;
        for (i, &every) in self.every.iter().enumerate().skip(1) {
            let due = every > 0 && count.is_multiple_of(every);
            if due && (every > self.every[best] || (every == self.every[best] && best == 0)) {
                best = i;
            }
        }
        Ok(best)
    }
}

/// The descriptor chosen for one checkpoint.
pub(crate) struct Chosen {
    /// Its name (recorded with the dataset).
    pub(crate) name: String,
    /// Its scheme.
    pub(crate) scheme: Scheme,
    /// Its level (`None`: the policy's).
    pub(crate) level: Option<LevelKind>,
}

impl Checkpointer {
    /// Collective: [`Checkpointer::checkpoint`] protected by the redundancy descriptor
    /// `descriptor` (a `[descriptors.<name>]` table, or `default` for `[redundancy]`)
    /// instead of the one the `every` rule picks, at the descriptor's level (or the policy's).
    /// Err([`CkptError::UnknownDescriptor`]) when no such descriptor is configured.
    pub fn checkpoint_with(
        &mut self,
        name: Option<&str>,
        version: u64,
        descriptor: &str,
    ) -> Result<crate::CheckpointOutcome> {
        self.checkpoint_full(name, version, None, Some(descriptor), false)
    }

    /// The descriptor names of this job, `default` first.
    pub fn descriptors(&self) -> &[String] {
        &self.plan.names
    }

    /// Chooses the descriptor of the next checkpoint (and tells the scheme).
    pub(crate) fn choose_descriptor(&self, explicit: Option<&str>) -> Result<Chosen> {
        let i = self.plan.choose(self.run.taken + 1, explicit)?;
        if let Some(selection) = &self.plan.selection {
            selection.lock().expect("not poisoned").active = i;
        }
        Ok(Chosen { name: self.plan.names[i].clone(), scheme: self.plan.schemes[i], level: self.plan.levels[i] })
    }

    /// Collective: pools every rank's descriptor records of `name` so the scheme rebuilds
    /// each version with the descriptor that protected it (nothing without descriptors).
    pub(crate) fn learn_descriptors(&self, name: &str) -> Result<()> {
        let (Some(selection), Strategy::Full(full)) = (&self.plan.selection, &self.strategy) else {
            return Ok(());
        };
        let rank = self.job.comm.rank();
        let mut mine: Vec<(PathBuf, String)> = Vec::new();
        for level in full.levels().into_iter().filter(|l| l.kind != LevelKind::Pfs) {
            let Ok(entries) = std::fs::read_dir(level.dir.join(name)) else { continue };
            for e in entries.filter_map(|e| e.ok()) {
                let record = e.path().join(format!("rank-{rank}.{RECORD_SUFFIX}"));
                if let Ok(text) = std::fs::read_to_string(&record) {
                    mine.push((e.path(), text.trim().to_string()));
                }
            }
        }
        let json = serde_json::to_vec(&mine).expect("serializes");
        let mut known = BTreeMap::new();
        for bytes in self.job.comm.all_gather_bytes(&json) {
            // Every rank's list is our own encoding; a record naming a descriptor this
            // configuration lacks is left out (its version cannot be rebuilt here).
            let theirs: Vec<(PathBuf, String)> = serde_json::from_slice(&bytes).unwrap_or_default();
            for (dir, d) in theirs {
                if let Some(i) = self.plan.names.iter().position(|n| *n == d) {
                    known.insert(dir, i);
                }
            }
        }
        selection.lock().expect("not poisoned").known = known;
        Ok(())
    }
}

/// Collective: the job's descriptors; when the configuration has some besides `default`,
/// builds their schemes and puts them behind [`Described`] as `full`'s scheme (whose
/// current scheme is `default`'s).
pub(crate) fn install(
    comm: &Comm,
    config: &Config,
    client: Option<&ServerClient>,
    full: Option<&mut Full>,
) -> Result<Plan> {
    let mut plan = Plan::new(config)?;
    let Some(full) = full.filter(|_| !config.descriptors.is_empty()) else {
        return Ok(plan);
    };
    let base = config.redundancy_config();
    let mut schemes: Vec<Box<dyn Redundancy>> = Vec::new();
    for (name, d) in &config.descriptors {
        let c = RedundancyConfig {
            scheme: Scheme::parse(&d.scheme)?,
            set_size: d.set_size,
            rs_parity: d.rs_parity,
            ..base.clone()
        };
        let built = redundancy::build_with(comm, &c, client);
        schemes.push(comm.agree(built, &format!("setting up redundancy descriptor `{name}`"))?);
    }
    let default = std::mem::replace(&mut full.scheme, Box::new(redundancy::NoRedundancy::new(comm)));
    schemes.insert(0, default);
    let selection = Arc::new(Mutex::new(Selection::default()));
    full.scheme = Box::new(Described { names: plan.names.clone(), schemes, selection: selection.clone() });
    plan.selection = Some(selection);
    Ok(plan)
}

/// Several schemes behind one [`Redundancy`]: protects with the chosen descriptor's scheme and
/// rebuilds a version with the scheme that protected it.
struct Described {
    names: Vec<String>,
    schemes: Vec<Box<dyn Redundancy>>,
    selection: Arc<Mutex<Selection>>,
}

impl Described {
    /// Why no scheme can rebuild `target`: no rank recorded which descriptor protected it.
    fn unrecorded(&self, target: &Target) -> CkptError {
        CkptError::Unrecoverable(format!(
            "no rank recorded which redundancy descriptor protected {}",
            target.dir.display()
        ))
    }

    fn active(&self) -> usize {
        self.selection.lock().expect("not poisoned").active
    }

    /// The descriptor that protected the version in `target.dir`: the pooled records, else
    /// this rank's own.
    fn of(&self, target: &Target) -> Option<usize> {
        if let Some(&i) = self.selection.lock().expect("not poisoned").known.get(target.dir) {
            return Some(i);
        }
        let text = std::fs::read_to_string(target.file(RECORD_SUFFIX)).ok()?;
        self.names.iter().position(|n| n == text.trim())
    }

    /// The descriptor that protected the version in `target.dir` by the pooled records only,
    /// for a rebuild: they are the same on every rank, so every rank takes the same scheme
    /// into the rebuild's collectives, or fails alike.
    fn pooled(&self, target: &Target) -> Result<usize> {
        let known = self.selection.lock().expect("not poisoned").known.get(target.dir).copied();
        known.ok_or_else(|| self.unrecorded(target))
    }

    fn record(&self, target: &Target) -> Result<()> {
        let path = target.file(RECORD_SUFFIX);
        let name = &self.names[self.active()];
        std::fs::create_dir_all(target.dir).map_err(|e| CkptError::io("create", target.dir, e))?;
        std::fs::write(&path, name.as_bytes()).map_err(|e| CkptError::io("write", path, e))
    }
}

impl Redundancy for Described {
    fn scheme(&self) -> Scheme {
        self.schemes[self.active()].scheme()
    }

    fn protect(&mut self, data: &[u8], target: &Target) -> Result<ProtectStats> {
        let i = self.active();
        // The record's outcome joins the scheme's collective outcome, never skips it.
        let recorded = self.record(target);
        let stats = self.schemes[i].protect(data, target)?;
        recorded.map(|_| stats)
    }

    fn protect_overlapped(&mut self, data: &[u8], target: &Target, local: &mut dyn LocalWrite) -> Result<ProtectStats> {
        let i = self.active();
        let recorded = self.record(target);
        let stats = self.schemes[i].protect_overlapped(data, target, local)?;
        recorded.map(|_| stats)
    }

    fn rebuild(&mut self, data: Option<&[u8]>, target: &Target) -> Result<Rebuilt> {
        let i = self.pooled(target)?;
        self.schemes[i].rebuild(data, target)
    }

    fn rebuild_into(&mut self, data: Option<&[u8]>, into: &mut [&mut [u8]], target: &Target) -> Result<Rebuilt> {
        let i = self.pooled(target)?;
        self.schemes[i].rebuild_into(data, into, target)
    }

    fn rebuild_into_with(
        &mut self,
        data: Option<&[u8]>,
        into: &mut [&mut [u8]],
        arrived: &mut Arrived<'_>,
        target: &Target,
    ) -> Result<Rebuilt> {
        let i = self.pooled(target)?;
        self.schemes[i].rebuild_into_with(data, into, arrived, target)
    }

    fn discard(&mut self, target: &Target) -> Result<()> {
        let i = self.of(target).unwrap_or_else(|| self.active());
        self.schemes[i].discard(target)
    }

    fn missing_redundancy(&self, target: &Target) -> Option<String> {
        let of = self.of(target);
        self.selection.lock().expect("not poisoned").judging = of;
        match of {
            Some(i) => self.schemes[i].missing_redundancy(target),
            None => Some(format!("{} is missing", target.file(RECORD_SUFFIX).display())),
        }
    }

    fn can_rebuild(&self, lost: &[usize], no_redundancy: &[usize]) -> std::result::Result<(), String> {
        match self.selection.lock().expect("not poisoned").judging {
            Some(i) => self.schemes[i].can_rebuild(lost, no_redundancy),
            None if lost.is_empty() => Ok(()),
            None => Err(format!("ranks {lost:?} lost their data and no rank recorded the redundancy descriptor")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str) -> Plan {
        Plan::new(&Config::parse(text, &[]).unwrap()).unwrap()
    }

    #[test]
    fn the_every_rule_picks_the_rarest_descriptor_due() {
        let p = plan("[redundancy]\nscheme = \"partner\"\n[descriptors.xor]\nscheme = \"xor\"\nevery = 10\n");
        let picks: Vec<usize> = (1..=20).map(|n| p.choose(n, None).unwrap()).collect();
        assert_eq!(picks.iter().filter(|&&i| i == 1).count(), 2, "{picks:?}");
        assert_eq!((picks[9], picks[19], picks[0]), (1, 1, 0));
        let p = plan("[descriptors.a]\nevery = 1\n[descriptors.b]\nevery = 1\n[descriptors.c]\nevery = 0\n");
        assert_eq!(p.choose(1, None).unwrap(), 1, "a named descriptor over default, then by name");
        assert_eq!(p.choose(5, Some("c")).unwrap(), 3);
        let e = p.choose(1, Some("d")).unwrap_err();
        assert!(
            matches!(&e, CkptError::UnknownDescriptor { name, known } if name == "d" && known == "default, a, b, c"),
            "{e}"
        );
    }

    #[test]
    fn bad_descriptors_are_named() {
        for (text, what) in [
            ("[descriptors.x]\nschem = \"xor\"\n", "descriptors.x.schem"),
            ("[descriptors.x]\nscheme = \"raid\"\n", "unknown redundancy scheme `raid`"),
            ("[descriptors.x]\nlevel = \"tape\"\n", "descriptors.x.level"),
            ("[descriptors.default]\n", "`default` is the [redundancy] section's"),
            ("[descriptors.x]\nlevel = \"pfs\"\n", "needs flush.dir"),
            ("[descriptors]\nx = 3\n", "descriptors.x must be a table"),
            ("[redundancy]\nscheme = \"nam-xor\"\n[descriptors.x]\nscheme = \"nam-xor\"\n", "at most one"),
        ] {
            let e = Config::parse(text, &[]).unwrap_err();
            assert!(e.to_string().contains(what), "{text}: {e}");
        }
        let e = Config::parse("", &[("NAM_CKPT_DESCRIPTORS_X_EVERY".into(), "2".into())]).unwrap_err();
        assert!(matches!(&e, CkptError::UnknownKey(_)), "{e}");
    }
}
