//! The pager's userfaultfd: `nam-uffd`'s descriptor, registered for missing-page and
//! write-protect faults, with failures as this crate's typed errors (the call that failed
//! and the system's reason).

use crate::constants::PAGE_BYTES;
use crate::error::{Error, Result};
pub use nam_uffd::{Fault, FAULT_WP, FAULT_WRITE};
use nam_uffd::{OpenError, FEATURE_MOVE, FEATURE_SIGBUS, FEATURE_THREAD_ID};

/// A userfaultfd descriptor of a paged region.
pub struct Uffd {
    inner: nam_uffd::Uffd,
    /// Faults from the kernel's own accesses are not reported (see [`nam_uffd::Uffd::open`]).
    pub user_mode_only: bool,
    /// The kernel moves pages into the region without a copy ([`Uffd::move_pages`]).
    pub can_move: bool,
}

fn sys(what: &'static str, e: std::io::Error) -> Error {
    Error::System { what, source: std::sync::Arc::new(e) }
}

impl Uffd {
    /// Opens a non-blocking descriptor, with kernel faults if permitted, else user-mode
    /// only; `UserfaultfdNotPermitted` when neither is. With `sigbus`, faults raise SIGBUS
    /// in the faulting thread instead of being queued on the descriptor.
    /// Thread-mode faults carry the faulting thread's id where the kernel can say it.
    pub fn open(sigbus: bool) -> Result<Uffd> {
        let features = if sigbus { FEATURE_SIGBUS } else { FEATURE_THREAD_ID };
        // Each optional feature the kernel may lack: asked for first, then done without.
        let mut can_move = true;
        let mut opened = nam_uffd::Uffd::open(features | FEATURE_MOVE, true);
        if let Err(OpenError::Failed { what: "UFFDIO_API", .. }) = opened {
            can_move = false;
            opened = match nam_uffd::Uffd::open(features, true) {
                Err(OpenError::Failed { what: "UFFDIO_API", .. }) if !sigbus => nam_uffd::Uffd::open(0, true),
                other => other,
            };
        }
        match opened {
            Ok(inner) => Ok(Uffd { user_mode_only: inner.user_mode_only, can_move, inner }),
            Err(OpenError::NotPermitted(reason)) => Err(Error::UserfaultfdNotPermitted { reason }),
            Err(OpenError::Unsupported) => {
                Err(Error::UserfaultfdNotPermitted { reason: "the kernel has no userfaultfd".into() })
            }
            Err(OpenError::Failed { what, source }) => Err(sys(what, source)),
        }
    }

    /// Registers `[start, start + len)` for missing-page and write-protect faults.
    pub fn register(&self, start: u64, len: u64) -> Result<()> {
        self.inner.register(start, len, true, true).map_err(|e| sys("UFFDIO_REGISTER (missing + write-protect)", e))
    }

    /// Registers `[start, start + len)` for missing-page faults only: a range that pages
    /// are moved into, never touched while missing.
    pub fn register_missing(&self, start: u64, len: u64) -> Result<()> {
        self.inner.register(start, len, true, false).map_err(|e| sys("UFFDIO_REGISTER (missing)", e))
    }

    /// Moves `len` bytes of present pages from `src` to the missing pages at `dst` without
    /// a copy ([`nam_uffd::move_pages`]; only when [`Uffd::can_move`]); they arrive
    /// writable. `Err` says how much moved before the failure.
    pub fn move_pages(&self, dst: u64, src: u64, len: u64, wake: bool) -> std::result::Result<(), nam_uffd::MoveError> {
        self.inner.move_pages(dst, src, len, wake)
    }

    /// Unregisters the range (a failure leaves nothing to undo).
    pub fn unregister(&self, start: u64, len: u64) {
        let _ = self.inner.unregister(start, len);
    }

    /// Installs `len` bytes from `src` at `dst` (page aligned), read-only when
    /// `write_protect`. Returns false when the page was already there.
    ///
    /// A run that the kernel refuses with `ENOENT` crosses a boundary between two of the
    /// region's mappings (the kernel copies within one): a program's `madvise` or
    /// `mprotect` on part of the region splits it, and the pieces may not merge back. Such
    /// a run is copied a page at a time instead; false then if any page was there already.
    pub fn copy(&self, dst: u64, src: *const u8, len: u64, write_protect: bool, wake: bool) -> Result<bool> {
        match self.inner.copy(dst, src, len, write_protect, wake) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && len > PAGE_BYTES => {
                let mut all = true;
                for at in (0..len).step_by(PAGE_BYTES as usize) {
                    // SAFETY: `src` holds `len` bytes (the caller's promise); `at < len`.
                    let from = unsafe { src.add(at as usize) };
                    all &= self
                        .inner
                        .copy(dst + at, from, PAGE_BYTES, write_protect, wake)
                        .map_err(|e| sys("UFFDIO_COPY", e))?;
                }
                Ok(all)
            }
            other => other.map_err(|e| sys("UFFDIO_COPY", e)),
        }
    }

    /// Sets (`protect`) or clears write protection of the range; clearing wakes waiters.
    pub fn write_protect(&self, start: u64, len: u64, protect: bool) -> Result<()> {
        self.inner.write_protect(start, len, protect).map_err(|e| sys("UFFDIO_WRITEPROTECT", e))
    }

    /// Wakes threads waiting on faults in the range.
    pub fn wake(&self, start: u64, len: u64) {
        self.inner.wake(start, len)
    }

    /// Waits up to `timeout_ms` for events on the descriptor or on `also` (the pager's
    /// reclaim eventfd); true when some are ready.
    pub fn poll_also(&self, also: std::os::fd::RawFd, timeout_ms: i32) -> bool {
        self.inner.poll(Some(also), timeout_ms)
    }

    /// Reads the pending page faults into `out` (appending); other events are ignored.
    pub fn read_faults(&self, out: &mut Vec<Fault>) -> Result<()> {
        self.inner.read_faults(out).map_err(|e| sys("read(userfaultfd)", e))
    }
}
