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
    /// The caller's metadata.
    pub meta: Vec<u8>,
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

/// The complete checkpoints kept besides the newest one, so that a restart can go back to an
/// older version (a collective restart picks the newest version every rank has completed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retention {
    /// Complete checkpoints kept in all, the newest included (at least 1).
    pub keep: usize,
    /// Checkpoints from this interval on are kept whatever `keep` says ([`crate::Engine::keep_from`]).
    pub pin: Option<u32>,
    /// The older ones, oldest first.
    pub older: Vec<Chain>,
}

impl Retention {
    /// Bookkeeping of a commit of a new chain after `previous`: `previous` joins the older
    /// chains (or goes, when `replaced` by a merge of the same interval), and the chains
    /// beyond `keep` are returned as garbage.
    pub fn advance(&mut self, previous: &Chain, replaced: bool) -> Vec<Chain> {
        let mut garbage = Vec::new();
        if previous.committed().is_some() {
            if replaced {
                garbage.push(previous.clone());
            } else {
                self.older.push(previous.clone());
            }
        }
        let pinned = |c: &Chain| self.pin.is_some_and(|p| c.interval >= p);
        while !self.older.is_empty() && self.older.len() + 1 > self.keep.max(1) && !pinned(&self.older[0]) {
            garbage.push(self.older.remove(0));
        }
        garbage
    }
}

/// Stores `chain` as complete, then removes what only the checkpoints no longer kept needed.
/// `previous` is the chain `chain` follows (`replaced`: the same interval, merged).
pub fn publish(
    store: &dyn Store,
    chain: &Chain,
    regions: &[Arc<Region>],
    (previous, replaced): (&Chain, bool),
    retention: &mut Retention,
    written: &AtomicU64,
) -> Result<(), StoreError> {
    let commit = Commit {
        interval: chain.interval,
        generation: chain.generation,
        regions: shapes(regions),
        objects: chain.objects.clone(),
        meta: chain.meta.clone(),
    };
    store.sync_names()?;
    put(store, &Commit::name(chain.interval, chain.generation), &commit.encode(), written)?;
    put(store, HEAD, &encode_head(chain.interval, chain.generation), written)?;
    let garbage = retention.advance(previous, replaced);
    let live: HashSet<&String> = chain.objects.iter().chain(retention.older.iter().flat_map(|c| &c.objects)).collect();
    for old in &garbage {
        // The commit goes first: a commit naming a deleted object is never left behind.
        store.remove(&Commit::name(old.interval, old.generation))?;
        for object in old.objects.iter().filter(|o| !live.contains(o)) {
            store.remove(object)?;
        }
    }
    Ok(())
}
