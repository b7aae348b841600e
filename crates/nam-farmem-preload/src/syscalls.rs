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
//! **File transfers are completed in pieces.** A transfer that meets a missing page after
//! its first bytes does not fail: the kernel stops there and returns the bytes it moved. A
//! program may take that short count for the end of the file, and a buffer larger than the
//! local budget could never be touched resident as a whole for a retry. So `read`, `readv`,
//! `write` and `writev` (on regular files), and `pread`, `preadv`, `pwrite` and `pwritev`
//! (and their `64` forms), whose far buffers were cut short or refused, are carried on in
//! pieces of [`PIECE`] bytes, each touched first, until
//! the whole count is moved, the file ends, or the kernel reports an error (then the bytes
//! moved so far are returned, as the kernel does). A regular file's rest can be asked for
//! again without changing what the call means; a socket's or a pipe's short count may just
//! mean that no more data was there, so those calls keep the `EFAULT` retry only.
//!
//! The calls are reached past this library with `dlsym(RTLD_NEXT)`, keeping glibc's
//! cancellation points. In thread fault mode none of this triggers: the kernel waits for
//! the pager's handler thread instead of failing.

use crate::arena;
use crate::constants::PAGE;
pub use crate::constants::{PIECE, RETRIES};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// Makes the call again, while it fails with `EFAULT` on far memory (at most [`RETRIES`]
/// retries), touching the far buffers with `touch` before each retry; `first` is what the
/// first call returned.
fn retrying(first: isize, mut call: impl FnMut() -> isize, mut touch: impl FnMut() -> bool) -> isize {
    let mut n = first;
    for _ in 0..RETRIES {
        if n >= 0 || errno() != libc::EFAULT || !touch() {
            break;
        }
        n = call();
    }
    n
}

/// Whether any byte of `buf..buf + len` is in the far arena.
fn in_arena(buf: *const u8, len: usize) -> bool {
    let (start, end) = (buf as usize, (buf as usize).saturating_add(len));
    arena::bounds().is_some_and(|(base, arena_end)| start.max(base) < end.min(arena_end))
}

/// Whether a transfer of `count` bytes that returned `first` may have been cut short by the
/// kernel at a missing far page: it failed with `EFAULT`, or it moved fewer bytes and stopped
/// on a page boundary (where a copy meets a missing page; a socket's short count ends there
/// only by chance), with far memory after that.
fn cut_short_on_far_memory(buf: *const u8, count: usize, first: isize) -> bool {
    let end = buf.wrapping_add(first.max(0) as usize);
    let cut = (first >= 0 && (first as usize) < count && (end as usize).is_multiple_of(PAGE))
        || (first < 0 && errno() == libc::EFAULT);
    cut && in_arena(end, count - first.max(0) as usize)
}

/// Carries on a file transfer of `count` bytes that the kernel cut short at `first` (see
/// the module documentation): `call(done, len)` moves the `len` bytes after the first `done`
/// of the buffer (and, for positioned calls, at the file offset plus `done`), in pieces of
/// [`PIECE`] bytes, each made resident with `touch(done, len)` first. A piece refused again
/// is retried at most [`RETRIES`] times. Returns the bytes moved in all, or the error if none
/// were.
fn carry_on(
    count: usize,
    first: isize,
    mut touch: impl FnMut(usize, usize) -> bool,
    mut call: impl FnMut(usize, usize) -> isize,
) -> isize {
    let mut done = first.max(0) as usize;
    let mut refused = 0;
    while done < count {
        let piece = (count - done).min(PIECE);
        touch(done, piece);
        let n = call(done, piece);
        if n < 0 && errno() == libc::EFAULT && refused < RETRIES {
            refused += 1; // evicted again before the call: a tiny budget
            continue;
        }
        if n <= 0 {
            // The end of the file, or an error: what was moved, or the error if nothing was.
            return if done > 0 { done as isize } else { n };
        }
        done += n as usize;
    }
    done as isize
}

/// The bytes `skip..skip + len` of the buffers `iov`, as buffers.
fn part_of(iov: &[libc::iovec], mut skip: usize, mut len: usize) -> Vec<libc::iovec> {
    let mut part = Vec::new();
    for v in iov {
        if len == 0 {
            break;
        }
        if skip >= v.iov_len {
            skip -= v.iov_len;
            continue;
        }
        let take = (v.iov_len - skip).min(len);
        part.push(libc::iovec { iov_base: v.iov_base.cast::<u8>().wrapping_add(skip).cast(), iov_len: take });
        (skip, len) = (0, len - take);
    }
    part
}

/// [`cut_short_on_far_memory`] for a vectored transfer over the buffers `iov`.
fn vector_cut_short_on_far_memory(iov: &[libc::iovec], first: isize) -> bool {
    let total: usize = iov.iter().map(|v| v.iov_len).sum();
    // The common case first, without looking at the buffers: all moved, or another error.
    if (first >= 0 && first as usize >= total) || (first < 0 && errno() != libc::EFAULT) {
        return false;
    }
    let rest = part_of(iov, first.max(0) as usize, total);
    let stopped_at = rest.first().map_or(0, |v| v.iov_base as usize);
    (first < 0 || stopped_at.is_multiple_of(PAGE)) && rest.iter().any(|v| in_arena(v.iov_base as *const u8, v.iov_len))
}

/// Whether `fd` is a regular file (whose transfers [`carry_on`] may complete).
fn regular_file(fd: libc::c_int) -> bool {
    // SAFETY: a zeroed stat is a valid out-buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into `st`.
    unsafe { libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG }
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
            nam_farmem::exit_fatal(&format!("no {} past the far-memory library", name.to_string_lossy()));
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
            files::resolve();
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
            let call = || f($($arg),*);
            retrying(call(), call, || $touch)
        }
        )*
    };
}

wrap! {
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
    /// `recvmsg(2)`.
    fn recvmsg(fd: libc::c_int, msg: *mut libc::msghdr, flags: libc::c_int) -> isize;
    touch = touch_msg(msg, Access::KernelWrites);
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
    /// `sendmsg(2)`.
    fn sendmsg(fd: libc::c_int, msg: *const libc::msghdr, flags: libc::c_int) -> isize;
    touch = touch_msg(msg, Access::KernelReads);
}

/// The file transfers: `read`, `readv`, `write`, `writev`, `pread`, `preadv`, `pwrite`,
/// `pwritev` and the `64` forms, carried on in pieces when the kernel cuts them short on far
/// memory ([`carry_on`]); the unpositioned ones on anything but a regular file keep the
/// `EFAULT` retry of the other wrappers.
mod files {
    use super::{
        carry_on, cut_short_on_far_memory, next, part_of, regular_file, retrying, touch, touch_iov,
        vector_cut_short_on_far_memory, Access,
    };
    use std::ffi::{c_int, c_void, CStr};
    use std::sync::atomic::AtomicUsize;

    static READ: AtomicUsize = AtomicUsize::new(0);
    static WRITE: AtomicUsize = AtomicUsize::new(0);
    static PREAD: AtomicUsize = AtomicUsize::new(0);
    static PWRITE: AtomicUsize = AtomicUsize::new(0);
    static READV: AtomicUsize = AtomicUsize::new(0);
    static WRITEV: AtomicUsize = AtomicUsize::new(0);
    static PREADV: AtomicUsize = AtomicUsize::new(0);
    static PWRITEV: AtomicUsize = AtomicUsize::new(0);

    type Transfer = unsafe extern "C" fn(c_int, *mut c_void, usize) -> isize;
    type Positioned = unsafe extern "C" fn(c_int, *mut c_void, usize, i64) -> isize;
    type Vectored = unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> isize;
    type PositionedVectored = unsafe extern "C" fn(c_int, *const libc::iovec, c_int, i64) -> isize;

    fn glibc<F>(slot: &AtomicUsize, name: &CStr) -> F {
        let f = next(slot, name);
        // SAFETY: glibc's function of the signature the caller names (`Transfer` or
        // `Positioned`, which `F` is); `F` is a function pointer of the size of `usize`.
        unsafe { std::mem::transmute_copy(&f) }
    }

    /// Looks the functions up before the first fault can need them in a signal handler.
    pub(super) fn resolve() {
        let _: Transfer = glibc(&READ, c"read");
        let _: Transfer = glibc(&WRITE, c"write");
        let _: Positioned = glibc(&PREAD, c"pread64");
        let _: Positioned = glibc(&PWRITE, c"pwrite64");
        let _: Vectored = glibc(&READV, c"readv");
        let _: Vectored = glibc(&WRITEV, c"writev");
        let _: PositionedVectored = glibc(&PREADV, c"preadv64");
        let _: PositionedVectored = glibc(&PWRITEV, c"pwritev64");
    }

    /// The caller's `count` buffers at `iov`.
    ///
    /// # Safety
    /// `iov` points at `count` iovecs (when `count` is positive), as the C call requires.
    unsafe fn buffers<'a>(iov: *const libc::iovec, count: c_int) -> &'a [libc::iovec] {
        if iov.is_null() || count <= 0 {
            &[]
        } else {
            std::slice::from_raw_parts(iov, count as usize)
        }
    }

    /// `transfer` for the vectored calls: `call(part)` moves the buffers `part`, and `at` is
    /// where a part starts in the file (for positioned calls), given the bytes before it.
    fn vectored(
        (iov, count): (*const libc::iovec, c_int),
        access: Access,
        regular: impl FnOnce() -> bool,
        call: impl Fn(&[libc::iovec], usize) -> isize,
    ) -> isize {
        // SAFETY: the caller's vector, as the call itself reads it.
        let all = unsafe { buffers(iov, count) };
        let first = call(all, 0);
        let total: usize = all.iter().map(|v| v.iov_len).sum();
        if !vector_cut_short_on_far_memory(all, first) {
            first
        } else if regular() {
            let touch_part = |done: usize, len: usize| {
                let part = part_of(all, done, len);
                touch_iov(part.as_ptr(), part.len() as c_int, access)
            };
            carry_on(total, first, touch_part, |done, len| call(&part_of(all, done, len), done))
        } else if first < 0 {
            retrying(first, || call(all, 0), || touch_iov(iov, count, access))
        } else {
            first // a socket's or a pipe's short count: all there was, maybe
        }
    }

    /// `readv(2)`.
    ///
    /// # Safety
    /// As the C function.
    #[no_mangle]
    pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, count: c_int) -> isize {
        let f: Vectored = glibc(&READV, c"readv");
        // SAFETY: the caller's arguments, a part of its buffers at a time.
        let call = |part: &[libc::iovec], _: usize| unsafe { f(fd, part.as_ptr(), part.len() as c_int) };
        vectored((iov, count), Access::KernelWrites, || regular_file(fd), call)
    }

    /// `writev(2)`.
    ///
    /// # Safety
    /// As the C function.
    #[no_mangle]
    pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, count: c_int) -> isize {
        let f: Vectored = glibc(&WRITEV, c"writev");
        // SAFETY: as in `readv`.
        let call = |part: &[libc::iovec], _: usize| unsafe { f(fd, part.as_ptr(), part.len() as c_int) };
        vectored((iov, count), Access::KernelReads, || regular_file(fd), call)
    }

    fn positioned_vectored(
        slot: &AtomicUsize,
        name: &CStr,
        (fd, iov, count, offset): (c_int, *const libc::iovec, c_int, i64),
        access: Access,
    ) -> isize {
        let f: PositionedVectored = glibc(slot, name);
        // SAFETY: as in `readv`; a part's file offset moves with its place in the buffers.
        let call = |part: &[libc::iovec], done: usize| unsafe {
            f(fd, part.as_ptr(), part.len() as c_int, offset + done as i64)
        };
        vectored((iov, count), access, || true, call)
    }

    /// `preadv(2)`.
    ///
    /// # Safety
    /// As the C function.
    #[no_mangle]
    pub unsafe extern "C" fn preadv(fd: c_int, iov: *const libc::iovec, count: c_int, offset: i64) -> isize {
        positioned_vectored(&PREADV, c"preadv64", (fd, iov, count, offset), Access::KernelWrites)
    }

    /// `preadv64(2)`.
    ///
    /// # Safety
    /// As the C function.
    #[no_mangle]
    pub unsafe extern "C" fn preadv64(fd: c_int, iov: *const libc::iovec, count: c_int, offset: i64) -> isize {
        positioned_vectored(&PREADV, c"preadv64", (fd, iov, count, offset), Access::KernelWrites)
    }

    /// `pwritev(2)`.
    ///
    /// # Safety
    /// As the C function.
    #[no_mangle]
    pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const libc::iovec, count: c_int, offset: i64) -> isize {
        positioned_vectored(&PWRITEV, c"pwritev64", (fd, iov, count, offset), Access::KernelReads)
    }

    /// `pwritev64(2)`.
    ///
    /// # Safety
    /// As the C function.
    #[no_mangle]
    pub unsafe extern "C" fn pwritev64(fd: c_int, iov: *const libc::iovec, count: c_int, offset: i64) -> isize {
        positioned_vectored(&PWRITEV, c"pwritev64", (fd, iov, count, offset), Access::KernelReads)
    }

    fn transfer(slot: &AtomicUsize, name: &CStr, fd: c_int, buf: *mut c_void, count: usize, access: Access) -> isize {
        let f: Transfer = glibc(slot, name);
        // SAFETY: the caller's arguments, passed on as they came (pieces lie inside them).
        let call = |done: usize, len: usize| unsafe { f(fd, buf.cast::<u8>().add(done).cast(), len) };
        let first = call(0, count);
        // Only the slow path asks what `fd` is: a transfer on local memory never does.
        if !cut_short_on_far_memory(buf as *const u8, count, first) {
            first
        } else if regular_file(fd) {
            carry_on(count, first, |done, len| touch(buf.cast::<u8>().wrapping_add(done), len, access), call)
        } else if first < 0 {
            retrying(first, || call(0, count), || touch(buf as *const u8, count, access))
        } else {
            first // a socket's or a pipe's short count: all there was, maybe
        }
    }

    fn positioned(
        slot: &AtomicUsize,
        name: &CStr,
        (fd, buf, count, offset): (c_int, *mut c_void, usize, i64),
        access: Access,
    ) -> isize {
        let f: Positioned = glibc(slot, name);
        // SAFETY: as in `transfer`; a piece's file offset moves with its place in the buffer.
        let call =
            |done: usize, len: usize| unsafe { f(fd, buf.cast::<u8>().add(done).cast(), len, offset + done as i64) };
        let first = call(0, count);
        if cut_short_on_far_memory(buf as *const u8, count, first) {
            carry_on(count, first, |done, len| touch(buf.cast::<u8>().wrapping_add(done), len, access), call)
        } else {
            first
        }
    }

    /// `read(2)`.
    ///
    /// # Safety
    /// As the C function.
    #[no_mangle]
    pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: usize) -> isize {
        transfer(&READ, c"read", fd, buf, count, Access::KernelWrites)
    }

    /// `write(2)`.
    ///
    /// # Safety
    /// As the C function.
    #[no_mangle]
    pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: usize) -> isize {
        transfer(&WRITE, c"write", fd, buf as *mut c_void, count, Access::KernelReads)
    }

    /// `pread(2)`.
    ///
    /// # Safety
    /// As the C function.
    #[no_mangle]
    pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, count: usize, offset: i64) -> isize {
        positioned(&PREAD, c"pread64", (fd, buf, count, offset), Access::KernelWrites)
    }

    /// `pread64(2)`.
    ///
    /// # Safety
    /// As the C function.
    #[no_mangle]
    pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, count: usize, offset: i64) -> isize {
        positioned(&PREAD, c"pread64", (fd, buf, count, offset), Access::KernelWrites)
    }

    /// `pwrite(2)`.
    ///
    /// # Safety
    /// As the C function.
    #[no_mangle]
    pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, count: usize, offset: i64) -> isize {
        positioned(&PWRITE, c"pwrite64", (fd, buf as *mut c_void, count, offset), Access::KernelReads)
    }

    /// `pwrite64(2)`.
    ///
    /// # Safety
    /// As the C function.
    #[no_mangle]
    pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, count: usize, offset: i64) -> isize {
        positioned(&PWRITE, c"pwrite64", (fd, buf as *mut c_void, count, offset), Access::KernelReads)
    }
}
