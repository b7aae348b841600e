//! A parity slot: one pool allocation holding an epoch's header, checksum tables and XOR
//! parity. A group has two (ping-pong), so generating epoch `e` never touches the slot that
//! holds the last complete epoch. The layout is in `docs/protocol.md`; with a file-backed
//! pool the slots survive a server restart and the newest valid one is restorable.

use crate::pool::Pool;
use nam_proto::ckpt::CkptWord;
use nam_proto::limits::{ALLOC_SIZE_MAX, CKPT_SEGMENTS_MAX, CKPT_SEGMENT_MAX, CKPT_SEGMENT_MIN};

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
    /// Decodes a stored header (its first [`HEADER_LEN`] bytes, then the size table) of a
    /// slot allocation of `slot_len` bytes for a group of `ranks` ranks: `Ok(None)` when the
    /// magic is absent (never initialised), otherwise every field checked so that the
    /// geometry cannot overflow, index past the size table, address past the allocation or
    /// size a job's tables beyond [`CKPT_SEGMENTS_MAX`].
    pub(crate) fn decode(bytes: &[u8], ranks: u32, slot_len: u64) -> Result<Option<SlotHeader>, String> {
        let Some(head) = bytes.get(..HEADER_LEN as usize) else {
            return Err(format!("{} bytes, shorter than the {HEADER_LEN}-byte header", bytes.len()));
        };
        let word = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().expect("8 bytes"));
        if word(0) != SLOT_MAGIC {
            return Ok(None);
        }
        let stored_ranks = u32::from_le_bytes(head[24..28].try_into().expect("4 bytes"));
        let segment = u32::from_le_bytes(head[28..32].try_into().expect("4 bytes"));
        if stored_ranks != ranks {
            return Err(format!("the header says {stored_ranks} ranks; the group has {ranks}"));
        }
        if !(CKPT_SEGMENT_MIN..=CKPT_SEGMENT_MAX).contains(&segment) || !segment.is_multiple_of(16) {
            return Err(format!(
                "segment of {segment} bytes: not a multiple of 16 in {CKPT_SEGMENT_MIN}..={CKPT_SEGMENT_MAX}"
            ));
        }
        let state = match word(16) {
            0 => SlotState::Empty,
            1 => SlotState::Writing,
            2 => SlotState::Valid,
            other => return Err(format!("unknown state {other}")),
        };
        let epoch = word(8);
        if epoch == 0 || epoch > CkptWord::EPOCH_MASK {
            return Err(format!("epoch {epoch} is outside 1..={}", CkptWord::EPOCH_MASK));
        }
        let table = &bytes[HEADER_LEN as usize..];
        if table.len() < 8 * ranks as usize {
            return Err(format!("the size table of {ranks} ranks is cut at {} bytes", table.len()));
        }
        let sizes: Vec<u64> =
            table.chunks_exact(8).take(ranks as usize).map(|c| u64::from_le_bytes(c.try_into().expect("8"))).collect();
        if let Some((r, size)) = sizes.iter().enumerate().find(|(_, &s)| s > ALLOC_SIZE_MAX) {
            return Err(format!("rank {r}'s size {size} exceeds {ALLOC_SIZE_MAX}"));
        }
        let header = SlotHeader { epoch, state, ranks, segment, sizes };
        // With sizes, ranks and the segment bounded as above, none of the layout's sums overflow.
        if header.segments() > CKPT_SEGMENTS_MAX {
            return Err(format!("{} segments exceed {CKPT_SEGMENTS_MAX}", header.segments()));
        }
        if header.slot_len() > slot_len {
            return Err(format!("its layout needs {} bytes; the slot's allocation has {slot_len}", header.slot_len()));
        }
        Ok(Some(header))
    }

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

    /// Reads the header back and checks it against the group (`ranks`) and this slot's
    /// allocation: `Ok(None)` for a slot never initialised, `Err` (the cause) for one whose
    /// stored bytes cannot describe an epoch of this group. Anyone holding the pool's key can
    /// write these bytes, so nothing here is trusted until [`SlotHeader::decode`] accepts it.
    pub(super) fn read_header(&self, pool: &Pool, ranks: u32) -> Result<Option<SlotHeader>, String> {
        if self.len < HEADER_LEN {
            return Err(format!("the slot's allocation is {} bytes, shorter than a header", self.len));
        }
        let head = pool.read(self.offset, HEADER_LEN as usize);
        // The size table is read only once the rank count is known to be this group's.
        let stored_ranks = u32::from_le_bytes(head[24..28].try_into().expect("4 bytes"));
        let with_sizes = HEADER_LEN + 8 * stored_ranks as u64;
        if stored_ranks != ranks || with_sizes > self.len {
            return SlotHeader::decode(&head, ranks, self.len);
        }
        SlotHeader::decode(&pool.read(self.offset, with_sizes as usize), ranks, self.len)
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

#[cfg(test)]
mod decode_tests {
    use super::*;

    fn stored(h: &SlotHeader) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&SLOT_MAGIC.to_le_bytes());
        bytes.extend_from_slice(&h.epoch.to_le_bytes());
        bytes.extend_from_slice(&(h.state as u64).to_le_bytes());
        bytes.extend_from_slice(&h.ranks.to_le_bytes());
        bytes.extend_from_slice(&h.segment.to_le_bytes());
        bytes.resize(HEADER_LEN as usize, 0);
        h.sizes.iter().for_each(|s| bytes.extend_from_slice(&s.to_le_bytes()));
        bytes
    }

    #[test]
    fn a_sound_header_decodes_and_every_corrupt_field_is_named() {
        let h = SlotHeader { epoch: 3, state: SlotState::Valid, ranks: 2, segment: 4096, sizes: vec![9000, 10] };
        let len = h.slot_len();
        assert_eq!(SlotHeader::decode(&stored(&h), 2, len), Ok(Some(h.clone())));
        assert_eq!(SlotHeader::decode(&[0; 64], 2, len), Ok(None), "never initialised");
        let bad = |f: &dyn Fn(&mut SlotHeader), ranks: u32, len: u64| {
            let mut b = h.clone();
            f(&mut b);
            SlotHeader::decode(&stored(&b), ranks, len).unwrap_err()
        };
        assert!(bad(&|_| {}, 3, len).contains("2 ranks; the group has 3"));
        assert!(bad(&|b| b.segment = 0, 2, len).contains("segment"));
        assert!(bad(&|b| b.epoch = 0, 2, len).contains("epoch"));
        assert!(bad(&|b| b.sizes[1] = u64::MAX, 2, len).contains("rank 1's size"));
        assert!(bad(&|b| b.sizes[0] = 1 << 30, 2, len).contains("layout needs"));
        assert!(bad(
            &|b| {
                b.segment = 16;
                b.sizes[0] = 1 << 40
            },
            2,
            u64::MAX
        )
        .contains("segments exceed"));
        assert!(SlotHeader::decode(&stored(&h)[..70], 2, len).unwrap_err().contains("cut"));
        let mut state = stored(&h);
        state[16] = 9;
        assert!(SlotHeader::decode(&state, 2, len).unwrap_err().contains("unknown state 9"));
    }
}
