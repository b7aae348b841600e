//! A parity slot: one pool allocation holding an epoch's header, checksum tables and XOR
//! parity. A group has two (ping-pong), so generating epoch `e` never touches the slot that
//! holds the last complete epoch. The layout is in `docs/protocol.md`; with a file-backed
//! pool the slots survive a server restart and the newest valid one is restorable.

use crate::pool::Pool;

/// `"NAMPAR01"`: marks an initialised slot.
pub(super) const SLOT_MAGIC: u64 = u64::from_le_bytes(*b"NAMPAR01");
/// Header bytes before the size table.
pub(super) const HEADER_LEN: u64 = 64;
/// Parity data starts on a page boundary.
pub(super) const DATA_ALIGN: u64 = 4096;

/// What a slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SlotState {
    /// Never written, or its epoch failed.
    Empty = 0,
    /// An epoch is being generated into it: not restorable.
    Writing = 1,
    /// Holds a complete epoch.
    Valid = 2,
}

/// The geometry of a slot, fixed when the epoch starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SlotHeader {
    /// Epoch number.
    pub(super) epoch: u64,
    /// Empty, writing or valid.
    pub(super) state: SlotState,
    /// Ranks in the group.
    pub(super) ranks: u32,
    /// Bytes per segment.
    pub(super) segment: u32,
    /// Checkpoint length of each rank in this epoch.
    pub(super) sizes: Vec<u64>,
}

impl SlotHeader {
    /// Length of the parity: the longest rank's checkpoint.
    pub(super) fn parity_len(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(0)
    }

    /// Segments of the parity.
    pub(super) fn segments(&self) -> u64 {
        self.parity_len().div_ceil(self.segment as u64)
    }

    pub(super) fn sizes_at(&self) -> u64 {
        HEADER_LEN
    }

    /// Offset (inside the slot) of the parity checksum of segment 0.
    pub(super) fn parity_crc_at(&self) -> u64 {
        self.sizes_at() + 8 * self.ranks as u64
    }

    /// Offset of rank `rank`'s checksum of segment 0.
    pub(super) fn rank_crc_at(&self, rank: u32) -> u64 {
        self.parity_crc_at() + 4 * self.segments() * (1 + rank as u64)
    }

    /// Offset of the parity's first byte.
    pub(super) fn data_at(&self) -> u64 {
        self.rank_crc_at(self.ranks).div_ceil(DATA_ALIGN) * DATA_ALIGN
    }

    /// Allocation size the slot needs.
    pub(super) fn slot_len(&self) -> u64 {
        self.data_at() + self.segments() * self.segment as u64
    }
}

/// A slot placed in the pool at `offset` (its allocation's first byte).
#[derive(Debug, Clone)]
pub(super) struct Slot {
    /// Pool offset of the allocation.
    pub(super) offset: u64,
    /// Its size.
    pub(super) len: u64,
    /// Manager handle of the allocation.
    pub(super) handle: u64,
}

impl Slot {
    /// Writes `header` (state included) and zeroes the checksum tables.
    pub(super) fn write_header(&self, pool: &Pool, header: &SlotHeader) {
        let mut bytes = Vec::with_capacity(header.parity_crc_at() as usize);
        bytes.extend_from_slice(&SLOT_MAGIC.to_le_bytes());
        bytes.extend_from_slice(&header.epoch.to_le_bytes());
        bytes.extend_from_slice(&(header.state as u64).to_le_bytes());
        bytes.extend_from_slice(&header.ranks.to_le_bytes());
        bytes.extend_from_slice(&header.segment.to_le_bytes());
        bytes.resize(HEADER_LEN as usize, 0);
        for size in &header.sizes {
            bytes.extend_from_slice(&size.to_le_bytes());
        }
        pool.write(self.offset, &bytes);
        pool.zero(self.offset + header.parity_crc_at(), header.data_at() - header.parity_crc_at());
    }

    /// Marks the slot's state; written last when an epoch completes, first when it starts.
    pub(super) fn set_state(&self, pool: &Pool, state: SlotState) {
        pool.word(self.offset + 16).store(state as u64, std::sync::atomic::Ordering::SeqCst);
    }

    /// Reads the header back, or `None` if the slot is not initialised or inconsistent.
    pub(super) fn read_header(&self, pool: &Pool) -> Option<SlotHeader> {
        if self.len < HEADER_LEN {
            return None;
        }
        let head = pool.read(self.offset, HEADER_LEN as usize);
        let word = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().unwrap());
        if word(0) != SLOT_MAGIC {
            return None;
        }
        let ranks = u32::from_le_bytes(head[24..28].try_into().unwrap());
        let segment = u32::from_le_bytes(head[28..32].try_into().unwrap());
        if ranks == 0 || ranks > nam_proto::limits::CKPT_RANKS_MAX || segment == 0 {
            return None;
        }
        let state = match word(16) {
            1 => SlotState::Writing,
            2 => SlotState::Valid,
            _ => SlotState::Empty,
        };
        let raw = pool.read(self.offset + HEADER_LEN, 8 * ranks as usize);
        let sizes = raw.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        let header = SlotHeader { epoch: word(8), state, ranks, segment, sizes };
        (header.slot_len() <= self.len).then_some(header)
    }

    /// Stores a checksum at table offset `at` (from [`SlotHeader::parity_crc_at`] or
    /// [`SlotHeader::rank_crc_at`]) for segment `segment`.
    pub(super) fn store_crc(&self, pool: &Pool, at: u64, segment: u64, crc: u32) {
        pool.write(self.offset + at + 4 * segment, &crc.to_le_bytes());
    }

    /// Reads a stored checksum.
    pub(super) fn load_crc(&self, pool: &Pool, at: u64, segment: u64) -> u32 {
        u32::from_le_bytes(pool.read(self.offset + at + 4 * segment, 4).try_into().unwrap())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_ordered_and_page_aligned() {
        let h = SlotHeader { epoch: 1, state: SlotState::Writing, ranks: 3, segment: 1024, sizes: vec![5000, 100, 0] };
        assert_eq!(h.parity_len(), 5000);
        assert_eq!(h.segments(), 5);
        assert_eq!(h.parity_crc_at(), 64 + 24);
        assert_eq!(h.rank_crc_at(0), 64 + 24 + 20);
        assert_eq!(h.rank_crc_at(2), 64 + 24 + 60);
        assert_eq!(h.data_at(), 4096);
        assert_eq!(h.slot_len(), 4096 + 5 * 1024);
    }
}
