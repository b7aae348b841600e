//! Garbage collection by merging increments backwards in time (Abeyratne 2017 §5.3.2): walk the chain
//! from the newest object to the oldest, keep for every page only the lines no newer object
//! already holds, and pack the survivors into fresh records. The merged set replaces the chain
//! under the next generation of the same commit.

use crate::commit::{self, Chain};
use crate::copy::Batch;
use crate::engine::Inner;
use crate::error::StoreError;
use crate::format::{RegionShape, RECORD_MAGIC};
use crate::geometry::Geometry;
use crate::record::decode_segment;
use crate::region::Region;
use crate::store::Store;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Merges `chain` when it grew past the configured length; returns the chain now committed.
pub fn maybe_merge(
    inner: &Inner,
    chain: Chain,
    regions: &[Arc<Region>],
    retention: &mut commit::Retention,
) -> Result<Chain, StoreError> {
    let region_bytes: usize = regions.iter().map(|r| r.geometry.len).sum();
    let ratio = inner.config.merge_ratio;
    if ratio <= 0.0 || (chain.bytes as f64) <= ratio * region_bytes as f64 {
        return Ok(chain);
    }
    let shapes = commit::shapes(regions);
    let sizes = (inner.config.record_bytes, inner.config.segment_bytes);
    let merged = merge(&*inner.store, &chain, &shapes, sizes, &inner.written)?;
    commit::publish(&*inner.store, &merged, regions, (&chain, true), retention, &inner.written)?;
    Ok(merged)
}

/// Writes the merged objects of `chain` and returns the new chain (not yet committed).
pub fn merge(
    store: &dyn Store,
    chain: &Chain,
    shapes: &[RegionShape],
    (record_bytes, segment_bytes): (usize, usize),
    written: &AtomicU64,
) -> Result<Chain, StoreError> {
    let generation = chain.generation + 1;
    let mut covered: HashMap<(u32, u32), u64> = HashMap::new();
    let mut batch = Batch::new(chain.interval, record_bytes, segment_bytes);
    batch.prefix = format!("mrg{generation:04}");
    for name in chain.objects.iter().rev() {
        let bytes = store.get(name)?;
        if bytes.get(..4) != Some(RECORD_MAGIC.as_slice()) {
            return Err(StoreError::Corrupt { name: name.clone(), why: "only records can be merged".into() });
        }
        // Newest record first inside a segment too.
        for record in decode_segment(name, &bytes)?.iter().rev() {
            for entry in record.entries.iter().rev() {
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
                    batch.next_record(store, written)?;
                }
                batch.builder.add_packed(entry.region, entry.page, fresh, &packed);
            }
        }
    }
    batch.flush(store, written)?;
    let meta = chain.meta.clone();
    Ok(Chain { interval: chain.interval, generation, objects: batch.objects, bytes: batch.bytes, meta })
}
