//! The one configuration file (TOML), its documented defaults, and `NAM_CKPT_*` overrides.
//!
//! Every key and its default is in [`Config::default`] and `docs/checkpoint.md`. An
//! environment variable `NAM_CKPT_<SECTION>_<KEY>` (or `NAM_CKPT_<KEY>` for top-level keys)
//! overrides the file, e.g. `NAM_CKPT_RAM_DIR=/dev/shm/x`, `NAM_CKPT_POLICY_KIND=always-ssd`.
//! A key that does not exist, in the file or in the environment, is an error naming it.
//! [`Config::dump`] prints the resolved configuration.

use crate::constants::CHUNK_ALIGN;
use crate::error::{CkptError, Result};
use crate::redundancy::{RedundancyConfig, Scheme};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::path::{Path, PathBuf};

/// Environment variable naming the configuration file when none is passed.
pub const CONFIG_ENV: &str = "NAM_CKPT_CONFIG";
const ENV_PREFIX: &str = "NAM_CKPT_";
/// `NAM_CKPT_*` variables that are not configuration keys: the file itself, and the group-name
/// prefix of the NAM-XOR scheme ([`crate::memory_server::GROUP_ENV`]).
const NOT_KEYS: [&str; 2] = [CONFIG_ENV, crate::memory_server::GROUP_ENV];

/// A byte count written as a number or a size string (`64MiB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Size(pub u64);

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(Size(n)),
            Raw::S(s) => nam_proto::size::parse_size(&s).map(Size).map_err(serde::de::Error::custom),
        }
    }
}

/// L1 RAM level: a size-capped directory in memory (tmpfs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RamConfig {
    /// Directory on a tmpfs (node-local).
    pub dir: PathBuf,
    /// Bytes of this directory the checkpoints of all ranks of a node may use; a rank's
    /// share is `capacity / ranks on the node` (Abeyratne 2017's TMPFS_SIZE/numMPIRanks).
    pub capacity: Size,
    /// Versions kept (at least 1; 2 keeps the previous one while the next is written).
    pub keep: usize,
    /// Chunk bytes (each chunk has a CRC32C).
    pub chunk: Size,
    /// Data chunks per parity stripe.
    pub stripe_chunks: usize,
    /// Parity chunks per stripe (0: none).
    pub parity_chunks: usize,
}

impl Default for RamConfig {
    fn default() -> Self {
        RamConfig {
            dir: PathBuf::from("/dev/shm/nam-ckpt"),
            capacity: Size(1 << 30),
            keep: 2,
            chunk: Size(crate::constants::RAM_CHUNK_DEFAULT),
            stripe_chunks: crate::constants::RAM_STRIPE_CHUNKS_DEFAULT,
            parity_chunks: crate::constants::RAM_PARITY_CHUNKS_DEFAULT,
        }
    }
}

/// L1 SSD level: a node-local directory written with fsync.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SsdConfig {
    /// Directory on the node's SSD.
    pub dir: PathBuf,
    /// fsync each file before the checkpoint completes.
    pub fsync: bool,
    /// Versions kept.
    pub keep: usize,
    /// Chunk bytes (each chunk has a CRC32C).
    pub chunk: Size,
    /// Rated endurance of the device, petabytes written.
    pub rated_pbw: f64,
    /// Rated lifetime, years (Abeyratne 2017: 5).
    pub rated_years: f64,
    /// Petabytes already written when the wear file is first created (from `nvme smart-log`
    /// or `smartctl`); later runs read the wear file.
    pub used_pbw: f64,
    /// File that persists the bytes written per device across runs (default
    /// `<dir>/wear-<node>.json`).
    pub wear_file: Option<PathBuf>,
}

impl Default for SsdConfig {
    fn default() -> Self {
        SsdConfig {
            dir: PathBuf::from("/var/tmp/nam-ckpt"),
            fsync: true,
            keep: 2,
            chunk: Size(1 << 20),
            rated_pbw: 14.6,
            rated_years: 5.0,
            used_pbw: 0.0,
            wear_file: None,
        }
    }
}

/// L2 redundancy (see [`crate::redundancy`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct L2Config {
    /// `none`, `partner`, `xor`, `nam-xor` or `rs`.
    pub scheme: String,
    /// Largest set (XOR, RS, NAM-XOR).
    pub set_size: usize,
    /// Parity segments per RS set.
    pub rs_parity: usize,
    /// Bytes per pipelined message.
    pub block: Size,
    /// Memory servers for `nam-xor` (`host:port`).
    pub servers: Vec<String>,
}

impl Default for L2Config {
    fn default() -> Self {
        let d = RedundancyConfig::default();
        L2Config {
            scheme: d.scheme.name().into(),
            set_size: d.set_size,
            rs_parity: d.rs_parity,
            block: Size(d.block_bytes as u64),
            servers: d.servers,
        }
    }
}

/// L3: asynchronous flush to a parallel file system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FlushConfig {
    /// Target directory (shared file system); empty: no flush.
    pub dir: Option<PathBuf>,
    /// Flush every N-th checkpoint (0: never).
    pub every: u64,
    /// Flushed versions kept.
    pub keep: usize,
}

impl Default for FlushConfig {
    fn default() -> Self {
        FlushConfig { dir: None, every: 0, keep: 2 }
    }
}

/// The placement policy between RAM and SSD.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// `always-ram`, `always-ssd`, `ratio` (N to RAM, then 1 to SSD), `le` (lifetime estimation),
    /// `le-ple` (lifetime and performance-loss estimation: Abeyratne 2017, Algorithm 1).
    pub kind: String,
    /// N of the `ratio` policy (9 gives Abeyratne 2017's static 9:1).
    pub ratio: u64,
    /// Bound on the fraction of run time spent checkpointing (PLE), e.g. 0.10.
    pub bound: f64,
    /// Force an SSD checkpoint every M-th checkpoint (0: never).
    pub force_ssd_every: u64,
    /// Bytes each rank writes (and fsyncs, as `ssd.fsync` says) to the SSD level once at
    /// init under `le-ple`, so performance-loss estimation knows the SSD's cost before its
    /// first SSD checkpoint (0: no probe; the first SSD checkpoint is then chosen blind).
    pub ssd_probe: Size,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig { kind: "le-ple".into(), ratio: 9, bound: 0.10, force_ssd_every: 0, ssd_probe: Size(8 << 20) }
    }
}

/// Snapshots ([`crate::Checkpointer::snapshot`]): checkpoints taken when an interval has
/// passed, as FTI's `FTI_Snapshot` does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SnapshotConfig {
    /// Seconds from init, or from the last checkpoint, after which a snapshot call
    /// checkpoints (0: every call).
    pub interval: f64,
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        SnapshotConfig { interval: 60.0 }
    }
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Default checkpoint name.
    pub name: String,
    /// L1 RAM level.
    pub ram: RamConfig,
    /// L1 SSD level.
    pub ssd: SsdConfig,
    /// L2 redundancy.
    pub redundancy: L2Config,
    /// L3 flush.
    pub flush: FlushConfig,
    /// Placement policy.
    pub policy: PolicyConfig,
    /// Incremental checkpoints of the protected regions.
    pub incremental: crate::incremental::IncrementalConfig,
    /// Snapshots.
    pub snapshot: SnapshotConfig,
    /// Failure groups beyond the node ([`crate::failure_groups`]).
    pub failure_groups: crate::failure_groups::FailureGroupsConfig,
    /// The run loop: when to checkpoint and when to stop (`need_checkpoint`, `should_exit`).
    pub runloop: crate::runloop::RunloopConfig,
    /// The control directory and the version a restart uses.
    pub datasets: crate::datasets::DatasetsConfig,
    /// Named redundancy descriptors besides `[redundancy]` (`[descriptors.<name>]`).
    pub descriptors: std::collections::BTreeMap<String, crate::descriptors::DescriptorConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            name: "ckpt".into(),
            ram: RamConfig::default(),
            ssd: SsdConfig::default(),
            redundancy: L2Config::default(),
            flush: FlushConfig::default(),
            policy: PolicyConfig::default(),
            incremental: Default::default(),
            snapshot: SnapshotConfig::default(),
            failure_groups: Default::default(),
            runloop: Default::default(),
            datasets: Default::default(),
            descriptors: Default::default(),
        }
    }
}

impl Config {
    /// Reads `path` (or `NAM_CKPT_CONFIG`, or only defaults when neither is given) and
    /// applies the `NAM_CKPT_*` environment.
    pub fn load(path: Option<&Path>) -> Result<Config> {
        let from_env = std::env::var_os(CONFIG_ENV).map(PathBuf::from);
        let text = match path.map(Path::to_path_buf).or(from_env) {
            Some(p) => std::fs::read_to_string(&p).map_err(|e| CkptError::io("read config", &p, e))?,
            None => String::new(),
        };
        let vars: Vec<(String, String)> = std::env::vars().filter(|(k, _)| k.starts_with(ENV_PREFIX)).collect();
        Self::parse(&text, &vars)
    }

    /// Parses TOML text with `(NAME, value)` overrides.
    pub fn parse(text: &str, env: &[(String, String)]) -> Result<Config> {
        let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| CkptError::Config(e.to_string()))?;
        let defaults = toml::Table::try_from(Config::default()).expect("defaults serialize");
        check_keys(&table, &defaults, "")?;
        for (name, value) in env {
            if NOT_KEYS.contains(&name.as_str()) {
                continue;
            }
            apply_env(&mut table, &defaults, name, value)?;
        }
        let config: Config = table.try_into().map_err(|e: toml::de::Error| CkptError::Config(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(CkptError::Config(m));
        if self.ram.keep == 0 || self.ssd.keep == 0 {
            return bad("ram.keep and ssd.keep must be at least 1".into());
        }
        for (key, chunk) in [("ram.chunk", self.ram.chunk), ("ssd.chunk", self.ssd.chunk)] {
            if chunk.0 < CHUNK_ALIGN || !chunk.0.is_multiple_of(CHUNK_ALIGN) {
                return bad(format!("{key} = {} must be a multiple of 64 bytes", chunk.0));
            }
        }
        if self.ram.parity_chunks > 0 && self.ram.stripe_chunks == 0 {
            return bad("ram.stripe_chunks must be at least 1 when ram.parity_chunks > 0".into());
        }
        if !(0.0..1.0).contains(&self.policy.bound) {
            return bad(format!("policy.bound = {} must be in [0, 1)", self.policy.bound));
        }
        if !(self.snapshot.interval >= 0.0 && self.snapshot.interval.is_finite()) {
            return bad(format!(
                "snapshot.interval = {} must be a finite number of seconds >= 0",
                self.snapshot.interval
            ));
        }
        crate::policy::PolicyKind::parse(&self.policy.kind)?;
        Scheme::parse(&self.redundancy.scheme)?;
        self.failure_groups.parse()?;
        self.runloop.validate()?;
        self.datasets.current_version()?;
        crate::descriptors::validate(self)?;
        crate::relocate::validate(self)?;
        self.incremental.validate()
    }

    /// The L2 parameters as the redundancy schemes take them.
    pub fn redundancy_config(&self) -> RedundancyConfig {
        RedundancyConfig {
            scheme: Scheme::parse(&self.redundancy.scheme).expect("validated"),
            set_size: self.redundancy.set_size,
            rs_parity: self.redundancy.rs_parity,
            block_bytes: self.redundancy.block.0.max(64) as usize,
            servers: self.redundancy.servers.clone(),
        }
    }

    /// The resolved configuration as TOML (every key, defaults included).
    pub fn dump(&self) -> String {
        toml::to_string_pretty(self).expect("config serializes")
    }
}

fn check_keys(table: &toml::Table, defaults: &toml::Table, prefix: &str) -> Result<()> {
    for (key, value) in table {
        let full = format!("{prefix}{key}");
        let optional = matches!(full.as_str(), "flush.dir" | "ssd.wear_file");
        match (defaults.get(key), value) {
            // Descriptors are named by the user: each table's keys are checked instead.
            (_, toml::Value::Table(t)) if full == "descriptors" => crate::descriptors::check_keys(t)?,
            (_, _) if full == "descriptors" => {
                return Err(CkptError::Config("descriptors must be tables ([descriptors.<name>])".into()))
            }
            (None, _) if !optional => return Err(CkptError::UnknownKey(full)),
            (Some(toml::Value::Table(d)), toml::Value::Table(t)) => check_keys(t, d, &format!("{full}."))?,
            _ => {}
        }
    }
    Ok(())
}

fn apply_env(table: &mut toml::Table, defaults: &toml::Table, name: &str, value: &str) -> Result<()> {
    let key = name[ENV_PREFIX.len()..].to_ascii_lowercase();
    // Numbers, booleans and arrays are TOML; anything else is a string.
    let parsed = format!("v = {value}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|t| t.get("v").cloned())
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    if defaults.get(&key).is_some_and(|v| !v.is_table()) {
        table.insert(key, parsed);
        return Ok(());
    }
    for (section, fields) in defaults.iter().filter_map(|(k, v)| v.as_table().map(|t| (k, t))) {
        if let Some(field) = key.strip_prefix(&format!("{section}_")) {
            let optional = matches!((section.as_str(), field), ("flush", "dir") | ("ssd", "wear_file"));
            if fields.contains_key(field) || optional {
                let entry = table.entry(section.clone()).or_insert_with(|| toml::Value::Table(Default::default()));
                let sub =
                    entry.as_table_mut().ok_or_else(|| CkptError::Config(format!("`{section}` is not a table")))?;
                let parsed = if fields.get(field).is_some_and(|v| v.is_str()) || optional {
                    toml::Value::String(value.to_string())
                } else {
                    parsed
                };
                sub.insert(field.to_string(), parsed);
                return Ok(());
            }
        }
    }
    Err(CkptError::UnknownKey(name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_file_and_environment() {
        let c = Config::parse("", &[]).unwrap();
        assert_eq!(c, Config::default());
        let text = "name = \"heat\"\n[ram]\ncapacity = \"64MiB\"\n[policy]\nkind = \"ratio\"\nratio = 4\n";
        let env = vec![
            ("NAM_CKPT_RAM_DIR".to_string(), "/tmp/r".to_string()),
            ("NAM_CKPT_POLICY_BOUND".to_string(), "0.2".to_string()),
            ("NAM_CKPT_FLUSH_DIR".to_string(), "/tmp/pfs".to_string()),
        ];
        let c = Config::parse(text, &env).unwrap();
        assert_eq!((c.name.as_str(), c.ram.capacity, c.policy.ratio), ("heat", Size(64 << 20), 4));
        assert_eq!((c.ram.dir.to_str(), c.policy.bound), (Some("/tmp/r"), 0.2));
        assert_eq!(c.flush.dir, Some(PathBuf::from("/tmp/pfs")));
        assert!(Config::parse(&c.dump(), &[]).unwrap() == c);
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = Config::parse("[ram]\ndirr = \"/x\"\n", &[]).unwrap_err();
        assert!(matches!(&e, CkptError::UnknownKey(k) if k == "ram.dirr"), "{e}");
        let e = Config::parse("", &[("NAM_CKPT_RAM_SIZE".into(), "1".into())]).unwrap_err();
        assert!(matches!(&e, CkptError::UnknownKey(k) if k == "NAM_CKPT_RAM_SIZE"), "{e}");
        assert!(Config::parse("[policy]\nkind = \"sometimes\"\n", &[]).is_err());
    }

    #[test]
    fn the_snapshot_interval_is_seconds_at_least_zero() {
        assert_eq!(Config::default().snapshot.interval, 60.0);
        let c = Config::parse("[snapshot]\ninterval = 2.5\n", &[]).unwrap();
        assert_eq!(c.snapshot.interval, 2.5);
        let env = [("NAM_CKPT_SNAPSHOT_INTERVAL".to_string(), "0".to_string())];
        assert_eq!(Config::parse("", &env).unwrap().snapshot.interval, 0.0);
        let e = Config::parse("[snapshot]\ninterval = -1.0\n", &[]).unwrap_err();
        assert!(matches!(&e, CkptError::Config(m) if m.contains("snapshot.interval")), "{e}");
    }
}
