//! `nam-bench ckpt`'s restart through the checkpoint library (`Checkpointer::restart`, what
//! `nam_ckpt_restart` runs), for every scheme of the run (and Reed-Solomon beside XOR), timed
//! beside the floor a restart cannot beat: each rank reading its checkpoint file with plain
//! `read` into the same array. The rows of [`super::ckpt`]'s table time the schemes' rebuild
//! alone; these time what an application waits for, nothing lost and with one rank's node
//! storage erased, and check every byte.

use anyhow::{bail, Context, Result};
use nam_ckpt::comm::Comm;
use nam_ckpt::config::Size;
use nam_ckpt::level::{remove_rank_files, Level};
use nam_ckpt::redundancy::{NamXor, Scheme};
use nam_ckpt::{Checkpointer, Config, LevelKind};
use serde::Serialize;
use std::io::Read;
use std::path::Path;
use std::time::Instant;

/// The checkpoint name and version every library row writes.
const NAME: &str = "bench";
const VERSION: u64 = 1;

/// Longest wait for the library's background work (the rebuilt file's store) between rounds.
const STORE_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// One scheme's library restart, as `--json` prints it (`"row": "library"`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LibraryResult {
    row: &'static str,
    /// The scheme.
    pub(crate) scheme: String,
    /// Bytes per rank.
    pub(crate) bytes_per_rank: u64,
    /// Each rank reads its checkpoint file with plain `read` into the array (slowest rank,
    /// median of the rounds).
    pub(crate) plain_read_s: f64,
    /// `Checkpointer::restart` with nothing lost (slowest rank, median).
    pub(crate) restart_noloss_s: f64,
    /// `Checkpointer::restart` after the lost rank's node-local files were erased and its
    /// array overwritten (slowest rank, median).
    pub(crate) restart_loss_s: f64,
    /// Every restart gave back every byte.
    pub(crate) bytes_match: bool,
}

impl LibraryResult {
    /// No-loss restart over the plain read.
    pub(crate) fn noloss_ratio(&self) -> f64 {
        self.restart_noloss_s / self.plain_read_s
    }

    /// Restart with a loss over the no-loss restart.
    pub(crate) fn loss_ratio(&self) -> f64 {
        self.restart_loss_s / self.restart_noloss_s
    }
}

/// The schemes whose library restart the run measures: those of its rows, and Reed-Solomon
/// beside XOR. NAM-XOR only when its rows' groups were dropped (`keep_groups` leaves them,
/// and the library's sets would join the same groups).
pub(crate) fn schemes(rows: &[Scheme], keep_groups: bool) -> Vec<Scheme> {
    let mut out: Vec<Scheme> = Vec::new();
    for &s in rows {
        let kept = s == Scheme::NamXor && keep_groups;
        if !out.contains(&s) && !kept {
            out.push(s);
        }
        if s == Scheme::Xor && !out.contains(&Scheme::Rs) {
            out.push(Scheme::Rs);
        }
    }
    out
}

/// What each row needs from the benchmark's arguments.
pub(crate) struct Setup<'a> {
    pub(crate) dir: &'a Path,
    pub(crate) fsync: bool,
    pub(crate) set_size: usize,
    pub(crate) block: u64,
    pub(crate) servers: &'a [String],
    pub(crate) lose: usize,
    pub(crate) rounds: u32,
}

/// Checkpoints `expected` (this rank's array) once with the library and scheme `scheme` on
/// the SSD level in `setup.dir` (disk or tmpfs, as the other rows), then times, round by
/// round, a plain read of each rank's file, a restart with nothing lost, and a restart after
/// `setup.lose`'s files are erased.
pub(crate) fn measure(comm: &Comm, setup: &Setup, scheme: Scheme, expected: &[u8]) -> Result<LibraryResult> {
    let root = setup.dir.join(format!("library-{}", scheme.name()));
    let config = config(&root, setup, scheme, expected.len() as u64, comm);
    let mut ckpt = Checkpointer::init(Comm::new(comm.raw()), config)?;
    let mut array = expected.to_vec();
    // SAFETY: `array` outlives `ckpt` (dropped below) and nothing else touches it meanwhile.
    unsafe { ckpt.protect(1, array.as_mut_ptr(), array.len())? };
    ckpt.checkpoint_level(Some(NAME), VERSION, LevelKind::Ssd)?;
    let level = Level { kind: LevelKind::Ssd, dir: root.join("ssd"), keep: 2 };
    let file = level.file(NAME, VERSION, comm.rank());
    let (mut plain, mut noloss, mut loss, mut ok) = (Vec::new(), Vec::new(), Vec::new(), true);
    for _ in 0..setup.rounds.max(1) {
        // The floor: the file's bytes (its data comes first) into the same array.
        array.fill(0);
        comm.barrier();
        let start = Instant::now();
        let read = read_prefix(&file, &mut array);
        plain.push(comm.max_f64(start.elapsed().as_secs_f64()));
        comm.agree(read, "reading the checkpoint file with plain read")?;
        ok &= array == expected;
        array.fill(0);
        noloss.push(timed_restart(comm, &mut ckpt)?);
        ok &= array == expected;
    }
    for _ in 0..setup.rounds.max(1) {
        // The lost rank stores its rebuilt file again in the background after its restart
        // returned; that store ends before the next loss is injected (untimed).
        comm.agree(ckpt.wait_flush(STORE_WAIT), "waiting for the rebuilt file's store")?;
        let erased = match comm.rank() == setup.lose {
            true => remove_rank_files(&level.version_dir(NAME, VERSION), comm.rank()).map(|()| array.fill(0xA5)),
            false => Ok(()),
        };
        comm.agree(erased, "erasing the lost rank's files")?;
        loss.push(timed_restart(comm, &mut ckpt)?);
        ok &= array == expected;
    }
    drop(ckpt);
    if scheme == Scheme::NamXor {
        drop_group(comm, setup, expected.len())?;
    }
    comm.barrier();
    if comm.rank() == 0 {
        let _ = std::fs::remove_dir_all(&root);
    }
    use crate::harness::stats::median;
    Ok(LibraryResult {
        row: "library",
        scheme: scheme.name().into(),
        bytes_per_rank: expected.len() as u64,
        plain_read_s: median(plain),
        restart_noloss_s: median(noloss),
        restart_loss_s: median(loss),
        bytes_match: comm.all_agree(ok),
    })
}

/// Removes the group the library's NAM-XOR sets left on the memory servers (a job's groups
/// stay there for its restarts; the benchmark leaves nothing behind): the sets join it
/// again, as a restarted job would, and drop it.
fn drop_group(comm: &Comm, setup: &Setup, len: usize) -> Result<()> {
    let mut scheme = NamXor::new(comm, setup.set_size, setup.servers)?;
    comm.agree(scheme.buffer_mut(len).map(drop), "joining the library's NAM-XOR group to drop it")?;
    Ok(comm.agree(scheme.drop_group(), "dropping the library's NAM-XOR group")?)
}

/// The library's configuration for one row: every checkpoint on the SSD level in `root`
/// (fsync as the run says), the RAM level's directory beside it unused.
fn config(root: &Path, setup: &Setup, scheme: Scheme, len: u64, comm: &Comm) -> Config {
    let mut config = Config { name: NAME.into(), ..Config::default() };
    config.ram.dir = root.join("ram");
    config.ram.capacity = Size(len * 4 * comm.size() as u64);
    config.ssd.dir = root.join("ssd");
    config.ssd.fsync = setup.fsync;
    config.ssd.wear_file = Some(root.join(format!("wear-{}.json", comm.rank())));
    config.policy.kind = "always-ssd".into();
    config.policy.ssd_probe = Size(0);
    config.redundancy.scheme = scheme.name().into();
    config.redundancy.set_size = setup.set_size;
    config.redundancy.block = Size(setup.block);
    config.redundancy.servers = setup.servers.to_vec();
    config
}

/// One `Checkpointer::restart` from a barrier, slowest rank's seconds.
fn timed_restart(comm: &Comm, ckpt: &mut Checkpointer) -> Result<f64> {
    comm.barrier();
    let start = Instant::now();
    let restarted = ckpt.restart(Some(NAME), Some(VERSION), None);
    let seconds = comm.max_f64(start.elapsed().as_secs_f64());
    let outcome = restarted.context("the library restart")?;
    if outcome.version != VERSION {
        bail!("the library restarted version {} instead of {VERSION}", outcome.version);
    }
    Ok(seconds)
}

/// Reads the first `into.len()` bytes of `path` into `into` with plain `read` calls.
fn read_prefix(path: &Path, into: &mut [u8]) -> Result<()> {
    let mut file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    file.read_exact(into).with_context(|| format!("reading {}", path.display()))
}

/// The library rows as Markdown: the table, and the ratios the targets name.
pub(crate) fn markdown(rows: &[LibraryResult]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let mut md = String::from(
        "\nRestart through the checkpoint library (`Checkpointer::restart`, as `nam_ckpt_restart`), each rank's checkpoint on the same storage, beside each rank reading its checkpoint file with plain `read` into the same array (slowest rank, medians):\n\n",
    );
    md += "| scheme | plain read s | restart, no loss s | no loss / plain read | restart, one rank's storage lost s | lost / no loss | restore, no loss GB/s | restore, lost GB/s | bytes match |\n";
    md += "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
    for r in rows {
        let gbps = |s: f64| r.bytes_per_rank as f64 / s / 1e9;
        md += &format!(
            "| {} | {:.3} | {:.3} | {:.2}x | {:.3} | {:.2}x | {:.2} | {:.2} | {} |\n",
            r.scheme,
            r.plain_read_s,
            r.restart_noloss_s,
            r.noloss_ratio(),
            r.restart_loss_s,
            r.loss_ratio(),
            gbps(r.restart_noloss_s),
            gbps(r.restart_loss_s),
            r.bytes_match
        );
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_scheme_is_measured_once_with_reed_solomon_beside_xor() {
        let rows = [Scheme::Partner, Scheme::Xor, Scheme::NamXor, Scheme::NamXor];
        assert_eq!(schemes(&rows, false), [Scheme::Partner, Scheme::Xor, Scheme::Rs, Scheme::NamXor]);
        assert_eq!(schemes(&rows, true), [Scheme::Partner, Scheme::Xor, Scheme::Rs]);
    }
}
