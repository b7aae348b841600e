//! The allreduce engine as the server runs it: attaching ranks to groups, finishing the
//! rounds whose ranks have all arrived (polled from the progress loop, or kicked by the last
//! rank while the server sleeps), and aborting a group's rounds when a member is gone.

use super::{aborted_word, judge, reduce_into, Group, Reducer, Verdict};
use crate::engine::{Caller, Engine, EngineCtx, Execution};
use crate::manager::{Grant, Manager, Refusal};
use crate::pool::Pool;
use nam_proto::gas::{GasRequest, REDUCE_CHUNK_MAX, REDUCE_RANKS_MAX};
use nam_proto::reduce::{
    Descriptor, GroupLayout, GROUP_ARRIVED_AT, GROUP_ASLEEP_AT, GROUP_BROKEN_AT, GROUP_CLAIMED_AT,
    GROUP_DESCRIPTOR_LEN, GROUP_RESULT_AT,
};
use nam_proto::{Alloc, Reply, Request, Status};
use std::sync::atomic::Ordering;

fn refuse<T>(status: Status, message: String) -> Result<T, Refusal> {
    Err(Refusal { status, message })
}

/// Every allreduce group of the server, served from the progress loop.
#[derive(Default)]
pub(crate) struct ReduceEngine {
    reducer: Reducer,
}

impl Engine for ReduceEngine {
    fn execute(&mut self, ctx: &mut EngineCtx<'_>, caller: &Caller<'_>, request: Request) -> Execution {
        let client = caller.client;
        Execution::Done(match request {
            Request::Gas(GasRequest::ReduceAttach { name, ranks, rank, chunk_bytes }) => {
                self.attach(ctx, client, &name, ranks, rank, chunk_bytes).map(|g| Reply::Alloc(ctx.alloc_reply(&g)))
            }
            Request::Gas(GasRequest::ReduceKick { handle }) => ctx.manager.resolve(client, handle).map(|_| {
                self.poll(ctx);
                Reply::Done
            }),
            request => return Execution::Declined(request),
        })
    }

    /// Finishes every group round whose ranks have all arrived; true if any did. A round
    /// the last rank claimed first (it reduces small vectors itself, in the mapped pool) is
    /// only counted: the server did no work for it.
    fn poll(&mut self, ctx: &mut EngineCtx<'_>) -> bool {
        let (pool, manager) = (ctx.pool, &*ctx.manager);
        let mut any = false;
        for group in live_groups(&mut self.reducer, manager) {
            let ranks = group.layout.ranks as u64;
            let (arrived, claimed) =
                (pool.word(group.pool_offset + GROUP_ARRIVED_AT), pool.word(group.pool_offset + GROUP_CLAIMED_AT));
            while arrived.load(Ordering::SeqCst) >= (group.done + 1) * ranks {
                match claimed.compare_exchange(group.done, group.done + 1, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(_) => {
                        group.done += 1;
                        finish_round(pool, group);
                        any = true;
                    }
                    // A rank took this round (and maybe later ones): it publishes them.
                    Err(taken) => group.done = taken.max(group.done + 1),
                }
            }
        }
        any
    }

    /// Tells every group's ranks that the server is about to sleep (so the last rank of a
    /// round sends a kick), then looks once more: true if a round finished meanwhile.
    fn before_sleep(&mut self, ctx: &mut EngineCtx<'_>) -> bool {
        self.set_asleep(ctx, 1);
        self.poll(ctx)
    }

    /// Awake again: ranks need not kick.
    fn after_sleep(&mut self, ctx: &mut EngineCtx<'_>) {
        self.set_asleep(ctx, 0);
    }

    /// A client left or died: its groups' rounds fail now and from now on. Between rounds
    /// (every arrival so far belongs to a claimed round, whose result is or will be
    /// published) the last result stays for the ranks still reading it, and the broken word
    /// fails the next round instead.
    fn client_gone(&mut self, ctx: &mut EngineCtx<'_>, client: u64) {
        for (offset, ranks) in self.reducer.member_gone(client) {
            let claimed = ctx.pool.word(offset + GROUP_CLAIMED_AT).load(Ordering::SeqCst);
            let arrived = ctx.pool.word(offset + GROUP_ARRIVED_AT).load(Ordering::SeqCst);
            if claimed.checked_mul(ranks) == Some(arrived) {
                ctx.pool.word(offset + GROUP_BROKEN_AT).store(claimed + 1, Ordering::SeqCst);
                continue;
            }
            let word = ctx.pool.word(offset + GROUP_RESULT_AT);
            // A round that already failed (ranks that disagreed) keeps its cause for the
            // ranks still reading it; every later round reads as aborted either way.
            let failed = Status::from_code((word.load(Ordering::SeqCst) & 0xff) as u16)
                .filter(|s| *s != Status::Ok && *s != Status::ReduceAborted);
            let abort = failed
                .map_or(aborted_word(), |status| GroupLayout::result_word(nam_proto::reduce::ROUND_ABORTED, status));
            word.store(abort, Ordering::SeqCst);
        }
    }

    fn label(&self) -> &'static str {
        "the allreduce engine"
    }
}

/// The groups whose memory is still theirs: a broken group's allocation may have been
/// freed and handed to another group (writing a flag there corrupted its deposits:
/// allreduce results differed from MPI's under `nam-bench allreduce`).
fn live_groups<'r>(reducer: &'r mut Reducer, manager: &'r Manager) -> impl Iterator<Item = &'r mut Group> {
    reducer.groups_mut().filter(move |g| !g.broken && manager.is_live(g.handle))
}

impl ReduceEngine {
    fn set_asleep(&mut self, ctx: &EngineCtx<'_>, value: u64) {
        for group in live_groups(&mut self.reducer, ctx.manager) {
            ctx.pool.word(group.pool_offset + GROUP_ASLEEP_AT).store(value, Ordering::SeqCst);
        }
    }

    fn attach(
        &mut self,
        ctx: &mut EngineCtx<'_>,
        client: u64,
        name: &str,
        ranks: u32,
        rank: u32,
        chunk_bytes: u64,
    ) -> Result<Grant, Refusal> {
        if ranks == 0 || ranks > REDUCE_RANKS_MAX || rank >= ranks {
            return refuse(Status::InvalidArgument, format!("rank {rank} of {ranks} (1..={REDUCE_RANKS_MAX} ranks)"));
        }
        if chunk_bytes == 0 || chunk_bytes > REDUCE_CHUNK_MAX || !chunk_bytes.is_multiple_of(8) {
            return refuse(
                Status::InvalidArgument,
                format!("chunk of {chunk_bytes} bytes (a multiple of 8 up to {REDUCE_CHUNK_MAX})"),
            );
        }
        let domain = ctx.manager.domain_of(client)?;
        let tenant = ctx.manager.tenant(client).expect("domain_of checked the client").to_string();
        let existing = self.reducer.by_name(&tenant, name).map(|g| (g.handle, g.layout.ranks, g.layout.chunk_bytes));
        let grant = match existing {
            Some((handle, _, _)) if !ctx.manager.is_live(handle) => {
                self.reducer.remove(handle);
                return self.attach(ctx, client, name, ranks, rank, chunk_bytes);
            }
            Some((_, have_ranks, have_chunk)) if (have_ranks, have_chunk) != (ranks, chunk_bytes) => {
                return refuse(
                    Status::ReduceMismatch,
                    format!(
                        "group {name:?} has {have_ranks} ranks of {have_chunk} bytes; asked {ranks} of {chunk_bytes}"
                    ),
                )
            }
            Some((handle, _, _)) => ctx.manager.hold_global(client, domain, handle)?,
            None => {
                let layout = GroupLayout { ranks, chunk_bytes };
                let size = layout.total_len();
                let grant = ctx.manager.allocate(client, &Alloc { size, align: 0, flags: 0, name: String::new() })?;
                ctx.pool.zero(grant.offset, grant.size);
                self.reducer.insert(&tenant, name, grant.handle, grant.offset, layout);
                grant
            }
        };
        let group = self.reducer.group_mut(grant.handle).expect("inserted or found above");
        match group.members[rank as usize] {
            Some(other) if other != client => {
                refuse(Status::InvalidArgument, format!("rank {rank} of group {name:?} is already attached"))
            }
            _ => {
                group.members[rank as usize] = Some(client);
                Ok(grant)
            }
        }
    }
}

/// Judges and reduces round `group.done`, which this server claimed, and publishes it.
fn finish_round(pool: &Pool, group: &Group) {
    let descriptors: Vec<Descriptor> = (0..group.layout.ranks)
        .map(|r| {
            let bytes = pool.read(group.pool_offset + group.layout.descriptor_at(r), GROUP_DESCRIPTOR_LEN as usize);
            Descriptor::decode(bytes.as_slice().try_into().expect("read the descriptor length"))
        })
        .collect();
    let status = match judge(group.layout, group.done, &descriptors) {
        Verdict::Fail(status) => {
            log::info!("allreduce group {:?} round {}: {status}", group.name, group.done);
            status
        }
        Verdict::Reduce { op, dtype, count } => {
            let (deposits, result) = (group.layout.deposit_at(0), group.layout.result_data_at());
            // SAFETY: the group's allocation is live (its members hold it) and laid out as
            // `layout`; the ranks wait for this round's result word; `judge` checked the
            // count against the chunk.
            unsafe {
                reduce_into(
                    pool.ptr(group.pool_offset + deposits, 0),
                    pool.ptr(group.pool_offset + result, 0),
                    group.layout.ranks as usize,
                    group.layout.chunk_bytes as usize,
                    op,
                    dtype,
                    count,
                )
            };
            Status::Ok
        }
    };
    // fetch_max: an abort published meanwhile (a rank died) stays.
    let word = GroupLayout::result_word(group.done, status);
    pool.word(group.pool_offset + GROUP_RESULT_AT).fetch_max(word, Ordering::SeqCst);
}
