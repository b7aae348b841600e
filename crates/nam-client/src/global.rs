//! Global addresses on the client: make one for a byte of an allocation, and use one made by
//! any process (of the same protection domain) directly: put, get, atomics. The first use of
//! an address's allocation asks its server to resolve it (the server checks the domain
//! before it hands out the remote key, and the client becomes a holder); later uses hit a
//! cache and cost what the same operation on an [`Allocation`] costs.

use crate::allocation::Allocation;
use crate::client::Client;
use crate::error::{Error, Result};
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

impl Client {
    fn domain(&self, server: usize) -> Result<DomainReply> {
        if let Some(d) = self.global.domains.lock().unwrap().get(&server) {
            return Ok(*d);
        }
        let reply = self.lock().call(server, &Request::Gas(GasRequest::Domain), "domain", self.config.timeout)?;
        let Reply::Domain(d) = reply else {
            return Err(Error::UnexpectedReply { addr: self.config.servers[server], what: "domain" });
        };
        self.global.domains.lock().unwrap().insert(server, d);
        Ok(d)
    }

    /// The global address of byte `offset` of `allocation`: pass it to any process (through
    /// MPI, a file, the environment) whose client acts for the same tenant.
    pub fn global_address(&self, allocation: &Allocation, offset: u64) -> Result<GlobalAddress> {
        allocation.target(offset, 1)?;
        let d = self.domain(allocation.server)?;
        GlobalAddress::new(d.server_tag, d.domain, allocation.handle, offset)
            .map_err(|_| Error::InvalidArgument("handle or offset beyond the 40 bits of a global address"))
    }

    /// The allocation an address points into and the offset in it. The first call for an
    /// allocation asks its server (which refuses another domain's address with
    /// [`nam_proto::Status::DomainMismatch`], a freed allocation with
    /// [`nam_proto::Status::FreedHandle`]); later calls are answered from a cache. The client
    /// holds the allocation from then on: [`Client::free`] on the result releases it.
    pub fn resolve(&self, address: GlobalAddress) -> Result<(Allocation, u64)> {
        if address.is_null() {
            return Err(Error::InvalidArgument("the null global address"));
        }
        let key = (address.server(), address.handle());
        if let Some(a) = self.global.resolved.lock().unwrap().get(&key) {
            return Ok((a.clone(), address.offset()));
        }
        let server = self.server_of_tag(address.server())?;
        let request = Request::Gas(GasRequest::Resolve { address });
        let allocation = self.lock().grant(server, &request, "resolve", self.config.timeout)?;
        self.global.resolved.lock().unwrap().insert(key, allocation.clone());
        Ok((allocation, address.offset()))
    }

    fn server_of_tag(&self, tag: u32) -> Result<usize> {
        let mut found = None;
        for server in 0..self.server_count() {
            if self.domain(server)?.server_tag == tag {
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

    /// Put `data` at a global address (local completion, as [`Client::put`]).
    pub fn put_global(&self, address: GlobalAddress, data: &[u8]) -> Result<()> {
        let (allocation, offset) = self.resolve(address)?;
        self.put(&allocation, offset, data)
    }

    /// Put with remote completion at a global address.
    pub fn put_global_sync(&self, address: GlobalAddress, data: &[u8]) -> Result<()> {
        let (allocation, offset) = self.resolve(address)?;
        self.put_sync(&allocation, offset, data)
    }

    /// Get from a global address.
    pub fn get_global(&self, address: GlobalAddress, buffer: &mut [u8]) -> Result<()> {
        let (allocation, offset) = self.resolve(address)?;
        self.get(&allocation, offset, buffer)
    }

    /// Atomic fetch-and-add on the 64-bit word at a global address; returns the old value.
    pub fn fetch_add_global(&self, address: GlobalAddress, value: u64) -> Result<u64> {
        let (allocation, offset) = self.resolve(address)?;
        self.fetch_add(&allocation, offset, value)
    }

    /// Atomic compare-and-swap on the word at a global address; returns the old value.
    pub fn compare_swap_global(&self, address: GlobalAddress, compare: u64, value: u64) -> Result<u64> {
        let (allocation, offset) = self.resolve(address)?;
        self.compare_swap(&allocation, offset, compare, value)
    }

    /// Forgets the cached resolution of the allocation `address` points into (after
    /// [`Client::free`] of it, so a later use asks the server again).
    pub fn forget_global(&self, address: GlobalAddress) {
        self.global.resolved.lock().unwrap().remove(&(address.server(), address.handle()));
    }
}
