//! Which network devices the server's UCX may open data ports on: those of the address it
//! listens on.
//!
//! UCX's TCP transport opens a listening data port on every network device it uses, apart
//! from the connection manager's listener that `--listen` names. Left to its default, a server
//! told to listen on `127.0.0.1` still accepted TCP connections on every other interface. That
//! matters beyond tidiness: UCX's TCP receiver executes a peer's PUT request at the address the
//! request names, without any check (`docs/security.md`, "UCX's TCP transport"), so every host
//! that reaches a data port can crash the server with one message. A server listening on a
//! specific address therefore runs UCX with `UCX_NET_DEVICES` set to that address's
//! device (and, for a bridge, `UCX_TCP_BRIDGE_ENABLE=y`, without which UCX skips bridges); a
//! server listening on every address (`0.0.0.0`, `::`) keeps every device. Either yields to
//! the environment variable when the administrator sets it.
//!
//! A same-host checkpoint rank's worker address lists TCP on every device of the host, and
//! the server checks each entry against how this host's UCX packs it
//! ([`nam_ucx::check_worker_address`]). A server whose own worker has fewer devices checks
//! against [`address_reference`] instead: the address of a worker on every device, made
//! once at start and closed at once.

use nam_ucx::{Context, Features, Setting, Worker};
use std::ffi::{CStr, CString};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The UCX settings that keep the server's data ports on the device of `listen`: none when
/// `listen` is unspecified or no device holds it (the listener's bind then fails and says so).
pub(super) fn settings_for(listen: IpAddr) -> Vec<Setting> {
    if listen.is_unspecified() {
        return Vec::new();
    }
    let devices = devices_holding(listen);
    // A device name never holds a NUL (the kernel's names are C strings).
    let Ok(list) = CString::new(devices.join(",")) else { return Vec::new() };
    if devices.is_empty() {
        return Vec::new();
    }
    let mut settings = vec![Setting { variable: "UCX_NET_DEVICES", key: c"NET_DEVICES", value: list }];
    if devices.iter().any(|d| std::path::Path::new(&format!("/sys/class/net/{d}/bridge")).exists()) {
        settings.push(Setting { variable: "UCX_TCP_BRIDGE_ENABLE", key: c"TCP_BRIDGE_ENABLE", value: c"y".into() });
    }
    settings
}

/// The worker address that peers' addresses are checked against: `own` when `settings`
/// restrict nothing, else the address of a short-lived worker of a context without them (so
/// listing every device this host's UCX uses).
pub(super) fn address_reference(settings: &[Setting], own: &[u8]) -> nam_ucx::Result<Vec<u8>> {
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
        let settings = settings_for(IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(settings.len(), 1, "{settings:?}");
        assert_eq!(settings[0].value.to_str().unwrap(), "lo");
    }

    #[test]
    fn every_address_keeps_every_device() {
        assert!(settings_for(IpAddr::V4(Ipv4Addr::UNSPECIFIED)).is_empty());
        assert!(settings_for(IpAddr::V6(Ipv6Addr::UNSPECIFIED)).is_empty());
    }
}
