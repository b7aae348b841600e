//! Collectives that sleep while they wait, for ranks that leave their core to someone else.
//!
//! Open MPI's blocking collectives spin until the last rank arrives. On a node whose cores
//! are shared (ranks oversubscribed, or a memory server next to them) a rank that arrives
//! early burns its time slice polling, and the rank everyone waits for gets the core later.
//! NAM-XOR's ranks meet right after a memory server folded their buffers, at slightly
//! different moments: these collectives start the operation non-blocking and test it with a
//! growing sleep in between (at most [`MAX_SLEEP`]), so an early rank costs almost no CPU
//! and adds at most that much latency.

use mpi::collective::SystemOperation;
use mpi::request::{Request, Scope};
use mpi::traits::*;
use std::time::Duration;

/// Longest sleep between two tests of a pending collective ([`crate::constants`]).
pub use crate::constants::PATIENT_MAX_SLEEP as MAX_SLEEP;
use crate::constants::PATIENT_YIELD_POLLS as YIELD_POLLS;

/// Tests `request` until it completes, yielding, then sleeping a little longer each time.
pub(crate) fn wait<'a, R: ?Sized, S: Scope<'a>>(mut request: Request<'a, R, S>) {
    let mut polls = 0u32;
    loop {
        match request.test() {
            Ok(_) => return,
            Err(pending) => request = pending,
        }
        polls = polls.saturating_add(1);
        if polls <= YIELD_POLLS {
            std::thread::yield_now();
        } else {
            let micros = 10u64.saturating_mul((polls - YIELD_POLLS) as u64);
            std::thread::sleep(Duration::from_micros(micros).min(MAX_SLEEP));
        }
    }
}

/// Collective over `comm`: every rank's `value`, by rank (`MPI_Iallgather`, then sleeping tests).
pub fn all_gather_u64<C: Communicator>(comm: &C, value: u64) -> Vec<u64> {
    let mut out = vec![0u64; comm.size() as usize];
    mpi::request::scope(|scope| wait(comm.immediate_all_gather_into(scope, &value, &mut out[..])));
    out
}

/// Collective over `comm`: every rank's `values` (the same count on every rank), rank after
/// rank.
pub fn all_gather_u64s<C: Communicator>(comm: &C, values: &[u64]) -> Vec<u64> {
    let mut out = vec![0u64; comm.size() as usize * values.len()];
    mpi::request::scope(|scope| wait(comm.immediate_all_gather_into(scope, values, &mut out[..])));
    out
}

/// Collective over `comm`: true on every rank when `ok` is true on every rank.
pub fn all_agree<C: Communicator>(comm: &C, ok: bool) -> bool {
    let send = u8::from(ok);
    let mut all = 0u8;
    mpi::request::scope(|scope| wait(comm.immediate_all_reduce_into(scope, &send, &mut all, SystemOperation::min())));
    all == 1
}

/// Collective over `comm`: `values` (the same count on every rank) reduced element by
/// element with `op`, on every rank.
pub fn all_reduce_u64s<C: Communicator>(comm: &C, values: &[u64], op: SystemOperation) -> Vec<u64> {
    let mut out = vec![0u64; values.len()];
    mpi::request::scope(|scope| wait(comm.immediate_all_reduce_into(scope, values, &mut out[..], op)));
    out
}
