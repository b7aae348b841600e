//! What nam-ckpt stores in each nam-incr commit (so it is complete exactly when the
//! checkpoint is): the version, the job size, which region id each engine region is, and the
//! regions kept whole in the commit (those sharing a page with another protected region,
//! which write tracking at page granularity cannot tell apart).
//!
//! Layout (little-endian; the commit's CRC32C covers it): version u64, ranks u32, id count
//! u32, ids i32 each (`i32::MIN`: unprotected), inline count u32, then per inline region
//! id i32, len u64, bytes.

use crate::error::{CkptError, Result};

const NONE: i32 = i32::MIN;

/// The metadata of one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// The nam-ckpt version.
    pub version: u64,
    /// Ranks of the job.
    pub ranks: usize,
    /// Region id of each engine region, by engine index.
    pub ids: Vec<Option<i32>>,
    /// Regions stored whole: (id, bytes).
    pub inline: Vec<(i32, Vec<u8>)>,
}

impl Meta {
    /// Encodes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&(self.ranks as u32).to_le_bytes());
        b.extend_from_slice(&(self.ids.len() as u32).to_le_bytes());
        for id in &self.ids {
            b.extend_from_slice(&id.unwrap_or(NONE).to_le_bytes());
        }
        b.extend_from_slice(&(self.inline.len() as u32).to_le_bytes());
        for (id, bytes) in &self.inline {
            b.extend_from_slice(&id.to_le_bytes());
            b.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            b.extend_from_slice(bytes);
        }
        b
    }

    /// Decodes; `what` names the checkpoint in errors.
    pub fn decode(what: &str, bytes: &[u8]) -> Result<Meta> {
        let mut r = nam_incr::format::Reader::new(what, bytes);
        let corrupt = |e: nam_incr::StoreError| CkptError::Corrupt(e.to_string());
        let version = r.u64().map_err(corrupt)?;
        let ranks = r.u32().map_err(corrupt)? as usize;
        let count = r.u32().map_err(corrupt)?;
        let mut ids = Vec::new();
        for _ in 0..count {
            let id = i32::from_le_bytes(r.take(4).map_err(corrupt)?.try_into().expect("4 bytes"));
            ids.push((id != NONE).then_some(id));
        }
        let mut inline = Vec::new();
        for _ in 0..r.u32().map_err(corrupt)? {
            let id = i32::from_le_bytes(r.take(4).map_err(corrupt)?.try_into().expect("4 bytes"));
            let len = r.u64().map_err(corrupt)? as usize;
            inline.push((id, r.take(len).map_err(corrupt)?.to_vec()));
        }
        Ok(Meta { version, ranks, ids, inline })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let meta = Meta { version: 42, ranks: 3, ids: vec![Some(1), None, Some(-7)], inline: vec![(2, vec![9; 8])] };
        let bytes = meta.encode();
        assert_eq!(Meta::decode("m", &bytes).unwrap(), meta);
        assert!(matches!(Meta::decode("m", &bytes[..bytes.len() - 1]), Err(CkptError::Corrupt(_))));
    }
}
