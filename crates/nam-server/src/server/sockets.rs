//! Connections UCX accepted but never turned into a connection request, closed by the server.
//!
//! UCX's TCP connection manager (1.13) accepts every TCP connection to the listener and waits
//! for the client's first message. It has no deadline for it, and a peer that sends bytes it
//! cannot parse and then closes leaves the socket in CLOSE-WAIT for ever, registered in
//! UCX's event set (measured: 200 of them held 200 descriptors and 23% of a core). A peer that
//! connects and sends nothing (half-open) holds a descriptor for ever too, and about a
//! thousand of them made legitimate clients fail with "Connection reset by remote peer". None
//! of these reaches nam as a connection request, so the server finds them itself: it scans
//! its own descriptors for TCP sockets accepted on the listening port and closes
//!
//! - those whose peer closed (CLOSE-WAIT) and that UCX has not closed within
//!   [`CLOSE_WAIT_GRACE`]: UCX closes a real client's socket as soon as it sees the close;
//! - those whose peer closed after sending more than a connection request can hold
//!   ([`CM_BYTES_MAX`]), at once: that was no client;
//! - those that received no byte within the handshake deadline (a real client sends its
//!   connection request as soon as TCP connects);
//! - beyond `pending_per_source` such silent sockets from one address, the oldest at once.
//!
//! A silent socket is shut down (`shutdown(2)`): UCX then reads the end of the stream, as if
//! the peer had closed, and closes it itself (it does for a peer that connects and closes
//! without a byte). A socket in CLOSE-WAIT already shows UCX that end and UCX ignores it, so
//! it is closed under UCX with `dup2` of `/dev/null` over the descriptor: the socket closes
//! (and leaves UCX's event set with it) while the descriptor number stays valid for UCX, which
//! owns it. UCX keeps that number and its small record of the connection until the server
//! stops: a leak of one descriptor per such connection (not of a socket, a buffer or CPU),
//! which `nam status` counts ("unfinished sockets closed"). Either way the descriptor is
//! duplicated and the duplicate's inode checked just before ([`SocketReaper::close`] says
//! what that guarantees).

use crate::constants::{CLOSE_WAIT_GRACE, CM_BYTES_MAX, SOCKET_SCAN_INTERVAL};
use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// `TCP_ESTABLISHED` and `TCP_CLOSE_WAIT` of Linux's `tcp_states.h`.
const TCP_ESTABLISHED: u8 = 1;
const TCP_CLOSE_WAIT: u8 = 8;
/// Offset of `tcpi_bytes_received` in Linux's `struct tcp_info` (since 4.1).
const TCPI_BYTES_RECEIVED: usize = 128;

/// What one descriptor looked like when the reaper first saw it in its current state.
struct Seen {
    inode: u64,
    state: u8,
    since: Instant,
}

/// A socket found on the listening port.
struct Found {
    fd: i32,
    inode: u64,
    state: u8,
    received: u64,
    peer: Option<IpAddr>,
}

/// What a scan closed.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Reaped {
    /// Sockets whose peer had closed (CLOSE-WAIT).
    pub(crate) closed: u64,
    /// Sockets that sent nothing (half-open).
    pub(crate) silent: u64,
}

/// Finds and closes the sockets UCX leaves behind on the listening port (module docs).
pub(crate) struct SocketReaper {
    port: u16,
    /// [`CM_BYTES_MAX`], or `u64::MAX` (the rule off) when UCX's connection-request size
    /// is configured (`UCX_TCP_CM_PRIV_DATA_LEN`) and the constant may not hold.
    cm_bytes_max: u64,
    seen: HashMap<i32, Seen>,
    next_scan: Instant,
    dev_null: Option<std::fs::File>,
}

impl SocketReaper {
    /// A reaper for connections accepted on `port`.
    pub(crate) fn new(port: u16) -> SocketReaper {
        let dev_null = std::fs::File::open("/dev/null")
            .map_err(|e| log::warn!("cannot open /dev/null, so leaked sockets stay open: {e}"))
            .ok();
        let cm_bytes_max = if std::env::var_os("UCX_TCP_CM_PRIV_DATA_LEN").is_some() { u64::MAX } else { CM_BYTES_MAX };
        SocketReaper { port, cm_bytes_max, seen: HashMap::new(), next_scan: Instant::now(), dev_null }
    }

    /// Scans (at most every [`SOCKET_SCAN_INTERVAL`]) and closes what the module docs say.
    pub(crate) fn scan(&mut self, now: Instant, handshake: Duration, pending_per_source: usize) -> Reaped {
        let mut reaped = Reaped::default();
        if now < self.next_scan || self.dev_null.is_none() {
            return reaped;
        }
        self.next_scan = now + SOCKET_SCAN_INTERVAL;
        let found = self.find();
        let mut seen = HashMap::with_capacity(found.len());
        let mut doomed = Vec::new();
        let mut silent_by_source: HashMap<Option<IpAddr>, Vec<(Instant, i32, u64)>> = HashMap::new();
        for f in found {
            let since = match self.seen.get(&f.fd) {
                Some(s) if s.inode == f.inode && s.state == f.state => s.since,
                _ => now,
            };
            seen.insert(f.fd, Seen { inode: f.inode, state: f.state, since });
            let age = now.saturating_duration_since(since);
            if f.state == TCP_CLOSE_WAIT && (age >= CLOSE_WAIT_GRACE || f.received > self.cm_bytes_max) {
                doomed.push((f.fd, f.inode, true));
            } else if f.state == TCP_ESTABLISHED && f.received == 0 {
                if age >= handshake {
                    doomed.push((f.fd, f.inode, false));
                } else {
                    silent_by_source.entry(f.peer).or_default().push((since, f.fd, f.inode));
                }
            }
        }
        for (_, mut silent) in silent_by_source {
            if silent.len() > pending_per_source {
                silent.sort();
                let excess = silent.len() - pending_per_source;
                doomed.extend(silent.into_iter().take(excess).map(|(_, fd, inode)| (fd, inode, false)));
            }
        }
        for (fd, inode, closed) in doomed {
            if self.close(fd, inode, closed) {
                seen.remove(&fd);
                if closed {
                    reaped.closed += 1;
                } else {
                    reaped.silent += 1;
                }
            }
        }
        self.seen = seen;
        if reaped.closed + reaped.silent > 0 {
            log::info!(
                "closed {} sockets whose peer had closed and {} that sent nothing (connections UCX never completed)",
                reaped.closed,
                reaped.silent
            );
        }
        reaped
    }

    /// Every TCP socket of this process accepted on the listening port.
    fn find(&self) -> Vec<Found> {
        let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return Vec::new() };
        let mut found = Vec::new();
        for entry in dir.flatten() {
            let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
            let Ok(target) = std::fs::read_link(entry.path()) else { continue };
            let Some(inode) = socket_inode(&target.to_string_lossy()) else { continue };
            if let Some(f) = self.inspect(fd, inode) {
                found.push(f);
            }
        }
        found
    }

    /// `fd` if it is a connected TCP socket whose local port is the listener's.
    fn inspect(&self, fd: i32, inode: u64) -> Option<Found> {
        // SAFETY: plain queries on a descriptor number; a stale number fails with EBADF.
        unsafe {
            let mut listening: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            let rc = libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_ACCEPTCONN,
                &mut listening as *mut _ as *mut libc::c_void,
                &mut len,
            );
            if rc != 0 || listening != 0 {
                return None;
            }
            let mut local: libc::sockaddr_storage = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            if libc::getsockname(fd, &mut local as *mut _ as *mut libc::sockaddr, &mut len) != 0 {
                return None;
            }
            if addr_of(&local)?.1 != self.port {
                return None;
            }
            let mut info = [0u8; 256];
            let mut len = info.len() as libc::socklen_t;
            let rc = libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                info.as_mut_ptr() as *mut libc::c_void,
                &mut len,
            );
            if rc != 0 || (len as usize) < TCPI_BYTES_RECEIVED + 8 {
                return None;
            }
            let received = u64::from_ne_bytes(info[TCPI_BYTES_RECEIVED..TCPI_BYTES_RECEIVED + 8].try_into().ok()?);
            let mut peer: libc::sockaddr_storage = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            let peer = if libc::getpeername(fd, &mut peer as *mut _ as *mut libc::sockaddr, &mut len) == 0 {
                addr_of(&peer).map(|(ip, _)| ip)
            } else {
                None
            };
            Some(Found { fd, inode, state: info[0], received, peer })
        }
    }

    /// Ends socket `inode` if descriptor `fd` still refers to it (module docs); true if it
    /// did. The descriptor is duplicated first and the duplicate checked: a number that UCX
    /// closed and reused meanwhile names another socket and is left alone. A silent socket
    /// is shut down through the duplicate, which holds the very socket checked, so that step
    /// cannot touch another. A socket whose peer `closed` is replaced under UCX's number by
    /// `/dev/null` while the duplicate still holds it; that `dup2` acts on the number, so it
    /// is exact unless UCX closes and reuses the number between the check and the `dup2`
    /// (a few instructions; UCX has left these sockets alone for [`CLOSE_WAIT_GRACE`]).
    fn close(&self, fd: i32, inode: u64, closed: bool) -> bool {
        let Some(dev_null) = &self.dev_null else { return false };
        // SAFETY: dup of a descriptor number (a stale one fails with EBADF); fstat, shutdown
        // and close act on the duplicate this function owns; dup2 keeps UCX's number valid.
        unsafe {
            let dup = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0);
            if dup < 0 {
                return false;
            }
            let mut st: libc::stat = std::mem::zeroed();
            let same =
                libc::fstat(dup, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK && st.st_ino == inode;
            let ended = same
                && if closed {
                    libc::dup2(dev_null.as_raw_fd(), fd) == fd
                } else {
                    libc::shutdown(dup, libc::SHUT_RDWR) == 0
                };
            libc::close(dup);
            ended
        }
    }
}

/// The inode of a `/proc/self/fd` link target `socket:[N]`.
fn socket_inode(target: &str) -> Option<u64> {
    target.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

/// The IP address and port of an IPv4 or IPv6 socket address.
fn addr_of(storage: &libc::sockaddr_storage) -> Option<(IpAddr, u16)> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says it is a sockaddr_in.
            let sin = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            Some((IpAddr::from(u32::from_be(sin.sin_addr.s_addr).to_be_bytes()), u16::from_be(sin.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says it is a sockaddr_in6.
            let sin6 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            Some((IpAddr::from(sin6.sin6_addr.s6_addr), u16::from_be(sin6.sin6_port)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::socket_inode;

    #[test]
    fn reads_socket_inodes() {
        assert_eq!(socket_inode("socket:[12345]"), Some(12345));
        assert_eq!(socket_inode("pipe:[12]"), None);
        assert_eq!(socket_inode("/dev/null"), None);
    }
}
