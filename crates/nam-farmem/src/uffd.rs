//! The few userfaultfd calls the pager needs, as raw ioctls through libc (the kernel ABI
//! of `include/uapi/linux/userfaultfd.h`; libc has no bindings for it). Everything unsafe
//! about userfaultfd is in this file.

use crate::error::{Error, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const UFFD_API: u64 = 0xAA;
/// Only faults from user mode are reported: allowed without privilege when
/// `vm.unprivileged_userfaultfd=0`, but the kernel's own accesses (read(2) into a missing
/// page) then fail with EFAULT instead of waiting.
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
// _IOWR(0xAA, nr, size) = 0xC000_0000 | size << 16 | 0xAA << 8 | nr
const UFFDIO_API: libc::c_ulong = 0xc018_aa3f;
const UFFDIO_REGISTER: libc::c_ulong = 0xc020_aa00;
const UFFDIO_UNREGISTER: libc::c_ulong = 0x8010_aa01;
const UFFDIO_WAKE: libc::c_ulong = 0x8010_aa02;
const UFFDIO_COPY: libc::c_ulong = 0xc028_aa03;
const UFFDIO_WRITEPROTECT: libc::c_ulong = 0xc018_aa06;
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;
const UFFDIO_REGISTER_MODE_WP: u64 = 2;
const UFFDIO_COPY_MODE_DONTWAKE: u64 = 1;
const UFFDIO_COPY_MODE_WP: u64 = 2;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1;
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
/// Faults raise SIGBUS in the faulting thread instead of waiting for a handler thread.
const UFFD_FEATURE_SIGBUS: u64 = 1 << 7;
/// The fault was a write.
pub const FAULT_WRITE: u64 = 1;
/// The fault was a write to a write-protected page.
pub const FAULT_WP: u64 = 2;

#[repr(C)]
struct ApiArg {
    api: u64,
    features: u64,
    ioctls: u64,
}
#[repr(C)]
struct Range {
    start: u64,
    len: u64,
}
#[repr(C)]
struct RegisterArg {
    range: Range,
    mode: u64,
    ioctls: u64,
}
#[repr(C)]
struct CopyArg {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}
#[repr(C)]
struct WriteProtectArg {
    range: Range,
    mode: u64,
}
/// `struct uffd_msg` (32 bytes); only the page-fault arm is read.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Msg {
    event: u8,
    reserved: [u8; 7],
    flags: u64,
    address: u64,
    feat: u64,
}

/// One page fault read from the descriptor.
#[derive(Debug, Clone, Copy)]
pub struct Fault {
    /// Faulting address.
    pub address: u64,
    /// [`FAULT_WRITE`], [`FAULT_WP`].
    pub flags: u64,
}

/// A userfaultfd descriptor.
pub struct Uffd {
    fd: OwnedFd,
    /// Created with [`UFFD_USER_MODE_ONLY`].
    pub user_mode_only: bool,
}

fn ioctl<T>(fd: &OwnedFd, request: libc::c_ulong, arg: &mut T) -> std::io::Result<()> {
    // SAFETY: `arg` is the struct the kernel expects for `request` and lives across the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request, arg as *mut T) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn sys(what: &'static str, e: std::io::Error) -> Error {
    Error::System { what, source: std::sync::Arc::new(e) }
}

impl Uffd {
    /// Opens a non-blocking descriptor: with kernel faults if permitted, else user-mode
    /// only; `UserfaultfdNotPermitted` when neither is. With `sigbus`, faults raise SIGBUS
    /// in the faulting thread instead of being queued on the descriptor.
    pub fn open(sigbus: bool) -> Result<Uffd> {
        let base = libc::O_CLOEXEC | libc::O_NONBLOCK;
        let mut reasons = Vec::new();
        for (flags, user_mode_only) in [(base, false), (base | UFFD_USER_MODE_ONLY, true)] {
            // SAFETY: the syscall takes one int of flags and returns a descriptor or -1.
            let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
            if fd >= 0 {
                // SAFETY: a fresh descriptor this process owns.
                let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
                let features = if sigbus { UFFD_FEATURE_SIGBUS } else { 0 };
                let mut api = ApiArg { api: UFFD_API, features, ioctls: 0 };
                ioctl(&fd, UFFDIO_API, &mut api).map_err(|e| sys("UFFDIO_API", e))?;
                return Ok(Uffd { fd, user_mode_only });
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => reasons.push(format!("{e}")),
                Some(libc::ENOSYS) => {
                    return Err(Error::UserfaultfdNotPermitted { reason: "the kernel has no userfaultfd".into() })
                }
                _ => return Err(sys("userfaultfd(2)", e)),
            }
        }
        Err(Error::UserfaultfdNotPermitted { reason: reasons.join("; ") })
    }

    /// Registers `[start, start + len)` for missing-page and write-protect faults.
    pub fn register(&self, start: u64, len: u64) -> Result<()> {
        let mut arg = RegisterArg {
            range: Range { start, len },
            mode: UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        ioctl(&self.fd, UFFDIO_REGISTER, &mut arg).map_err(|e| sys("UFFDIO_REGISTER (missing + write-protect)", e))
    }

    /// Unregisters the range.
    pub fn unregister(&self, start: u64, len: u64) {
        let mut arg = Range { start, len };
        let _ = ioctl(&self.fd, UFFDIO_UNREGISTER, &mut arg);
    }

    /// Installs `len` bytes from `src` at `dst` (page aligned), read-only when
    /// `write_protect`. Returns false when the page was already there.
    pub fn copy(&self, dst: u64, src: *const u8, len: u64, write_protect: bool, wake: bool) -> Result<bool> {
        let mut mode = if write_protect { UFFDIO_COPY_MODE_WP } else { 0 };
        if !wake {
            mode |= UFFDIO_COPY_MODE_DONTWAKE;
        }
        loop {
            let mut arg = CopyArg { dst, src: src as u64, len, mode, copy: 0 };
            match ioctl(&self.fd, UFFDIO_COPY, &mut arg) {
                Ok(()) => return Ok(true),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                    if wake {
                        self.wake(dst, len);
                    }
                    return Ok(false);
                }
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => continue,
                Err(e) => return Err(sys("UFFDIO_COPY", e)),
            }
        }
    }

    /// Sets (`protect`) or clears write protection of the range; clearing wakes waiters.
    pub fn write_protect(&self, start: u64, len: u64, protect: bool) -> Result<()> {
        let mode = if protect { UFFDIO_WRITEPROTECT_MODE_WP } else { 0 };
        let mut arg = WriteProtectArg { range: Range { start, len }, mode };
        ioctl(&self.fd, UFFDIO_WRITEPROTECT, &mut arg).map_err(|e| sys("UFFDIO_WRITEPROTECT", e))
    }

    /// Wakes threads waiting on faults in the range.
    pub fn wake(&self, start: u64, len: u64) {
        let mut arg = Range { start, len };
        let _ = ioctl(&self.fd, UFFDIO_WAKE, &mut arg);
    }

    /// Waits up to `timeout_ms` for events on the descriptor or on `also` (an eventfd
    /// that signal-mode faults ring); true when some are ready.
    pub fn poll(&self, also: Option<&OwnedFd>, timeout_ms: i32) -> bool {
        let pfd = |fd: i32| libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let mut fds = [pfd(self.fd.as_raw_fd()), pfd(also.map_or(-1, |f| f.as_raw_fd()))];
        // SAFETY: two valid pollfds (a negative descriptor is ignored by poll).
        unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) > 0 }
    }

    /// Reads the pending page faults into `out` (appending); other events are ignored.
    pub fn read_faults(&self, out: &mut Vec<Fault>) -> Result<()> {
        let mut msgs = [Msg::default(); 32];
        loop {
            let bytes = std::mem::size_of_val(&msgs);
            // SAFETY: reads at most `bytes` into `msgs`.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), msgs.as_mut_ptr().cast(), bytes) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::EAGAIN) => Ok(()),
                    Some(libc::EINTR) => continue,
                    _ => Err(sys("read(userfaultfd)", e)),
                };
            }
            let count = n as usize / std::mem::size_of::<Msg>();
            out.extend(
                msgs[..count]
                    .iter()
                    .filter(|m| m.event == UFFD_EVENT_PAGEFAULT)
                    .map(|m| Fault { address: m.address, flags: m.flags }),
            );
            if count < msgs.len() {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn struct_sizes_match_the_kernel_abi() {
        assert_eq!(std::mem::size_of::<super::ApiArg>(), 24);
        assert_eq!(std::mem::size_of::<super::RegisterArg>(), 32);
        assert_eq!(std::mem::size_of::<super::CopyArg>(), 40);
        assert_eq!(std::mem::size_of::<super::WriteProtectArg>(), 24);
        assert_eq!(std::mem::size_of::<super::Msg>(), 32);
    }
}
