//! Contexts (OpenSHMEM's `shmem_ctx`): independent streams of one-sided operations, each
//! with its own ordering ([`Context::fence`]) and completion ([`Context::quiet`]), so that
//! threads that each use their own context need no shared lock.
//!
//! What a context owns depends on the path (the path table is the client's):
//! - **UCX RMA** (shared memory above the direct crossover, RDMA): a UCX worker of its own,
//!   its own data endpoint to every RMA server and the remote keys unpacked on it, its own
//!   lock and its own set of handle-less operations. Its quiet flushes only its endpoints;
//!   another context's operations neither wait for it nor are completed by it.
//! - **Direct** (mapped same-host memory): loads, stores and CPU atomics, which take no lock
//!   on any stream and complete when they retire; nothing is shared but the memory.
//! - **Messages** (TCP): the server's replies arrive on the client's control endpoint, so a
//!   context's message-path operations take the client's lock to send and to collect; but
//!   they are recorded in a stream of the context's own ([`crate::pending::StreamScope`]):
//!   its quiet waits for its own requests only, never for the client's or another
//!   context's (which may be stuck on a slow or stopped server), and theirs never for it.
//!
//! A context is made from a [`Client`] and borrows it; it may move to another thread (one
//! thread at a time is the intended use, as `SHMEM_CTX_PRIVATE`, but it is safe to share).
//! Dropping it completes its operations (its quiet), bounded by the client's timeout.

use crate::allocation::Allocation;
use crate::amo::AtomicWord;
use crate::amo_op::{AmoKind, AtomicOp};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::path::{Atomic, Path, Store};
use crate::pending::{FetchSink, StreamScope};
use crate::session::{Inner, Session};
use nam_proto::{AtomicKind, TrafficReport};
use nam_ucx::Worker;

/// An independent stream of operations over a [`Client`] (see the module docs): made by
/// [`Client::context`], destroyed by dropping it (`shmem_ctx_destroy`), which completes it.
pub struct Context<'c> {
    client: &'c Client,
    /// The context's own worker, RMA endpoints and pending set.
    session: Session,
    /// Its message-path stream ([`crate::pending::StreamScope`]).
    stream: u64,
}

impl Client {
    /// A new context (`shmem_ctx_create`): its own UCX worker and data endpoints for the
    /// servers reached through UCX RMA, so its operations, fence and quiet are independent
    /// of the client's and of other contexts' there (see [`Context`]).
    pub fn context(&self) -> Result<Context<'_>> {
        let session = {
            let parent = self.lock();
            let addr = parent.links[0].addr;
            let worker = Worker::new(&parent.context).map_err(|source| Error::Connect { addr, source })?;
            let links = parent.links.iter().map(|l| l.for_context(&worker)).collect::<Result<Vec<_>>>()?;
            let inner = Inner {
                links,
                replies: Default::default(),
                next_request_id: 1,
                next_server: 0,
                traffic: TrafficReport::default(),
                held: Default::default(),
                unprogressed_ops: 0,
                unacked: Default::default(),
                worker,
                context: parent.context.clone(),
            };
            Session::new(inner, self.session.servers.clone(), self.session.timeout)
        };
        Ok(Context { client: self, session, stream: crate::pending::new_stream() })
    }
}

impl<'c> Context<'c> {
    /// The client the context belongs to.
    pub fn client(&self) -> &'c Client {
        self.client
    }

    /// The stream an operation on `a` over `path` belongs to: the context's own for UCX RMA
    /// (its remote keys brought up to date first), the client's otherwise.
    /// While the returned scope lives, message-path operations of this thread are this
    /// context's ([`crate::pending::StreamScope`]).
    fn stream(&self, a: &Allocation, path: Path) -> Result<(StreamScope, &Session)> {
        let scope = StreamScope::enter(self.stream);
        if path != Path::Rma {
            return Ok((scope, &self.client.session));
        }
        if !self.session.lock().links[a.server].has_rkey(a.key) {
            // An allocation granted after the context was made: its key is the client's.
            let parent = self.client.lock();
            let mut mine = self.session.lock();
            mine.links[a.server].adopt_rkeys(&parent.links[a.server])?;
        }
        Ok((scope, &self.session))
    }

    /// [`Client::put`] on this context: returns when `data` may be reused; this context's
    /// [`Context::quiet`] completes it at the server.
    pub fn put(&self, allocation: &Allocation, offset: u64, data: &[u8]) -> Result<()> {
        allocation.target(offset, data.len())?;
        let path = self.client.paths.transfer(allocation, data.len());
        let (_scope, stream) = self.stream(allocation, path)?;
        path.put(stream, allocation, offset, data, Store::Cached)
    }

    /// [`Client::get`] on this context: returns with the data.
    pub fn get(&self, allocation: &Allocation, offset: u64, buffer: &mut [u8]) -> Result<()> {
        allocation.target(offset, buffer.len())?;
        let path = self.client.paths.transfer_get(allocation, buffer.len());
        let (_scope, stream) = self.stream(allocation, path)?;
        path.get(stream, allocation, offset, buffer)
    }

    /// [`Client::put_nbi`] on this context (`shmem_ctx_putmem_nbi`): completed by this
    /// context's [`Context::quiet`].
    ///
    /// # Safety
    /// `data` must stay valid and unmodified until that quiet returns.
    pub unsafe fn put_nbi(&self, allocation: &Allocation, offset: u64, data: &[u8]) -> Result<()> {
        allocation.target(offset, data.len())?;
        let path = self.client.paths.transfer(allocation, data.len());
        let (_scope, stream) = self.stream(allocation, path)?;
        path.put_nbi(stream, allocation, offset, (data.as_ptr(), data.len()))
    }

    /// [`Client::get_nbi`] on this context (`shmem_ctx_getmem_nbi`): `buffer` holds the data
    /// once this context's [`Context::quiet`] returns.
    ///
    /// # Safety
    /// `buffer` must stay valid, and unread, until that quiet returns.
    pub unsafe fn get_nbi(&self, allocation: &Allocation, offset: u64, buffer: &mut [u8]) -> Result<()> {
        allocation.target(offset, buffer.len())?;
        let path = self.client.paths.transfer_get(allocation, buffer.len());
        let (_scope, stream) = self.stream(allocation, path)?;
        path.get_nbi(stream, allocation, offset, (buffer.as_mut_ptr(), buffer.len()))
    }

    /// `op` on the `T` at `offset`, on this context; the old word.
    fn amo<T: AtomicWord>(&self, a: &Allocation, offset: u64, op: AtomicKind, (value, compare): (T, T)) -> Result<T> {
        self.client.word_of::<T>(a, offset)?;
        let atomic = Atomic { op: op.with_width(T::WIDTH_BYTES), value: value.to_bits(), compare: compare.to_bits() };
        let path = self.client.paths.word(a);
        let (_scope, stream) = self.stream(a, path)?;
        Ok(T::from_bits(path.atomic(stream, a, offset, atomic)?))
    }

    /// [`Client::atomic_fetch_add`] on this context (`shmem_ctx_atomic_fetch_add`).
    pub fn atomic_fetch_add<T: AtomicWord>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<T> {
        self.amo(allocation, offset, AtomicKind::FetchAdd, (value, value))
    }

    /// [`Client::atomic_add`] on this context (`shmem_ctx_atomic_add`).
    pub fn atomic_add<T: AtomicWord>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<()> {
        self.atomic_fetch_add(allocation, offset, value).map(drop)
    }

    /// [`Client::atomic_fetch`] on this context (`shmem_ctx_atomic_fetch`).
    pub fn atomic_fetch<T: AtomicWord>(&self, allocation: &Allocation, offset: u64) -> Result<T> {
        let zero = T::from_bits(0);
        self.amo(allocation, offset, AtomicKind::FetchOr, (zero, zero))
    }

    /// [`Client::atomic_set`] on this context (`shmem_ctx_atomic_set`).
    pub fn atomic_set<T: AtomicWord>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<()> {
        self.amo(allocation, offset, AtomicKind::Swap, (value, value)).map(drop)
    }

    /// [`Client::atomic_compare_swap`] on this context (`shmem_ctx_atomic_compare_swap`).
    pub fn atomic_compare_swap<T: AtomicWord>(
        &self,
        allocation: &Allocation,
        offset: u64,
        compare: T,
        value: T,
    ) -> Result<T> {
        self.amo(allocation, offset, AtomicKind::CompareSwap, (value, compare))
    }

    /// [`Client::atomic_fetch_inc`] on this context (`shmem_ctx_atomic_fetch_inc`).
    pub fn atomic_fetch_inc<T: AtomicWord>(&self, allocation: &Allocation, offset: u64) -> Result<T> {
        self.amo(allocation, offset, AtomicKind::FetchAdd, (T::ONE, T::ONE))
    }

    /// [`Client::atomic_swap`] on this context (`shmem_ctx_atomic_swap`).
    pub fn atomic_swap<T: AtomicWord>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<T> {
        self.amo(allocation, offset, AtomicKind::Swap, (value, value))
    }

    /// [`Client::atomic_fetch_and`] on this context (`shmem_ctx_atomic_fetch_and`).
    pub fn atomic_fetch_and<T: AtomicWord>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<T> {
        self.amo(allocation, offset, AtomicKind::FetchAnd, (value, value))
    }

    /// [`Client::atomic_fetch_or`] on this context (`shmem_ctx_atomic_fetch_or`).
    pub fn atomic_fetch_or<T: AtomicWord>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<T> {
        self.amo(allocation, offset, AtomicKind::FetchOr, (value, value))
    }

    /// [`Client::atomic_fetch_xor`] on this context (`shmem_ctx_atomic_fetch_xor`).
    pub fn atomic_fetch_xor<T: AtomicWord>(&self, allocation: &Allocation, offset: u64, value: T) -> Result<T> {
        self.amo(allocation, offset, AtomicKind::FetchXor, (value, value))
    }

    /// [`Client::atomic_fetch_add_nbi`] on this context (`shmem_ctx_atomic_fetch_add_nbi`):
    /// `*fetch` holds the old word once this context's [`Context::quiet`] returns.
    ///
    /// # Safety
    /// `fetch` must stay valid, and be neither read nor written, until that quiet returns.
    pub unsafe fn atomic_fetch_add_nbi<T: AtomicWord>(
        &self,
        fetch: &mut T,
        allocation: &Allocation,
        offset: u64,
        value: T,
    ) -> Result<()> {
        self.client.word_of::<T>(allocation, offset)?;
        let atomic = Atomic { op: AtomicKind::FetchAdd.with_width(T::WIDTH_BYTES), value: value.to_bits(), compare: 0 };
        let sink = FetchSink::new(fetch as *mut T as *mut u8, T::WIDTH_BYTES);
        let path = self.client.paths.word(allocation);
        let (_scope, stream) = self.stream(allocation, path)?;
        path.atomic_nbi(stream, allocation, offset, atomic, sink)
    }

    /// [`Client::atomic_nb`] on this context: the handle completes it, and so does this
    /// context's [`Context::quiet`] (not the client's, nor another context's).
    pub fn atomic_nb<T: AtomicWord>(
        &self,
        allocation: &Allocation,
        offset: u64,
        kind: AmoKind,
        value: T,
        compare: T,
    ) -> Result<AtomicOp<'_, T>> {
        self.client.word_of::<T>(allocation, offset)?;
        let path = self.client.paths.word(allocation);
        let (_scope, stream) = self.stream(allocation, path)?;
        AtomicOp::post(stream, (path, self.stream), allocation, offset, kind.atomic(value, compare))
    }

    /// Orders this context's operations (`shmem_ctx_fence`): those issued before complete
    /// at their targets before those issued after. Other contexts are not ordered by it.
    pub fn fence(&self) -> Result<()> {
        let inner = self.session.lock();
        let addr = inner.links[0].addr;
        inner.worker.fence().map_err(|source| Error::Transport { addr, what: "fence", source })?;
        drop(inner);
        // The message path is the client's stream (see the module docs).
        if (0..self.client.server_count()).any(|s| self.client.paths.link(s) == Path::Messages) {
            self.client.fence()?;
        }
        Ok(())
    }

    /// Remote completion of every operation issued on this context (`shmem_ctx_quiet`):
    /// its RMA endpoints flushed, its handle-less operations waited for, and the replies to
    /// its message-path requests collected; the client's and other contexts' operations are
    /// not waited for (see the module docs).
    pub fn quiet(&self) -> Result<()> {
        let _scope = StreamScope::enter(self.stream);
        // As [`Client::flush`]: one server's flush keeps its own deadline.
        let _call = (self.client.server_count() > 1).then(|| self.client.session.begin_call());
        let mut first = Ok(());
        for server in 0..self.client.server_count() {
            let result = match self.client.paths.link(server) {
                Path::Rma => Path::Rma.flush(&self.session, server),
                path => path.flush(&self.client.session, server),
            };
            first = first.and(result);
        }
        first
    }
}

impl Drop for Context<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.quiet() {
            log::warn!("a context's operations failed to complete as it was destroyed: {e}");
        }
        self.client.session.lock().end_stream(self.stream);
    }
}
