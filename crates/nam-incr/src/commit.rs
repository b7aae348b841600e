//! Committing a checkpoint: the commit object, then the head, then garbage of older
//! checkpoints. The order makes every kill point safe: until the commit is stored the previous
//! checkpoint is the newest complete one, and older objects go only after the head moved.

use crate::error::StoreError;
use crate::format::{encode_head, Commit, RegionShape, HEAD};
use crate::region::Region;
use crate::store::Store;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The objects that rebuild the newest complete checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chain {
    /// Its interval (0: none yet).
    pub interval: u32,
    /// Its generation (bumped by merging).
    pub generation: u32,
    /// Objects, oldest first.
    pub objects: Vec<String>,
    /// Their total size.
    pub bytes: u64,
}

impl Chain {
    /// The interval, if any checkpoint is complete.
    pub fn committed(&self) -> Option<u32> {
        (self.interval > 0).then_some(self.interval)
    }
}

/// The shapes of `regions` as a commit records them.
pub fn shapes(regions: &[Arc<Region>]) -> Vec<RegionShape> {
    regions.iter().map(|r| RegionShape { len: r.geometry.len, lead: r.geometry.lead }).collect()
}

fn put(store: &dyn Store, name: &str, bytes: &[u8], written: &AtomicU64) -> Result<(), StoreError> {
    store.put(name, bytes)?;
    written.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    Ok(())
}

/// Stores `chain` as complete and removes what only `previous` needed.
pub fn publish(
    store: &dyn Store,
    chain: &Chain,
    regions: &[Arc<Region>],
    previous: &Chain,
    written: &AtomicU64,
) -> Result<(), StoreError> {
    let commit = Commit {
        interval: chain.interval,
        generation: chain.generation,
        regions: shapes(regions),
        objects: chain.objects.clone(),
    };
    store.sync_names()?;
    put(store, &Commit::name(chain.interval, chain.generation), &commit.encode(), written)?;
    put(store, HEAD, &encode_head(chain.interval, chain.generation), written)?;
    if previous.committed().is_some() {
        let keep: HashSet<&String> = chain.objects.iter().collect();
        for old in previous.objects.iter().filter(|o| !keep.contains(o)) {
            store.remove(old)?;
        }
        store.remove(&Commit::name(previous.interval, previous.generation))?;
    }
    Ok(())
}
