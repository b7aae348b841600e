//! Conversion between `std::net::SocketAddr` and the C socket addresses UCX takes.

use crate::error::{Error, Result};
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Owned storage for a C `sockaddr_in`/`sockaddr_in6`.
pub(crate) struct CSockAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl CSockAddr {
    pub(crate) fn new(addr: SocketAddr) -> CSockAddr {
        // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
        let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let len = match addr {
            SocketAddr::V4(v4) => {
                // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
                let sin = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in) };
                sin.sin_family = libc::AF_INET as libc::sa_family_t;
                sin.sin_port = v4.port().to_be();
                sin.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
                mem::size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(v6) => {
                // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
                let sin6 = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in6) };
                sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sin6.sin6_port = v6.port().to_be();
                sin6.sin6_addr.s6_addr = v6.ip().octets();
                sin6.sin6_scope_id = v6.scope_id();
                mem::size_of::<libc::sockaddr_in6>()
            }
        };
        CSockAddr { storage, len: len as libc::socklen_t }
    }

    pub(crate) fn as_ucs(&self) -> crate::ffi::ucs_sock_addr_t {
        crate::ffi::ucs_sock_addr_t {
            addr: &self.storage as *const _ as *const crate::ffi::sockaddr,
            addrlen: self.len,
        }
    }
}

/// Reads a C socket address written by UCX back into a `SocketAddr`.
pub(crate) fn from_storage(storage: &libc::sockaddr_storage) -> Result<SocketAddr> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let sin = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Ok(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let sin6 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Ok(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        family => Err(Error::InvalidAddress(format!("unsupported address family {family}"))),
    }
}
