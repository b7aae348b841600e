//! Non-blocking atomics with a handle: OpenSHMEM's `shmem_atomic_*_nbi` calls complete only
//! all together (`shmem_quiet`); these also complete one at a time. [`Client::atomic_nb`]
//! (and [`crate::Context::atomic_nb`]) posts the atomic and returns an [`AtomicOp`], which
//! [`AtomicOp::test`] polls and [`AtomicOp::wait`] waits for, yielding the word's old value.
//!
//! Completion, in OpenSHMEM's terms: when `test` returns true or `wait` returns, the atomic
//! is done at the server's memory (remote completion) and its old word is known. A quiet
//! (or flush) of the stream that issued it completes it as well; the handle then reports
//! the outcome the quiet collected without waiting. Dropping a handle waits for it (bounded
//! by the client's timeout), as [`crate::Op`] does.
//!
//! On the direct path and for 32-bit words on UCX RMA (a compare-and-swap loop) the atomic
//! is done before the call returns; on UCX RMA (64-bit) the handle owns the request and
//! the words UCX reads and writes; on the message path it is a request whose reply is taken
//! by id, leaving other replies queued for whoever waits for them.

use crate::allocation::Allocation;
use crate::amo::AtomicWord;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::path::{Atomic, Path};
use crate::pending::AmoPending;
use crate::session::Session;
use nam_proto::AtomicKind;
use std::marker::PhantomData;

/// Which atomic [`Client::atomic_nb`] performs (OpenSHMEM's names without `shmem_atomic_`).
/// Every kind yields the old word; the non-fetching ones (`Add`, `Inc`, `Set`, `And`, `Or`,
/// `Xor`) are the same operations for callers that ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AmoKind {
    /// Adds the value.
    FetchAdd,
    /// Adds one (the value is ignored).
    FetchInc,
    /// Reads the word (the value is ignored).
    Fetch,
    /// Stores the value.
    Swap,
    /// Stores the value if the word equals the compare operand.
    CompareSwap,
    /// Bitwise AND with the value.
    FetchAnd,
    /// Bitwise OR with the value.
    FetchOr,
    /// Bitwise XOR with the value.
    FetchXor,
    /// `FetchAdd` whose old word is not wanted (`shmem_atomic_add`).
    Add,
    /// `FetchInc` whose old word is not wanted (`shmem_atomic_inc`).
    Inc,
    /// `Swap` whose old word is not wanted (`shmem_atomic_set`).
    Set,
    /// `FetchAnd` whose old word is not wanted (`shmem_atomic_and`).
    And,
    /// `FetchOr` whose old word is not wanted (`shmem_atomic_or`).
    Or,
    /// `FetchXor` whose old word is not wanted (`shmem_atomic_xor`).
    Xor,
}

impl AmoKind {
    /// The atomic on a `T` word with operands `value` and `compare`.
    pub(crate) fn atomic<T: AtomicWord>(self, value: T, compare: T) -> Atomic {
        let (op, value) = match self {
            AmoKind::FetchAdd | AmoKind::Add => (AtomicKind::FetchAdd, value.to_bits()),
            AmoKind::FetchInc | AmoKind::Inc => (AtomicKind::FetchAdd, 1),
            AmoKind::Fetch => (AtomicKind::FetchOr, 0),
            AmoKind::Swap | AmoKind::Set => (AtomicKind::Swap, value.to_bits()),
            AmoKind::CompareSwap => (AtomicKind::CompareSwap, value.to_bits()),
            AmoKind::FetchAnd | AmoKind::And => (AtomicKind::FetchAnd, value.to_bits()),
            AmoKind::FetchOr | AmoKind::Or => (AtomicKind::FetchOr, value.to_bits()),
            AmoKind::FetchXor | AmoKind::Xor => (AtomicKind::FetchXor, value.to_bits()),
        };
        Atomic { op: op.with_width(T::WIDTH_BYTES), value, compare: compare.to_bits() }
    }
}

/// A non-blocking atomic in flight (see the module docs): poll it with [`AtomicOp::test`],
/// take its old word with [`AtomicOp::wait`] or [`AtomicOp::value`].
pub struct AtomicOp<'a, T: AtomicWord> {
    /// The session whose worker and links carry it (the client's, or a context's on RMA).
    session: &'a Session,
    server: usize,
    /// The message-path stream that sent it ([`crate::pending::StreamScope`]).
    stream: u64,
    pending: Option<AmoPending>,
    /// How it ended, once seen.
    outcome: Option<Result<u64>>,
    _word: PhantomData<T>,
}

impl<'a, T: AtomicWord> AtomicOp<'a, T> {
    /// Posts `kind` on the `T` at `offset` of `a` over `path` on `session` (stream `stream`).
    pub(crate) fn post(
        session: &'a Session,
        (path, stream): (Path, u64),
        a: &Allocation,
        offset: u64,
        atomic: Atomic,
    ) -> Result<AtomicOp<'a, T>> {
        let pending = {
            let _scope = crate::pending::StreamScope::enter(stream);
            path.atomic_nb(session, a, offset, atomic)?
        };
        let mut op =
            AtomicOp { session, server: a.server, stream, pending: Some(pending), outcome: None, _word: PhantomData };
        if let Some(AmoPending::Done(old)) = op.pending {
            op.pending = None;
            op.outcome = Some(Ok(old));
        }
        Ok(op)
    }

    /// Progresses once and reports whether the atomic is complete (`true`: done at the
    /// server, its old word ready for [`AtomicOp::wait`]). Never blocks. An error is the
    /// atomic's: it failed (refused by the server, or the server is gone).
    pub fn test(&mut self) -> Result<bool> {
        if let Some(outcome) = &self.outcome {
            return outcome.clone().map(|_| true);
        }
        self.finish(false)?;
        match &self.outcome {
            Some(outcome) => outcome.clone().map(|_| true),
            None => Ok(false),
        }
    }

    /// The old word if the atomic is complete ([`AtomicOp::test`] without consuming it).
    pub fn value(&mut self) -> Result<Option<T>> {
        if !self.test()? {
            return Ok(None);
        }
        match &self.outcome {
            Some(Ok(old)) => Ok(Some(T::from_bits(*old))),
            Some(Err(e)) => Err(e.clone()),
            None => Ok(None),
        }
    }

    /// Waits for completion, at most the client's timeout ([`Error::Timeout`]); the word's
    /// old value.
    pub fn wait(mut self) -> Result<T> {
        self.finish(true)?;
        self.outcome.take().expect("a blocking finish leaves an outcome").map(T::from_bits)
    }

    /// Moves the atomic toward completion: one progress, or (`block`) until it completes
    /// or the timeout passes. Sets `outcome` when it ends; errors only of the lock's users.
    fn finish(&mut self, block: bool) -> Result<()> {
        let Some(pending) = self.pending.take() else { return Ok(()) };
        let session = self.session;
        let mut inner = session.lock();
        match pending {
            AmoPending::Done(old) => self.outcome = Some(Ok(old)),
            AmoPending::Message { id } => {
                let wait = block.then(|| session.time_left());
                match inner.take_handle((self.stream, self.server, id), wait) {
                    Ok(Some(old)) => self.outcome = Some(Ok(old)),
                    Ok(None) => self.pending = Some(AmoPending::Message { id }),
                    Err(e) => self.outcome = Some(Err(e)),
                }
            }
            AmoPending::Rma { request, operand, reply } => {
                let addr = inner.links[self.server].addr;
                let result = if block {
                    let posted = nam_ucx::Posted::InFlight(request);
                    Some(inner.links[self.server].wait(posted, session.time_left(), "atomic_nb"))
                } else {
                    inner.worker.progress();
                    match request.check() {
                        None => {
                            self.pending = Some(AmoPending::Rma { request, operand, reply });
                            return Ok(());
                        }
                        Some(result) => {
                            Some(result.map_err(|source| Error::Transport { addr, what: "atomic_nb", source }))
                        }
                    }
                };
                match result {
                    // Complete: UCX no longer touches the words.
                    Some(Ok(())) => self.outcome = Some(Ok(*reply)),
                    // Failed or late: UCX may still write them, so they are never freed.
                    Some(Err(e)) => {
                        Box::leak(operand);
                        Box::leak(reply);
                        self.outcome = Some(Err(e));
                    }
                    None => {}
                }
            }
        }
        Ok(())
    }
}

impl<T: AtomicWord> Drop for AtomicOp<'_, T> {
    fn drop(&mut self) {
        if self.pending.is_some() {
            if let Err(e) = self.finish(true) {
                log::warn!("a dropped atomic failed: {e}");
            }
            if let Some(Err(e)) = &self.outcome {
                log::warn!("a dropped atomic failed: {e}");
            }
        }
    }
}

impl Client {
    /// Posts atomic `kind` with `value` (and `compare`, for [`AmoKind::CompareSwap`]) on the
    /// `T` at `offset`, and returns its handle at once (OpenSHMEM's `shmem_atomic_*_nbi`,
    /// completable one at a time: see [`AtomicOp`]). Checked (bounds, alignment) before
    /// anything is sent. The next [`Client::quiet`] completes it too.
    pub fn atomic_nb<T: AtomicWord>(
        &self,
        allocation: &Allocation,
        offset: u64,
        kind: AmoKind,
        value: T,
        compare: T,
    ) -> Result<AtomicOp<'_, T>> {
        self.word_of::<T>(allocation, offset)?;
        let path = self.paths.word(allocation);
        AtomicOp::post(&self.session, (path, 0), allocation, offset, kind.atomic(value, compare))
    }
}
