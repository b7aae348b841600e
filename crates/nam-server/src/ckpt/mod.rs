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

/// Decodes a stored slot header as the engine does and checks what the engine then relies
/// on (the fuzz target's body; see `crate::fuzzing`).
#[cfg(feature = "fuzzing")]
pub(crate) fn fuzz_slot_header(bytes: &[u8], ranks: u32, slot_len: u64) {
    if let Ok(Some(h)) = slot::SlotHeader::decode(bytes, ranks, slot_len) {
        assert_eq!(h.sizes.len(), ranks as usize, "one size per rank");
        assert!(h.slot_len() <= slot_len, "the layout fits the allocation");
        assert!(h.segments() <= nam_proto::limits::CKPT_SEGMENTS_MAX);
        assert!(h.parity_crc_at() <= h.rank_crc_at(0) && h.rank_crc_at(h.ranks) <= h.data_at());
        for r in 0..ranks {
            assert!(h.sizes[r as usize].div_ceil(h.segment as u64) <= h.segments());
        }
    }
}

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
