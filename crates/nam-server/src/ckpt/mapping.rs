//! Where a rank's buffer lies once UCX has mapped it into the server (shared memory).
//!
//! `ucp_rkey_ptr` turns a remote address into a local pointer without any bounds: for the
//! shared-memory transports it is the segment's local base plus the distance from the
//! owner's base the key names. A rank that sends a real key with a buffer address or length
//! beyond its segment would have the engine read (and, restoring in place, write) whatever
//! the server has mapped there, the pool of every tenant included; a key naming the pool's
//! own segment would map the pool a second time. So before the engine touches a mapped
//! buffer, the whole range must lie in one shared mapping of this process (as
//! `/proc/self/maps` lists it) that is not the pool's: neither the pool's addresses nor the
//! same file or segment.

use crate::pool::Pool;

pub(super) struct Mapping {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) shared: bool,
    /// Device and inode of the backing file or System V segment (the segment id).
    pub(super) object: (String, u64),
}

pub(super) fn mappings() -> Result<Vec<Mapping>, String> {
    let text = std::fs::read_to_string("/proc/self/maps").map_err(|e| format!("cannot read /proc/self/maps: {e}"))?;
    let mut out = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms), Some(_offset), Some(dev), Some(inode)) =
            (fields.next(), fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let Some((start, end)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end), Ok(inode)) =
            (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16), inode.parse::<u64>())
        else {
            continue;
        };
        out.push(Mapping { start, end, shared: perms.as_bytes().get(3) == Some(&b's'), object: (dev.into(), inode) });
    }
    Ok(out)
}

/// The mapped object `[start, end)` lies in, merging adjacent mappings of one object.
pub(super) fn object_around(maps: &[Mapping], start: u64, end: u64) -> Option<&(String, u64)> {
    let first = maps.iter().position(|m| m.start <= start && start < m.end)?;
    let object = &maps[first].object;
    let mut reached = maps[first].end;
    for m in &maps[first + 1..] {
        if reached >= end || m.start != reached || &m.object != object || !m.shared {
            break;
        }
        reached = m.end;
    }
    (maps[first].shared && reached >= end && object.1 != 0).then_some(object)
}

/// Checks that `len` bytes at `base` (a rank's buffer as UCX mapped it) lie in one shared
/// mapping that is not the pool's.
pub(super) fn check_rank_buffer(base: *mut u8, len: u64, pool: &Pool) -> Result<(), String> {
    let start = base as u64;
    let end = start.checked_add(len.max(1)).ok_or_else(|| format!("{len} bytes at {start:#x} wrap around"))?;
    let segments = pool.local_ranges();
    if segments.iter().any(|&(pool_start, pool_end)| start < pool_end && pool_start < end) {
        return Err("the key and address name this server's pool".into());
    }
    let maps = mappings()?;
    let Some(object) = object_around(&maps, start, end) else {
        return Err(format!("{len} bytes at the remote address are not inside the shared segment the key names"));
    };
    if segments.iter().any(|&(pool_start, _)| object_around(&maps, pool_start, pool_start + 1) == Some(object)) {
        return Err("the key names a segment of this server's pool".into());
    }
    Ok(())
}
