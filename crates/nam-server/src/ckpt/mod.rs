//! The checkpoint-parity engine (the CR unit of Schmidt 2017 §4.5, in software).
//!
//! Ranks join a group ([`join`]), handing the server their registered checkpoint buffer
//! (address, remote key, worker address). When a rank flags its buffer ready for epoch `e`
//! ([`epoch`]), the group's job ([`job`]) pulls it with RMA GETs, or reads it in place when UCX
//! maps it into the server, XORs equal segment indices of all ranks ([`fold`]) into a parity
//! slot in the pool ([`slot`]) and signals the rank in its control word once its last segment
//! is folded in. Two slots alternate (ping-pong), so a failure during generation leaves the
//! previous epoch restorable. A restore ([`restore`]) pulls the survivors, XORs them with the
//! stored parity and leaves the lost rank's buffer in a pool allocation its replacement
//! reads. [`group`] holds a group's state and runs its job; [`engine`] is the engine the
//! server's progress loop drives.

mod direct;
mod engine;
mod epoch;
mod fold;
mod group;
mod job;
mod join;
mod mapping;
mod pull;
mod restore;
mod slot;
mod sys;

pub(crate) use engine::CkptEngine;

use crate::manager::Refusal;
use nam_proto::ckpt::CKPT_NAME_PREFIX;
use nam_proto::Status;

fn refuse<T>(status: Status, message: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal { status, message: message.into() })
}

/// The allocation name of parity slot `i` of `group`.
fn slot_name(group: &str, i: usize) -> String {
    format!("{CKPT_NAME_PREFIX}{group}:parity{i}")
}
