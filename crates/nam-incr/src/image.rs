//! Full images (stop-and-copy and fork): every byte of every region, streamed from the
//! regions straight to the store, so no second copy of a region is made in memory.

use crate::error::StoreError;
use crate::format::{image_header, image_trailer};
use crate::region::Region;
use crate::store::Store;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Writes the image of `regions` for `interval` and returns its object name.
pub fn write(
    store: &dyn Store,
    interval: u32,
    regions: &[Arc<Region>],
    written: &AtomicU64,
) -> Result<String, StoreError> {
    let lens: Vec<usize> = regions.iter().map(|r| if r.is_removed() { 0 } else { r.geometry.len }).collect();
    let header = image_header(interval, &lens);
    let parts: Vec<&[u8]> = regions
        .iter()
        .zip(&lens)
        // SAFETY: a protected region is mapped and readable (the contract of
        // `Engine::protect`), and stop-and-copy runs while the application is stopped.
        .map(|(r, &len)| unsafe { std::slice::from_raw_parts(r.addr as *const u8, len) })
        .collect();
    let trailer = image_trailer(&header, &parts);
    let mut all = vec![header.as_slice()];
    all.extend(parts.iter().copied());
    all.push(&trailer);
    let name = format!("img-{interval:010}");
    store.put_parts(&name, &all)?;
    written.fetch_add(all.iter().map(|p| p.len() as u64).sum(), Ordering::Relaxed);
    Ok(name)
}
