//! Global addresses: 128 bits that name one byte of server memory anywhere in the cluster,
//! with the protection domain that may touch it (Ploumidis et al. 2023 §4.3: the 80-bit global virtual
//! address with a protection-domain id; here in software, so there is room for 128 bits).
//!
//! Layout of the 16 bytes (little-endian, as `u128` bits):
//!
//! | bytes | bits | field | meaning |
//! | --- | --- | --- | --- |
//! | 0..5 | 0..40 | `offset` | byte offset inside the allocation (< [`crate::limits::ALLOC_SIZE_MAX`]) |
//! | 5..10 | 40..80 | `handle` | the allocation's handle on its server (1..2^40) |
//! | 10..12 | 80..96 | `domain` | protection domain: the owning tenant's id on that server (1..) |
//! | 12..16 | 96..128 | `server` | the server's tag (see [`server_tag`]) |
//!
//! An address with domain 0 is the null address. The address is not a capability: a
//! process must also hold the domain's credential (the tenant token); the server checks
//! that before it hands out the remote key the address needs.

use std::fmt;
use std::str::FromStr;

/// Largest offset and handle a global address can carry (40 bits each).
pub const GLOBAL_FIELD_MAX: u64 = (1 << 40) - 1;

/// A 128-bit global address. Plain data: copy it, send it through MPI, print it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct GlobalAddress(pub u128);

/// A field does not fit its bits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// Offset or handle above 2^40 - 1.
    #[error("{field} {value} does not fit the 40 bits of a global address")]
    FieldTooLarge {
        /// Which field.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// Text that is not `nam:` and 32 hex digits.
    #[error("{0:?} is not a global address (expected nam: followed by 32 hex digits)")]
    Syntax(String),
}

impl GlobalAddress {
    /// Packs the four fields; fails when offset or handle exceed 40 bits.
    pub fn new(server: u32, domain: u16, handle: u64, offset: u64) -> Result<GlobalAddress, AddressError> {
        if handle > GLOBAL_FIELD_MAX {
            return Err(AddressError::FieldTooLarge { field: "handle", value: handle });
        }
        if offset > GLOBAL_FIELD_MAX {
            return Err(AddressError::FieldTooLarge { field: "offset", value: offset });
        }
        Ok(GlobalAddress(offset as u128 | (handle as u128) << 40 | (domain as u128) << 80 | (server as u128) << 96))
    }
    /// The server tag.
    pub fn server(self) -> u32 {
        (self.0 >> 96) as u32
    }
    /// The protection domain.
    pub fn domain(self) -> u16 {
        (self.0 >> 80) as u16
    }
    /// The allocation handle.
    pub fn handle(self) -> u64 {
        (self.0 >> 40) as u64 & GLOBAL_FIELD_MAX
    }
    /// The byte offset inside the allocation.
    pub fn offset(self) -> u64 {
        self.0 as u64 & GLOBAL_FIELD_MAX
    }
    /// Whether this is the null address (domain 0).
    pub fn is_null(self) -> bool {
        self.domain() == 0
    }
    /// The address `bytes` further on in the same allocation; `None` past 40 bits.
    pub fn offset_by(self, bytes: u64) -> Option<GlobalAddress> {
        let offset = self.offset().checked_add(bytes).filter(|o| *o <= GLOBAL_FIELD_MAX)?;
        GlobalAddress::new(self.server(), self.domain(), self.handle(), offset).ok()
    }
    /// The 16 wire bytes.
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_le_bytes()
    }
    /// From the 16 wire bytes.
    pub fn from_bytes(bytes: [u8; 16]) -> GlobalAddress {
        GlobalAddress(u128::from_le_bytes(bytes))
    }
}

impl fmt::Display for GlobalAddress {
    /// `nam:` and the 128 bits as 32 hex digits, most significant first
    /// (server, domain, handle, offset read left to right).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "nam:{:032x}", self.0)
    }
}

impl FromStr for GlobalAddress {
    type Err = AddressError;
    fn from_str(s: &str) -> Result<GlobalAddress, AddressError> {
        let hex = s.strip_prefix("nam:").filter(|h| h.len() == 32).ok_or_else(|| AddressError::Syntax(s.into()))?;
        u128::from_str_radix(hex, 16).map(GlobalAddress).map_err(|_| AddressError::Syntax(s.into()))
    }
}

/// The tag a server puts in its global addresses: FNV-1a (32 bit) of its name and listening
/// address, so it stays the same across restarts on the same address (persistent
/// allocations keep their addresses) and two servers of one job differ unless they share
/// both (clients refuse a job whose servers collide).
pub fn server_tag(server_name: &str, listen: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in server_name.bytes().chain([0u8]).chain(listen.bytes()) {
        hash ^= byte as u32;
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_sit_where_the_doc_says() {
        let a = GlobalAddress::new(0xA1B2_C3D4, 0x0102, 0x12_3456_789A, 0xFF_0000_0001).unwrap();
        assert_eq!(
            (a.server(), a.domain(), a.handle(), a.offset()),
            (0xA1B2_C3D4, 0x0102, 0x12_3456_789A, 0xFF_0000_0001)
        );
        let b = a.to_bytes();
        assert_eq!(&b[0..5], &[0x01, 0, 0, 0, 0xFF]);
        assert_eq!(&b[5..10], &[0x9A, 0x78, 0x56, 0x34, 0x12]);
        assert_eq!(&b[10..12], &[0x02, 0x01]);
        assert_eq!(&b[12..16], &[0xD4, 0xC3, 0xB2, 0xA1]);
        assert_eq!(GlobalAddress::from_bytes(b), a);
        assert_eq!(a.to_string().parse::<GlobalAddress>().unwrap(), a);
        assert_eq!(a.offset_by(1).unwrap().offset(), 0xFF_0000_0002);
        assert!(a.offset_by(1 << 40).is_none());
    }

    #[test]
    fn oversized_fields_and_bad_text_are_refused() {
        assert!(matches!(
            GlobalAddress::new(1, 1, 1 << 40, 0),
            Err(AddressError::FieldTooLarge { field: "handle", .. })
        ));
        assert!(matches!(
            GlobalAddress::new(1, 1, 1, 1 << 40),
            Err(AddressError::FieldTooLarge { field: "offset", .. })
        ));
        for bad in ["", "nam:", "nam:xyz", "0123456789abcdef0123456789abcdef", "nam:0123456789abcdef0123456789abcdeg"] {
            assert!(bad.parse::<GlobalAddress>().is_err(), "{bad}");
        }
        assert!(GlobalAddress::default().is_null());
    }
}
