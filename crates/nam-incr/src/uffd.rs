//! userfaultfd write-protection through raw ioctls (linux/userfaultfd.h, x86-64 and aarch64
//! numbering). We use raw calls rather than the `userfaultfd` crate because its bindings are
//! generated with bindgen at build time and its write-protect API did not expose
//! `UFFD_FEATURE_WP_UNPOPULATED`, which lets us protect pages the application has not touched
//! yet. Every unsafe block here is one system call on plain-old-data structs we own.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const UFFD_API: u64 = 0xAA;
const UFFD_FEATURE_PAGEFAULT_FLAG_WP: u64 = 1 << 0;
const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
// _IOWR(0xAA, 0x3F, struct uffdio_api), _IOWR(0xAA, 0x00, struct uffdio_register), ...
const UFFDIO_API: libc::c_ulong = 0xC018_AA3F;
const UFFDIO_REGISTER: libc::c_ulong = 0xC020_AA00;
const UFFDIO_UNREGISTER: libc::c_ulong = 0x8010_AA01;
const UFFDIO_WRITEPROTECT: libc::c_ulong = 0xC018_AA06;
const UFFDIO_REGISTER_MODE_WP: u64 = 2;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1;
// _IO(0xAA, 0x00) on /dev/userfaultfd.
const USERFAULTFD_IOC_NEW: libc::c_ulong = 0xAA00;
/// `uffd_msg.event` of a page fault.
pub const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
/// `uffd_msg.arg.pagefault.flags` bit of a write-protect fault.
pub const UFFD_PAGEFAULT_FLAG_WP: u64 = 2;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

/// One message read from the descriptor (struct uffd_msg, 32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct UffdMsg {
    /// `UFFD_EVENT_*`.
    pub event: u8,
    reserved: [u8; 7],
    /// For page faults: `UFFD_PAGEFAULT_FLAG_*`.
    pub flags: u64,
    /// For page faults: the faulting address.
    pub address: u64,
    feat: u64,
}

fn ioctl<T>(fd: i32, request: libc::c_ulong, arg: &mut T) -> io::Result<()> {
    // SAFETY: `arg` is a live, exclusively borrowed #[repr(C)] struct of the size encoded in
    // `request`; the kernel reads and writes only that struct.
    let rc = unsafe { libc::ioctl(fd, request as _, arg as *mut T) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Opens a userfaultfd with write-protect faults: first the system call, then
/// `/dev/userfaultfd` (which is governed by file permissions instead of
/// `vm.unprivileged_userfaultfd`). Returns the error of the system call when both fail.
pub fn open_wp() -> io::Result<OwnedFd> {
    open_with(UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_WP_UNPOPULATED)
}

/// Opens a userfaultfd whose write-protect faults the kernel resolves itself
/// (`UFFD_FEATURE_WP_ASYNC`, Linux 6.7+): a write to a protected page costs a minor fault
/// that clears the page's protection bit, no message and no thread; [`pagemap_scan`] then
/// reads (and re-arms) those bits in one call.
pub fn open_wp_async() -> io::Result<OwnedFd> {
    open_with(UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED)
}

fn open_with(features: u64) -> io::Result<OwnedFd> {
    // SAFETY: the system call takes flags only and returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) } as i32;
    let fd = if raw >= 0 {
        // SAFETY: `raw` is a descriptor we just received and own.
        unsafe { OwnedFd::from_raw_fd(raw) }
    } else {
        let syscall_error = io::Error::last_os_error();
        open_dev().map_err(|_| syscall_error)?
    };
    let mut api = UffdioApi { api: UFFD_API, features, ioctls: 0 };
    ioctl(fd.as_raw_fd(), UFFDIO_API, &mut api)?;
    Ok(fd)
}

fn open_dev() -> io::Result<OwnedFd> {
    let dev = std::fs::OpenOptions::new().read(true).write(true).open("/dev/userfaultfd")?;
    // SAFETY: USERFAULTFD_IOC_NEW takes the new descriptor's flags by value.
    let raw = unsafe { libc::ioctl(dev.as_raw_fd(), USERFAULTFD_IOC_NEW as _, libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor we just received and own.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Registers `[start, start + len)` (page aligned) for write-protect faults.
pub fn register(fd: i32, start: usize, len: usize) -> io::Result<()> {
    let mut reg = UffdioRegister {
        range: UffdioRange { start: start as u64, len: len as u64 },
        mode: UFFDIO_REGISTER_MODE_WP,
        ioctls: 0,
    };
    ioctl(fd, UFFDIO_REGISTER, &mut reg)
}

/// Unregisters a range (also drops its write protection).
pub fn unregister(fd: i32, start: usize, len: usize) -> io::Result<()> {
    let mut range = UffdioRange { start: start as u64, len: len as u64 };
    ioctl(fd, UFFDIO_UNREGISTER, &mut range)
}

/// Write-protects (`protect = true`) or releases a range; releasing wakes threads blocked on
/// a write fault in it.
pub fn write_protect(fd: i32, start: usize, len: usize, protect: bool) -> io::Result<()> {
    let mode = if protect { UFFDIO_WRITEPROTECT_MODE_WP } else { 0 };
    let mut wp = UffdioWriteprotect { range: UffdioRange { start: start as u64, len: len as u64 }, mode };
    ioctl(fd, UFFDIO_WRITEPROTECT, &mut wp)
}

/// Reads one message; `Ok(None)` when none is queued (the descriptor is non-blocking).
pub fn read_msg(fd: i32) -> io::Result<Option<UffdMsg>> {
    let mut msg = UffdMsg::default();
    let size = std::mem::size_of::<UffdMsg>();
    // SAFETY: `msg` is a 32-byte #[repr(C)] buffer we own; read writes at most `size` bytes.
    let n = unsafe { libc::read(fd, &mut msg as *mut UffdMsg as *mut libc::c_void, size) };
    if n == size as isize {
        return Ok(Some(msg));
    }
    let err = io::Error::last_os_error();
    if n < 0 && err.kind() == io::ErrorKind::WouldBlock {
        return Ok(None);
    }
    Err(err)
}

// linux/fs.h: PAGEMAP_SCAN = _IOWR('f', 16, struct pm_scan_arg).
const PAGEMAP_SCAN: libc::c_ulong = 0xC060_6610;
const PAGE_IS_WRITTEN: u64 = 1 << 1;
const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// Opens `/proc/self/pagemap` for [`pagemap_scan`].
pub fn open_pagemap() -> io::Result<OwnedFd> {
    Ok(OwnedFd::from(std::fs::File::open("/proc/self/pagemap")?))
}

/// The pages of `[start, end)` written since they were last protected, as byte ranges,
/// write-protecting them again in the same call (atomically with reading their bits, so no
/// write falls between the two). Needs a range registered with an [`open_wp_async`] descriptor.
pub fn pagemap_scan(pagemap: i32, start: usize, end: usize, out: &mut Vec<(usize, usize)>) -> io::Result<()> {
    let mut vec = [PageRegion::default(); 256];
    let mut from = start as u64;
    while from < end as u64 {
        let mut arg = PmScanArg {
            size: std::mem::size_of::<PmScanArg>() as u64,
            flags: PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
            start: from,
            end: end as u64,
            vec: vec.as_mut_ptr() as u64,
            vec_len: vec.len() as u64,
            category_mask: PAGE_IS_WRITTEN,
            return_mask: PAGE_IS_WRITTEN,
            ..PmScanArg::default()
        };
        // SAFETY: `arg` is a live #[repr(C)] struct of the size encoded in the request, and
        // `vec` holds `vec_len` entries the kernel may fill.
        let n = unsafe { libc::ioctl(pagemap, PAGEMAP_SCAN as _, &mut arg as *mut PmScanArg) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        out.extend(vec[..n as usize].iter().map(|r| (r.start as usize, r.end as usize)));
        if arg.walk_end <= from {
            break;
        }
        from = arg.walk_end;
    }
    Ok(())
}
