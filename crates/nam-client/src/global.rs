//! Global addresses on the client: make one for a byte of an allocation, and use one made by
//! any process (of the same protection domain) directly: put, get, atomics. The first use of
//! an address's allocation asks its server to resolve it (the server checks the domain
//! before it hands out the remote key, and the client becomes a holder); later uses hit a
//! cache and cost what the same operation on an [`Allocation`] costs. The operations on a
//! resolved address are [`crate::Client`]'s (`put_global` and friends).

use crate::allocation::Allocation;
use crate::error::{Error, Result};
use crate::session::Session;
use nam_proto::gas::{DomainReply, GasRequest};
use nam_proto::{GlobalAddress, Reply, Request};
use std::collections::HashMap;
use std::sync::Mutex;

/// Per-client state of the global address space.
#[derive(Default)]
pub(crate) struct GlobalState {
    /// Each server's tag and this client's domain there, learnt on first use.
    domains: Mutex<HashMap<usize, DomainReply>>,
    /// Allocations resolved from addresses, by (server tag, handle).
    resolved: Mutex<HashMap<(u32, u64), Allocation>>,
}

impl GlobalState {
    fn domain(&self, session: &Session, server: usize) -> Result<DomainReply> {
        if let Some(d) = self.domains.lock().unwrap().get(&server) {
            return Ok(*d);
        }
        let reply = session.lock().call(server, &Request::Gas(GasRequest::Domain), "domain", session.timeout)?;
        let Reply::Domain(d) = reply else {
            return Err(Error::UnexpectedReply { addr: session.servers[server], what: "domain" });
        };
        self.domains.lock().unwrap().insert(server, d);
        Ok(d)
    }

    /// The global address of byte `offset` of `allocation`.
    pub(crate) fn address(&self, session: &Session, allocation: &Allocation, offset: u64) -> Result<GlobalAddress> {
        allocation.target(offset, 1)?;
        let d = self.domain(session, allocation.server)?;
        GlobalAddress::new(d.server_tag, d.domain, allocation.handle, offset)
            .map_err(|_| Error::InvalidArgument("handle or offset beyond the 40 bits of a global address"))
    }

    /// The allocation `address` points into and the offset in it, from the cache or its
    /// server.
    pub(crate) fn resolve(&self, session: &Session, address: GlobalAddress) -> Result<(Allocation, u64)> {
        if address.is_null() {
            return Err(Error::InvalidArgument("the null global address"));
        }
        let key = (address.server(), address.handle());
        if let Some(a) = self.resolved.lock().unwrap().get(&key) {
            return Ok((a.clone(), address.offset()));
        }
        let server = self.server_of_tag(session, address.server())?;
        let request = Request::Gas(GasRequest::Resolve { address });
        let allocation = session.lock().grant(server, &request, "resolve", session.timeout)?;
        self.resolved.lock().unwrap().insert(key, allocation.clone());
        Ok((allocation, address.offset()))
    }

    fn server_of_tag(&self, session: &Session, tag: u32) -> Result<usize> {
        let mut found = None;
        for server in 0..session.servers.len() {
            if self.domain(session, server)?.server_tag == tag {
                if found.is_some() {
                    return Err(Error::Config(format!(
                        "two configured servers share the global-address tag {tag:08x}"
                    )));
                }
                found = Some(server);
            }
        }
        found.ok_or(Error::UnknownServer { tag })
    }

    /// Forgets the cached resolution of the allocation `address` points into.
    pub(crate) fn forget(&self, address: GlobalAddress) {
        self.resolved.lock().unwrap().remove(&(address.server(), address.handle()));
    }
}
