//! userfaultfd for nam, as raw ioctls through libc (the kernel ABI of
//! `include/uapi/linux/userfaultfd.h`, x86-64 and aarch64 numbering; libc has no bindings
//! for it). Raw calls rather than the `userfaultfd` crate: its bindings are generated with
//! bindgen at build time, and its API did not expose `UFFD_FEATURE_WP_UNPOPULATED`,
//! `UFFD_FEATURE_WP_ASYNC` or `UFFD_USER_MODE_ONLY`, which nam uses. Everything unsafe about
//! userfaultfd in nam is in this crate; every unsafe block is one system call on
//! plain-old-data structs it owns.
//!
//! Two users: `nam-farmem`'s pager (missing-page and write-protect faults, served by a
//! handler thread or, with [`FEATURE_SIGBUS`], in the faulting thread) and `nam-incr`'s write
//! tracking (write-protect faults, or [`FEATURE_WP_ASYNC`] with [`pagemap_scan`]). Calls take
//! a raw descriptor, so a descriptor shared with a tracking thread needs no wrapper; [`Uffd`]
//! owns one and offers the same calls as methods.

pub mod constants;

use constants::{FAULT_BATCH, MOVE_ATTEMPTS, SCAN_RANGES};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const UFFD_API: u64 = 0xAA;
/// Only faults from user mode are reported: allowed without privilege when
/// `vm.unprivileged_userfaultfd=0`, but the kernel's own accesses (read(2) into a missing
/// page) then fail with EFAULT instead of waiting.
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
// _IOWR(0xAA, nr, size) = 0xC000_0000 | size << 16 | 0xAA << 8 | nr; _IOR has 0x8000_0000.
const UFFDIO_API: libc::c_ulong = 0xC018_AA3F;
const UFFDIO_REGISTER: libc::c_ulong = 0xC020_AA00;
const UFFDIO_UNREGISTER: libc::c_ulong = 0x8010_AA01;
const UFFDIO_WAKE: libc::c_ulong = 0x8010_AA02;
const UFFDIO_COPY: libc::c_ulong = 0xC028_AA03;
const UFFDIO_WRITEPROTECT: libc::c_ulong = 0xC018_AA06;
const UFFDIO_MOVE: libc::c_ulong = 0xC028_AA05;
// _IO(0xAA, 0x00) on /dev/userfaultfd.
const USERFAULTFD_IOC_NEW: libc::c_ulong = 0xAA00;
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;
const UFFDIO_REGISTER_MODE_WP: u64 = 2;
const UFFDIO_COPY_MODE_DONTWAKE: u64 = 1;
const UFFDIO_COPY_MODE_WP: u64 = 2;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1;
const UFFDIO_MOVE_MODE_DONTWAKE: u64 = 1;
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;

/// Feature: write-protect faults carry [`FAULT_WP`].
pub const FEATURE_PAGEFAULT_FLAG_WP: u64 = 1 << 0;
/// Feature: faults raise SIGBUS in the faulting thread instead of waiting for a reader.
pub const FEATURE_SIGBUS: u64 = 1 << 7;
/// Feature: page faults carry the faulting thread's id ([`Fault::thread`]).
pub const FEATURE_THREAD_ID: u64 = 1 << 8;
/// Feature: pages the application has not touched yet can be write-protected too.
pub const FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
/// Feature (Linux 6.7+): the kernel resolves write-protect faults itself, clearing the page's
/// protection bit with no message and no thread; [`pagemap_scan`] reads the bits.
pub const FEATURE_WP_ASYNC: u64 = 1 << 15;
/// Feature (Linux 6.8+): [`move_pages`] moves pages into a registered range without a copy.
pub const FEATURE_MOVE: u64 = 1 << 16;

/// Page-fault flag: the access was a write.
pub const FAULT_WRITE: u64 = 1;
/// Page-fault flag: a write to a write-protected page.
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
struct MoveArg {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    moved: i64,
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

/// One page fault read from a descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// Faulting address.
    pub address: u64,
    /// [`FAULT_WRITE`], [`FAULT_WP`].
    pub flags: u64,
    /// The faulting thread's id, with [`FEATURE_THREAD_ID`] (else 0).
    pub thread: u32,
}

/// Why no descriptor could be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The system call and `/dev/userfaultfd` were both refused (the reasons, joined).
    NotPermitted(String),
    /// The kernel has no userfaultfd.
    Unsupported,
    /// Another failure of `what`.
    Failed {
        /// The call that failed.
        what: &'static str,
        /// Its error.
        source: io::Error,
    },
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::NotPermitted(reasons) => write!(f, "userfaultfd is not permitted: {reasons}"),
            OpenError::Unsupported => write!(f, "the kernel has no userfaultfd"),
            OpenError::Failed { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl std::error::Error for OpenError {}

/// An open userfaultfd descriptor (non-blocking, close-on-exec).
pub struct Uffd {
    fd: OwnedFd,
    /// Opened with `UFFD_USER_MODE_ONLY` (see [`Uffd::open`]).
    pub user_mode_only: bool,
}

impl Uffd {
    /// Opens a descriptor with `features` (`FEATURE_*`): through the system call, else
    /// through `/dev/userfaultfd` (governed by file permissions instead of
    /// `vm.unprivileged_userfaultfd`), else, when `user_mode_only_ok`, through the system
    /// call restricted to user-mode faults (then the kernel's own accesses to a missing page
    /// fail with EFAULT).
    pub fn open(features: u64, user_mode_only_ok: bool) -> Result<Uffd, OpenError> {
        let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
        let mut reasons = Vec::new();
        match syscall_userfaultfd(flags) {
            Ok(fd) => return Self::handshake(fd, features, false),
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => return Err(OpenError::Unsupported),
            Err(e) if denied(&e) => reasons.push(format!("userfaultfd(2): {e}")),
            Err(source) => return Err(OpenError::Failed { what: "userfaultfd(2)", source }),
        }
        match open_dev(flags) {
            Ok(fd) => return Self::handshake(fd, features, false),
            Err(e) => reasons.push(format!("/dev/userfaultfd: {e}")),
        }
        if user_mode_only_ok {
            match syscall_userfaultfd(flags | UFFD_USER_MODE_ONLY) {
                Ok(fd) => return Self::handshake(fd, features, true),
                Err(e) => reasons.push(format!("userfaultfd(2) for user-mode faults: {e}")),
            }
        }
        Err(OpenError::NotPermitted(reasons.join("; ")))
    }

    fn handshake(fd: OwnedFd, features: u64, user_mode_only: bool) -> Result<Uffd, OpenError> {
        let mut api = ApiArg { api: UFFD_API, features, ioctls: 0 };
        ioctl(fd.as_raw_fd(), UFFDIO_API, &mut api)
            .map_err(|source| OpenError::Failed { what: "UFFDIO_API", source })?;
        Ok(Uffd { fd, user_mode_only })
    }

    /// The descriptor, for the free functions of this crate and for poll(2).
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// [`register`] on this descriptor.
    pub fn register(&self, start: u64, len: u64, missing: bool, write_protect: bool) -> io::Result<()> {
        register(self.raw(), start, len, missing, write_protect)
    }

    /// [`unregister`] on this descriptor.
    pub fn unregister(&self, start: u64, len: u64) -> io::Result<()> {
        unregister(self.raw(), start, len)
    }

    /// [`copy`] on this descriptor.
    pub fn copy(
        &self,
        dst: u64,
        src: *const u8,
        len: u64,
        write_protect: bool,
        wake_waiters: bool,
    ) -> io::Result<bool> {
        copy(self.raw(), dst, src, len, write_protect, wake_waiters)
    }

    /// [`write_protect`] on this descriptor.
    pub fn write_protect(&self, start: u64, len: u64, protect: bool) -> io::Result<()> {
        write_protect(self.raw(), start, len, protect)
    }

    /// [`move_pages`] on this descriptor.
    pub fn move_pages(&self, dst: u64, src: u64, len: u64, wake_waiters: bool) -> Result<(), MoveError> {
        move_pages(self.raw(), dst, src, len, wake_waiters)
    }

    /// [`wake`] on this descriptor.
    pub fn wake(&self, start: u64, len: u64) {
        wake(self.raw(), start, len)
    }

    /// [`read_faults`] on this descriptor.
    pub fn read_faults(&self, out: &mut Vec<Fault>) -> io::Result<()> {
        read_faults(self.raw(), out)
    }

    /// Waits up to `timeout_ms` for events on the descriptor or on `also` (an eventfd,
    /// say); true when some are ready.
    pub fn poll(&self, also: Option<RawFd>, timeout_ms: i32) -> bool {
        let pfd = |fd: RawFd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let mut fds = [pfd(self.raw()), pfd(also.unwrap_or(-1))];
        // SAFETY: two valid pollfds (a negative descriptor is ignored by poll).
        unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout_ms) > 0 }
    }
}

fn denied(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
}

fn syscall_userfaultfd(flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: the system call takes flags only and returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just received and own.
    Ok(unsafe { OwnedFd::from_raw_fd(raw as RawFd) })
}

fn open_dev(flags: libc::c_int) -> io::Result<OwnedFd> {
    let dev = std::fs::OpenOptions::new().read(true).write(true).open("/dev/userfaultfd")?;
    // SAFETY: USERFAULTFD_IOC_NEW takes the new descriptor's flags by value.
    let raw = unsafe { libc::ioctl(dev.as_raw_fd(), USERFAULTFD_IOC_NEW as _, flags) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just received and own.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn ioctl<T>(fd: RawFd, request: libc::c_ulong, arg: &mut T) -> io::Result<()> {
    // SAFETY: `arg` is a live, exclusively borrowed #[repr(C)] struct of the size encoded in
    // `request`; the kernel reads and writes only that struct.
    let rc = unsafe { libc::ioctl(fd, request as _, arg as *mut T) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Registers `[start, start + len)` (page aligned) for missing-page faults, write-protect
/// faults, or both.
pub fn register(fd: RawFd, start: u64, len: u64, missing: bool, write_protect: bool) -> io::Result<()> {
    let mode = if missing { UFFDIO_REGISTER_MODE_MISSING } else { 0 }
        | if write_protect { UFFDIO_REGISTER_MODE_WP } else { 0 };
    let mut arg = RegisterArg { range: Range { start, len }, mode, ioctls: 0 };
    ioctl(fd, UFFDIO_REGISTER, &mut arg)
}

/// Unregisters a range (which also drops its write protection).
pub fn unregister(fd: RawFd, start: u64, len: u64) -> io::Result<()> {
    ioctl(fd, UFFDIO_UNREGISTER, &mut Range { start, len })
}

/// Installs `len` bytes from `src` at `dst` (page aligned) in a range registered for
/// missing-page faults, read-only when `write_protect`; wakes the threads waiting on it
/// unless `wake_waiters` is false. Returns false when a page was there already.
pub fn copy(
    fd: RawFd,
    dst: u64,
    src: *const u8,
    len: u64,
    write_protect: bool,
    wake_waiters: bool,
) -> io::Result<bool> {
    let mut mode = if write_protect { UFFDIO_COPY_MODE_WP } else { 0 };
    if !wake_waiters {
        mode |= UFFDIO_COPY_MODE_DONTWAKE;
    }
    loop {
        let mut arg = CopyArg { dst, src: src as u64, len, mode, copy: 0 };
        match ioctl(fd, UFFDIO_COPY, &mut arg) {
            Ok(()) => return Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                if wake_waiters {
                    wake(fd, dst, len);
                }
                return Ok(false);
            }
            // The mapping changed under the copy (for example, an munmap elsewhere): retry.
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// A [`move_pages`] that stopped early: the first `moved` bytes went, the rest did not.
#[derive(Debug)]
pub struct MoveError {
    /// Bytes moved before the failure (a multiple of the page size).
    pub moved: u64,
    /// Why the rest did not move (`EEXIST`: a destination page exists; `EBUSY`: a source
    /// page is shared, pinned or part of a huge page).
    pub source: io::Error,
}

/// Moves the pages of `[src, src + len)` to `[dst, dst + len)` without copying them (Linux
/// 6.8+, with [`FEATURE_MOVE`]): `dst` lies in a range registered with `fd` whose pages are
/// missing, `src` in a private anonymous mapping of the same process whose pages are present
/// and not shared with another process. Afterwards the source pages are missing, and the
/// moved pages are writable at `dst` (the kernel does not carry write protection over).
/// Wakes the threads waiting on `dst` unless `wake_waiters` is false.
pub fn move_pages(fd: RawFd, dst: u64, src: u64, len: u64, wake_waiters: bool) -> Result<(), MoveError> {
    let mode = if wake_waiters { 0 } else { UFFDIO_MOVE_MODE_DONTWAKE };
    let mut done = 0;
    // A move interrupted by a concurrent change of the mappings (EAGAIN) is retried for the
    // rest, a bounded number of times, so that a caller never spins on it.
    for _ in 0..MOVE_ATTEMPTS {
        let mut arg = MoveArg { dst: dst + done, src: src + done, len: len - done, mode, moved: 0 };
        let result = ioctl(fd, UFFDIO_MOVE, &mut arg);
        done += arg.moved.max(0) as u64;
        match result {
            Ok(()) => return Ok(()),
            Err(_) if done >= len => return Ok(()), // every page went before the error
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => continue,
            Err(source) => return Err(MoveError { moved: done, source }),
        }
    }
    Err(MoveError { moved: done, source: io::Error::from_raw_os_error(libc::EAGAIN) })
}

/// Write-protects (`protect`) or releases a range; releasing wakes threads blocked on a
/// write fault in it.
pub fn write_protect(fd: RawFd, start: u64, len: u64, protect: bool) -> io::Result<()> {
    let mode = if protect { UFFDIO_WRITEPROTECT_MODE_WP } else { 0 };
    ioctl(fd, UFFDIO_WRITEPROTECT, &mut WriteProtectArg { range: Range { start, len }, mode })
}

/// Wakes threads waiting on faults in the range (errors ignored: nobody may be waiting).
pub fn wake(fd: RawFd, start: u64, len: u64) {
    let _ = ioctl(fd, UFFDIO_WAKE, &mut Range { start, len });
}

/// Reads the queued page faults into `out` (appending) until none is left; other events
/// are skipped. The descriptor is non-blocking.
pub fn read_faults(fd: RawFd, out: &mut Vec<Fault>) -> io::Result<()> {
    let mut msgs = [Msg::default(); FAULT_BATCH];
    loop {
        let bytes = std::mem::size_of_val(&msgs);
        // SAFETY: reads at most `bytes` into `msgs`, which we own.
        let n = unsafe { libc::read(fd, msgs.as_mut_ptr().cast(), bytes) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) => Ok(()),
                Some(libc::EINTR) => continue,
                _ => Err(e),
            };
        }
        let count = n as usize / std::mem::size_of::<Msg>();
        out.extend(msgs[..count].iter().filter(|m| m.event == UFFD_EVENT_PAGEFAULT).map(|m| Fault {
            address: m.address,
            flags: m.flags,
            thread: m.feat as u32,
        }));
        if count < msgs.len() {
            return Ok(());
        }
    }
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
/// write falls between the two). Needs a range registered for write protection with a
/// [`FEATURE_WP_ASYNC`] descriptor.
pub fn pagemap_scan(pagemap: RawFd, start: u64, end: u64, out: &mut Vec<(u64, u64)>) -> io::Result<()> {
    let mut vec = [PageRegion::default(); SCAN_RANGES];
    let mut from = start;
    while from < end {
        let mut arg = PmScanArg {
            size: std::mem::size_of::<PmScanArg>() as u64,
            flags: PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
            start: from,
            end,
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
        out.extend(vec[..n as usize].iter().map(|r| (r.start, r.end)));
        if arg.walk_end <= from {
            break;
        }
        from = arg.walk_end;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_sizes_match_the_kernel_abi() {
        assert_eq!(std::mem::size_of::<ApiArg>(), 24);
        assert_eq!(std::mem::size_of::<RegisterArg>(), 32);
        assert_eq!(std::mem::size_of::<CopyArg>(), 40);
        assert_eq!(std::mem::size_of::<WriteProtectArg>(), 24);
        assert_eq!(std::mem::size_of::<MoveArg>(), 40);
        assert_eq!(std::mem::size_of::<Msg>(), 32);
        assert_eq!(std::mem::size_of::<PmScanArg>(), 96);
        assert_eq!(std::mem::size_of::<PageRegion>(), 24);
    }

    const PAGE: usize = 4096;

    /// One anonymous page registered for missing-page faults with a descriptor opened with
    /// `features`; unregistered and unmapped on drop.
    struct OnePage {
        uffd: Uffd,
        base: *mut libc::c_void,
    }

    impl OnePage {
        /// `None` where userfaultfd is not permitted or not there: nothing to test on such a
        /// machine (the callers' tests cover their clear error).
        fn new(features: u64) -> Option<OnePage> {
            let uffd = match Uffd::open(features, true) {
                Ok(u) => u,
                Err(OpenError::NotPermitted(_)) | Err(OpenError::Unsupported) => return None,
                Err(e) => panic!("{e}"),
            };
            // SAFETY: a fresh anonymous mapping of one page, unmapped on drop.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    PAGE,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(base, libc::MAP_FAILED);
            uffd.register(base as u64, PAGE as u64, true, false).unwrap();
            Some(OnePage { uffd, base })
        }

        fn at(&self) -> u64 {
            self.base as u64
        }
    }

    impl Drop for OnePage {
        fn drop(&mut self) {
            let unregistered = self.uffd.unregister(self.at(), PAGE as u64);
            if !std::thread::panicking() {
                unregistered.unwrap();
            }
            // SAFETY: the mapping made in `new`.
            unsafe { libc::munmap(self.base, PAGE) };
        }
    }

    /// A missing page is installed with `copy` and read back, and a second copy reports it
    /// present.
    #[test]
    fn copy_installs_a_missing_page_once() {
        let Some(page) = OnePage::new(0) else { return };
        let (uffd, at) = (&page.uffd, page.at());
        let src = vec![0x5Au8; PAGE];
        assert!(uffd.copy(at, src.as_ptr(), PAGE as u64, false, true).unwrap());
        assert!(!uffd.copy(at, src.as_ptr(), PAGE as u64, false, true).unwrap(), "the page is there already");
        // SAFETY: the page is installed and mapped.
        let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, PAGE) };
        assert!(bytes.iter().all(|&b| b == 0x5A));
        let mut faults = Vec::new();
        uffd.read_faults(&mut faults).unwrap();
        assert!(faults.is_empty(), "no fault was taken: {faults:?}");
    }

    /// With [`FEATURE_THREAD_ID`], a fault names the thread that took it.
    #[test]
    fn a_fault_carries_the_faulting_threads_id() {
        let Some(page) = OnePage::new(FEATURE_THREAD_ID) else { return };
        let (uffd, at) = (&page.uffd, page.at());
        let toucher = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() } as u32;
            // SAFETY: inside the registered page; the read waits until the page is installed.
            let byte = unsafe { std::ptr::read_volatile(at as *const u8) };
            (tid, byte)
        });
        let mut faults = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while faults.is_empty() {
            assert!(std::time::Instant::now() < deadline, "no fault read within 10 s");
            uffd.poll(None, 100);
            uffd.read_faults(&mut faults).unwrap();
        }
        let src = vec![0x33u8; PAGE];
        uffd.copy(at, src.as_ptr(), PAGE as u64, false, true).unwrap();
        let (tid, byte) = toucher.join().unwrap();
        assert_eq!(byte, 0x33);
        assert_eq!(faults[0].thread, tid, "{faults:?}");
    }
}
