//! The byte layout of a mailbox in server memory (Ploumidis et al. 2023 §4.4: packetizer messages into a
//! mailbox, with back-pressure). A mailbox is an allocation; senders reach it by its global
//! address, so the server's protection-domain check guards it like any other memory.
//!
//! ```text
//! header (128 bytes, at the address's offset; two cache lines so senders and owner do not
//! write the same line)
//!   0..8     magic      "NAMMBOX1"
//!   8..12    slot_size  u32: payload bytes per slot (default 64)
//!   12..16   slots      u32: number of slots (a power of two)
//!   16..24   tail       u64: tickets handed out (compare-and-swap by senders)
//!   24..64   reserved   zero
//!   64..72   head       u64: messages consumed, as last published by the owner
//!   72..128  reserved   zero
//! slot i (at 128 + i * stride, stride = 16 + slot_size rounded up to 64)
//!   0..8     seq        u64: ticket + 1 once the message is complete; the owner waits for it
//!   8..12    len        u32: payload bytes used
//!   12..16   sender     u32: the sender's process id
//!   16..     payload
//! ```
//!
//! A sender takes ticket `t` by compare-and-swap of `tail` from `t` to `t + 1`, but only while
//! `t - head < slots` (otherwise the mailbox is full: a retryable error, nothing written).
//! It writes the slot `t mod slots` and then, ordered after the payload (put, fence,
//! atomic), sets `seq = t + 1`. The owner consumes tickets in order: it waits for
//! `seq == head + 1` in slot `head mod slots`, copies the message out, and only then counts
//! it consumed. It publishes `head` (which frees slots) every `slots / 4` messages and
//! whenever it finds the mailbox empty, so a sender may see a mailbox as full for up to
//! `slots / 4 - 1` consumed messages, never longer than until the owner next polls.
//! Tickets give a total order, so each sender's messages arrive in the order it sent them.

/// `"NAMMBOX1"` little-endian.
pub const MAILBOX_MAGIC: u64 = u64::from_le_bytes(*b"NAMMBOX1");
/// Size of the mailbox header.
pub const MAILBOX_HEADER_LEN: u64 = 128;
/// Offset of `slot_size` in the header.
pub const MAILBOX_SLOT_SIZE_AT: u64 = 8;
/// Offset of `slots` in the header.
pub const MAILBOX_SLOTS_AT: u64 = 12;
/// Offset of `head` in the header.
pub const MAILBOX_HEAD_AT: u64 = 64;
/// Offset of `tail` in the header.
pub const MAILBOX_TAIL_AT: u64 = 16;
/// Size of a slot's header (`seq`, `len`, `sender`).
pub const MAILBOX_SLOT_HEADER_LEN: u64 = 16;
pub use crate::limits::{MAILBOX_SLOTS_MAX, MAILBOX_SLOT_SIZE_DEFAULT, MAILBOX_SLOT_SIZE_MAX};

/// The geometry of one mailbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MailboxLayout {
    /// Payload bytes per slot.
    pub slot_size: u32,
    /// Number of slots (a power of two).
    pub slots: u32,
}

impl MailboxLayout {
    /// A layout, if `slot_size` is 1..=[`MAILBOX_SLOT_SIZE_MAX`] and `slots` a power of two
    /// up to [`MAILBOX_SLOTS_MAX`].
    pub fn new(slot_size: u32, slots: u32) -> Option<MailboxLayout> {
        let ok =
            (1..=MAILBOX_SLOT_SIZE_MAX).contains(&slot_size) && slots.is_power_of_two() && slots <= MAILBOX_SLOTS_MAX;
        ok.then_some(MailboxLayout { slot_size, slots })
    }
    /// Bytes between two slots: whole cache lines, so two slots never share one.
    pub fn stride(self) -> u64 {
        (MAILBOX_SLOT_HEADER_LEN + self.slot_size as u64).next_multiple_of(64)
    }
    /// Offset of the slot that ticket `ticket` uses.
    pub fn slot_at(self, ticket: u64) -> u64 {
        MAILBOX_HEADER_LEN + (ticket % self.slots as u64) * self.stride()
    }
    /// Bytes the whole mailbox takes.
    pub fn total_len(self) -> u64 {
        MAILBOX_HEADER_LEN + self.slots as u64 * self.stride()
    }
    /// The header bytes of an empty mailbox.
    pub fn encode_header(self) -> [u8; MAILBOX_HEADER_LEN as usize] {
        let mut h = [0u8; MAILBOX_HEADER_LEN as usize];
        h[0..8].copy_from_slice(&MAILBOX_MAGIC.to_le_bytes());
        h[8..12].copy_from_slice(&self.slot_size.to_le_bytes());
        h[12..16].copy_from_slice(&self.slots.to_le_bytes());
        h
    }
    /// The layout a header describes, if it is a valid mailbox header.
    pub fn decode_header(h: &[u8]) -> Option<MailboxLayout> {
        if h.len() < MAILBOX_HEADER_LEN as usize || h[0..8] != MAILBOX_MAGIC.to_le_bytes() {
            return None;
        }
        let slot_size = u32::from_le_bytes(h[8..12].try_into().ok()?);
        let slots = u32::from_le_bytes(h[12..16].try_into().ok()?);
        MailboxLayout::new(slot_size, slots)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_and_header_round_trip() {
        let l = MailboxLayout::new(64, 8).unwrap();
        assert_eq!((l.stride(), l.slot_at(9), l.total_len()), (128, 128 + 128, 128 + 8 * 128));
        assert_eq!(MailboxLayout::decode_header(&l.encode_header()), Some(l));
        assert_eq!(MailboxLayout::new(64, 6), None);
        assert_eq!(MailboxLayout::new(0, 8), None);
        assert_eq!(MailboxLayout::decode_header(&[0u8; 128]), None);
    }
}
