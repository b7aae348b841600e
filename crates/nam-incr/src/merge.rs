//! Garbage collection by merging increments backwards in time (seed §5.3.2): walk the chain
//! from the newest object to the oldest, keep for every page only the lines no newer object
//! already holds, and pack the survivors into fresh records. The merged set replaces the chain
//! under the next generation of the same commit.

use crate::commit::{self, Chain};
use crate::copy::Batch;
use crate::engine::Inner;
use crate::error::StoreError;
use crate::format::{self, RegionShape, RECORD_MAGIC};
use crate::geometry::Geometry;
use crate::record::Record;
use crate::region::Region;
use crate::store::Store;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Merges `chain` when it grew past the configured length; returns the chain now committed.
pub fn maybe_merge(inner: &Inner, chain: Chain, regions: &[Arc<Region>]) -> Result<Chain, StoreError> {
    let limit = inner.config.merge_after;
    if limit == 0 || chain.objects.len() <= limit {
        return Ok(chain);
    }
    let shapes = commit::shapes(regions);
    let merged = merge(&*inner.store, &chain, &shapes, inner.config.record_bytes, &inner.written)?;
    commit::publish(&*inner.store, &merged, regions, &chain, &inner.written)?;
    Ok(merged)
}

/// Writes the merged objects of `chain` and returns the new chain (not yet committed).
pub fn merge(
    store: &dyn Store,
    chain: &Chain,
    shapes: &[RegionShape],
    record_bytes: usize,
    written: &AtomicU64,
) -> Result<Chain, StoreError> {
    let generation = chain.generation + 1;
    let mut covered: HashMap<(u32, u32), u64> = HashMap::new();
    let mut batch = Batch::new(chain.interval, record_bytes);
    let mut objects = Vec::new();
    for name in chain.objects.iter().rev() {
        let bytes = store.get(name)?;
        let body = format::unseal(name, &bytes)?;
        if &body[..4] != RECORD_MAGIC {
            return Err(StoreError::Corrupt { name: name.clone(), why: "only records can be merged".into() });
        }
        let record = Record::decode(name, body)?;
        for entry in &record.entries {
            let shape = shapes.get(entry.region as usize).ok_or_else(|| StoreError::Corrupt {
                name: name.clone(),
                why: format!("region {} not in the commit", entry.region),
            })?;
            let geometry = Geometry { lead: shape.lead, len: shape.len };
            let seen = covered.entry((entry.region, entry.page)).or_insert(0);
            let fresh = entry.bitmap & !*seen;
            *seen |= entry.bitmap;
            if fresh == 0 {
                continue;
            }
            let packed = record.lines(entry, &geometry, fresh);
            if !batch.builder.fits(packed.len()) {
                flush(store, &mut batch, generation, &mut objects, written)?;
            }
            batch.builder.add_packed(entry.region, entry.page, fresh, &packed);
        }
    }
    flush(store, &mut batch, generation, &mut objects, written)?;
    Ok(Chain { interval: chain.interval, generation, objects })
}

fn flush(
    store: &dyn Store,
    batch: &mut Batch,
    generation: u32,
    objects: &mut Vec<String>,
    written: &AtomicU64,
) -> Result<(), StoreError> {
    if batch.builder.is_empty() {
        return Ok(());
    }
    let bytes = batch.builder.finish(batch.interval, batch.seq);
    let name = format!("mrg-{:010}-{generation:04}-{:06}", batch.interval, batch.seq);
    store.put(&name, &bytes)?;
    written.fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
    objects.push(name);
    batch.seq += 1;
    Ok(())
}
