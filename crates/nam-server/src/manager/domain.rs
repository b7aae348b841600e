//! Protection domains: a tenant's id on this server, and the check that lets a client of
//! that tenant (and only of it) hold an allocation it reached by global address.

use super::{grant_of, refuse, Grant, Manager, Refusal};
use nam_proto::limits::HANDLES_PER_CLIENT_MAX;
use nam_proto::Status;

impl Manager {
    /// The protection domain of `client`: its tenant's id, 1 + the tenant's position in the
    /// configuration's tenants sorted by name (stable while the tenant set is unchanged).
    pub(crate) fn domain_of(&self, client: u64) -> Result<u16, Refusal> {
        let tenant = self.tenant_of(client)?;
        let index = self.tenants.keys().position(|t| *t == tenant).expect("authenticated tenant exists");
        Ok(index as u16 + 1)
    }

    /// Makes `client` a holder of `handle`, reached by a global address in `domain`. The
    /// domain must be the client's, and the allocation must belong to the client's tenant;
    /// otherwise nothing changes and the client is told exactly what it would be told for a
    /// handle never issued, so it learns nothing of other tenants' allocations (issue 25,
    /// "authentication that reveals nothing"). Only its own tenant's freed allocations answer
    /// `FreedHandle`. The client then holds a reference, so the allocation lives until it
    /// frees it (or its lease expires).
    pub(crate) fn hold_global(&mut self, client: u64, domain: u16, handle: u64) -> Result<Grant, Refusal> {
        let tenant = self.tenant_of(client)?;
        let mine = self.domain_of(client)?;
        let unknown = || refuse(Status::UnknownHandle, format!("no allocation {handle} on this server"));
        if domain != mine {
            return unknown();
        }
        let Some(allocation) = self.allocations.get(&handle) else {
            return if self.freed_by(&tenant, handle) {
                refuse(Status::FreedHandle, format!("allocation {handle} was freed"))
            } else {
                unknown()
            };
        };
        if allocation.record.tenant != tenant {
            return unknown();
        }
        let handles = self.client_handles.get_mut(&client).expect("authenticated client");
        if !handles.contains(&handle) && handles.len() >= HANDLES_PER_CLIENT_MAX {
            return refuse(Status::TooMany, format!("client holds {HANDLES_PER_CLIENT_MAX} allocations, the limit"));
        }
        handles.insert(handle);
        let allocation = self.allocations.get_mut(&handle).expect("checked above");
        allocation.holders.insert(client);
        Ok(grant_of(&allocation.record))
    }

    /// Whether `handle` names a live allocation.
    pub(crate) fn is_live(&self, handle: u64) -> bool {
        self.allocations.contains_key(&handle)
    }
}

#[cfg(test)]
mod tests {
    use super::super::TenantConfig;
    use super::*;
    use nam_proto::Alloc;

    fn manager() -> Manager {
        let tenant = |name: &str| TenantConfig { name: name.into(), token: name.into(), quota_bytes: 1 << 20 };
        let mut m = Manager::new(1 << 20, &[tenant("b"), tenant("a")]);
        m.authenticate(1, "a", "a").unwrap();
        m.authenticate(2, "a", "a").unwrap();
        m.authenticate(3, "b", "b").unwrap();
        m
    }

    #[test]
    fn domains_follow_sorted_tenant_names() {
        let m = manager();
        assert_eq!((m.domain_of(1).unwrap(), m.domain_of(3).unwrap()), (1, 2));
    }

    #[test]
    fn only_the_owning_domain_may_hold_by_address() {
        let mut m = manager();
        let alloc = Alloc { size: 64, align: 0, flags: 0, name: String::new() };
        let g = m.allocate(1, &alloc).unwrap();
        assert_eq!(m.hold_global(2, 1, g.handle).unwrap(), g);
        assert_eq!(m.resolve(2, g.handle).unwrap(), (g.offset, g.size));
        // Client 3 (domain 2) with the owner's domain, and with its own domain: answered
        // exactly as a handle never issued.
        let never = m.hold_global(3, 2, 999).unwrap_err();
        assert_eq!(never.status, Status::UnknownHandle);
        let never_msg = |h: u64| never.message.replace("999", &h.to_string());
        for domain in [1, 2] {
            let e = m.hold_global(3, domain, g.handle).unwrap_err();
            assert_eq!((e.status, e.message), (Status::UnknownHandle, never_msg(g.handle)), "domain {domain}");
        }
        assert!(m.resolve(3, g.handle).is_err(), "a refused hold grants nothing");
        m.free(1, g.handle).unwrap();
        assert!(m.is_live(g.handle), "client 2 still holds it");
        m.free(2, g.handle).unwrap();
        assert_eq!(m.hold_global(1, 1, g.handle).unwrap_err().status, Status::FreedHandle);
        assert_eq!(m.hold_global(1, 1, 999).unwrap_err().status, Status::UnknownHandle);
        // Freed by tenant a: tenant b is told nothing more than for a handle never issued.
        let e = m.hold_global(3, 2, g.handle).unwrap_err();
        assert_eq!((e.status, e.message), (Status::UnknownHandle, never_msg(g.handle)));
        let (e, never) = (m.resolve(3, g.handle).unwrap_err(), m.resolve(3, 999).unwrap_err());
        assert_eq!((e.status, e.message), (never.status, never.message.replace("999", &g.handle.to_string())));
        assert_eq!(m.resolve(1, g.handle).unwrap_err().status, Status::FreedHandle, "its own tenant is told");
    }
}
