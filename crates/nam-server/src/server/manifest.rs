//! The manifest of a file-backed pool: the persistent allocations it holds, written
//! atomically whenever they change and read back at start, so a restarted server finds
//! them; a backing file with data but no manifest is refused rather than handed out anew.

use super::ServerError;
use crate::constants::PAGE_BYTES;
use crate::manager::{AllocationRecord, Manager, Manifest, SegmentRecord};
use nam_proto::address::GLOBAL_FIELD_MAX;
use nam_proto::limits::{ALIGN_MIN, ALLOC_SIZE_MAX, NAME_LEN_MAX, TENANT_NAME_LEN_MAX};
use nam_proto::{ALLOC_FLAGS_KNOWN, ALLOC_FLAG_PERSISTENT};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

/// Where the manifest of a backing file lives.
pub fn manifest_path_for(backing: &std::path::Path) -> PathBuf {
    let mut name = backing.as_os_str().to_owned();
    name.push(".manifest.json");
    PathBuf::from(name)
}

fn read_manifest(path: &std::path::Path) -> Result<Option<Manifest>, ServerError> {
    let err = |message: String| ServerError::Manifest { path: path.into(), message };
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| err(format!("corrupt: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err(format!("cannot read: {e}"))),
    }
}

/// Restores the persistent allocations the manifest at `path` lists, or refuses a non-empty
/// `backing` file that has none.
pub(super) fn restore_manifest(
    manager: &mut Manager,
    backing: &std::path::Path,
    path: &std::path::Path,
    capacity: u64,
) -> Result<(), ServerError> {
    let Some(manifest) = read_manifest(path)? else {
        return refuse_unlisted_backing(backing, path);
    };
    check_manifest_capacity(path, &manifest, capacity)?;
    let checked = check_manifest(manifest, capacity);
    if !checked.rejected.is_empty() || !checked.rejected_segments.is_empty() {
        keep_rejected_copy(path);
    }
    for (segment, cause) in &checked.rejected_segments {
        log::error!(
            "manifest {}: arena segment {}+{} of tenant {:?} is corrupt and not restored: {cause}",
            path.display(),
            segment.offset,
            segment.len,
            segment.tenant
        );
    }
    for (record, cause) in &checked.rejected {
        log::error!(
            "manifest {}: allocation {} ({:?} of tenant {:?}) is corrupt and not restored: {cause}",
            path.display(),
            record.handle,
            record.name,
            record.tenant
        );
        manager.quarantine(record, cause);
    }
    manager.restore(&checked.kept).map_err(|message| ServerError::Manifest { path: path.into(), message })?;
    log::info!("restored {} persistent allocations from {}", checked.kept.allocations.len(), path.display());
    Ok(())
}

/// A manifest split into the records that describe a possible allocation of this pool and
/// those that cannot (each with the cause).
#[derive(Debug)]
pub(crate) struct CheckedManifest {
    /// The manifest with only the sound records, and a `next_handle` above all of them.
    pub(crate) kept: Manifest,
    /// The records left out, and why.
    pub(crate) rejected: Vec<(AllocationRecord, String)>,
    /// The arena segment records left out, and why (their allocations are left out too).
    pub(crate) rejected_segments: Vec<(SegmentRecord, String)>,
}

/// Checks every record of a manifest against what it must describe: a persistent, named
/// allocation of a pool of `capacity` bytes, with a handle a client can hold and that no other
/// record has, a range inside the pool that no other record overlaps, known flags and names
/// within the protocol's limits; and a `next_handle` above every handle and able to grow. The
/// manifest is a file anyone with the server's Unix user can edit, so nothing in it reaches
/// the manager's counters or the range allocator unchecked. Pure, so it is fuzzed directly.
pub(crate) fn check_manifest(manifest: Manifest, capacity: u64) -> CheckedManifest {
    let mut rejected = Vec::new();
    let mut handles = HashSet::new();
    let mut names = HashSet::new();
    // Ranges of the records kept so far, by offset: a new one may not overlap either neighbour.
    let mut ranges: BTreeMap<u64, u64> = BTreeMap::new();
    let mut kept = Vec::new();
    let (segments, rejected_segments) = check_segments(manifest.segments, capacity);
    // A manifest written since arenas exist lists segments: every block lies in one of its
    // tenant's (an older one gets segments made from its records at restore).
    let listed_segments = !segments.is_empty() || !rejected_segments.is_empty();
    for record in manifest.allocations {
        let cause = record_fault(&record, capacity)
            .or_else(|| listed_segments.then(|| outside_segments(&segments, &record)).flatten())
            .or_else(|| handles.contains(&record.handle).then(|| format!("handle {} is listed twice", record.handle)))
            .or_else(|| {
                let key = (record.tenant.clone(), record.name.clone());
                names.contains(&key).then(|| format!("the name {:?} is listed twice", record.name))
            })
            .or_else(|| {
                let (block, charged) = record.block_range();
                overlap(&ranges, block, charged)
            });
        match cause {
            Some(cause) => rejected.push((record, cause)),
            None => {
                handles.insert(record.handle);
                names.insert((record.tenant.clone(), record.name.clone()));
                let (block, charged) = record.block_range();
                ranges.insert(block, charged);
                kept.push(record);
            }
        }
    }
    let highest = kept.iter().map(|r| r.handle).max().unwrap_or(0);
    // Handles are never reused across restarts, so the next one stays the manifest's when it
    // is sound; one at or below a listed handle, or past what a global address can carry,
    // cannot be, and issuing continues above the records instead.
    let next_handle = if manifest.next_handle > highest && manifest.next_handle <= GLOBAL_FIELD_MAX {
        manifest.next_handle
    } else {
        highest + 1
    };
    CheckedManifest {
        kept: Manifest { capacity: manifest.capacity, next_handle, allocations: kept, segments },
        rejected,
        rejected_segments,
    }
}

/// Splits arena segment records into those that can be a segment of this pool (a tenant
/// name, whole pages inside the pool, no overlap with another kept segment) and the rest,
/// each with its cause.
fn check_segments(records: Vec<SegmentRecord>, capacity: u64) -> (Vec<SegmentRecord>, Vec<(SegmentRecord, String)>) {
    let (mut kept, mut rejected) = (Vec::new(), Vec::new());
    let mut ranges: BTreeMap<u64, u64> = BTreeMap::new();
    for segment in records {
        let cause = if segment.tenant.is_empty() || segment.tenant.len() > TENANT_NAME_LEN_MAX {
            Some(format!("tenant name of {} bytes is outside 1..={TENANT_NAME_LEN_MAX}", segment.tenant.len()))
        } else if segment.len == 0
            || !segment.offset.is_multiple_of(PAGE_BYTES)
            || !segment.len.is_multiple_of(PAGE_BYTES)
        {
            Some(format!("segment {}+{} is not whole pages of {PAGE_BYTES} bytes", segment.offset, segment.len))
        } else if segment.offset.checked_add(segment.len).is_none_or(|end| end > capacity) {
            Some(format!("segment {}+{} leaves the {capacity}-byte pool", segment.offset, segment.len))
        } else {
            overlap(&ranges, segment.offset, segment.len)
        };
        match cause {
            Some(cause) => rejected.push((segment, cause)),
            None => {
                ranges.insert(segment.offset, segment.len);
                kept.push(segment);
            }
        }
    }
    (kept, rejected)
}

/// Why `record`'s block is not inside one of its tenant's `segments`, if it is not.
fn outside_segments(segments: &[SegmentRecord], record: &AllocationRecord) -> Option<String> {
    let (block, charged) = record.block_range();
    let inside = segments.iter().any(|s| {
        s.tenant == record.tenant && block >= s.offset && block + charged <= s.offset + s.len
        // checked by `record_fault`
    });
    (!inside).then(|| format!("block {block}+{charged} is in no arena segment of tenant {:?}", record.tenant))
}

/// What makes one record impossible on its own, if anything.
fn record_fault(r: &AllocationRecord, capacity: u64) -> Option<String> {
    if r.handle == 0 || r.handle > GLOBAL_FIELD_MAX {
        return Some(format!("handle {} is outside 1..={GLOBAL_FIELD_MAX}", r.handle));
    }
    if r.size == 0 || r.size > ALLOC_SIZE_MAX {
        return Some(format!("size {} is outside 1..={ALLOC_SIZE_MAX}", r.size));
    }
    if r.offset.checked_add(r.size).is_none_or(|end| end > capacity) {
        return Some(format!("range {}+{} leaves the {capacity}-byte pool", r.offset, r.size));
    }
    let (block, charged) = r.block_range();
    if block > r.offset || block.checked_add(charged).is_none_or(|end| end < r.offset + r.size || end > capacity) {
        return Some(format!(
            "block {block}+{charged} does not hold the range {}+{} inside the pool",
            r.offset, r.size
        ));
    }
    if !r.offset.is_multiple_of(ALIGN_MIN) {
        return Some(format!("offset {} is not a multiple of {ALIGN_MIN}", r.offset));
    }
    if r.flags & !ALLOC_FLAGS_KNOWN != 0 || r.flags & ALLOC_FLAG_PERSISTENT == 0 {
        return Some(format!("flags 0x{:x} are not those of a persistent allocation", r.flags));
    }
    match &r.name {
        Some(n) if !n.is_empty() && n.len() <= NAME_LEN_MAX => {}
        _ => return Some(format!("a persistent allocation needs a name of 1..={NAME_LEN_MAX} bytes")),
    }
    if r.tenant.is_empty() || r.tenant.len() > TENANT_NAME_LEN_MAX {
        return Some(format!("tenant name of {} bytes is outside 1..={TENANT_NAME_LEN_MAX}", r.tenant.len()));
    }
    None
}

/// The record of `ranges` that `[offset, offset + size)` overlaps, named, if any.
fn overlap(ranges: &BTreeMap<u64, u64>, offset: u64, size: u64) -> Option<String> {
    let end = offset + size; // checked by `record_fault`
    let before = ranges.range(..=offset).next_back().filter(|(&o, &s)| o + s > offset);
    let after = ranges.range(offset..).next().filter(|(&o, _)| o < end);
    before.or(after).map(|(&o, &s)| format!("range {offset}+{size} overlaps the range {o}+{s} of another record"))
}

/// Keeps the manifest as read beside it (`.rejected`, the server's user only) before the
/// server rewrites it without the corrupt records, so the operator can see and repair them.
fn keep_rejected_copy(path: &std::path::Path) {
    let mut name = path.as_os_str().to_owned();
    name.push(".rejected");
    let copy = PathBuf::from(name);
    let _ = std::fs::remove_file(&copy);
    if let Err(e) = std::fs::copy(path, &copy).and_then(|_| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(crate::constants::BACKING_FILE_MODE))
    }) {
        log::warn!("cannot keep a copy of the corrupt manifest at {}: {e}", copy.display());
    }
}

/// A backing file with data but no manifest: its allocations cannot be found, and starting
/// on it would hand its bytes out again as new, zeroed allocations. Refused, unless the
/// operator asks for a fresh pool.
fn refuse_unlisted_backing(backing: &std::path::Path, manifest: &std::path::Path) -> Result<(), ServerError> {
    let len = match std::fs::metadata(backing) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(ServerError::Manifest {
                path: manifest.into(),
                message: format!("cannot stat the backing file {}: {e}", backing.display()),
            })
        }
    };
    if len == 0 {
        return Ok(());
    }
    Err(ServerError::Manifest {
        path: manifest.into(),
        message: format!(
            "missing, but the backing file {} holds {len} bytes: its allocations cannot be found without it. \
             Restore the manifest, or start with --reinit-pool to discard the pool's contents and start empty",
            backing.display()
        ),
    })
}

fn check_manifest_capacity(path: &std::path::Path, manifest: &Manifest, capacity: u64) -> Result<(), ServerError> {
    if manifest.capacity > capacity {
        return Err(ServerError::Manifest {
            path: path.into(),
            message: format!("written for a {}-byte pool; start with --capacity of at least that", manifest.capacity),
        });
    }
    Ok(())
}

/// Writes the manifest atomically: a temporary file, fsync, rename.
pub(super) fn write_manifest(path: &std::path::Path, manifest: &Manifest) -> Result<(), ServerError> {
    use std::io::Write;
    let err = |message: String| ServerError::Manifest { path: path.into(), message };
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec_pretty(manifest).map_err(|e| err(e.to_string()))?;
    // Names and sizes of every tenant's allocations: the server's user only.
    let _ = std::fs::remove_file(&tmp); // a leftover may have other permissions
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(crate::constants::BACKING_FILE_MODE)
        .open(&tmp)
        .map_err(|e| err(format!("cannot create {}: {e}", tmp.display())))?;
    file.write_all(&bytes).and_then(|()| file.sync_all()).map_err(|e| err(format!("cannot write: {e}")))?;
    std::fs::rename(&tmp, path).map_err(|e| err(format!("cannot rename into place: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(handle: u64, offset: u64, name: &str) -> AllocationRecord {
        AllocationRecord {
            handle,
            offset,
            size: 4096,
            flags: ALLOC_FLAG_PERSISTENT,
            name: Some(name.into()),
            tenant: "t".into(),
            block: 0,
            charged: 0,
        }
    }

    fn segment(tenant: &str, offset: u64, len: u64) -> SegmentRecord {
        SegmentRecord { tenant: tenant.into(), offset, len }
    }

    #[test]
    fn sound_records_are_kept_and_each_fault_rejects_its_record_alone() {
        let good = record(1, 0, "a");
        let faults = [
            AllocationRecord { size: 0, ..record(2, 8192, "b") },
            AllocationRecord { offset: u64::MAX - 1, ..record(2, 0, "b") },
            record(2, 64, "b"),   // overlaps a
            record(1, 8192, "b"), // a's handle
            record(2, 8192, "a"), // a's name
            AllocationRecord { flags: 0, ..record(2, 8192, "b") },
            AllocationRecord { name: None, ..record(2, 8192, "b") },
            record(u64::MAX, 8192, "b"),
            record(2, 8200, "b"), // misaligned
        ];
        for bad in faults {
            let manifest = Manifest {
                capacity: 1 << 20,
                next_handle: 3,
                allocations: vec![good.clone(), bad.clone()],
                segments: vec![],
            };
            let checked = check_manifest(manifest, 1 << 20);
            assert_eq!(checked.kept.allocations, vec![good.clone()], "{bad:?}");
            assert_eq!(checked.rejected.len(), 1, "{bad:?}");
            assert!(checked.kept.next_handle >= 2);
        }
        let manifest = Manifest { capacity: 1 << 20, next_handle: u64::MAX, allocations: vec![good], segments: vec![] };
        assert_eq!(check_manifest(manifest, 1 << 20).kept.next_handle, 2, "a next handle that cannot grow");
    }

    #[test]
    fn bad_segments_and_the_records_outside_their_tenants_segments_are_left_out() {
        let page = PAGE_BYTES;
        let segments = vec![
            segment("t", 0, 4 * page),
            segment("t", page, page),                 // overlaps the first
            segment("u", 4 * page + 1, page),         // not whole pages
            segment("u", (1 << 20) - page, 2 * page), // leaves the pool
            segment("", 8 * page, page),              // no tenant
            segment("u", 8 * page, page),
        ];
        let inside = record(1, 0, "a");
        let other_tenants = record(2, 8 * page, "b");
        let in_no_segment = record(3, 16 * page, "c");
        let padded = AllocationRecord { block: 0, charged: 64, ..record(4, 2 * page, "d") }; // block misses the range
        let manifest = Manifest {
            capacity: 1 << 20,
            next_handle: 5,
            allocations: vec![inside.clone(), other_tenants, in_no_segment, padded],
            segments,
        };
        let checked = check_manifest(manifest, 1 << 20);
        assert_eq!(checked.kept.segments, vec![segment("t", 0, 4 * page), segment("u", 8 * page, page)]);
        assert_eq!(checked.rejected_segments.len(), 4);
        assert_eq!(checked.kept.allocations, vec![inside]);
        assert_eq!(checked.rejected.len(), 3);
        assert!(checked.rejected.iter().all(|(_, cause)| !cause.is_empty()));
        assert!(checked.rejected_segments.iter().all(|(_, cause)| !cause.is_empty()));
    }
}
