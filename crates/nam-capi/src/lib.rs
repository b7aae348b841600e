//! The C API of nam: `libnam.so` / `libnam.a` and `include/nam.h`.
//!
//! Thin `extern "C"` wrappers over `nam_client`; no logic of its own. Names follow
//! libNAM and UCX (`nam_<object>_<verb>`). A tour:
//! - `nam_t`: a client connected to one or several memory servers (`nam_init`,
//!   `nam_finalize`), configured by a `nam_config_t` or the `NAM_*` environment.
//! - `nam_alloc_t`: an allocation (`nam_malloc`, `nam_open`, `nam_free`).
//! - Data: `nam_put_sync` / `nam_get_sync` (blocking), `nam_put` / `nam_get`
//!   (non-blocking, returning a `nam_request_t` completed by `nam_test` / `nam_wait`),
//!   `nam_flush` (remote completion) and `nam_fence` (ordering).
//! - 64-bit atomics (`nam_atomic_fetch_add`, `nam_atomic_cswap`, `nam_atomic_swap`,
//!   `nam_atomic_fetch`) and signals (`nam_put_signal`, `nam_wait_until`).
//! - Checkpoint/restart for MPI applications (`nam_ckpt_t`, nam-ckpt): `nam_ckpt_init`
//!   with an `MPI_Comm` and a config file, `nam_ckpt_protect`, `nam_ckpt_checkpoint` (at the
//!   policy's level, or `nam_ckpt_checkpoint_level` at one chosen per call),
//!   `nam_ckpt_snapshot` (once an interval has passed), `nam_ckpt_latest`, `nam_ckpt_restart`, `nam_ckpt_route_file`, `nam_ckpt_finalize`;
//!   the run loop (`nam_ckpt_need_checkpoint`, `nam_ckpt_should_exit`), a redundancy
//!   descriptor per call (`nam_ckpt_checkpoint_descriptor`), output datasets
//!   (`nam_ckpt_output`) and dataset choices (`nam_ckpt_set_current`, `nam_ckpt_forget`,
//!   `nam_ckpt_delete`).
//! - Checkpoint groups (`nam_ckpt_group_*`): a memory server pulls each rank's checkpoint
//!   buffer and keeps XOR parity (NAM-XOR); ready, wait, restore.
//! - Global addresses (`nam_gaddr_t`, `nam_gaddr_of`, `nam_gaddr_put`, `nam_gaddr_get`,
//!   `nam_gaddr_fetch_add`) and allreduce at the memory server (`nam_reduce_create`,
//!   `nam_allreduce`, `nam_reduce_destroy`); mailboxes (`nam_mailbox_create`,
//!   `nam_mailbox_recv`, `nam_mailbox_sender_open`, `nam_mailbox_send`, ...).
//! - Status: every call returns a `nam_status_t` (`NAM_OK` = 0, errors negative);
//!   `nam_status_string` names a code and `nam_last_error_message` gives the exact cause
//!   of this thread's last failure.
//!
//! Every pointer argument is checked: NULL gives `NAM_ERR_INVALID_ARGUMENT`, never a crash.
//! A panic inside the library is caught at the boundary and returned as `NAM_ERR_INTERNAL`.
//! Every call has a deadline (the client's timeout); none waits forever.
//!
//! ```no_run
//! use nam::*;
//! use std::ptr;
//! let mut nam = ptr::null_mut();
//! assert_eq!(unsafe { nam_init(ptr::null(), &mut nam) }, nam_status_t::NAM_OK);
//! let mut a = ptr::null_mut();
//! assert_eq!(unsafe { nam_malloc(nam, 4096, ptr::null(), &mut a) }, nam_status_t::NAM_OK);
//! let data = b"hello";
//! assert_eq!(unsafe { nam_put_sync(a, 0, data.as_ptr().cast(), data.len()) }, nam_status_t::NAM_OK);
//! assert_eq!(unsafe { nam_finalize(nam) }, nam_status_t::NAM_OK);
//! ```
#![deny(missing_docs)]
#![allow(non_camel_case_types)]

// Declared in the order nam.h presents them.
mod client;
mod constants;

mod alloc;

mod nbi;
mod rma;

mod amo;
mod amo_nb;
mod atomic;

mod ckpt_group;
mod global;

mod collective;
mod ctx;
mod shmem;

mod mailbox;

mod status;

mod ckpt;
mod ckpt_runloop;
mod farmem;

mod ffi;

pub use alloc::{
    nam_alloc_params_t, nam_alloc_release, nam_alloc_size, nam_alloc_t, nam_free, nam_malloc, nam_open,
    NAM_ALLOC_PERSISTENT, NAM_ALLOC_SHARED, NAM_SERVER_ANY,
};
pub use amo::{nam_amo_op_t, nam_amo_type_t, nam_atomic, nam_ptr, nam_test_word};
pub use amo_nb::{nam_atomic_nb, nam_ctx_atomic_nb};
pub use atomic::{
    nam_atomic_cswap, nam_atomic_fetch, nam_atomic_fetch_add, nam_atomic_swap, nam_cmp_t, nam_put_signal,
    nam_signal_op_t, nam_wait_until,
};
pub use ckpt::{
    nam_ckpt_checkpoint, nam_ckpt_checkpoint_level, nam_ckpt_config_dump, nam_ckpt_finalize, nam_ckpt_init_fcomm,
    nam_ckpt_latest, nam_ckpt_protect, nam_ckpt_restart, nam_ckpt_route_file, nam_ckpt_snapshot, nam_ckpt_t,
    nam_ckpt_unprotect, status_of_ckpt_error, NAM_CKPT_LEVEL_NAM, NAM_CKPT_LEVEL_PFS, NAM_CKPT_LEVEL_RAM,
    NAM_CKPT_LEVEL_SKIPPED, NAM_CKPT_LEVEL_SSD, NAM_CKPT_VERSION_LATEST,
};
pub use ckpt_group::{
    nam_ckpt_group_buffer, nam_ckpt_group_fetch_restored, nam_ckpt_group_join, nam_ckpt_group_leave,
    nam_ckpt_group_params_t, nam_ckpt_group_ready, nam_ckpt_group_recorded_len, nam_ckpt_group_restore,
    nam_ckpt_group_t, nam_ckpt_group_test, nam_ckpt_group_wait, nam_ckpt_group_wait_restore,
};
pub use ckpt_runloop::{
    nam_ckpt_checkpoint_descriptor, nam_ckpt_delete, nam_ckpt_forget, nam_ckpt_need_checkpoint, nam_ckpt_output,
    nam_ckpt_set_current, nam_ckpt_should_exit,
};
pub use client::{nam_config_t, nam_fence, nam_finalize, nam_flush, nam_init, nam_t};
pub use collective::{nam_allreduce, nam_dtype_t, nam_op_t, nam_reduce_create, nam_reduce_destroy, nam_reduce_t};
pub use ctx::{
    nam_ctx_atomic, nam_ctx_create, nam_ctx_destroy, nam_ctx_fence, nam_ctx_get, nam_ctx_get_nbi, nam_ctx_put,
    nam_ctx_put_nbi, nam_ctx_quiet, nam_ctx_t,
};
pub use farmem::{
    nam_farmem_create, nam_farmem_destroy, nam_farmem_flush, nam_farmem_params_t, nam_farmem_read, nam_farmem_t,
    nam_farmem_write, nam_region_create, nam_region_destroy, nam_region_flush, nam_region_t,
};
pub use global::{nam_gaddr_fetch_add, nam_gaddr_get, nam_gaddr_of, nam_gaddr_put, nam_gaddr_t};
pub use mailbox::{
    nam_mailbox_address, nam_mailbox_create, nam_mailbox_destroy, nam_mailbox_recv, nam_mailbox_send,
    nam_mailbox_sender_close, nam_mailbox_sender_open, nam_mailbox_sender_t, nam_mailbox_t,
};
pub use nbi::{nam_get_nbi, nam_put_nbi};
pub use rma::{nam_get, nam_get_sync, nam_put, nam_put_sync, nam_request_t, nam_test, nam_wait};
pub use shmem::{nam_atomic_nbi, nam_barrier, nam_broadcast, nam_g, nam_iget, nam_iput, nam_p};
pub use status::{
    nam_last_error_message, nam_status_string, nam_status_t, status_of_error, status_of_far_error, status_of_refusal,
};
