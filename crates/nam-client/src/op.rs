//! Non-blocking operations in flight.

use crate::error::{Error, Result};
use crate::session::Session;
use nam_ucx::Posted;
use std::marker::PhantomData;

/// A non-blocking put or get in flight. It borrows its buffer; dropping it waits for
/// completion (bounded by the client's timeout), so the buffer is never used afterwards.
pub struct Op<'a> {
    pub(crate) session: &'a Session,
    pub(crate) server: usize,
    pub(crate) request: Option<nam_ucx::Request>,
    pub(crate) what: &'static str,
    pub(crate) _buffer: PhantomData<&'a mut [u8]>,
}

impl<'a> Op<'a> {
    /// An operation that already completed.
    pub(crate) fn completed(session: &'a Session, server: usize, what: &'static str) -> Op<'a> {
        Op { session, server, request: None, what, _buffer: PhantomData }
    }

    /// An operation UCX posted: in flight, or already done.
    pub(crate) fn posted(
        session: &'a Session,
        server: usize,
        posted: nam_ucx::Result<Posted>,
        what: &'static str,
    ) -> Result<Op<'a>> {
        let addr = session.servers[server];
        let request = match posted.map_err(|source| Error::Transport { addr, what, source })? {
            Posted::Done => None,
            Posted::InFlight(request) => Some(request),
        };
        Ok(Op { session, server, request, what, _buffer: PhantomData })
    }

    /// Progresses once and reports whether the operation completed.
    pub fn test(&mut self) -> Result<bool> {
        let Some(request) = &self.request else { return Ok(true) };
        let inner = self.session.lock();
        inner.worker.progress();
        match request.check() {
            None => Ok(false),
            Some(result) => {
                self.request = None;
                let addr = inner.links[self.server].addr;
                result.map(|()| true).map_err(|source| Error::Transport { addr, what: self.what, source })
            }
        }
    }

    /// Waits for completion, at most the client's timeout.
    pub fn wait(mut self) -> Result<()> {
        self.complete()
    }

    fn complete(&mut self) -> Result<()> {
        let Some(request) = self.request.take() else { return Ok(()) };
        let inner = self.session.lock();
        inner.links[self.server].wait(Posted::InFlight(request), self.session.time_left(), self.what)
    }
}

impl Drop for Op<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.complete() {
            log::warn!("dropped {} failed: {e}", self.what);
        }
    }
}
