//! The run loop and datasets of the checkpoint library in C (nam-ckpt's `runloop`,
//! `datasets` and `descriptors`): `nam_ckpt_need_checkpoint` and `nam_ckpt_should_exit`
//! (SCR's `SCR_Need_checkpoint` and `SCR_Should_exit`), a checkpoint with a named redundancy
//! descriptor, output datasets, and the dataset choices (current, forget, delete). All are
//! collective over the handle's communicator and return the same outcome on every rank.

use crate::ckpt::{nam_ckpt_t, NAM_CKPT_LEVEL_SKIPPED, NAM_CKPT_VERSION_LATEST};
use crate::ffi::{deref_mut, guard, optional_str, required_str, write_optional};
use crate::status::nam_status_t::{self, *};
use std::ffi::{c_char, c_int};

/// Collective, to call every iteration: `*flag_out` = 1 when it is time to checkpoint
/// (`runloop.interval` seconds since the last checkpoint, or the `runloop.overhead` fraction
/// measured against this job's checkpoints; 1 on every call when neither is configured),
/// else 0. Every rank gets the same answer (the slowest rank's clock decides).
///
/// # Safety
/// `ckpt` is a live handle; `flag_out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_need_checkpoint(ckpt: *mut nam_ckpt_t, flag_out: *mut c_int) -> nam_status_t {
    guard("nam_ckpt_need_checkpoint", || {
        let ckpt = deref_mut(ckpt, "ckpt")?;
        let flag_out = deref_mut(flag_out, "flag_out")?;
        *flag_out = c_int::from(ckpt.inner.need_checkpoint()?);
        Ok(NAM_OK)
    })
}

/// Collective, to call every iteration: `*flag_out` = 1 when the job should stop now (a halt
/// file in the control directory, written by `nam ckpt halt DIR`; or the allocation ends
/// within `runloop.exit_before` seconds, its end from `runloop.end_time` or
/// `SLURM_JOB_END_TIME`), else 0; the same on every rank. When `reason_out` is not NULL it
/// receives why (NUL-terminated, cut to `reason_len` bytes; empty when 0). A malformed halt
/// file gives `NAM_ERR_CKPT_CORRUPTED`, a malformed `SLURM_JOB_END_TIME` `NAM_ERR_CONFIG`.
///
/// # Safety
/// `ckpt` is a live handle; `flag_out` is valid for a write; `reason_out` is NULL or valid
/// for `reason_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_should_exit(
    ckpt: *mut nam_ckpt_t,
    flag_out: *mut c_int,
    reason_out: *mut c_char,
    reason_len: usize,
) -> nam_status_t {
    guard("nam_ckpt_should_exit", || {
        let ckpt = deref_mut(ckpt, "ckpt")?;
        let flag_out = deref_mut(flag_out, "flag_out")?;
        let reason = ckpt.inner.should_exit()?;
        *flag_out = c_int::from(reason.is_some());
        if !reason_out.is_null() && reason_len > 0 {
            let text = reason.map(|r| r.to_string()).unwrap_or_default();
            let n = text.len().min(reason_len - 1);
            std::ptr::copy_nonoverlapping(text.as_ptr(), reason_out.cast(), n);
            *reason_out.add(n) = 0;
        }
        Ok(NAM_OK)
    })
}

/// Collective: `nam_ckpt_checkpoint` protected by the redundancy descriptor named
/// `descriptor` (a `[descriptors.<name>]` table of the configuration, or `"default"` for
/// `[redundancy]`) instead of the one its `every` rule picks, at the descriptor's level.
/// `NAM_ERR_CONFIG` naming the descriptor when none has that name.
///
/// # Safety
/// `ckpt` is a live handle; `name` is NULL or a NUL-terminated string; `descriptor` is a
/// NUL-terminated string; `level_out` is NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_checkpoint_descriptor(
    ckpt: *mut nam_ckpt_t,
    name: *const c_char,
    version: u64,
    descriptor: *const c_char,
    level_out: *mut c_int,
) -> nam_status_t {
    guard("nam_ckpt_checkpoint_descriptor", || {
        let ckpt = deref_mut(ckpt, "ckpt")?;
        let descriptor = required_str(descriptor, "descriptor")?;
        let out = ckpt.inner.checkpoint_with(optional_str(name, "name")?, version, descriptor)?;
        write_optional(level_out, out.level.map_or(NAM_CKPT_LEVEL_SKIPPED, |l| l.code() as c_int));
        Ok(NAM_OK)
    })
}

/// Collective: stores the protected regions as output dataset `version` of `name` (NULL: the
/// configured name): written and flushed to `flush.dir` before the call returns, and marked
/// in the dataset index so that no restart uses it. `NAM_ERR_CONFIG` without `flush.dir`.
///
/// # Safety
/// `ckpt` is a live handle; `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_output(ckpt: *mut nam_ckpt_t, name: *const c_char, version: u64) -> nam_status_t {
    guard("nam_ckpt_output", || {
        let ckpt = deref_mut(ckpt, "ckpt")?;
        ckpt.inner.checkpoint_output(optional_str(name, "name")?, version)?;
        Ok(NAM_OK)
    })
}

/// Collective: makes `version` of `name` the one `nam_ckpt_restart(..., NAM_CKPT_VERSION_LATEST,
/// ...)` and `nam_ckpt_latest` use, in this job and later ones (SCR's `SCR_CURRENT`, kept in
/// the dataset index); `NAM_CKPT_VERSION_LATEST` goes back to the newest restorable version.
///
/// # Safety
/// `ckpt` is a live handle; `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_set_current(
    ckpt: *mut nam_ckpt_t,
    name: *const c_char,
    version: u64,
) -> nam_status_t {
    guard("nam_ckpt_set_current", || {
        let ckpt = deref_mut(ckpt, "ckpt")?;
        let version = (version != NAM_CKPT_VERSION_LATEST).then_some(version);
        ckpt.inner.set_current(optional_str(name, "name")?, version)?;
        Ok(NAM_OK)
    })
}

/// Collective: forgets `version` of `name` (SCR's `SCR_Drop`): its files stay, but no
/// restart or `nam_ckpt_latest` offers it again.
///
/// # Safety
/// `ckpt` is a live handle; `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_forget(ckpt: *mut nam_ckpt_t, name: *const c_char, version: u64) -> nam_status_t {
    guard("nam_ckpt_forget", || {
        let ckpt = deref_mut(ckpt, "ckpt")?;
        ckpt.inner.forget(optional_str(name, "name")?, version)?;
        Ok(NAM_OK)
    })
}

/// Collective: deletes `version` of `name` (SCR's `SCR_Delete`): every rank removes its files
/// of it at every level, and the dataset index forgets it.
///
/// # Safety
/// `ckpt` is a live handle; `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_delete(ckpt: *mut nam_ckpt_t, name: *const c_char, version: u64) -> nam_status_t {
    guard("nam_ckpt_delete", || {
        let ckpt = deref_mut(ckpt, "ckpt")?;
        ckpt.inner.delete(optional_str(name, "name")?, version)?;
        Ok(NAM_OK)
    })
}
