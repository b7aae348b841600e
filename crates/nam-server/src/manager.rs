//! The allocation manager (the NAM manager of Schmidt 2017): allocations with size, alignment,
//! sharing, names and persistence; tenants with tokens and quotas; per-client references.
//!
//! Pure bookkeeping with no I/O, so every rule here is unit-tested directly. An allocation
//! lives while some client holds it; a persistent one (which must be named) also outlives
//! its holders until it is freed explicitly.

use crate::allocator::RangeAllocator;
use arena::{charge_of, Arena};
use nam_proto::limits::{ALIGN_MAX, ALIGN_MIN, ALLOC_SIZE_MAX, HANDLES_PER_CLIENT_MAX};
use nam_proto::size::format_size;
use nam_proto::{Alloc, Status, TenantUsage, ALLOC_FLAGS_KNOWN, ALLOC_FLAG_PERSISTENT, ALLOC_FLAG_SHARED};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

mod arena;
mod domain;

pub(crate) use arena::SegmentMapper;
pub use arena::SegmentRecord;

/// A refused manager operation: the status for the wire and the exact cause.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub(crate) struct Refusal {
    /// Status code sent to the client.
    pub(crate) status: Status,
    /// What exactly was wrong.
    pub(crate) message: String,
}

/// The one answer to a failed Hello, whether the tenant is unknown or the token wrong.
pub(crate) const AUTH_FAILED_MESSAGE: &str = "authentication failed: unknown tenant or wrong token";

fn refuse<T>(status: Status, message: impl Into<String>) -> Result<T, Refusal> {
    Err(Refusal { status, message: message.into() })
}

/// A tenant as configured: who may connect and how much they may allocate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantConfig {
    /// Tenant name.
    pub name: String,
    /// Secret token clients must present.
    pub token: String,
    /// Bytes this tenant may hold at once.
    pub quota_bytes: u64,
}

#[derive(Debug)]
struct Tenant {
    /// The token clients must present; `None` for a tenant only the manifest names (its
    /// memory is kept, but no Hello can reach it, whatever token it sends).
    token: Option<String>,
    quota_bytes: u64,
    /// Bytes charged: every allocation's block, alignment padding included.
    used_bytes: u64,
    allocations: u64,
    arena: Arena,
}

/// One allocation, as recorded in the manifest of a file-backed pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocationRecord {
    /// Handle clients use for it.
    pub handle: u64,
    /// Offset in the pool.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
    /// Wire flags.
    pub flags: u32,
    /// Name, if any.
    pub name: Option<String>,
    /// Owning tenant.
    pub tenant: String,
    /// Start of the block the allocation takes in its tenant's arena (its alignment padding
    /// included); with `charged` 0 (a manifest of a server before per-tenant arenas), the
    /// block is the allocation itself.
    #[serde(default)]
    pub block: u64,
    /// Bytes of the block, charged to the tenant's quota.
    #[serde(default)]
    pub charged: u64,
}

impl AllocationRecord {
    /// The block `(start, len)` the allocation takes in its arena.
    pub fn block_range(&self) -> (u64, u64) {
        if self.charged == 0 {
            (self.offset, self.size)
        } else {
            (self.block, self.charged)
        }
    }
}

/// The persistent allocations of a pool, saved beside a backing file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Pool capacity the manifest was written for.
    pub capacity: u64,
    /// Next handle to issue, so handles are never reused across restarts.
    pub next_handle: u64,
    /// The persistent allocations.
    pub allocations: Vec<AllocationRecord>,
    /// Every tenant's arena segments (ranges of the backing file). Empty in a manifest of a
    /// server before per-tenant arenas: the allocations' pages are then made segments.
    #[serde(default)]
    pub segments: Vec<SegmentRecord>,
}

#[derive(Debug)]
struct Allocation {
    record: AllocationRecord,
    holders: BTreeSet<u64>,
}

/// Where a granted allocation is and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    /// Handle.
    pub(crate) handle: u64,
    /// Offset in the pool.
    pub(crate) offset: u64,
    /// Size in bytes.
    pub(crate) size: u64,
    /// Flags.
    pub(crate) flags: u32,
}

/// The allocation manager.
pub(crate) struct Manager {
    /// The pool's address space, out of which arena segments are carved.
    space: RangeAllocator,
    /// Maps new segments (the pool); `None` for pure bookkeeping (unit tests).
    mapper: Option<Box<dyn SegmentMapper + Send>>,
    allocations: HashMap<u64, Allocation>,
    names: HashMap<(String, String), u64>,
    tenants: BTreeMap<String, Tenant>,
    client_tenant: HashMap<u64, String>,
    client_handles: HashMap<u64, BTreeSet<u64>>,
    next_handle: u64,
    /// The tenant of each recently destroyed handle, so that `FreedHandle` is told only to
    /// that tenant; to anyone else a freed handle answers as one never issued (issue 25).
    /// Bounded by [`FREED_REMEMBERED`]: older freed handles answer `UnknownHandle` to all.
    freed: BTreeMap<u64, String>,
    /// Allocations a manifest listed with a corrupt record, by (tenant, name), with the
    /// cause: opening one answers `Internal` naming it, until an allocation takes the name.
    quarantined: HashMap<(String, String), String>,
    manifest_dirty: bool,
}

/// How many destroyed handles the manager remembers the tenant of, so the record cannot
/// grow without bound however many allocations come and go.
const FREED_REMEMBERED: usize = 16_384;

impl Manager {
    /// A manager for a pool of `capacity` bytes serving `tenants`.
    pub(crate) fn new(capacity: u64, tenants: &[TenantConfig]) -> Manager {
        let tenants = tenants
            .iter()
            .map(|t| {
                let tenant = Tenant {
                    token: Some(t.token.clone()),
                    quota_bytes: t.quota_bytes,
                    used_bytes: 0,
                    allocations: 0,
                    arena: Arena::default(),
                };
                (t.name.clone(), tenant)
            })
            .collect();
        Manager {
            space: RangeAllocator::new(capacity),
            mapper: None,
            allocations: HashMap::new(),
            names: HashMap::new(),
            tenants,
            client_tenant: HashMap::new(),
            client_handles: HashMap::new(),
            next_handle: 1,
            freed: BTreeMap::new(),
            quarantined: HashMap::new(),
            manifest_dirty: false,
        }
    }

    /// Has `mapper` map every segment carved for an arena from now on.
    pub(crate) fn set_mapper(&mut self, mapper: Box<dyn SegmentMapper + Send>) {
        self.mapper = Some(mapper);
    }

    /// Checks a tenant's token and attaches `client` to it.
    pub(crate) fn authenticate(&mut self, client: u64, tenant: &str, token: &str) -> Result<(), Refusal> {
        // One status and one text for both failures, so a stranger cannot learn which
        // tenant names exist by probing (issue 25, "authentication that reveals nothing").
        let known = self
            .tenants
            .get(tenant)
            .and_then(|t| t.token.as_ref())
            .map(|expected| constant_time_eq(expected.as_bytes(), token.as_bytes()));
        if known != Some(true) {
            // A failed re-Hello leaves the client acting for no tenant (docs/protocol.md):
            // it keeps the references it holds, to be released when it leaves, but can
            // use none of them until it authenticates again.
            self.client_tenant.remove(&client);
            return refuse(Status::AuthFailed, AUTH_FAILED_MESSAGE);
        }
        self.client_tenant.insert(client, tenant.to_string());
        self.client_handles.entry(client).or_default();
        Ok(())
    }

    /// `client` acts for no tenant from now on (it authenticated as the administrator); the
    /// references it holds stay held until it leaves, as after a failed re-Hello.
    pub(crate) fn act_for_no_tenant(&mut self, client: u64) {
        self.client_tenant.remove(&client);
    }

    /// The tenant `client` acts for, once authenticated.
    pub(crate) fn tenant(&self, client: u64) -> Option<&str> {
        self.client_tenant.get(&client).map(String::as_str)
    }

    fn tenant_of(&self, client: u64) -> Result<String, Refusal> {
        match self.client_tenant.get(&client) {
            Some(t) => Ok(t.clone()),
            None => refuse(Status::NotConnected, "send Hello with a valid tenant token first"),
        }
    }

    /// Validates and performs an allocation for `client`.
    pub(crate) fn allocate(&mut self, client: u64, request: &Alloc) -> Result<Grant, Refusal> {
        let tenant_name = self.tenant_of(client)?;
        let align = validate_alloc(request)?;
        let name = (!request.name.is_empty()).then(|| request.name.clone());
        if let Some(n) = &name {
            if self.names.contains_key(&(tenant_name.clone(), n.clone())) {
                return refuse(
                    Status::NameExists,
                    format!("tenant {tenant_name:?} already has an allocation named {n:?}"),
                );
            }
        }
        if self.client_handles[&client].len() >= HANDLES_PER_CLIENT_MAX {
            return refuse(Status::TooMany, format!("client holds {HANDLES_PER_CLIENT_MAX} allocations, the limit"));
        }
        // The alignment's padding is the tenant's to pay (module `arena`).
        let charge = charge_of(request.size, align);
        let tenant = self.tenants.get_mut(&tenant_name).expect("authenticated tenant exists");
        if tenant.used_bytes.saturating_add(charge) > tenant.quota_bytes {
            let padding = charge - request.size;
            return refuse(
                Status::QuotaExceeded,
                format!(
                    "tenant {tenant_name:?} holds {} of its {} quota; {} more{} does not fit",
                    format_size(tenant.used_bytes),
                    format_size(tenant.quota_bytes),
                    format_size(charge),
                    if padding > 0 {
                        format!(" ({} of it padding for alignment {align})", format_size(padding))
                    } else {
                        String::new()
                    }
                ),
            );
        }
        let placement = match tenant.arena.place(charge, align) {
            Some(p) => p,
            None => {
                self.grow_arena(&tenant_name, charge)?;
                let arena = &mut self.tenants.get_mut(&tenant_name).expect("checked above").arena;
                arena.place(charge, align).expect("a new segment holds the block it was made for")
            }
        };
        let tenant = self.tenants.get_mut(&tenant_name).expect("checked above");
        tenant.used_bytes += charge;
        tenant.allocations += 1;
        let handle = self.next_handle;
        self.next_handle += 1;
        let record = AllocationRecord {
            handle,
            offset: placement.offset,
            size: request.size,
            flags: request.flags,
            name,
            tenant: tenant_name.clone(),
            block: placement.block,
            charged: charge,
        };
        if let Some(n) = &record.name {
            self.names.insert((tenant_name, n.clone()), handle);
        }
        self.manifest_dirty |= record.flags & ALLOC_FLAG_PERSISTENT != 0;
        let grant = grant_of(&record);
        self.allocations.insert(handle, Allocation { record, holders: BTreeSet::from([client]) });
        self.client_handles.get_mut(&client).expect("attached").insert(handle);
        Ok(grant)
    }

    /// Opens a shared allocation of the client's tenant by name.
    pub(crate) fn open(&mut self, client: u64, name: &str) -> Result<Grant, Refusal> {
        let tenant = self.tenant_of(client)?;
        let key = (tenant.clone(), name.to_string());
        let Some(&handle) = self.names.get(&key) else {
            if let Some(cause) = self.quarantined.get(&key) {
                return refuse(
                    Status::Internal,
                    format!("allocation {name:?} was not restored: its manifest record is corrupt ({cause})"),
                );
            }
            return refuse(Status::NameNotFound, format!("tenant {tenant:?} has no allocation named {name:?}"));
        };
        let allocation = self.allocations.get_mut(&handle).expect("named allocation exists");
        if allocation.record.flags & ALLOC_FLAG_SHARED == 0 && !allocation.holders.contains(&client) {
            return refuse(Status::NotShared, format!("allocation {name:?} is exclusive to its creator"));
        }
        allocation.holders.insert(client);
        let grant = grant_of(&allocation.record);
        self.client_handles.get_mut(&client).expect("attached").insert(handle);
        Ok(grant)
    }

    /// Releases `client`'s reference to `handle`; the space is returned when nobody holds
    /// it (an explicit free releases persistent allocations too).
    pub(crate) fn free(&mut self, client: u64, handle: u64) -> Result<(), Refusal> {
        let tenant = self.tenant_of(client)?;
        let held = self.client_handles.get_mut(&client).is_some_and(|h| h.remove(&handle));
        if !held {
            return if self.freed_by(&tenant, handle) {
                refuse(Status::FreedHandle, format!("handle {handle} was already freed"))
            } else {
                refuse(Status::UnknownHandle, format!("handle {handle} is not held by this client"))
            };
        }
        let allocation = self.allocations.get_mut(&handle).expect("held handle exists");
        allocation.holders.remove(&client);
        if allocation.holders.is_empty() {
            self.destroy(handle);
        }
        Ok(())
    }

    /// Where `handle` lies in the pool, if `client` holds it: `(offset, size)`. Every
    /// operation of the message data path goes through this check.
    pub(crate) fn resolve(&self, client: u64, handle: u64) -> Result<(u64, u64), Refusal> {
        // A client that acts for no tenant (never authenticated, or failed a re-Hello) uses
        // nothing, not even what it still holds.
        let tenant = self.tenant_of(client)?;
        let held = self.client_handles.get(&client).is_some_and(|h| h.contains(&handle));
        if !held {
            return if self.freed_by(&tenant, handle) {
                refuse(Status::FreedHandle, format!("handle {handle} was freed"))
            } else {
                refuse(Status::UnknownHandle, format!("handle {handle} is not held by this client"))
            };
        }
        let r = &self.allocations[&handle].record;
        // Held handles are the client's tenant's (open and hold_global check it), but a
        // client that authenticated again as another tenant still holds its old ones: the
        // message path reaches only the arena of the tenant it acts for now.
        if r.tenant != tenant {
            return refuse(Status::UnknownHandle, format!("handle {handle} is not held by this client"));
        }
        Ok((r.offset, r.size))
    }

    /// Whether `handle` was an allocation of `tenant` that is now destroyed (and recent
    /// enough to be remembered). Another tenant's freed handle is not: it must answer as one
    /// that never existed.
    fn freed_by(&self, tenant: &str, handle: u64) -> bool {
        self.freed.get(&handle).is_some_and(|t| t == tenant)
    }

    /// The named allocation of `tenant`, without taking a reference to it.
    pub(crate) fn lookup(&self, tenant: &str, name: &str) -> Option<Grant> {
        let handle = self.names.get(&(tenant.to_string(), name.to_string()))?;
        Some(grant_of(&self.allocations[handle].record))
    }

    /// The name of `handle`, if it is live and named.
    pub(crate) fn name_of(&self, handle: u64) -> Option<&str> {
        self.allocations.get(&handle)?.record.name.as_deref()
    }

    /// Drops `client`'s reference to a persistent allocation without destroying it, so the
    /// server (the checkpoint engine) keeps it on the tenant's account.
    pub(crate) fn release_hold(&mut self, client: u64, handle: u64) {
        if let Some(handles) = self.client_handles.get_mut(&client) {
            handles.remove(&handle);
        }
        if let Some(a) = self.allocations.get_mut(&handle) {
            debug_assert!(a.record.flags & ALLOC_FLAG_PERSISTENT != 0, "release_hold on a transient allocation");
            a.holders.remove(&client);
        }
    }

    /// Destroys `handle` whoever holds it (the engine replacing or deleting its own slots).
    pub(crate) fn destroy_handle(&mut self, handle: u64) {
        let Some(a) = self.allocations.get(&handle) else { return };
        for client in a.holders.clone() {
            if let Some(handles) = self.client_handles.get_mut(&client) {
                handles.remove(&handle);
            }
        }
        self.destroy(handle);
    }

    /// Drops every reference `client` holds (goodbye or lease expiry). Non-persistent
    /// allocations nobody else holds are destroyed; returns how many were.
    pub(crate) fn release_client(&mut self, client: u64) -> u64 {
        self.client_tenant.remove(&client);
        let handles = self.client_handles.remove(&client).unwrap_or_default();
        let mut destroyed = 0;
        for handle in handles {
            let allocation = self.allocations.get_mut(&handle).expect("held handle exists");
            allocation.holders.remove(&client);
            if allocation.holders.is_empty() && allocation.record.flags & ALLOC_FLAG_PERSISTENT == 0 {
                self.destroy(handle);
                destroyed += 1;
            }
        }
        destroyed
    }

    fn destroy(&mut self, handle: u64) {
        let allocation = self.allocations.remove(&handle).expect("destroy of a live handle");
        let r = allocation.record;
        let (block, charged) = r.block_range();
        self.freed.insert(handle, r.tenant.clone());
        if self.freed.len() > FREED_REMEMBERED {
            self.freed.pop_first();
        }
        if let Some(name) = r.name {
            self.names.remove(&(r.tenant.clone(), name));
        }
        if let Some(t) = self.tenants.get_mut(&r.tenant) {
            t.arena.release(block, charged);
            t.used_bytes -= charged;
            t.allocations -= 1;
        }
        self.manifest_dirty |= r.flags & ALLOC_FLAG_PERSISTENT != 0;
    }

    /// Bytes allocated (charged to the tenants, alignment padding included).
    pub(crate) fn used_bytes(&self) -> u64 {
        self.tenants.values().map(|t| t.used_bytes).sum()
    }

    /// Live allocations.
    pub(crate) fn allocation_count(&self) -> u64 {
        self.allocations.len() as u64
    }

    /// Per-tenant usage for `nam status`.
    pub(crate) fn tenant_usage(&self) -> Vec<TenantUsage> {
        self.tenants
            .iter()
            .map(|(name, t)| TenantUsage {
                name: name.clone(),
                used: t.used_bytes,
                quota: t.quota_bytes,
                allocations: t.allocations,
            })
            .collect()
    }

    /// The persistent allocations if they changed since the last call.
    pub(crate) fn take_manifest_if_dirty(&mut self) -> Option<Manifest> {
        if !std::mem::take(&mut self.manifest_dirty) {
            return None;
        }
        Some(self.manifest())
    }

    /// The persistent allocations now.
    pub(crate) fn manifest(&self) -> Manifest {
        let mut allocations: Vec<AllocationRecord> = self
            .allocations
            .values()
            .filter(|a| a.record.flags & ALLOC_FLAG_PERSISTENT != 0)
            .map(|a| a.record.clone())
            .collect();
        allocations.sort_by_key(|r| r.handle);
        Manifest {
            capacity: self.space.capacity(),
            next_handle: self.next_handle,
            allocations,
            segments: self.segment_records(),
        }
    }

    /// Remembers a manifest record that was not restored because it is corrupt, so its
    /// tenant's Open of its name gets that cause rather than `NameNotFound`.
    pub(crate) fn quarantine(&mut self, record: &AllocationRecord, cause: &str) {
        if let Some(name) = &record.name {
            self.quarantined.insert((record.tenant.clone(), name.clone()), cause.to_string());
        }
    }

    /// Restores the arenas and persistent allocations of a manifest (at start-up, before
    /// any client; the pool maps the segments afterwards, [`Manager::segments`]).
    pub(crate) fn restore(&mut self, manifest: &Manifest) -> Result<(), String> {
        let segments = if manifest.segments.is_empty() {
            arena::segments_of_allocations(&manifest.allocations)
        } else {
            manifest.segments.clone()
        };
        for s in &segments {
            if s.len == 0
                || !s.offset.is_multiple_of(crate::constants::PAGE_BYTES)
                || !s.len.is_multiple_of(crate::constants::PAGE_BYTES)
            {
                return Err(format!(
                    "segment of tenant {:?} at offset {} ({} bytes) is not whole pages",
                    s.tenant, s.offset, s.len
                ));
            }
            if !self.space.reserve(s.offset, s.len) {
                return Err(format!(
                    "segment of tenant {:?} at offset {} ({} bytes) overlaps another or leaves the pool",
                    s.tenant, s.offset, s.len
                ));
            }
            self.tenant_entry(&s.tenant).arena.add(s.offset, s.len);
        }
        for r in &manifest.allocations {
            let (block, charged) = r.block_range();
            let inside = r.offset >= block && r.offset.checked_add(r.size).is_some_and(|end| end <= block + charged);
            let tenant = self.tenant_entry(&r.tenant);
            if r.size == 0 || !inside || !tenant.arena.reserve(block, charged) {
                return Err(format!(
                    "allocation {} at offset {} overlaps another or leaves its tenant's arena",
                    r.handle, r.offset
                ));
            }
            tenant.used_bytes += charged;
            tenant.allocations += 1;
            if let Some(n) = &r.name {
                self.names.insert((r.tenant.clone(), n.clone()), r.handle);
            }
            self.allocations.insert(r.handle, Allocation { record: r.clone(), holders: BTreeSet::new() });
        }
        self.next_handle = self.next_handle.max(manifest.next_handle);
        Ok(())
    }

    /// The tenant named `name`, made (with no token and no quota, so unreachable) when a
    /// manifest lists one the configuration no longer does: its memory is kept.
    fn tenant_entry(&mut self, name: &str) -> &mut Tenant {
        self.tenants.entry(name.to_string()).or_insert_with(|| {
            log::warn!("the manifest lists memory of unconfigured tenant {name:?}; kept, unreachable");
            Tenant { token: None, quota_bytes: 0, used_bytes: 0, allocations: 0, arena: Arena::default() }
        })
    }
}

fn grant_of(r: &AllocationRecord) -> Grant {
    Grant { handle: r.handle, offset: r.offset, size: r.size, flags: r.flags }
}

/// Checks an allocation request's fields; returns the effective alignment.
fn validate_alloc(request: &Alloc) -> Result<u64, Refusal> {
    if request.size == 0 {
        return refuse(Status::InvalidArgument, "allocation size must be at least 1 byte");
    }
    if request.size > ALLOC_SIZE_MAX {
        return refuse(
            Status::TooLarge,
            format!("allocation of {} exceeds the {} limit", request.size, format_size(ALLOC_SIZE_MAX)),
        );
    }
    if request.flags & !ALLOC_FLAGS_KNOWN != 0 {
        return refuse(
            Status::InvalidArgument,
            format!("unknown allocation flags 0x{:x}", request.flags & !ALLOC_FLAGS_KNOWN),
        );
    }
    if request.flags & ALLOC_FLAG_PERSISTENT != 0 && request.name.is_empty() {
        return refuse(Status::InvalidArgument, "a persistent allocation needs a name, or nobody could find it again");
    }
    let align = if request.align == 0 { ALIGN_MIN } else { request.align };
    if !align.is_power_of_two() {
        return refuse(Status::InvalidArgument, format!("alignment {align} is not a power of two"));
    }
    if align > ALIGN_MAX {
        return refuse(Status::TooLarge, format!("alignment {align} exceeds the limit {ALIGN_MAX}"));
    }
    Ok(align.max(ALIGN_MIN))
}

/// Whether two secrets are equal, in time that does not depend on where they differ.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manager() -> Manager {
        let tenants = [
            TenantConfig { name: "a".into(), token: "ta".into(), quota_bytes: 1 << 20 },
            TenantConfig { name: "b".into(), token: "tb".into(), quota_bytes: 1 << 20 },
        ];
        let mut m = Manager::new(4 << 20, &tenants);
        m.authenticate(1, "a", "ta").unwrap();
        m.authenticate(2, "a", "ta").unwrap();
        m.authenticate(3, "b", "tb").unwrap();
        m
    }

    fn req(size: u64, flags: u32, name: &str) -> Alloc {
        Alloc { size, align: 0, flags, name: name.into() }
    }

    #[test]
    fn auth_rejects_wrong_token_and_unknown_tenant() {
        let mut m = manager();
        let wrong_token = m.authenticate(9, "a", "tb").unwrap_err();
        let unknown_tenant = m.authenticate(9, "zz", "").unwrap_err();
        assert_eq!(wrong_token.status, Status::AuthFailed);
        assert_eq!(unknown_tenant.status, Status::AuthFailed);
        // The two failures are indistinguishable to the peer.
        assert_eq!(wrong_token, unknown_tenant);
        assert_eq!(m.allocate(9, &req(64, 0, "")).unwrap_err().status, Status::NotConnected);
    }

    #[test]
    fn failed_rehello_forgets_the_tenant() {
        let mut m = manager();
        let g = m.allocate(1, &req(4096, 0, "")).unwrap();
        assert_eq!(m.authenticate(1, "a", "wrong").unwrap_err().status, Status::AuthFailed);
        assert_eq!(m.tenant(1), None);
        assert_eq!(m.allocate(1, &req(64, 0, "")).unwrap_err().status, Status::NotConnected);
        assert_eq!(m.resolve(1, g.handle).unwrap_err().status, Status::NotConnected);
        // What it held is still released when it leaves.
        assert_eq!(m.release_client(1), 1);
        assert!(m.resolve(2, g.handle).is_err());
    }

    #[test]
    fn shared_names_are_per_tenant_and_refcounted() {
        let mut m = manager();
        let g = m.allocate(1, &req(4096, ALLOC_FLAG_SHARED, "job")).unwrap();
        assert_eq!(m.open(2, "job").unwrap().handle, g.handle);
        assert_eq!(m.open(3, "job").unwrap_err().status, Status::NameNotFound);
        m.free(1, g.handle).unwrap();
        assert_eq!(m.allocation_count(), 1, "client 2 still holds it");
        m.free(2, g.handle).unwrap();
        assert_eq!(m.allocation_count(), 0);
        assert_eq!(m.free(2, g.handle).unwrap_err().status, Status::FreedHandle);
        assert_eq!(m.free(2, 999).unwrap_err().status, Status::UnknownHandle);
    }

    #[test]
    fn exclusive_cannot_be_opened_and_other_tenant_cannot_free() {
        let mut m = manager();
        let g = m.allocate(1, &req(64, 0, "mine")).unwrap();
        assert_eq!(m.open(2, "mine").unwrap_err().status, Status::NotShared);
        assert_eq!(m.free(3, g.handle).unwrap_err().status, Status::UnknownHandle);
        assert_eq!(m.allocate(2, &req(64, 0, "mine")).unwrap_err().status, Status::NameExists);
    }

    #[test]
    fn bad_requests_and_limits() {
        let mut m = manager();
        assert_eq!(m.allocate(1, &req(0, 0, "")).unwrap_err().status, Status::InvalidArgument);
        assert_eq!(m.allocate(1, &req(ALLOC_SIZE_MAX + 1, 0, "")).unwrap_err().status, Status::TooLarge);
        assert_eq!(m.allocate(1, &req(64, 0x80, "")).unwrap_err().status, Status::InvalidArgument);
        assert_eq!(m.allocate(1, &req(64, ALLOC_FLAG_PERSISTENT, "")).unwrap_err().status, Status::InvalidArgument);
        let bad_align = Alloc { size: 64, align: 3, flags: 0, name: String::new() };
        assert_eq!(m.allocate(1, &bad_align).unwrap_err().status, Status::InvalidArgument);
        let e = m.allocate(1, &req((1 << 20) + 1, 0, "")).unwrap_err();
        assert_eq!(e.status, Status::QuotaExceeded);
        assert!(e.message.contains("quota"), "{e}");
        let used_before = m.used_bytes();
        assert_eq!(m.used_bytes(), used_before, "a refused allocation changes nothing");
    }

    #[test]
    fn a_tenant_only_the_manifest_names_cannot_be_reached_even_with_an_empty_token() {
        let mut m = manager();
        m.tenant_entry("ghost");
        let e = m.authenticate(7, "ghost", "").unwrap_err();
        assert_eq!(e, m.authenticate(7, "nobody", "").unwrap_err(), "answered as an unknown tenant");
        assert_eq!(m.tenant(7), None);
    }

    #[test]
    fn pool_exhaustion_is_reported() {
        let tenants = [TenantConfig { name: "a".into(), token: String::new(), quota_bytes: u64::MAX }];
        let mut m = Manager::new(1 << 12, &tenants);
        m.authenticate(1, "a", "").unwrap();
        m.allocate(1, &req(1 << 12, 0, "")).unwrap();
        assert_eq!(m.allocate(1, &req(1, 0, "")).unwrap_err().status, Status::PoolExhausted);
    }

    #[test]
    fn release_client_keeps_persistent_and_shared() {
        let mut m = manager();
        m.allocate(1, &req(64, 0, "")).unwrap();
        let p = m.allocate(1, &req(64, ALLOC_FLAG_PERSISTENT | ALLOC_FLAG_SHARED, "ckpt")).unwrap();
        let s = m.allocate(1, &req(64, ALLOC_FLAG_SHARED, "shared")).unwrap();
        m.open(2, "shared").unwrap();
        assert_eq!(m.release_client(1), 1);
        assert_eq!(m.allocation_count(), 2);
        assert_eq!(m.open(2, "ckpt").unwrap().handle, p.handle);
        m.free(2, s.handle).unwrap();
        m.free(2, p.handle).unwrap();
        assert_eq!(m.allocation_count(), 0);
        assert_eq!(m.used_bytes(), 0);
    }

    #[test]
    fn manifest_round_trip() {
        let mut m = manager();
        m.allocate(1, &req(64, 0, "")).unwrap();
        let p = m.allocate(1, &req(100, ALLOC_FLAG_PERSISTENT | ALLOC_FLAG_SHARED, "ckpt")).unwrap();
        let manifest = m.take_manifest_if_dirty().unwrap();
        assert!(m.take_manifest_if_dirty().is_none());
        assert_eq!(manifest.allocations.len(), 1);
        let mut restored = manager();
        restored.restore(&manifest).unwrap();
        let g = restored.open(2, "ckpt").unwrap();
        assert_eq!((g.handle, g.offset, g.size), (p.handle, p.offset, p.size));
        let fresh = restored.allocate(2, &req(64, 0, "")).unwrap();
        assert!(fresh.handle > p.handle, "handles are not reused after a restart");
    }
}
