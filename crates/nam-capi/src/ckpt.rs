//! `nam_ckpt_t`: the checkpoint library (nam-ckpt) for MPI applications written in C.
//!
//! Collective calls (init, checkpoint, snapshot, latest, restart, finalize) must be made by
//! every rank of the communicator, in the same order. `nam_ckpt_init(MPI_Comm, ...)` is a
//! macro of nam.h that calls `nam_ckpt_init_fcomm` with the communicator's Fortran handle
//! where the program calls it, after its `<mpi.h>`: nam.h needs no MPI header and may be
//! included before or after `<mpi.h>`.

use crate::ffi::{deref_mut, guard, optional_str, required_str, write_optional, Failure};
use crate::status::nam_status_t::{self, *};
use nam_ckpt::{Checkpointer, CkptError, Comm, Config, ControlError, LevelKind};
use std::ffi::{c_char, c_int, c_void};

/// The checkpoint library of one MPI job (opaque). Created by `nam_ckpt_init_fcomm` (or
/// `nam_ckpt_init`), destroyed by `nam_ckpt_finalize`. Not thread-safe: one thread per rank
/// calls it, as MPI's collectives require.
pub struct nam_ckpt_t {
    pub(crate) inner: Checkpointer,
}

/// Pass as `version` to `nam_ckpt_restart` to restart the newest restorable version.
pub const NAM_CKPT_VERSION_LATEST: u64 = u64::MAX;

/// The level a checkpoint went to (`nam_ckpt_checkpoint`'s `level_out`), or came from; the
/// levels 1-3 can also be asked for per call (`nam_ckpt_checkpoint_level`).
/// `NAM_CKPT_LEVEL_SKIPPED`: the policy skipped the checkpoint.
pub const NAM_CKPT_LEVEL_SKIPPED: c_int = 0;
/// L1 in RAM (tmpfs).
pub const NAM_CKPT_LEVEL_RAM: c_int = 1;
/// L1 on the node's SSD.
pub const NAM_CKPT_LEVEL_SSD: c_int = 2;
/// L3 on the parallel file system (`flush.dir`); asked for per call, the checkpoint goes to
/// the policy's L1 level and is flushed there before the call returns.
pub const NAM_CKPT_LEVEL_PFS: c_int = 3;
/// Memory servers (incremental checkpoints, `incremental.levels`).
pub const NAM_CKPT_LEVEL_NAM: c_int = 4;

fn level_code(level: Option<LevelKind>) -> c_int {
    level.map_or(NAM_CKPT_LEVEL_SKIPPED, |l| l.code() as c_int)
}

/// The C code of a checkpoint-library error. No wildcard: a new variant does not compile
/// until it has a code.
pub fn status_of_ckpt_error(error: &CkptError) -> nam_status_t {
    match error {
        CkptError::Config(_) => NAM_ERR_CONFIG,
        CkptError::UnknownKey(_) => NAM_ERR_CKPT_UNKNOWN_KEY,
        CkptError::Directory { .. } => NAM_ERR_CKPT_DIRECTORY,
        CkptError::RamTooSmall { .. } => NAM_ERR_CKPT_RAM_TOO_SMALL,
        CkptError::Region { .. } => NAM_ERR_CKPT_REGION,
        CkptError::UnknownRegion(_) => NAM_ERR_CKPT_UNKNOWN_REGION,
        CkptError::NoCheckpoint(_) => NAM_ERR_CKPT_NO_CHECKPOINT,
        CkptError::RankCount { .. } => NAM_ERR_CKPT_RANK_COUNT,
        CkptError::Corrupt(_) => NAM_ERR_CKPT_CORRUPTED,
        CkptError::Unrecoverable(_) => NAM_ERR_CKPT_UNRECOVERABLE,
        CkptError::Layout { .. } => NAM_ERR_CKPT_LAYOUT,
        // A placement the failure groups refuse is a layout the schemes cannot use.
        CkptError::FailureGroup(_) => NAM_ERR_CKPT_LAYOUT,
        CkptError::SizeMismatch { .. } => NAM_ERR_CKPT_SIZE_MISMATCH,
        CkptError::Flush { .. } => NAM_ERR_CKPT_FLUSH,
        CkptError::Io { .. } => NAM_ERR_CKPT_IO,
        CkptError::State(_) => NAM_ERR_CKPT_STATE,
        CkptError::Peer { .. } => NAM_ERR_CKPT_RANK_FAILED,
        CkptError::Incremental(_) => NAM_ERR_CKPT_IO,
        CkptError::UnknownDescriptor { .. } => NAM_ERR_CONFIG,
        CkptError::Control(e) => match e {
            ControlError::Index { .. } | ControlError::Halt { .. } | ControlError::Record { .. } => {
                NAM_ERR_CKPT_CORRUPTED
            }
            ControlError::NoDataset { .. } => NAM_ERR_CKPT_NO_CHECKPOINT,
            ControlError::BadName(_) => NAM_ERR_INVALID_ARGUMENT,
            ControlError::Io { .. } => NAM_ERR_CKPT_IO,
        },
    }
}

impl From<CkptError> for Failure {
    fn from(error: CkptError) -> Failure {
        Failure::Coded(status_of_ckpt_error(&error), error.to_string())
    }
}

/// Collective over the communicator whose Fortran handle is `fcomm` (`MPI_Comm_c2f`):
/// reads the configuration (`config_path`, or `NAM_CKPT_CONFIG`, or defaults when NULL;
/// `NAM_CKPT_*` variables override it), checks its directories and builds the redundancy
/// scheme. MPI must be initialized. On success `*out` is the new handle.
///
/// # Safety
/// `config_path` is NULL or a NUL-terminated string; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_init_fcomm(
    fcomm: c_int,
    config_path: *const c_char,
    out: *mut *mut nam_ckpt_t,
) -> nam_status_t {
    guard("nam_ckpt_init_fcomm", || {
        let out = deref_mut(out, "out")?;
        let path = optional_str(config_path, "config_path")?;
        let config = Config::load(path.map(std::path::Path::new))?;
        let comm = Comm::from_raw(mpi::ffi::MPI_Comm_f2c(fcomm));
        let inner = Checkpointer::init(comm, config)?;
        *out = Box::into_raw(Box::new(nam_ckpt_t { inner }));
        Ok(NAM_OK)
    })
}

/// Protects `bytes` bytes at `ptr` under `id` (not collective). The memory must stay valid
/// until it is unprotected or the handle is finalized. Overlapping another region, a NULL
/// pointer or an id already protected give `NAM_ERR_CKPT_REGION`.
///
/// # Safety
/// `ckpt` is a live handle; `ptr` is valid for reads and writes of `bytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_protect(
    ckpt: *mut nam_ckpt_t,
    id: c_int,
    ptr: *mut c_void,
    bytes: usize,
) -> nam_status_t {
    guard("nam_ckpt_protect", || {
        deref_mut(ckpt, "ckpt")?.inner.protect(id, ptr.cast(), bytes)?;
        Ok(NAM_OK)
    })
}

/// Stops protecting `id` (`NAM_ERR_CKPT_UNKNOWN_REGION` if it is not protected).
///
/// # Safety
/// `ckpt` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_unprotect(ckpt: *mut nam_ckpt_t, id: c_int) -> nam_status_t {
    guard("nam_ckpt_unprotect", || {
        deref_mut(ckpt, "ckpt")?.inner.unprotect(id)?;
        Ok(NAM_OK)
    })
}

/// Collective: checkpoints the protected regions (and routed files) as `version` of `name`
/// (NULL: the configured name). The placement policy picks the level for all ranks;
/// `*level_out` (may be NULL) is a `NAM_CKPT_LEVEL_*`, `NAM_CKPT_LEVEL_SKIPPED` when the
/// policy skipped this checkpoint. Returns once every rank's data and redundancy are stored.
///
/// # Safety
/// `ckpt` is a live handle; `name` is NULL or a NUL-terminated string; `level_out` is NULL
/// or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_checkpoint(
    ckpt: *mut nam_ckpt_t,
    name: *const c_char,
    version: u64,
    level_out: *mut c_int,
) -> nam_status_t {
    guard("nam_ckpt_checkpoint", || {
        let ckpt = deref_mut(ckpt, "ckpt")?;
        let out = ckpt.inner.checkpoint(optional_str(name, "name")?, version)?;
        write_optional(level_out, level_code(out.level));
        Ok(NAM_OK)
    })
}

/// Collective: `nam_ckpt_checkpoint` at `level`, chosen for this call instead of by the
/// placement policy (as FTI's `FTI_Checkpoint(id, level)`), the same on every rank:
/// `NAM_CKPT_LEVEL_RAM`, `NAM_CKPT_LEVEL_SSD` or `NAM_CKPT_LEVEL_PFS` (the policy's L1 level,
/// then flushed to `flush.dir` before the call returns). The configured L2 scheme protects
/// it. Errors: `NAM_ERR_INVALID_ARGUMENT` (no such level), `NAM_ERR_CONFIG` (PFS without
/// `flush.dir`, `NAM_CKPT_LEVEL_NAM`, or incremental checkpoints), `NAM_ERR_CKPT_RAM_TOO_SMALL`.
///
/// # Safety
/// `ckpt` is a live handle; `name` is NULL or a NUL-terminated string; `level_out` is NULL
/// or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_checkpoint_level(
    ckpt: *mut nam_ckpt_t,
    name: *const c_char,
    version: u64,
    level: c_int,
    level_out: *mut c_int,
) -> nam_status_t {
    guard("nam_ckpt_checkpoint_level", || {
        let ckpt = deref_mut(ckpt, "ckpt")?;
        let kind = u64::try_from(level)
            .ok()
            .and_then(LevelKind::from_code)
            .ok_or_else(|| Failure::Invalid(format!("level {level} is no NAM_CKPT_LEVEL_*")))?;
        let out = ckpt.inner.checkpoint_level(optional_str(name, "name")?, version, kind)?;
        write_optional(level_out, level_code(out.level));
        Ok(NAM_OK)
    })
}

/// Collective, to call every iteration (as FTI's `FTI_Snapshot`): checkpoints as
/// `nam_ckpt_checkpoint` when `snapshot.interval` seconds (configuration; default 60) have
/// passed since init or the last checkpoint, else returns at the cost of one allreduce.
/// `*taken_out` (may be NULL) = 1 when it checkpointed, else 0; `*level_out` (may be NULL)
/// as for `nam_ckpt_checkpoint` (`NAM_CKPT_LEVEL_SKIPPED` when nothing was written).
///
/// # Safety
/// `ckpt` is a live handle; `name` is NULL or a NUL-terminated string; `taken_out` and
/// `level_out` are NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_snapshot(
    ckpt: *mut nam_ckpt_t,
    name: *const c_char,
    version: u64,
    taken_out: *mut c_int,
    level_out: *mut c_int,
) -> nam_status_t {
    guard("nam_ckpt_snapshot", || {
        let ckpt = deref_mut(ckpt, "ckpt")?;
        let out = ckpt.inner.snapshot(optional_str(name, "name")?, version)?;
        write_optional(taken_out, c_int::from(out.is_some()));
        write_optional(level_out, level_code(out.and_then(|o| o.level)));
        Ok(NAM_OK)
    })
}

/// Reserves the RAM level's files for checkpoints of `name` (NULL: the configured name) of
/// the regions protected now, so that no checkpoint allocates tmpfs pages; call it after
/// protecting the regions. Not collective. `*bytes_out` (may be NULL) = bytes reserved by
/// this rank (0 for `always-ssd` and incremental checkpoints).
///
/// # Safety
/// `ckpt` is a live handle; `name` is NULL or a NUL-terminated string; `bytes_out` is NULL
/// or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_reserve(
    ckpt: *mut nam_ckpt_t,
    name: *const c_char,
    bytes_out: *mut u64,
) -> nam_status_t {
    guard("nam_ckpt_reserve", || {
        let ckpt = deref_mut(ckpt, "ckpt")?;
        let bytes = ckpt.inner.reserve(optional_str(name, "name")?)?;
        write_optional(bytes_out, bytes);
        Ok(NAM_OK)
    })
}

/// Collective: `*found_out` = 1 and `*version_out` = the newest version of `name` (NULL:
/// the configured name) that `nam_ckpt_restart` can restore: every rank still has its data,
/// or the L2 scheme can rebuild the ranks that lost it from the files left (newer versions
/// that cannot be restored are passed over). `*found_out` = 0 and `NAM_OK` when no version
/// was ever committed (a first run); `*found_out` = 0 and `NAM_ERR_CKPT_UNRECOVERABLE` when
/// versions were committed but none can be restored, `nam_last_error_message` naming what
/// is missing of each (for example the ranks of an XOR set that lost their files).
///
/// # Safety
/// `ckpt` is a live handle; `name` is NULL or a NUL-terminated string; the outputs are valid
/// for writes.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_latest(
    ckpt: *mut nam_ckpt_t,
    name: *const c_char,
    version_out: *mut u64,
    found_out: *mut c_int,
) -> nam_status_t {
    guard("nam_ckpt_latest", || {
        let ckpt = deref_mut(ckpt, "ckpt")?;
        let (version_out, found_out) = (deref_mut(version_out, "version_out")?, deref_mut(found_out, "found_out")?);
        (*version_out, *found_out) = (0, 0);
        match ckpt.inner.latest_restorable(optional_str(name, "name")?) {
            Ok(latest) => (*version_out, *found_out) = (latest.version, 1),
            Err(CkptError::NoCheckpoint(_)) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(NAM_OK)
    })
}

/// Collective: restores `version` of `name` (`NAM_CKPT_VERSION_LATEST`: the newest
/// restorable one) into the protected regions — all of them when `ids` is NULL, else the
/// `nids` listed — and into routed files. Corrupt or missing data is rebuilt (chunk parity,
/// L2 redundancy) or the restart falls back to the next level and older versions; wrong
/// data is never reported as restored. `*version_out` (may be NULL) is the version restored.
///
/// What the regions hold is told by this call's status alone, which is `NAM_OK` on every
/// rank or on none: after `NAM_OK` every selected region holds the restored version's bytes
/// on every rank. After any other status the contents of the selected regions are
/// unspecified (each rank reads its file straight into them, so a candidate refused after
/// its bytes arrived, or a layout mismatch, leaves whatever was read there) and the routed
/// files are unchanged; `nam_last_error_message()` says why. Do not compute on them: set
/// them up afresh, or call `nam_ckpt_restart` again (for example with another version).
///
/// # Safety
/// `ckpt` is a live handle; `name` is NULL or a NUL-terminated string; `ids` is NULL or
/// valid for `nids` reads; `version_out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_restart(
    ckpt: *mut nam_ckpt_t,
    name: *const c_char,
    version: u64,
    ids: *const c_int,
    nids: usize,
    version_out: *mut u64,
) -> nam_status_t {
    guard("nam_ckpt_restart", || {
        let ckpt = deref_mut(ckpt, "ckpt")?;
        let ids = (!ids.is_null()).then(|| std::slice::from_raw_parts(ids, nids));
        let version = (version != NAM_CKPT_VERSION_LATEST).then_some(version);
        let out = ckpt.inner.restart(optional_str(name, "name")?, version, ids)?;
        write_optional(version_out, out.version);
        Ok(NAM_OK)
    })
}

/// Routes a file of a file-based application: writes to `out` (`out_len` bytes, NUL
/// included) the path where to write `path` so the next checkpoint stores it, and where a
/// restart puts it back. `NAM_ERR_INVALID_ARGUMENT` when `out` is too small.
///
/// # Safety
/// `ckpt` is a live handle; `path` is a NUL-terminated string; `out` is valid for
/// `out_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_route_file(
    ckpt: *mut nam_ckpt_t,
    path: *const c_char,
    out: *mut c_char,
    out_len: usize,
) -> nam_status_t {
    guard("nam_ckpt_route_file", || {
        let ckpt = deref_mut(ckpt, "ckpt")?;
        let routed = ckpt.inner.route_file(required_str(path, "path")?)?;
        copy_out(&routed.to_string_lossy(), out, out_len)
    })
}

/// Writes the resolved configuration (TOML, every key) to `out` (`out_len` bytes, NUL
/// included); `NAM_ERR_INVALID_ARGUMENT` when `out` is too small.
///
/// # Safety
/// `ckpt` is a live handle; `out` is valid for `out_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_config_dump(ckpt: *mut nam_ckpt_t, out: *mut c_char, out_len: usize) -> nam_status_t {
    guard("nam_ckpt_config_dump", || {
        let ckpt = deref_mut(ckpt, "ckpt")?;
        copy_out(&ckpt.inner.config().dump(), out, out_len)
    })
}

unsafe fn copy_out(text: &str, out: *mut c_char, out_len: usize) -> Result<nam_status_t, Failure> {
    if out.is_null() {
        return Err(Failure::Null("out"));
    }
    if text.len() + 1 > out_len {
        return Err(Failure::Invalid(format!("out_len {out_len} is too small: {} bytes needed", text.len() + 1)));
    }
    std::ptr::copy_nonoverlapping(text.as_ptr(), out.cast(), text.len());
    *out.add(text.len()) = 0;
    Ok(NAM_OK)
}

/// Collective: waits for outstanding flushes (with a deadline) and frees the handle, which
/// must not be used again. `NAM_ERR_CKPT_FLUSH` reports a flush that failed (the handle is
/// freed all the same). NULL is a no-op.
///
/// # Safety
/// `ckpt` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_finalize(ckpt: *mut nam_ckpt_t) -> nam_status_t {
    guard("nam_ckpt_finalize", || {
        if ckpt.is_null() {
            return Ok(NAM_OK);
        }
        Box::from_raw(ckpt).inner.finalize()?;
        Ok(NAM_OK)
    })
}
