//! The server's engines as providers (as Mochi Margo composes services from providers): the
//! allocation manager's requests, mailboxes, reductions and the checkpoint engine each
//! implement [`Engine`] and sit in one [`Engines`] list. The progress loop
//! ([`crate::Server::run`]) only iterates that list: it hands each decoded request to the
//! engine that takes it, polls every engine, lets every engine prepare for and recover from
//! a sleep on the worker's event fd, and tells every engine at once when a client is gone.
//! A new engine is one more `impl Engine` and one more entry in [`Engines::new`]; nothing in
//! the loop changes.

use crate::manager::{Grant, Manager, Refusal};
use crate::pool::Pool;
use nam_proto::{AllocReply, Reply, Request, Status};
use nam_ucx::{Endpoint, EndpointId, RkeyLayout, Worker};

/// What every engine may use of the server, for one call: the state engines share.
pub(crate) struct EngineCtx<'a> {
    /// The allocation manager: every engine's memory is allocations of some tenant.
    pub(crate) manager: &'a mut Manager,
    /// The pool.
    pub(crate) pool: &'a Pool,
    /// The server's worker, for endpoints an engine makes itself.
    pub(crate) worker: &'a Worker,
    /// A worker address of this host on every device its UCX uses (the server's own, unless
    /// `--listen` narrowed its devices): a same-host peer's address is checked against it.
    pub(crate) address_reference: &'a [u8],
    /// The remote-key layout of the server's UCX context: a peer's key is checked against it.
    pub(crate) rkey_layout: &'a RkeyLayout,
    /// This server's tag in global addresses.
    pub(crate) server_tag: u32,
}

impl EngineCtx<'_> {
    /// The reply that hands `grant` to a client: where it is and the key of its tenant's
    /// arena segment that holds it (never a key to any other memory).
    pub(crate) fn alloc_reply(&self, grant: &Grant) -> AllocReply {
        let (remote_addr, rkey) = self.pool.remote(grant.offset);
        AllocReply { handle: grant.handle, size: grant.size, remote_addr, flags: grant.flags, rkey }
    }
}

/// Who sent the request an engine executes.
pub(crate) struct Caller<'a> {
    /// The authenticated client.
    pub(crate) client: u64,
    /// Its connection's endpoint (accepted from the listener; only the server closes it).
    pub(crate) connection: &'a Endpoint,
    /// The request's id, for an engine that answers later ([`Execution::Deferred`]).
    pub(crate) request_id: u64,
}

/// A reply an engine sends after the request that asked for it ([`Execution::Deferred`]).
pub(crate) struct LateReply {
    /// The connection to send it on (gone connections are skipped).
    pub(crate) endpoint: EndpointId,
    /// The request's kind and id, as in an immediate reply.
    pub(crate) request_kind: u16,
    /// See `request_kind`.
    pub(crate) request_id: u64,
    /// The reply.
    pub(crate) reply: Reply,
}

/// What an engine did with a request.
pub(crate) enum Execution {
    /// It served the request: the reply, or why it was refused.
    Done(Result<Reply, Refusal>),
    /// Not one of its requests: handed back for the next engine.
    Declined(Request),
    /// It took the request and will answer it later through [`Engine::late_replies`].
    Deferred,
}

/// One server-side service. Every hook but [`Engine::execute`] has a default that does
/// nothing, so an engine implements only what it uses.
pub(crate) trait Engine {
    /// Serves `request` if it is one of this engine's, or hands it back.
    fn execute(&mut self, ctx: &mut EngineCtx<'_>, caller: &Caller<'_>, request: Request) -> Execution;

    /// Advances work that runs without requests; true if any progressed (the server keeps
    /// spinning then).
    fn poll(&mut self, _ctx: &mut EngineCtx<'_>) -> bool {
        false
    }

    /// The server is about to sleep on the worker's event fd: publish whatever peers must
    /// know to wake it, then look once more; true if work appeared (the server stays
    /// awake). [`Engine::after_sleep`] follows either way.
    fn before_sleep(&mut self, _ctx: &mut EngineCtx<'_>) -> bool {
        false
    }

    /// The server is awake again (or did not sleep after all).
    fn after_sleep(&mut self, _ctx: &mut EngineCtx<'_>) {}

    /// `client` said goodbye or failed: drop it from everything it takes part in. Called
    /// once or more per client; must be idempotent.
    fn client_gone(&mut self, _ctx: &mut EngineCtx<'_>, _client: u64) {}

    /// Allocation names starting with this prefix are the engine's own: clients may not
    /// allocate, open or free them.
    fn reserved_prefix(&self) -> Option<&'static str> {
        None
    }

    /// Who owns the reserved names, for the refusal ("the checkpoint engine").
    fn label(&self) -> &'static str;

    /// Adds what this engine holds to a Status reply (the checkpoint engine lists its groups).
    fn status(&self, _manager: &Manager, _status: &mut nam_proto::StatusReply) {}

    /// The earliest time it must poll again although no request comes (a deferred reply's
    /// deadline): the server does not sleep past it.
    fn next_deadline(&self) -> Option<std::time::Instant> {
        None
    }

    /// Replies to requests it deferred that are ready now (called after every poll).
    fn late_replies(&mut self, _ready: &mut Vec<LateReply>) {}
}

/// Every engine of the server, in the order requests are offered to them.
pub(crate) struct Engines {
    list: Vec<Box<dyn Engine>>,
    /// Set when the last request executed was deferred: the server sends no reply now.
    deferred: bool,
}

impl Engines {
    /// The server's engines. The allocation engine comes first: it serves the message data
    /// path (put, get, atomics), the bulk of the requests.
    pub(crate) fn new() -> Engines {
        Engines {
            list: vec![
                Box::new(crate::alloc_engine::AllocEngine),
                Box::new(crate::mailbox::MailboxEngine),
                Box::new(crate::reduce::ReduceEngine::default()),
                Box::new(crate::ckpt::CkptEngine::default()),
                Box::new(crate::watch::WatchEngine::default()),
            ],
            deferred: false,
        }
    }

    /// Refuses a request on a name an engine reserved, before any engine sees it.
    pub(crate) fn check_reserved(&self, manager: &Manager, request: &Request) -> Result<(), Refusal> {
        let name = match request {
            Request::Alloc(alloc) => alloc.name.as_str(),
            Request::Open { name } => name.as_str(),
            Request::Free { handle } => manager.name_of(*handle).unwrap_or_default(),
            _ => return Ok(()),
        };
        for engine in &self.list {
            if let Some(prefix) = engine.reserved_prefix().filter(|p| name.starts_with(p)) {
                return Err(Refusal {
                    status: Status::InvalidArgument,
                    message: format!("{name:?}: names starting with {prefix:?} belong to {}", engine.label()),
                });
            }
        }
        Ok(())
    }

    /// Offers `request` to each engine in turn until one serves it.
    pub(crate) fn execute(
        &mut self,
        ctx: &mut EngineCtx<'_>,
        caller: &Caller<'_>,
        request: Request,
    ) -> Result<Reply, Refusal> {
        let mut request = request;
        for engine in &mut self.list {
            match engine.execute(ctx, caller, request) {
                Execution::Done(reply) => return reply,
                Execution::Declined(r) => request = r,
                Execution::Deferred => {
                    self.deferred = true;
                    return Ok(Reply::Done);
                }
            }
        }
        Err(Refusal {
            status: Status::Internal,
            message: format!("no engine serves requests of kind {:#x}", request.kind()),
        })
    }

    /// Whether the request just executed was deferred (its reply comes later); clears it.
    pub(crate) fn take_deferred(&mut self) -> bool {
        std::mem::take(&mut self.deferred)
    }

    /// The deferred replies every engine has ready.
    pub(crate) fn late_replies(&mut self) -> Vec<LateReply> {
        let mut ready = Vec::new();
        for engine in &mut self.list {
            engine.late_replies(&mut ready);
        }
        ready
    }

    /// The earliest deadline of any engine ([`Engine::next_deadline`]).
    pub(crate) fn next_deadline(&self) -> Option<std::time::Instant> {
        self.list.iter().filter_map(|e| e.next_deadline()).min()
    }

    /// Polls every engine; true if any progressed.
    pub(crate) fn poll(&mut self, ctx: &mut EngineCtx<'_>) -> bool {
        let mut busy = false;
        for engine in &mut self.list {
            busy |= engine.poll(ctx);
        }
        busy
    }

    /// Prepares every engine for a sleep; true if one found work (do not sleep then).
    pub(crate) fn before_sleep(&mut self, ctx: &mut EngineCtx<'_>) -> bool {
        let mut awake = false;
        for engine in &mut self.list {
            awake |= engine.before_sleep(ctx);
        }
        awake
    }

    /// Tells every engine the server is awake.
    pub(crate) fn after_sleep(&mut self, ctx: &mut EngineCtx<'_>) {
        for engine in &mut self.list {
            engine.after_sleep(ctx);
        }
    }

    /// Tells every engine `client` is gone.
    pub(crate) fn client_gone(&mut self, ctx: &mut EngineCtx<'_>, client: u64) {
        for engine in &mut self.list {
            engine.client_gone(ctx, client);
        }
    }

    /// Every engine adds its part to a Status reply.
    pub(crate) fn status(&self, manager: &Manager, status: &mut nam_proto::StatusReply) {
        for engine in &self.list {
            engine.status(manager, status);
        }
    }
}
