//! Waits the server answers when a word changes ([`GasRequest::Watch`]): a client whose path
//! to this server is messages (TCP) or RMA registers interest in a 32- or 64-bit word and a
//! comparison; the server replies with the word as soon as the comparison holds, or when the
//! watch's deadline passes. The reply is one message, so a signal reaches a waiter in one
//! network trip, and the waiter sleeps meanwhile instead of polling the server.
//!
//! Every pending watch is evaluated after each turn of the progress loop ([`Engine::poll`]),
//! so a word changed by a request the server executes (a message-path put, atomic or
//! put-with-signal) is answered in the same turn. A word changed by a one-sided peer the
//! server does not see (a same-host client's store, an RMA atomic) is seen at the next turn:
//! at once while the server is busy, within its sleep ([`crate::constants::SLEEP_MAX`]) when
//! it is idle; the client's own deadline holds either way.
//!
//! A watch names the allocation by handle, not by pool offset, and is resolved again at
//! every evaluation: when its client frees the allocation, the watch is refused instead of
//! reading memory that may belong to someone else by then.

use crate::alloc_engine::checked_range;
use crate::engine::{Caller, Engine, EngineCtx, Execution, LateReply};
use crate::manager::Refusal;
use crate::pool::Pool;
use nam_proto::gas::{GasRequest, KIND_WATCH};
use nam_proto::limits::{WATCHES_PER_CLIENT_MAX, WATCH_TIMEOUT_MS_MAX};
use nam_proto::watch::watch_holds;
use nam_proto::{Reply, Request, Status};
use nam_ucx::EndpointId;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

/// One pending watch.
struct Watch {
    endpoint: EndpointId,
    client: u64,
    request_id: u64,
    handle: u64,
    offset: u64,
    compare: u8,
    width_bytes: u8,
    value: u64,
    deadline: Instant,
}

/// The pending watches of every client, and the replies that became ready.
#[derive(Default)]
pub(crate) struct WatchEngine {
    pending: Vec<Watch>,
    ready: Vec<LateReply>,
}

impl Engine for WatchEngine {
    fn execute(&mut self, ctx: &mut EngineCtx<'_>, caller: &Caller<'_>, request: Request) -> Execution {
        let Request::Gas(GasRequest::Watch { handle, offset, compare, width_bytes, value, timeout_ms }) = request
        else {
            return Execution::Declined(request);
        };
        let watch = Watch {
            endpoint: caller.connection.id(),
            client: caller.client,
            request_id: caller.request_id,
            handle,
            offset,
            compare,
            width_bytes,
            value,
            deadline: Instant::now() + Duration::from_millis(timeout_ms.min(WATCH_TIMEOUT_MS_MAX).into()),
        };
        if let Err(refusal) = check(&watch) {
            return Execution::Done(Err(refusal));
        }
        match evaluate(ctx, &watch) {
            Err(refusal) => Execution::Done(Err(refusal)),
            Ok((true, word)) => Execution::Done(Ok(Reply::Value(word))),
            Ok((false, _)) => {
                let held = self.pending.iter().filter(|w| w.client == caller.client).count();
                if held >= WATCHES_PER_CLIENT_MAX {
                    return Execution::Done(Err(Refusal {
                        status: Status::TooMany,
                        message: format!("{WATCHES_PER_CLIENT_MAX} watches already pending"),
                    }));
                }
                self.pending.push(watch);
                Execution::Deferred
            }
        }
    }

    fn poll(&mut self, ctx: &mut EngineCtx<'_>) -> bool {
        if self.pending.is_empty() {
            return false;
        }
        let now = Instant::now();
        let before = self.ready.len();
        let ready = &mut self.ready;
        self.pending.retain(|watch| {
            let reply = match evaluate(ctx, watch) {
                Ok((true, word)) => Reply::Value(word),
                // Expired: the client compares the word itself and waits again if it must.
                Ok((false, word)) if now >= watch.deadline => Reply::Value(word),
                Ok((false, _)) => return true,
                Err(Refusal { status, message }) => Reply::Error { status, message },
            };
            ready.push(LateReply {
                endpoint: watch.endpoint,
                request_kind: KIND_WATCH,
                request_id: watch.request_id,
                reply,
            });
            false
        });
        self.ready.len() > before
    }

    fn client_gone(&mut self, _ctx: &mut EngineCtx<'_>, client: u64) {
        self.pending.retain(|w| w.client != client);
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.pending.iter().map(|w| w.deadline).min()
    }

    fn late_replies(&mut self, ready: &mut Vec<LateReply>) {
        ready.append(&mut self.ready);
    }

    fn label(&self) -> &'static str {
        "the watch engine"
    }
}

/// Refuses a watch whose fields no word could satisfy: a width other than 4 or 8, an
/// unaligned offset, an unknown comparison.
fn check(watch: &Watch) -> Result<(), Refusal> {
    let refuse = |message: String| Err(Refusal { status: Status::InvalidArgument, message });
    if watch.width_bytes != 4 && watch.width_bytes != 8 {
        return refuse(format!("watch width {} bytes: expected 4 or 8", watch.width_bytes));
    }
    if !watch.offset.is_multiple_of(watch.width_bytes.into()) {
        return refuse(format!("offset {} is not {}-byte aligned", watch.offset, watch.width_bytes));
    }
    if watch_holds(watch.compare, watch.width_bytes, 0, 0).is_none() {
        return refuse(format!("unknown comparison code {:#x}", watch.compare));
    }
    Ok(())
}

/// Whether the watched word satisfies the comparison now, and the word; refused when the
/// client no longer holds the allocation.
fn evaluate(ctx: &EngineCtx<'_>, watch: &Watch) -> Result<(bool, u64), Refusal> {
    let at = checked_range(ctx.manager, watch.client, watch.handle, watch.offset, watch.width_bytes.into())?;
    let word = load(ctx.pool, at, watch.width_bytes);
    let holds = watch_holds(watch.compare, watch.width_bytes, word, watch.value).expect("checked on arrival");
    Ok((holds, word))
}

/// The 4- or 8-byte word at pool offset `at` (aligned to its width), zero-extended.
pub(crate) fn load(pool: &Pool, at: u64, width_bytes: u8) -> u64 {
    if width_bytes == 8 {
        return pool.word(at).load(SeqCst);
    }
    word32(pool, at).load(SeqCst).into()
}

/// The 32-bit word at pool offset `at` (4-byte aligned): a half of the aligned 64-bit word
/// that holds it.
pub(crate) fn word32(pool: &Pool, at: u64) -> &std::sync::atomic::AtomicU32 {
    debug_assert!(at.is_multiple_of(4));
    let whole = pool.word(at & !7);
    let half = (at & 4) as usize;
    // SAFETY: inside the aligned 8-byte word `whole`, 4-byte aligned; AtomicU32 has u32's
    // layout, and the pool outlives the reference as it does `whole`.
    unsafe { &*((whole.as_ptr() as *const u8).add(half) as *const std::sync::atomic::AtomicU32) }
}

/// Wakes the processes sleeping (shared futex) on the 32-bit word at pool offset `at`: a
/// same-host client waiting on a word that a message-path request just changed.
pub(crate) fn wake(pool: &Pool, at: u64) {
    let word = word32(pool, at & !3);
    // SAFETY: FUTEX_WAKE only looks the address up; the pool stays mapped.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX, 0usize, 0usize, 0u32) };
}
