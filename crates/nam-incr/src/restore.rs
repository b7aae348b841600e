//! Restart: find the newest complete checkpoint and rebuild the regions from its objects,
//! checking every checksum. A commit that fails a check is skipped for the next older one.

use crate::commit::Chain;
use crate::constants::PROBE_BACK_MAX;
use crate::error::{IncrError, StoreError};
use crate::format::{self, decode_head, Commit, HEAD, IMAGE_MAGIC, RECORD_MAGIC};
use crate::geometry::Geometry;
use crate::record::decode_segment;
use crate::store::Store;

/// Regions rebuilt from a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The interval restored.
    pub interval: u32,
    /// Every region's bytes, by region index.
    pub regions: Vec<Vec<u8>>,
    /// The metadata given to [`crate::Engine::checkpoint_with`].
    pub meta: Vec<u8>,
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
    restore_from(store, candidates(store)?)
}

/// Rebuilds checkpoint `interval` (its newest generation) from `store`; an older one is kept
/// when the engine's [`crate::Config::keep`] is above 1.
pub fn restore_interval(store: &dyn Store, interval: u32) -> Result<Restored, IncrError> {
    let mut names: Vec<String> = Vec::new();
    let mut generation = 0;
    while store.exists(&Commit::name(interval, generation + 1))? {
        generation += 1;
    }
    names.extend((0..=generation).rev().map(|g| Commit::name(interval, g)));
    let mut failure = None;
    for name in names {
        match load(store, &name) {
            Ok(Some(restored)) => return Ok(restored),
            Ok(None) => {}
            // The cause (a checksum, a missing object) is what the caller needs to hear.
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    Err(failure.map_or(IncrError::NoSuchCheckpoint { interval, level: store.level().into() }, IncrError::Store))
}

/// A checkpoint listed by [`checkpoints`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its interval.
    pub interval: u32,
    /// The metadata given to [`crate::Engine::checkpoint_with`].
    pub meta: Vec<u8>,
}

/// The checkpoints that have a commit in `store`, newest first. A commit is written after all
/// its objects, so each is complete unless damaged since; [`restore_interval`] checks that.
pub fn checkpoints(store: &dyn Store) -> Result<Vec<Listed>, IncrError> {
    let mut listed: Vec<Listed> =
        chains(store)?.into_iter().rev().map(|c| Listed { interval: c.interval, meta: c.meta }).collect();
    listed.dedup_by_key(|l| l.interval);
    Ok(listed)
}

/// The chains of the commits in `store` that decode, oldest first (what a new engine on a
/// used store adopts, so that it continues their numbering and collects them as garbage).
pub(crate) fn chains(store: &dyn Store) -> Result<Vec<Chain>, IncrError> {
    let mut chains = Vec::new();
    for name in candidates(store)? {
        let bytes = match store.get(&name) {
            Ok(b) => b,
            Err(StoreError::NotFound { .. }) => continue,
            Err(e) => return Err(e.into()),
        };
        match Commit::decode(&name, &bytes) {
            Ok(c) => chains.push(Chain {
                interval: c.interval,
                generation: c.generation,
                objects: c.objects,
                bytes: 0,
                meta: c.meta,
            }),
            Err(e) => log::warn!("ignoring checkpoint {name}: {e}"),
        }
    }
    chains.reverse();
    Ok(chains)
}

/// Names of the commits that may exist, newest first.
fn candidates(store: &dyn Store) -> Result<Vec<String>, IncrError> {
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
    Ok(candidates)
}

fn restore_from(store: &dyn Store, candidates: Vec<String>) -> Result<Restored, IncrError> {
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
    let meta = commit.meta.clone();
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
    Ok(Some(Restored { interval: commit.interval, regions, meta }))
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
