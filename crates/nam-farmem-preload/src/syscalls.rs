//! System calls that move data in and out of program buffers, retried after `EFAULT` on far
//! memory, so that the pager's signal fault mode serves unmodified programs too.
//!
//! In signal fault mode (`NAM_FARMEM_FAULT_MODE=signal`) the pager serves a page fault in
//! the faulting thread's SIGBUS handler, which the kernel cannot run in the middle of its
//! own copy to or from user memory: a `read(2)` into a missing far page, or into a clean
//! one (write-protected until its first write), fails with `EFAULT`, and a `sendmsg(2)`
//! from a missing page does too. memcached reads a set's value straight into the item and
//! sends a get's value from it, so each such call is wrapped here: when it fails with
//! `EFAULT` and a buffer lies in the far arena, the buffer's far pages are touched from
//! user space (a read for data the kernel reads, an atomic `fetch_or(0)` for data it
//! writes: a real write fault that changes nothing), which the SIGBUS handler serves, and
//! the call is made again. Socket calls that fail with `EFAULT` have consumed or sent
//! nothing (the kernel returns what it copied before the fault instead), so the retry is
//! exact. A page can be evicted again between the touch and the retry when the budget is
//! tiny, so the retries are bounded ([`RETRIES`]); an `EFAULT` on memory outside the arena
//! is returned at once, as without the library.
//!
//! The calls are reached past this library with `dlsym(RTLD_NEXT)`, keeping glibc's
//! cancellation points. In thread fault mode none of this triggers: the kernel waits for
//! the pager's handler thread instead of failing.

use crate::arena;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Most times one call is retried after touching its far buffers.
pub const RETRIES: usize = 16;
const PAGE: usize = 4096;

/// Whether the kernel reads the buffer (the call sends it) or writes it (receives into it).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    KernelReads,
    KernelWrites,
}

/// Touches the far pages of `buf..buf + len` so that they are resident (and writable for
/// [`Access::KernelWrites`]). Returns whether any byte of it is in the far arena.
fn touch(buf: *const u8, len: usize, access: Access) -> bool {
    let (start, end) = (buf as usize, (buf as usize).saturating_add(len));
    let Some((base, arena_end)) = arena::bounds() else {
        return false;
    };
    let (start, end) = (start.max(base), end.min(arena_end));
    if start >= end {
        return false;
    }
    let mut p = start;
    while p < end {
        // SAFETY: an address of the far arena's mapping, which stays mapped for the process.
        unsafe {
            match access {
                Access::KernelReads => {
                    std::ptr::read_volatile(p as *const u8);
                }
                Access::KernelWrites => write_touch(p as *mut u8),
            }
        }
        p = (p / PAGE + 1) * PAGE;
    }
    true
}

/// A write access to `*p` that leaves it as it is and races with no other thread's write:
/// an atomic read-modify-write. Not `fetch_or(0)`, which the compiler may turn into a plain
/// load (it changes nothing), and a load would not take the write fault.
///
/// # Safety
/// `p` must be mapped.
unsafe fn write_touch(p: *mut u8) {
    #[cfg(target_arch = "x86_64")]
    std::arch::asm!("lock or byte ptr [{p}], 0", p = in(reg) p, options(nostack, preserves_flags));
    #[cfg(not(target_arch = "x86_64"))]
    {
        let a = &*(p as *const std::sync::atomic::AtomicU8);
        let v = a.load(Ordering::Relaxed);
        let _ = a.compare_exchange(v, v, Ordering::Relaxed, Ordering::Relaxed);
    }
}

fn touch_iov(iov: *const libc::iovec, count: libc::c_int, access: Access) -> bool {
    if iov.is_null() || count <= 0 {
        return false;
    }
    // SAFETY: the caller's iovec array of `count` entries, which the call itself reads.
    let iov = unsafe { std::slice::from_raw_parts(iov, count as usize) };
    let mut any = false;
    for v in iov {
        any |= touch(v.iov_base as *const u8, v.iov_len, access);
    }
    any
}

fn touch_msg(msg: *const libc::msghdr, access: Access) -> bool {
    // SAFETY: the caller's message header, which the call itself reads.
    !msg.is_null() && unsafe { touch_iov((*msg).msg_iov, (*msg).msg_iovlen as libc::c_int, access) }
}

/// Makes the call until it does not fail with `EFAULT` on far memory (at most [`RETRIES`]
/// retries), touching the far buffers with `touch` before each retry.
fn retrying(mut call: impl FnMut() -> isize, mut touch: impl FnMut() -> bool) -> isize {
    let mut n = call();
    for _ in 0..RETRIES {
        if n >= 0 || errno() != libc::EFAULT || !touch() {
            break;
        }
        n = call();
    }
    n
}

fn errno() -> libc::c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The next definition of `name` (glibc's), looked up once into `slot`.
pub(crate) fn next(slot: &AtomicUsize, name: &std::ffi::CStr) -> usize {
    let mut f = slot.load(Ordering::Acquire);
    if f == 0 {
        // SAFETY: dlsym with a NUL-terminated name.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        if f == 0 {
            eprintln!("nam-farmem-preload: fatal: no {name:?} past this library");
            std::process::abort();
        }
        slot.store(f, Ordering::Release);
    }
    f
}

/// Defines the interposed system-call wrappers: each one's C signature and how it touches
/// its buffers (an expression over its arguments), and [`resolve`], which looks all of
/// glibc's functions up at once.
macro_rules! wrap {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> isize; touch = $touch:expr;)*) => {
        #[allow(non_upper_case_globals)]
        mod slot {
            $(pub static $name: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);)*
        }

        /// Looks up glibc's definitions of the wrapped calls, before the first fault can
        /// need them in a signal handler (where `dlsym` must not run).
        pub fn resolve() {
            $(next(&slot::$name, std::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()).expect("a C name"));)*
        }

        $(
        $(#[$doc])*
        ///
        /// # Safety
        /// As the C function.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> isize {
            let name = std::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes());
            let f = next(&slot::$name, name.expect("a C name"));
            // SAFETY: glibc's function of the same signature.
            let f: unsafe extern "C" fn($($ty),*) -> isize = std::mem::transmute(f);
            retrying(|| f($($arg),*), || $touch)
        }
        )*
    };
}

wrap! {
    /// `read(2)`.
    fn read(fd: libc::c_int, buf: *mut c_void, count: usize) -> isize;
    touch = touch(buf as *const u8, count, Access::KernelWrites);
    /// `recv(2)`.
    fn recv(fd: libc::c_int, buf: *mut c_void, len: usize, flags: libc::c_int) -> isize;
    touch = touch(buf as *const u8, len, Access::KernelWrites);
    /// `recvfrom(2)`.
    fn recvfrom(
        fd: libc::c_int,
        buf: *mut c_void,
        len: usize,
        flags: libc::c_int,
        addr: *mut libc::sockaddr,
        addrlen: *mut libc::socklen_t
    ) -> isize;
    touch = touch(buf as *const u8, len, Access::KernelWrites);
    /// `readv(2)`.
    fn readv(fd: libc::c_int, iov: *const libc::iovec, count: libc::c_int) -> isize;
    touch = touch_iov(iov, count, Access::KernelWrites);
    /// `recvmsg(2)`.
    fn recvmsg(fd: libc::c_int, msg: *mut libc::msghdr, flags: libc::c_int) -> isize;
    touch = touch_msg(msg, Access::KernelWrites);
    /// `write(2)`.
    fn write(fd: libc::c_int, buf: *const c_void, count: usize) -> isize;
    touch = touch(buf as *const u8, count, Access::KernelReads);
    /// `send(2)`.
    fn send(fd: libc::c_int, buf: *const c_void, len: usize, flags: libc::c_int) -> isize;
    touch = touch(buf as *const u8, len, Access::KernelReads);
    /// `sendto(2)`.
    fn sendto(
        fd: libc::c_int,
        buf: *const c_void,
        len: usize,
        flags: libc::c_int,
        addr: *const libc::sockaddr,
        addrlen: libc::socklen_t
    ) -> isize;
    touch = touch(buf as *const u8, len, Access::KernelReads);
    /// `writev(2)`.
    fn writev(fd: libc::c_int, iov: *const libc::iovec, count: libc::c_int) -> isize;
    touch = touch_iov(iov, count, Access::KernelReads);
    /// `sendmsg(2)`.
    fn sendmsg(fd: libc::c_int, msg: *const libc::msghdr, flags: libc::c_int) -> isize;
    touch = touch_msg(msg, Access::KernelReads);
}
