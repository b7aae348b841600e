//! L2 redundancy across nodes, behind one trait.
//!
//! Every scheme first has the rank's checkpoint in its node-local directory (L1, written by
//! the caller); [`Redundancy::protect`] then adds what lets the job survive the loss of
//! nodes, and [`Redundancy::rebuild`] brings back the data of ranks that lost theirs.
//! Both are collective over the communicator the scheme was built on; buffer sizes may
//! differ per rank.
//!
//! | scheme | stores | survives |
//! | --- | --- | --- |
//! | [`None`](NoRedundancy) | nothing | no node loss |
//! | [`Partner`] | a full copy on another node | loss of a rank/node whose partner survives |
//! | [`Xor`] | 1/(n-1) parity per rank in sets of n ranks on n nodes | one lost rank per set |
//! | [`ReedSolomon`] | k/(n-k) parity per rank in sets of n | k lost ranks per set |
//! | [`NamXor`] | parity in a memory server, computed there | one lost rank per set |

pub(crate) mod nam_xor;
mod none;
mod partner;
mod reed_solomon;
mod ring;
mod xor;

pub use crate::memory_server::ServerClient;
pub use nam_xor::{NamXor, ServerWork};
pub use none::NoRedundancy;
pub use partner::Partner;
pub use reed_solomon::ReedSolomon;
pub use xor::Xor;

use crate::comm::Comm;
use crate::error::{CkptError, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The L2 schemes a configuration can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scheme {
    /// No redundancy.
    None,
    /// Full copy on a partner node.
    Partner,
    /// SCR's XOR on the compute nodes.
    Xor,
    /// XOR parity computed by memory servers.
    NamXor,
    /// Reed-Solomon with `rs_parity` parity segments per set.
    Rs,
}

impl Scheme {
    /// The configuration name (`none`, `partner`, `xor`, `nam-xor`, `rs`).
    pub fn name(self) -> &'static str {
        match self {
            Scheme::None => "none",
            Scheme::Partner => "partner",
            Scheme::Xor => "xor",
            Scheme::NamXor => "nam-xor",
            Scheme::Rs => "rs",
        }
    }

    /// Parses a configuration name.
    pub fn parse(name: &str) -> Result<Scheme> {
        [Scheme::None, Scheme::Partner, Scheme::Xor, Scheme::NamXor, Scheme::Rs]
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| {
                CkptError::Config(format!("unknown redundancy scheme `{name}` (none|partner|xor|nam-xor|rs)"))
            })
    }
}

/// Where [`Redundancy::rebuild_into_with`] hands a lost rank's rebuilt bytes as they land:
/// `(offset in the rank's data, bytes)`.
pub type Arrived<'a> = dyn FnMut(usize, &[u8]) + 'a;

/// Parameters of the L2 schemes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RedundancyConfig {
    /// The scheme.
    pub scheme: Scheme,
    /// Largest set size for XOR / RS / NAM-XOR (ranks on distinct nodes).
    pub set_size: usize,
    /// Parity segments per set for RS (ranks per set it survives).
    pub rs_parity: usize,
    /// Bytes per pipelined message.
    pub block_bytes: usize,
    /// Memory servers for `nam-xor` (`host:port`).
    pub servers: Vec<String>,
}

impl Default for RedundancyConfig {
    fn default() -> Self {
        RedundancyConfig { scheme: Scheme::None, set_size: 8, rs_parity: 2, block_bytes: 1 << 20, servers: Vec::new() }
    }
}

/// Where a scheme keeps its redundancy data for one checkpoint.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// This rank's node-local directory.
    pub dir: &'a Path,
    /// Checkpoint name with version (file name stem, unique per checkpoint).
    pub name: &'a str,
    /// fsync files before protect returns.
    pub fsync: bool,
}

impl Target<'_> {
    /// `<dir>/<name>.<suffix>`.
    pub fn file(&self, suffix: &str) -> PathBuf {
        self.dir.join(format!("{}.{suffix}", self.name))
    }
}

/// What one protect cost this rank.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ProtectStats {
    /// Data bytes of this rank.
    pub data_bytes: u64,
    /// Bytes this rank sent to other ranks.
    pub sent_bytes: u64,
    /// Redundancy bytes this rank stored.
    pub stored_bytes: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// CPU seconds this rank spent (XOR, copies, messages, file writes).
    pub cpu_seconds: f64,
}

/// The outcome of one rebuild.
#[derive(Debug, Clone, Default)]
pub struct Rebuilt {
    /// The rebuilt data, on a rank that had lost its data; `None` elsewhere.
    pub data: Option<Vec<u8>>,
    /// Ranks that had lost their data (same on every rank).
    pub lost: Vec<usize>,
    /// Wall seconds.
    pub seconds: f64,
    /// CPU seconds of this rank.
    pub cpu_seconds: f64,
}

/// An L2 redundancy scheme. Every method is collective over the scheme's communicator
/// ([`Redundancy::protect_overlapped`] also over the caller's, see [`LocalWrite`]).
pub trait Redundancy {
    /// The scheme.
    fn scheme(&self) -> Scheme;

    /// Adds redundancy for `data` (this rank's checkpoint, sizes may differ per rank). On
    /// success every rank's redundancy for `target.name` is stored; on error (the same on
    /// every rank) nothing that was stored before for other names is touched.
    fn protect(&mut self, data: &[u8], target: &Target) -> Result<ProtectStats>;

    /// Rebuilds the data of ranks that lost theirs: each rank passes its data, or `None`
    /// when it lost it. The lost ranks get their data back (and the scheme's redundancy
    /// for them is restored); Err([`CkptError::Unrecoverable`]) on every rank when more was
    /// lost than the scheme survives, never wrong data.
    fn rebuild(&mut self, data: Option<&[u8]>, target: &Target) -> Result<Rebuilt>;

    /// [`Redundancy::rebuild`] that puts a lost rank's data straight where it is restored:
    /// `into`, the pieces the data goes to in order (the application's registered regions),
    /// which must add up to the size the rank protected, else Err([`CkptError::Corrupt`]) on
    /// that rank once the scheme's collectives completed. [`Rebuilt::data`] stays `None`;
    /// `into` is not touched on a rank that has its data, nor when the rebuild fails. The
    /// default rebuilds into a buffer and copies it; schemes that can write the pieces
    /// themselves override it, which saves the lost rank a buffer of its whole checkpoint and
    /// a pass over it.
    fn rebuild_into(&mut self, data: Option<&[u8]>, into: &mut [&mut [u8]], target: &Target) -> Result<Rebuilt> {
        let mut rebuilt = self.rebuild(data, target)?;
        if let Some(bytes) = rebuilt.data.take() {
            scatter(&bytes, into)?;
        }
        Ok(rebuilt)
    }

    /// [`Redundancy::rebuild_into`] that also hands the lost rank's bytes to `arrived`, as
    /// `(offset in the concatenation of into, bytes)`, once each stretch of them is in place:
    /// the checkpoint library stores the rebuilt file from them while the rebuild still runs,
    /// instead of copying the whole checkpoint after it. Every byte of `into` is handed over
    /// exactly once, in any order; nothing on a rank that has its data, nor when the rebuild
    /// fails. The default hands over the pieces once the rebuild is done; schemes that
    /// receive the data in blocks override it to hand each block over as it lands, while it
    /// is still in the cache.
    fn rebuild_into_with(
        &mut self,
        data: Option<&[u8]>,
        into: &mut [&mut [u8]],
        arrived: &mut Arrived<'_>,
        target: &Target,
    ) -> Result<Rebuilt> {
        let rebuilt = self.rebuild_into(data, into, target)?;
        if data.is_none() {
            let mut at = 0;
            for piece in into.iter() {
                arrived(at, piece);
                at += piece.len();
            }
        }
        Ok(rebuilt)
    }

    /// Deletes this rank's redundancy files for `target.name` (retention).
    fn discard(&mut self, target: &Target) -> Result<()>;

    /// Not collective: what a [`Redundancy::rebuild`] would need from this rank's redundancy
    /// files for `target.name` and cannot find (`None` when they are all there, or the
    /// scheme keeps none). [`crate::Checkpointer::latest`] asks it before it reports a
    /// version.
    fn missing_redundancy(&self, _target: &Target) -> Option<String> {
        None
    }

    /// Not collective: whether [`Redundancy::rebuild`] can bring back the data of the ranks
    /// it rebuilds with this rank (its set, or every rank for the partner scheme), when the
    /// ranks `lost` (of the communicator the scheme was built on) have no data and the ranks
    /// `no_redundancy` lack their redundancy files. Err says what is missing; the default is
    /// that of a scheme that rebuilds nothing.
    fn can_rebuild(&self, lost: &[usize], _no_redundancy: &[usize]) -> std::result::Result<(), String> {
        if lost.is_empty() {
            return Ok(());
        }
        Err(format!("ranks {lost:?} lost their data and the scheme `{}` rebuilds none", self.scheme().name()))
    }

    /// Stores the node-local copy of `data` through `local` and protects it, in the order
    /// that suits the scheme: the checkpoint library's store. The statistics and errors are
    /// those of [`Redundancy::protect`]; a failed write fails the whole call on every rank.
    ///
    /// The default is write-then-protect, as SCR does: the schemes that compute their
    /// redundancy on the ranks (partner, XOR, RS) would otherwise compete with the write for
    /// the cores and the memory bus, so every rank writes, the job agrees that every write
    /// succeeded ([`LocalWrite::agree_written`]), and then the scheme protects. A scheme whose
    /// redundancy costs the ranks no CPU (NAM-XOR) overrides this to overlap the two.
    fn protect_overlapped(&mut self, data: &[u8], target: &Target, local: &mut dyn LocalWrite) -> Result<ProtectStats> {
        let written = local.write(data);
        local.agree_written(written)?;
        local.before_protect();
        self.protect(data, target)
    }
}

/// The caller's side of [`Redundancy::protect_overlapped`]: the node-local write, and the
/// job-wide agreement on it.
pub trait LocalWrite {
    /// Finishes this rank's node-local copy of `data` (for a file: writes what is left,
    /// fsyncs and names it). Not collective.
    fn write(&mut self, data: &[u8]) -> Result<()>;

    /// Collective over the job: Err on every rank when `written` failed on any.
    fn agree_written(&mut self, written: Result<()>) -> Result<()>;

    /// Runs right before the redundancy starts: the point where a test's fault injection
    /// kills a rank ([`crate::fault`]). Nothing by default.
    fn before_protect(&mut self) {}
}

/// Builds the configured scheme over `comm` (collective: forms sets, splits communicators).
/// NAM-XOR takes its client settings from the environment ([`ServerClient::from_env`]).
pub fn build(comm: &Comm, config: &RedundancyConfig) -> Result<Box<dyn Redundancy>> {
    let client = match config.scheme {
        Scheme::NamXor => Some(comm.agree(ServerClient::from_env(), "reading the memory-server client settings")?),
        _ => None,
    };
    build_with(comm, config, client.as_ref())
}

/// [`build`] with the memory-server client settings read once by the caller (needed for
/// `nam-xor`, ignored by the other schemes).
pub fn build_with(
    comm: &Comm,
    config: &RedundancyConfig,
    client: Option<&ServerClient>,
) -> Result<Box<dyn Redundancy>> {
    Ok(match config.scheme {
        Scheme::None => Box::new(NoRedundancy::new(comm)),
        Scheme::Partner => Box::new(Partner::new(comm, config.block_bytes)?),
        Scheme::Xor => Box::new(Xor::new(comm, config.set_size, config.block_bytes)?),
        Scheme::Rs => Box::new(ReedSolomon::new(comm, config.set_size, config.rs_parity, config.block_bytes)?),
        Scheme::NamXor => {
            let client = match client {
                Some(c) => c.clone(),
                None => comm.agree(ServerClient::from_env(), "reading the memory-server client settings")?,
            };
            Box::new(NamXor::with_client(comm, config.set_size, &config.servers, &client, 0, 0)?)
        }
    })
}

/// [`Redundancy::can_rebuild`] for a scheme of sets that each survive `tolerated` lost
/// ranks and whose survivors read their own redundancy file (XOR, Reed-Solomon, NAM-XOR).
pub(crate) fn set_can_rebuild(
    what: &str,
    set: &[usize],
    tolerated: usize,
    lost: &[usize],
    no_redundancy: &[usize],
) -> std::result::Result<(), String> {
    let lost_here: Vec<usize> = set.iter().copied().filter(|r| lost.contains(r)).collect();
    if lost_here.is_empty() {
        return Ok(());
    }
    if lost_here.len() > tolerated {
        return Err(format!("{what} set {set:?} lost ranks {lost_here:?}; it rebuilds at most {tolerated} per set"));
    }
    let unreadable: Vec<usize> =
        set.iter().copied().filter(|r| !lost.contains(r) && no_redundancy.contains(r)).collect();
    if unreadable.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{what} set {set:?} lost ranks {lost_here:?}, and ranks {unreadable:?} of it have no redundancy file to rebuild them from"
    ))
}

/// `Some(what is missing)` when `path` does not exist (for [`Redundancy::missing_redundancy`]).
pub(crate) fn missing_file(path: &Path) -> Option<String> {
    (!path.exists()).then(|| format!("{} is missing", path.display()))
}

/// Ranks without data, agreed over `comm` (collective; the survivors, which arrive once they
/// read their data back, sleep while they wait: [`crate::patient`]).
pub(crate) fn lost_ranks<C: mpi::traits::Communicator>(comm: &C, have: bool) -> Vec<usize> {
    let flags = crate::patient::all_gather_u64(comm, u64::from(have));
    flags.iter().enumerate().filter(|(_, &f)| f == 0).map(|(r, _)| r).collect()
}

/// Collective error agreement: if any rank failed, every rank returns an error (its own, or
/// one naming that another rank failed).
pub(crate) fn agree<T, C: mpi::traits::Communicator>(comm: &C, local: Result<T>, what: &str) -> Result<T> {
    let all_ok = crate::comm::all_agree(comm, local.is_ok());
    agreed(comm, local, all_ok, what)
}

/// [`agree`] whose ranks sleep while they wait ([`crate::patient`]): for the agreements of a
/// rebuild, where ranks arrive as far apart as one rank's share of the work, and the ranks
/// still working need the shared cores.
pub(crate) fn agree_patient<T, C: mpi::traits::Communicator>(comm: &C, local: Result<T>, what: &str) -> Result<T> {
    let all_ok = crate::patient::all_agree(comm, local.is_ok());
    agreed(comm, local, all_ok, what)
}

/// [`agree`] when whether every rank succeeded (`all_ok`) is already known from another
/// collective: a further collective (gathering the causes) runs only when a rank failed.
pub(crate) fn agreed<T, C: mpi::traits::Communicator>(
    comm: &C,
    local: Result<T>,
    all_ok: bool,
    what: &str,
) -> Result<T> {
    if all_ok {
        return local;
    }
    let mine = local.as_ref().err().map(|e| e.to_string()).unwrap_or_default();
    let all = crate::comm::all_gather_bytes(comm, mine.as_bytes());
    match local {
        Err(e) => Err(e),
        Ok(_) => {
            let (rank, cause) = all.iter().enumerate().find(|(_, m)| !m.is_empty()).expect("a rank failed");
            let cause = String::from_utf8_lossy(cause);
            Err(CkptError::Unrecoverable(format!("{what} failed on rank {rank} of the set: {cause}")))
        }
    }
}

/// Copies `bytes` into `pieces` (consecutive, in order), which must hold exactly as many:
/// Err([`CkptError::Corrupt`]) naming both sizes otherwise, and the pieces untouched.
pub(crate) fn scatter(bytes: &[u8], pieces: &mut [&mut [u8]]) -> Result<()> {
    let holds: usize = pieces.iter().map(|p| p.len()).sum();
    if holds != bytes.len() {
        return Err(CkptError::Corrupt(format!(
            "rebuilt {} bytes, but the places to restore them hold {holds}",
            bytes.len()
        )));
    }
    write_at(pieces, 0, bytes);
    Ok(())
}

/// Copies `bytes` to offset `at` of the concatenation of `pieces`; what falls past their
/// end is dropped (a rank's zero padding in a parity segment).
pub(crate) fn write_at(pieces: &mut [&mut [u8]], at: usize, bytes: &[u8]) {
    let (mut start, mut from) = (0, 0);
    for p in pieces.iter_mut() {
        let end = start + p.len();
        if from < bytes.len() && (start..end).contains(&(at + from)) {
            let off = at + from - start;
            let n = (p.len() - off).min(bytes.len() - from);
            p[off..off + n].copy_from_slice(&bytes[from..from + n]);
            from += n;
        }
        start = end;
        if from == bytes.len() {
            break;
        }
    }
}

/// `(piece, offset)` when bytes `at..at+len` of the concatenation of `pieces` lie in one
/// piece (to receive them there directly), else `None`.
pub(crate) fn piece_at(pieces: &[&mut [u8]], at: usize, len: usize) -> Option<(usize, usize)> {
    let mut start = 0;
    for (i, p) in pieces.iter().enumerate() {
        if at < start + p.len() {
            return (at + len <= start + p.len()).then_some((i, at - start));
        }
        start += p.len();
    }
    None
}

/// `dst ^= src` (equal lengths), eight bytes at a time.
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len());
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (a, b) in (&mut d).zip(&mut s) {
        let x = u64::from_ne_bytes((*a).try_into().expect("8")) ^ u64::from_ne_bytes(b.try_into().expect("8"));
        a.copy_from_slice(&x.to_ne_bytes());
    }
    for (a, b) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *a ^= b;
    }
}

#[cfg(test)]
mod tests {
    use super::{piece_at, scatter, set_can_rebuild, write_at};

    #[test]
    fn bytes_land_at_their_offset_across_pieces_and_past_the_end_is_dropped() {
        let (mut a, mut b, mut c) = ([0u8; 3], [0u8; 0], [0u8; 4]);
        let mut pieces: Vec<&mut [u8]> = vec![&mut a, &mut b, &mut c];
        write_at(&mut pieces, 2, &[1, 2, 3]);
        // Past the end (a rank's zero padding in a parity segment): dropped.
        write_at(&mut pieces, 5, &[4, 5, 6, 7]);
        assert_eq!((a, c), ([0, 0, 1], [2, 3, 4, 5]));
        let pieces: Vec<&mut [u8]> = vec![&mut a, &mut b, &mut c];
        assert_eq!(piece_at(&pieces, 0, 3), Some((0, 0)));
        assert_eq!(piece_at(&pieces, 4, 3), Some((2, 1)));
        assert_eq!(piece_at(&pieces, 2, 2), None, "straddles two pieces");
        assert_eq!(piece_at(&pieces, 7, 1), None, "past the end");
    }

    #[test]
    fn scatter_refuses_pieces_of_another_size_and_leaves_them_untouched() {
        let (mut a, mut b) = ([9u8; 2], [9u8; 2]);
        let mut pieces: Vec<&mut [u8]> = vec![&mut a, &mut b];
        let refused = scatter(&[1, 2, 3], &mut pieces).unwrap_err().to_string();
        assert!(refused.contains("rebuilt 3 bytes, but the places to restore them hold 4"), "{refused}");
        scatter(&[1, 2, 3, 4], &mut pieces).unwrap();
        assert_eq!((a, b), ([1, 2], [3, 4]));
    }

    #[test]
    fn a_set_rebuilds_what_it_tolerates_from_the_redundancy_its_survivors_still_have() {
        let set = [0, 2, 4, 6];
        // Losses in other sets are theirs to judge.
        assert_eq!(set_can_rebuild("XOR", &set, 1, &[1, 3], &[1, 3]), Ok(()));
        assert_eq!(set_can_rebuild("XOR", &set, 1, &[2], &[2]), Ok(()));
        let two = set_can_rebuild("XOR", &set, 1, &[2, 4], &[2, 4]).unwrap_err();
        assert!(two.contains("XOR set [0, 2, 4, 6] lost ranks [2, 4]"), "{two}");
        assert_eq!(set_can_rebuild("Reed-Solomon", &set, 2, &[2, 4], &[]), Ok(()));
        // A survivor without its parity file cannot take part in the rebuild.
        let parity = set_can_rebuild("XOR", &set, 1, &[2], &[2, 6]).unwrap_err();
        assert!(parity.contains("ranks [6] of it have no redundancy file"), "{parity}");
        // Nothing lost: missing redundancy does not matter to a restart.
        assert_eq!(set_can_rebuild("XOR", &set, 1, &[], &[0, 2]), Ok(()));
    }
}
