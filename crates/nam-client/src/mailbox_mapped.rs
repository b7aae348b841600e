//! The same-host fast path of mailboxes: when the server's pool is mapped into this process
//! (the direct path, [`crate::direct`]), a sender claims a ticket with one compare-and-swap
//! on `tail` and fills its slot with plain stores, ending with a release store of the slot's
//! `seq` word; the owner polls that word with a plain acquire load, in the slot's own cache
//! line, and frees slots with a release store of `head`. No UCX request, no client lock,
//! no extra round trip: one message costs what an 8-byte put and a signal cost.
//!
//! It is the protocol of [`nam_proto::mailbox`] word for word, so mapped senders, RMA
//! senders and senders the server delivers for (TCP) share one mailbox; the CPU's atomics
//! on the mapped words are the atomics UCX's shared-memory transport and the server use.
//! The protection-domain check happened when the sender resolved the mailbox's global
//! address (the server checks the domain before it grants the allocation), exactly as for
//! an rkey: a mapping is only ever made for memory the domain may reach.

use nam_proto::mailbox::{MailboxLayout, MAILBOX_HEAD_AT, MAILBOX_SLOT_HEADER_LEN, MAILBOX_TAIL_AT};
use std::sync::atomic::{AtomicU64, Ordering};

/// A mailbox whose bytes are mapped here: its header's local address and its geometry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MappedMailbox {
    base: usize,
    layout: MailboxLayout,
}

/// Why a claim gave no ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimError {
    /// Every slot holds a message the owner has not consumed (as far as `head` says).
    Full,
    /// Other senders won the compare-and-swap this many times in a row.
    Contended,
}

/// Lost compare-and-swaps after which a claim gives up (the caller checks its deadline).
const CLAIM_TRIES: u32 = 1024;

impl MappedMailbox {
    /// The mailbox whose header is at local address `base`.
    ///
    /// # Safety
    /// `base` must be 8-byte aligned and point to `layout.total_len()` mapped bytes laid out
    /// as a mailbox of `layout`, which stay mapped while the value is used.
    pub(crate) unsafe fn new(base: usize, layout: MailboxLayout) -> MappedMailbox {
        MappedMailbox { base, layout }
    }

    fn word(&self, at: u64) -> &AtomicU64 {
        // SAFETY: `at` is a word of the header or a slot's `seq` (8-byte aligned, in bounds
        // per `new`'s contract); AtomicU64 has u64's layout.
        unsafe { &*((self.base + at as usize) as *const AtomicU64) }
    }

    /// `head` as the owner last published it (acquire: the owner's copies out of the freed
    /// slots happened before).
    pub(crate) fn head(&self) -> u64 {
        self.word(MAILBOX_HEAD_AT).load(Ordering::Acquire)
    }

    /// Publishes `head`: frees the slots of the tickets below `head + slots`.
    pub(crate) fn publish_head(&self, head: u64) {
        self.word(MAILBOX_HEAD_AT).store(head, Ordering::Release);
    }

    /// Takes the next ticket by one compare-and-swap of `tail`, if a slot is free. `tail` is
    /// the caller's guess (corrected by a lost compare-and-swap), `head` its cached `head`
    /// (refreshed only when the mailbox looks full, so polling owners are not disturbed).
    pub(crate) fn claim(&self, tail: &mut u64, head: &mut u64) -> Result<u64, ClaimError> {
        let slots = self.layout.slots as u64;
        let word = self.word(MAILBOX_TAIL_AT);
        let mut t = *tail;
        for _ in 0..CLAIM_TRIES {
            if t.wrapping_sub(*head) >= slots {
                *head = self.head();
                // tail >= head always: a guess below head is merely stale.
                t = t.max(*head);
                if t - *head >= slots {
                    *tail = t;
                    return Err(ClaimError::Full);
                }
            }
            match word.compare_exchange(t, t + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    *tail = t + 1;
                    return Ok(t);
                }
                Err(now) => t = now,
            }
        }
        *tail = t;
        Err(ClaimError::Contended)
    }

    /// Fills ticket `ticket`'s slot: length and sender, payload, then (release) `seq`.
    pub(crate) fn fill(&self, ticket: u64, sender: u32, data: &[u8]) {
        debug_assert!(data.len() <= self.layout.slot_size as usize);
        let at = self.layout.slot_at(ticket);
        let slot = self.base + at as usize;
        let meta = data.len() as u64 | (sender as u64) << 32;
        // SAFETY: the slot is this sender's by its ticket (its previous message was consumed:
        // `claim` saw head > ticket - slots), 64-byte aligned, and the payload fits it.
        unsafe {
            std::ptr::write((slot + 8) as *mut u64, meta.to_le());
            let payload = (slot + MAILBOX_SLOT_HEADER_LEN as usize) as *mut u8;
            std::ptr::copy_nonoverlapping(data.as_ptr(), payload, data.len());
        }
        self.word(at).store(ticket + 1, Ordering::Release);
    }

    /// The message of ticket `head`, if complete: copies it into `buffer` (at least the slot
    /// size) and returns its sender and length. The slot stays the owner's until it
    /// publishes a `head` above `head`.
    pub(crate) fn take(&self, head: u64, buffer: &mut [u8]) -> Option<(u32, usize)> {
        let at = self.layout.slot_at(head);
        if self.word(at).load(Ordering::Acquire) != head + 1 {
            return None;
        }
        let slot = self.base + at as usize;
        // SAFETY: seq == head + 1 (acquire) orders the sender's stores of this slot before
        // these reads; no sender writes the slot again before `head` passes it.
        let meta = u64::from_le(unsafe { std::ptr::read((slot + 8) as *const u64) });
        let len = (meta as u32 as usize).min(self.layout.slot_size as usize);
        unsafe {
            let payload = (slot + MAILBOX_SLOT_HEADER_LEN as usize) as *const u8;
            std::ptr::copy_nonoverlapping(payload, buffer.as_mut_ptr(), len);
        }
        Some(((meta >> 32) as u32, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nam_proto::mailbox::MAILBOX_HEADER_LEN;

    /// A mailbox in ordinary memory, 64-byte aligned like the pool's allocations.
    fn mailbox(layout: MailboxLayout) -> (Vec<u64>, MappedMailbox) {
        let mut words = vec![0u64; layout.total_len() as usize / 8 + 8];
        let base = (words.as_mut_ptr() as usize).next_multiple_of(64);
        let header = layout.encode_header();
        // SAFETY: `words` holds total_len bytes past `base` and outlives the test's use.
        unsafe { std::ptr::copy_nonoverlapping(header.as_ptr(), base as *mut u8, MAILBOX_HEADER_LEN as usize) };
        (words, unsafe { MappedMailbox::new(base, layout) })
    }

    #[test]
    fn tickets_come_in_order_and_a_full_mailbox_refuses_without_writing() {
        let layout = MailboxLayout::new(16, 2).unwrap();
        let (_memory, m) = mailbox(layout);
        let (mut tail, mut head) = (0, 0);
        for i in 0..2u8 {
            assert_eq!(m.claim(&mut tail, &mut head), Ok(i as u64));
            m.fill(i as u64, 7, &[i; 16]);
        }
        assert_eq!(m.claim(&mut tail, &mut head), Err(ClaimError::Full));
        let mut buffer = [0u8; 16];
        assert_eq!(m.take(0, &mut buffer), Some((7, 16)));
        assert_eq!(buffer, [0; 16]);
        // Not yet published: still full for senders.
        assert_eq!(m.claim(&mut tail, &mut head), Err(ClaimError::Full));
        m.publish_head(1);
        assert_eq!(m.claim(&mut tail, &mut head), Ok(2));
        assert_eq!(m.take(1, &mut buffer), Some((7, 16)));
        assert_eq!(buffer, [1; 16], "the refused claim overwrote nothing");
        assert_eq!(m.take(2, &mut buffer), None, "claimed but not filled");
        m.fill(2, 9, b"abc");
        assert_eq!(m.take(2, &mut buffer), Some((9, 3)));
    }

    #[test]
    fn a_stale_tail_guess_is_corrected_by_the_compare_and_swap() {
        let (_memory, m) = mailbox(MailboxLayout::new(8, 4).unwrap());
        let (mut a, mut b, mut head) = (0, 0, 0);
        assert_eq!(m.claim(&mut a, &mut head), Ok(0));
        assert_eq!(m.claim(&mut b, &mut head), Ok(1), "b's guess 0 was stale");
        assert_eq!(m.claim(&mut a, &mut head), Ok(2));
    }
}
