//! Allocations as the client sees them, and the options to make one.

use crate::error::{Error, Result};
use nam_proto::{ALLOC_FLAG_PERSISTENT, ALLOC_FLAG_SHARED};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How to allocate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllocOptions {
    /// Alignment (power of two); 0 means the server's default (64 bytes).
    pub align: u64,
    /// Other clients of the tenant may [`crate::Client::open`] it by name.
    pub shared: bool,
    /// Survives the disconnect of every holder until freed (needs a name).
    pub persistent: bool,
    /// Name for [`crate::Client::open`]; `None` for anonymous.
    pub name: Option<String>,
    /// Server index in the configured list; `None` spreads allocations round-robin.
    pub server: Option<usize>,
}

impl AllocOptions {
    /// A shared allocation named `name`.
    pub fn shared(name: &str) -> AllocOptions {
        AllocOptions { shared: true, name: Some(name.into()), ..Default::default() }
    }
}

/// An allocation on a memory server. Cheap to clone; every clone becomes invalid when the
/// allocation is freed through any of them.
#[derive(Debug, Clone)]
pub struct Allocation {
    pub(crate) server: usize,
    pub(crate) handle: u64,
    pub(crate) size: u64,
    pub(crate) remote_addr: u64,
    pub(crate) flags: u32,
    pub(crate) live: Arc<AtomicBool>,
    /// Where byte 0 is mapped in this process on a shared-memory path; 0 when it is not.
    pub(crate) local: usize,
    /// Which of its link's remote keys (its tenant's arena segment) reaches it.
    pub(crate) key: usize,
}

impl Allocation {
    /// An allocation that is already invalid, standing in until a real one arrives.
    pub(crate) fn placeholder() -> Allocation {
        Allocation {
            server: 0,
            handle: 0,
            size: 0,
            remote_addr: 0,
            flags: 0,
            live: Arc::new(AtomicBool::new(false)),
            local: 0,
            key: 0,
        }
    }

    /// Handle on its server.
    pub fn handle(&self) -> u64 {
        self.handle
    }
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// Index of its server in the client's list.
    pub fn server(&self) -> usize {
        self.server
    }
    /// Whether other clients may open it.
    pub fn is_shared(&self) -> bool {
        self.flags & ALLOC_FLAG_SHARED != 0
    }
    /// Whether this client reaches it with plain loads, stores and CPU atomics (its server's
    /// pool is mapped here through shared memory).
    pub fn is_direct(&self) -> bool {
        self.local != 0
    }
    /// This process's address of the word at `offset` when the allocation is direct.
    pub(crate) fn local_word(&self, offset: u64) -> Option<*const u64> {
        (self.local != 0 && offset + 8 <= self.size).then(|| (self.local + offset as usize) as *const u64)
    }
    /// Whether it survives its holders.
    pub fn is_persistent(&self) -> bool {
        self.flags & ALLOC_FLAG_PERSISTENT != 0
    }
    /// Remote address of `offset` after checking that `len` bytes fit. The fast-path check.
    #[inline]
    pub(crate) fn target(&self, offset: u64, len: usize) -> Result<u64> {
        if !self.live.load(Ordering::Relaxed) {
            return Err(Error::Freed { handle: self.handle });
        }
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.size => Ok(self.remote_addr + offset),
            _ => Err(Error::OutOfBounds { offset, len: len as u64, size: self.size }),
        }
    }
    #[inline]
    pub(crate) fn word(&self, offset: u64) -> Result<u64> {
        if !offset.is_multiple_of(8) {
            return Err(Error::Misaligned { offset });
        }
        self.target(offset, 8)
    }
}
