//! Restart: find the newest complete checkpoint and rebuild the regions from its objects,
//! checking every checksum. A commit that fails a check is skipped for the next older one.

use crate::error::{IncrError, StoreError};
use crate::format::{self, decode_head, Commit, HEAD, IMAGE_MAGIC, RECORD_MAGIC};
use crate::geometry::Geometry;
use crate::record::decode_segment;
use crate::store::Store;

/// How far below the head restart looks for an older complete checkpoint.
const PROBE_BACK_MAX: u32 = 64;

/// Regions rebuilt from a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The interval restored.
    pub interval: u32,
    /// Every region's bytes, by region index.
    pub regions: Vec<Vec<u8>>,
}

impl Restored {
    /// Copies region `index` into `target`, which must have the region's size.
    pub fn copy_into(&self, index: usize, target: &mut [u8]) -> Result<(), IncrError> {
        let data = self.regions.get(index).ok_or(IncrError::UnknownRegion(index))?;
        if data.len() != target.len() {
            return Err(IncrError::SizeMismatch { region: index, expected: data.len(), actual: target.len() });
        }
        target.copy_from_slice(data);
        Ok(())
    }
}

/// Rebuilds the newest complete checkpoint in `store`.
pub fn restore(store: &dyn Store) -> Result<Restored, IncrError> {
    let (head, head_generation) = match store.get(HEAD) {
        Ok(bytes) => decode_head(&bytes).unwrap_or((0, 0)),
        Err(StoreError::NotFound { .. }) => (0, 0),
        Err(e) => return Err(e.into()),
    };
    let mut candidates = Vec::new();
    // The head may lag one commit (killed between the two writes) or be missing.
    let mut top = head;
    while store.exists(&Commit::name(top + 1, 0))? || (head == 0 && top < PROBE_BACK_MAX) {
        top += 1;
    }
    for interval in (top.saturating_sub(PROBE_BACK_MAX).max(1)..=top).rev() {
        let mut generation = if interval == head { head_generation } else { 0 };
        while store.exists(&Commit::name(interval, generation + 1))? {
            generation += 1;
        }
        for g in (0..=generation).rev() {
            candidates.push(Commit::name(interval, g));
        }
    }
    for name in candidates {
        match load(store, &name) {
            Ok(Some(restored)) => return Ok(restored),
            Ok(None) => {}
            Err(e) => log::warn!("skipping checkpoint {name}: {e}"),
        }
    }
    Err(IncrError::NothingToRestore { level: store.level().into() })
}

fn load(store: &dyn Store, name: &str) -> Result<Option<Restored>, StoreError> {
    let bytes = match store.get(name) {
        Ok(b) => b,
        Err(StoreError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let commit = Commit::decode(name, &bytes)?;
    let mut regions: Vec<Vec<u8>> = commit.regions.iter().map(|r| vec![0u8; r.len]).collect();
    for object in &commit.objects {
        let bytes = store.get(object)?;
        match bytes.get(..4).unwrap_or_default() {
            m if m == IMAGE_MAGIC => apply_image(object, format::unseal(object, &bytes)?, &mut regions)?,
            m if m == RECORD_MAGIC => {
                for record in decode_segment(object, &bytes)? {
                    for entry in &record.entries {
                        let corrupt =
                            || StoreError::Corrupt { name: object.clone(), why: "entry outside the regions".into() };
                        let shape = commit.regions.get(entry.region as usize).ok_or_else(corrupt)?;
                        let geometry = Geometry { lead: shape.lead, len: shape.len };
                        if entry.page as usize >= geometry.pages()
                            || crate::record::lines_len(&geometry, entry.page as usize, entry.bitmap)
                                != entry.len as usize
                        {
                            return Err(corrupt());
                        }
                        record.apply(entry, &geometry, u64::MAX, &mut regions[entry.region as usize]);
                    }
                }
            }
            _ => return Err(StoreError::Corrupt { name: object.clone(), why: "unknown object kind".into() }),
        }
    }
    Ok(Some(Restored { interval: commit.interval, regions }))
}

fn apply_image(name: &str, body: &[u8], regions: &mut [Vec<u8>]) -> Result<(), StoreError> {
    let mut r = format::Reader::new(name, body);
    r.magic(IMAGE_MAGIC)?;
    let (_interval, count) = (r.u32()?, r.u32()? as usize);
    let lens: Vec<usize> = (0..count).map(|_| r.u64().map(|l| l as usize)).collect::<Result<_, _>>()?;
    for (i, len) in lens.into_iter().enumerate() {
        let data = r.take(len)?;
        if let Some(region) = regions.get_mut(i).filter(|g| g.len() == len) {
            region.copy_from_slice(data);
        }
    }
    Ok(())
}
