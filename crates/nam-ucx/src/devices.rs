//! Which network devices a process's UCX may open TCP data ports on: only those it needs.
//!
//! UCX's TCP transport opens a listening data port on every network device it uses, beside
//! any connection-manager listener, and its receiver executes a peer's PUT request at the
//! address the request names, without any check (`docs/security.md`, "UCX's TCP transport
//! trusts the address in a peer's PUT request"), so every host that reaches a data port can
//! crash the process with one message. nam therefore narrows `UCX_NET_DEVICES` to the devices
//! a process talks through: a server to the device of the address it listens on
//! ([`for_listening_on`]; every device when that is `0.0.0.0` or `::`), a client to the devices
//! its routes to its servers leave through ([`for_reaching`]). A bridge is named with
//! `UCX_TCP_BRIDGE_ENABLE=y` too, without which UCX skips bridges. Each setting yields to its
//! environment variable when the administrator sets it.
//!
//! A same-host peer's worker address lists TCP on every device of the host, and a server
//! checks each entry against how this host's UCX packs it ([`crate::check_worker_address`]).
//! A process whose own worker has fewer devices checks against [`address_reference`]
//! instead: the address of a worker on every device, made once and closed at once.

use crate::{Context, Features, Result, Setting, Worker};
use std::ffi::{CStr, CString};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

/// The settings that keep a server's data ports on the device of `listen`: none when
/// `listen` is unspecified or no device holds it (the listener's bind then fails and says so).
pub fn for_listening_on(listen: IpAddr) -> Vec<Setting> {
    if listen.is_unspecified() {
        return Vec::new();
    }
    settings_naming(&devices_holding(listen))
}

/// The settings that keep a client's data ports on the devices its routes to `servers` leave
/// through (the kernel's choice of source address for each, found with an unconnected UDP
/// socket's `connect`, which sends nothing): none if some route cannot be found, so that a
/// client never loses a server it could reach before.
pub fn for_reaching(servers: &[SocketAddr]) -> Vec<Setting> {
    let mut devices: Vec<String> = Vec::new();
    for server in servers {
        let any: IpAddr = if server.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
        let bind = SocketAddr::new(any, 0);
        let source = UdpSocket::bind(bind).and_then(|s| s.connect(server).and_then(|()| s.local_addr()));
        let Ok(source) = source else { return Vec::new() };
        let holding = devices_holding(source.ip());
        if holding.is_empty() {
            return Vec::new();
        }
        for d in holding {
            if !devices.contains(&d) {
                devices.push(d);
            }
        }
    }
    settings_naming(&devices)
}

/// `UCX_NET_DEVICES` naming `devices` (and bridges enabled if one is a bridge); none for none.
fn settings_naming(devices: &[String]) -> Vec<Setting> {
    // A device name never holds a NUL (the kernel's names are C strings).
    let list = match CString::new(devices.join(",")) {
        Ok(list) if !devices.is_empty() => list,
        _ => return Vec::new(),
    };
    let mut settings = vec![Setting { variable: "UCX_NET_DEVICES", key: c"NET_DEVICES", value: list }];
    if devices.iter().any(|d| std::path::Path::new(&format!("/sys/class/net/{d}/bridge")).exists()) {
        settings.push(Setting { variable: "UCX_TCP_BRIDGE_ENABLE", key: c"TCP_BRIDGE_ENABLE", value: c"y".into() });
    }
    settings
}

/// The worker address that same-host peers' addresses are checked against: `own` when
/// `settings` restrict nothing, else the address of a short-lived worker of a context without
/// them (so listing every device this host's UCX uses).
pub fn address_reference(settings: &[Setting], own: &[u8]) -> Result<Vec<u8>> {
    if settings.is_empty() {
        return Ok(own.to_vec());
    }
    let context = Context::new(Features::SERVER)?;
    let worker = Worker::new(&context)?;
    worker.address()
}

/// Names of the network devices that have `ip` as one of their addresses (`getifaddrs(3)`).
fn devices_holding(ip: IpAddr) -> Vec<String> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: out-pointer is valid; the list is freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Vec::new();
    }
    let mut names = Vec::new();
    let mut entry = list;
    while !entry.is_null() {
        // SAFETY: entry is an element of the list getifaddrs returned, not yet freed.
        let e = unsafe { &*entry };
        // SAFETY: ifa_addr is null or a sockaddr of the family it names, as getifaddrs fills it.
        if let Some(address) = unsafe { ip_of(e.ifa_addr) } {
            if address == ip && !e.ifa_name.is_null() {
                // SAFETY: ifa_name is a NUL-terminated string owned by the list.
                let name = unsafe { CStr::from_ptr(e.ifa_name) }.to_string_lossy().into_owned();
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        entry = e.ifa_next;
    }
    // SAFETY: list came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    names
}

/// The IP address of an IPv4 or IPv6 socket address.
///
/// # Safety
/// `sa` is null or points to a socket address whose size fits its `sa_family`.
unsafe fn ip_of(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees the family field is readable and the size matches it.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let v4 = &*(sa as *const libc::sockaddr_in);
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))))
            }
            libc::AF_INET6 => {
                let v6 = &*(sa as *const libc::sockaddr_in6);
                Some(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.s6_addr)))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_held_by_the_loopback_device_alone() {
        let settings = for_listening_on(IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(settings.len(), 1, "{settings:?}");
        assert_eq!(settings[0].value.to_str().unwrap(), "lo");
    }

    #[test]
    fn every_address_keeps_every_device() {
        assert!(for_listening_on(IpAddr::V4(Ipv4Addr::UNSPECIFIED)).is_empty());
        assert!(for_listening_on(IpAddr::V6(Ipv6Addr::UNSPECIFIED)).is_empty());
    }

    #[test]
    fn a_client_of_loopback_servers_uses_the_loopback_device() {
        let servers = ["127.0.0.1:7000".parse().unwrap(), "127.0.0.1:7001".parse().unwrap()];
        let settings = for_reaching(&servers);
        assert_eq!(settings.len(), 1, "{settings:?}");
        assert_eq!(settings[0].value.to_str().unwrap(), "lo");
    }
}
