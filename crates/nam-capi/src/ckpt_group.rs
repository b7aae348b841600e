//! `nam_ckpt_group_t`: a rank's membership of a checkpoint group whose XOR parity a memory
//! server computes by pulling the rank's buffer (NAM-XOR). The MPI-level library
//! (`nam_ckpt_*` with an `MPI_Comm`) builds on the same engine; this is the rank-level API.

use crate::alloc::nam_alloc_t;
use crate::client::nam_t;
use crate::ffi::{deref, deref_mut, guard, required_str, write_optional, Failure};
use crate::status::nam_status_t::{self, NAM_IN_PROGRESS, NAM_OK};
use nam_client::{CkptMember, GroupSpec, Restoring};
use std::ffi::c_char;
use std::time::Duration;

/// A rank of a checkpoint group (opaque). Destroy it with `nam_ckpt_group_leave` before
/// `nam_finalize` of its client.
pub struct nam_ckpt_group_t {
    member: CkptMember<'static>,
    nam: &'static nam_t,
    /// The restore `nam_ckpt_group_restore_own` started, until `nam_ckpt_group_finish_restore`.
    restoring: Option<Restoring>,
}

/// How `nam_ckpt_group_join` joins. Zero fields take the defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct nam_ckpt_group_params_t {
    /// Ranks in the group.
    pub ranks: u32,
    /// Index of the server (in the client's list) that keeps the parity.
    pub server: u32,
    /// Bytes per GET of the server (a multiple of 16); 0: 256 KiB.
    pub segment_bytes: u32,
    /// GETs in flight per rank; 0: 4.
    pub in_flight: u32,
    /// Deadline for all ranks to flag an epoch ready, and for a restore, in ms; 0: 60 s.
    pub timeout_ms: u32,
    /// Node identity of this rank (ranks of one node never share a group), or NULL for
    /// `NAM_NODE_ID` / the host name.
    pub node: *const c_char,
}

/// Joins (or creates) the checkpoint group `name` as `rank` with a checkpoint buffer of
/// `buffer_len` bytes that the library maps for the server (get it with
/// `nam_ckpt_group_buffer`). A replacement rank that does not know its size passes 0,
/// restores, and gets a buffer of the restored size. Blocking (one control round trip).
///
/// # Safety
/// `nam` is a live client; `name` a NUL-terminated string; `params` valid; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_group_join(
    nam: *const nam_t,
    name: *const c_char,
    rank: u32,
    buffer_len: u64,
    params: *const nam_ckpt_group_params_t,
    out: *mut *mut nam_ckpt_group_t,
) -> nam_status_t {
    guard("nam_ckpt_group_join", || {
        let nam: &'static nam_t = deref(nam, "nam")?;
        let spec = group_spec(name, deref(params, "params")?)?;
        let out = deref_mut(out, "out")?;
        let member = nam.client.ckpt_join(&spec, rank, buffer_len as usize)?;
        *out = Box::into_raw(Box::new(nam_ckpt_group_t { member, nam, restoring: None }));
        Ok(NAM_OK)
    })
}

/// Joins (or creates) the checkpoint group `name` as `rank` with the application's own
/// `len` bytes at `buf` as the checkpoint buffer, registered where they are: the server pulls
/// the application's data with no copy into a library buffer (as FTI and VeloC protect an
/// application's arrays in place). Write the checkpoint there and flag it as with
/// `nam_ckpt_group_join`; `nam_ckpt_group_buffer` returns `buf` and `len`. Such a buffer
/// keeps its size (a restore of another size is refused with `NAM_ERR_INVALID_ARGUMENT`).
/// Over shared memory the server cannot map it (it maps a buffer of `nam_ckpt_group_join`
/// and reads it in place): its GETs go through CMA where the kernel permits `ptrace`, else
/// UCX emulates them with messages this rank answers while it waits, which costs the rank
/// CPU time (docs/checkpoint.md). Blocking (one control round trip).
///
/// # Safety
/// `nam` is a live client; `name` a NUL-terminated string; `buf` `len` (> 0) writable bytes
/// that stay valid until `nam_ckpt_group_leave`; `params` valid; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_group_join_in(
    nam: *const nam_t,
    name: *const c_char,
    rank: u32,
    buf: *mut u8,
    len: u64,
    params: *const nam_ckpt_group_params_t,
    out: *mut *mut nam_ckpt_group_t,
) -> nam_status_t {
    guard("nam_ckpt_group_join_in", || {
        let nam: &'static nam_t = deref(nam, "nam")?;
        let spec = group_spec(name, deref(params, "params")?)?;
        let out = deref_mut(out, "out")?;
        if buf.is_null() {
            return Err(Failure::Null("buf"));
        }
        // SAFETY: the caller keeps `len` bytes at `buf` valid until the group is left, which
        // drops the member that borrows them.
        let buffer: &'static mut [u8] = std::slice::from_raw_parts_mut(buf, len as usize);
        let member = nam.client.ckpt_join_in(&spec, rank, buffer)?;
        *out = Box::into_raw(Box::new(nam_ckpt_group_t { member, nam, restoring: None }));
        Ok(NAM_OK)
    })
}

/// The group `name` as `params` describe it.
///
/// # Safety
/// `name` a NUL-terminated string; `params.node` NULL or one.
unsafe fn group_spec(name: *const c_char, params: &nam_ckpt_group_params_t) -> Result<GroupSpec, Failure> {
    let mut spec = GroupSpec::new(required_str(name, "name")?, params.ranks);
    spec.server = params.server as usize;
    spec.segment_bytes = params.segment_bytes;
    spec.in_flight = params.in_flight;
    spec.timeout = Duration::from_millis(params.timeout_ms as u64);
    if let Some(node) = crate::ffi::optional_str(params.node, "params->node")? {
        spec.node = node.into();
    }
    Ok(spec)
}

/// The checkpoint buffer: `*buf` and `*len`. Write the next checkpoint there, then call
/// `nam_ckpt_group_ready`; do not write it again until `nam_ckpt_group_wait` returned
/// `NAM_OK`. Completes immediately.
///
/// # Safety
/// `group` is a live group; `buf` and `len` writable.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_group_buffer(
    group: *mut nam_ckpt_group_t,
    buf: *mut *mut u8,
    len: *mut u64,
) -> nam_status_t {
    guard("nam_ckpt_group_buffer", || {
        let group = deref_mut(group, "group")?;
        let (buf, len) = (deref_mut(buf, "buf")?, deref_mut(len, "len")?);
        let buffer = group.member.buffer();
        *buf = buffer.as_ptr() as *mut u8;
        *len = buffer.len() as u64;
        Ok(NAM_OK)
    })
}

/// Flags the buffer ready for the next epoch (its number in `*epoch_out` if not NULL).
/// Non-blocking: the server pulls the buffer in the background. `NAM_ERR_CKPT_BUSY` while the
/// previous epoch is still being pulled.
///
/// # Safety
/// `group` is a live group; `epoch_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_group_ready(group: *mut nam_ckpt_group_t, epoch_out: *mut u64) -> nam_status_t {
    guard("nam_ckpt_group_ready", || {
        let epoch = deref_mut(group, "group")?.member.ready()?;
        write_optional(epoch_out, epoch);
        Ok(NAM_OK)
    })
}

/// `NAM_OK` once the server has folded this rank's buffer into the parity (the buffer may
/// change again), `NAM_IN_PROGRESS` before, or the epoch's error. Completes immediately.
///
/// # Safety
/// `group` is a live group.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_group_test(group: *mut nam_ckpt_group_t) -> nam_status_t {
    guard("nam_ckpt_group_test", || {
        Ok(if deref_mut(group, "group")?.member.test()? { NAM_OK } else { NAM_IN_PROGRESS })
    })
}

/// Waits until `nam_ckpt_group_test` would return `NAM_OK`, at most `timeout_ms`; then, if
/// `whole_group` is non-zero, until the parity of the epoch is complete for every rank.
/// Blocking; `NAM_ERR_CKPT_TIMEOUT` at the deadline, the epoch's error if it failed.
///
/// # Safety
/// `group` is a live group.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_group_wait(
    group: *mut nam_ckpt_group_t,
    whole_group: i32,
    timeout_ms: u64,
) -> nam_status_t {
    guard("nam_ckpt_group_wait", || {
        let group = deref_mut(group, "group")?;
        let timeout = Duration::from_millis(timeout_ms);
        let epoch = group.member.wait(timeout)?;
        if whole_group != 0 {
            group.member.wait_complete(epoch, timeout)?;
        }
        Ok(NAM_OK)
    })
}

/// Asks the server to rebuild `lost_rank`'s checkpoint of `epoch` (0: the newest complete)
/// from the other ranks' buffers (which must hold that epoch's data again) and the parity.
/// `*out` receives the server allocation the bytes are written to; every rank then calls
/// `nam_ckpt_group_wait_restore`. Blocking (one control round trip).
///
/// # Safety
/// `group` is a live group; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_group_restore(
    group: *mut nam_ckpt_group_t,
    lost_rank: u32,
    epoch: u64,
    out: *mut *mut nam_alloc_t,
) -> nam_status_t {
    guard("nam_ckpt_group_restore", || {
        let g = deref_mut(group, "group")?;
        let out = deref_mut(out, "out")?;
        let allocation = g.member.restore(lost_rank, epoch)?;
        crate::alloc::hand_out(g.nam, allocation, out);
        Ok(NAM_OK)
    })
}

/// The replacement rank rebuilds its own checkpoint of `epoch` (0: the newest complete)
/// straight into its buffer: the buffer is first resized to `len` bytes (the lost rank's
/// size, `nam_ckpt_group_recorded_len`) when it has another size, then the server rebuilds
/// it from the survivors' buffers and the parity. On the same host the server writes the
/// mapped buffer itself (one pass, no copy); elsewhere it goes through a server allocation.
/// Survivors call `nam_ckpt_group_wait_restore`; this rank `nam_ckpt_group_finish_restore`.
/// Blocking (one control round trip).
///
/// # Safety
/// `group` is a live group.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_group_restore_own(
    group: *mut nam_ckpt_group_t,
    epoch: u64,
    len: u64,
) -> nam_status_t {
    guard("nam_ckpt_group_restore_own", || {
        let g = deref_mut(group, "group")?;
        if g.member.buffer().len() as u64 != len {
            g.member.resize(len as usize)?;
        }
        g.restoring = Some(g.member.restore_own(epoch)?);
        Ok(NAM_OK)
    })
}

/// Finishes `nam_ckpt_group_restore_own`: waits for the rebuilt checkpoint (checksums
/// verified), at most `timeout_ms`, copies it into the buffer if the server could not write
/// the buffer itself, and stores the epoch restored in `*epoch_out` (may be NULL).
/// `NAM_ERR_INVALID_ARGUMENT` when no restore was started.
///
/// # Safety
/// `group` is a live group; `epoch_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_group_finish_restore(
    group: *mut nam_ckpt_group_t,
    timeout_ms: u64,
    epoch_out: *mut u64,
) -> nam_status_t {
    guard("nam_ckpt_group_finish_restore", || {
        let g = deref_mut(group, "group")?;
        let Some(restoring) = g.restoring.take() else {
            return Err(Failure::Invalid("no restore was started: call nam_ckpt_group_restore_own first".into()));
        };
        let epoch = g.member.finish_restore(restoring, Duration::from_millis(timeout_ms))?;
        write_optional(epoch_out, epoch);
        Ok(NAM_OK)
    })
}

/// Waits until the group's running restore has finished (checksums verified), at most
/// `timeout_ms`. Every rank of the group calls it; survivors keep their buffers unchanged
/// until it returns.
///
/// # Safety
/// `group` is a live group.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_group_wait_restore(group: *mut nam_ckpt_group_t, timeout_ms: u64) -> nam_status_t {
    guard("nam_ckpt_group_wait_restore", || {
        deref(group, "group")?.member.wait_restore(Duration::from_millis(timeout_ms))?;
        Ok(NAM_OK)
    })
}

/// The replacement rank copies a finished restore into its buffer (resized to `len`, the
/// lost rank's size: `nam_ckpt_group_recorded_len`) and the server allocation is freed
/// (release `restored` with `nam_alloc_release` afterwards). Blocking.
///
/// # Safety
/// `group` is a live group; `restored` the allocation from `nam_ckpt_group_restore`.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_group_fetch_restored(
    group: *mut nam_ckpt_group_t,
    restored: *const nam_alloc_t,
    len: u64,
) -> nam_status_t {
    guard("nam_ckpt_group_fetch_restored", || {
        let group = deref_mut(group, "group")?;
        let restored = deref(restored, "restored")?;
        group.member.fetch_restored(&restored.allocation, len)?;
        Ok(NAM_OK)
    })
}

/// The size this rank had in the newest complete epoch when it joined (0 if none).
///
/// # Safety
/// `group` is a live group; `len` writable.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_group_recorded_len(group: *const nam_ckpt_group_t, len: *mut u64) -> nam_status_t {
    guard("nam_ckpt_group_recorded_len", || {
        *deref_mut(len, "len")? = deref(group, "group")?.member.recorded_len();
        Ok(NAM_OK)
    })
}

/// Leaves the group and releases the object; with `destroy` non-zero the group and its
/// parity are deleted on the server too. The object is gone even when an error is returned.
///
/// # Safety
/// `group` is NULL or a live group, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn nam_ckpt_group_leave(group: *mut nam_ckpt_group_t, destroy: i32) -> nam_status_t {
    guard("nam_ckpt_group_leave", || {
        if group.is_null() {
            return Ok(NAM_OK);
        }
        let group = Box::from_raw(group);
        if destroy != 0 {
            group.member.destroy()?;
        }
        Ok(NAM_OK)
    })
}
