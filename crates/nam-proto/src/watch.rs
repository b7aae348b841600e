//! Waiting on a word at the server: the [`crate::gas::GasRequest::Watch`] request asks the
//! server to answer only once the 32- or 64-bit word it names satisfies a comparison (or its
//! deadline passes), so that a client whose path to the server is messages (TCP) or RMA
//! learns of a signal in one network trip instead of polling. This module holds what client
//! and server must agree on: the comparison codes and how they are evaluated.

/// A comparison of a word against a value, as `shmem_wait_until`'s `SHMEM_CMP_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchCompare {
    /// word == value
    Eq = 1,
    /// word != value
    Ne = 2,
    /// word >= value
    Ge = 3,
    /// word > value
    Gt = 4,
    /// word <= value
    Le = 5,
    /// word < value
    Lt = 6,
}

/// Bit of a comparison code that makes the ordering comparisons signed (two's complement at
/// the word's width).
pub const WATCH_SIGNED: u8 = 0x10;

impl WatchCompare {
    /// The comparison for its code's low bits, if it is one.
    pub fn from_code(code: u8) -> Option<WatchCompare> {
        use WatchCompare::*;
        [Eq, Ne, Ge, Gt, Le, Lt].into_iter().find(|c| *c as u8 == code & !WATCH_SIGNED)
    }
}

/// Whether `word` satisfies comparison `code` ([`WatchCompare`], plus [`WATCH_SIGNED`])
/// against `value`, both read at `width_bytes` (4: the low 32 bits of each; 8). `None` for a
/// code or width that is not one.
pub fn watch_holds(code: u8, width_bytes: u8, word: u64, value: u64) -> Option<bool> {
    let compare = WatchCompare::from_code(code)?;
    if code & !(WATCH_SIGNED | 0x0f) != 0 {
        return None;
    }
    let signed = code & WATCH_SIGNED != 0;
    // Map both to i128 so one comparison serves every width and signedness.
    let widen = |v: u64| -> i128 {
        match (width_bytes, signed) {
            (4, false) => v as u32 as i128,
            (4, true) => v as u32 as i32 as i128,
            (_, false) => v as i128,
            (_, true) => v as i64 as i128,
        }
    };
    if width_bytes != 4 && width_bytes != 8 {
        return None;
    }
    let (w, v) = (widen(word), widen(value));
    Some(match compare {
        WatchCompare::Eq => w == v,
        WatchCompare::Ne => w != v,
        WatchCompare::Ge => w >= v,
        WatchCompare::Gt => w > v,
        WatchCompare::Le => w <= v,
        WatchCompare::Lt => w < v,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_follow_width_and_sign() {
        assert_eq!(watch_holds(WatchCompare::Gt as u8, 8, 5, 4), Some(true));
        assert_eq!(watch_holds(WatchCompare::Gt as u8, 8, u64::MAX, 4), Some(true));
        assert_eq!(watch_holds(WatchCompare::Gt as u8 | WATCH_SIGNED, 8, u64::MAX, 4), Some(false));
        assert_eq!(watch_holds(WatchCompare::Lt as u8 | WATCH_SIGNED, 4, 0xffff_ffff, 0), Some(true));
        assert_eq!(watch_holds(WatchCompare::Eq as u8, 4, 0x1_0000_0007, 7), Some(true), "32 bits only");
        assert_eq!(watch_holds(0, 8, 1, 1), None);
        assert_eq!(watch_holds(7, 8, 1, 1), None);
        assert_eq!(watch_holds(WatchCompare::Eq as u8, 2, 1, 1), None);
        assert_eq!(watch_holds(0x41, 8, 1, 1), None);
    }
}
