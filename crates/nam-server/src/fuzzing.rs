//! The server's parsers of stored structures, for the cargo-fuzz targets in `fuzz/`
//! (`docs/security.md`, "Fuzzing"). Each function feeds arbitrary bytes to the parser the
//! server uses and panics if what the parser accepts breaks an invariant the server relies
//! on afterwards; an `Err` for bad bytes is the expected outcome, not a finding.

use crate::ckpt::fuzz_slot_header;
use crate::manager::{Manager, Manifest, TenantConfig};
use crate::server::check_manifest;

/// Decodes a parity-slot header (its 64 bytes, then the size table) as
/// `valid_slot` does for a group of `ranks` ranks in a slot allocation of `slot_len` bytes;
/// an accepted header must describe a layout that fits the allocation, with one size per
/// rank and no more segments than a job can hold.
pub fn slot_header(bytes: &[u8], ranks: u32, slot_len: u64) {
    fuzz_slot_header(bytes, ranks, slot_len);
}

/// Parses a manifest as a starting server does (JSON, then the record checks) and restores
/// the records it keeps into a manager for a pool of `capacity` bytes: the restore must
/// succeed (no kept record overlaps another or leaves the pool or its tenant's segments), the
/// manager's usage must equal the kept records' blocks, and issuing a handle after it must not overflow.
pub fn manifest(bytes: &[u8], capacity: u64) {
    let Ok(manifest) = serde_json::from_slice::<Manifest>(bytes) else { return };
    let checked = check_manifest(manifest, capacity);
    let tenants = [TenantConfig { name: "t".into(), token: String::new(), quota_bytes: u64::MAX }];
    let mut manager = Manager::new(capacity, &tenants);
    for (record, cause) in &checked.rejected {
        assert!(!cause.is_empty(), "a rejected record without a cause: {record:?}");
        manager.quarantine(record, cause);
    }
    manager.restore(&checked.kept).expect("every kept record restores");
    // Each allocation is charged its whole block (alignment padding included).
    let total: u64 = checked.kept.allocations.iter().map(|r| r.block_range().1).sum();
    assert_eq!(manager.used_bytes(), total, "usage after restore");
    assert!(checked.kept.allocations.iter().all(|r| r.handle < checked.kept.next_handle));
    assert!(checked.kept.next_handle <= nam_proto::address::GLOBAL_FIELD_MAX + 1);
    // A client of tenant "t" can allocate after the restore: the counters are sound.
    manager.authenticate(1, "t", "").expect("tenant t");
    let request = nam_proto::Alloc { size: 64, align: 0, flags: 0, name: String::new() };
    if let Ok(grant) = manager.allocate(1, &request) {
        assert!(grant.handle >= checked.kept.next_handle && grant.offset + grant.size <= capacity);
    }
}
