//! The end of a process whose far memory failed: [`exit_fatal`] and [`FATAL_EXIT_STATUS`].
//!
//! A page fault that cannot be served cannot be returned to the faulting instruction as an
//! error, so the process has to end. It must end whatever the program does with signals:
//! `abort()` raises SIGABRT, and a program's own SIGABRT handler (Redis installs one that
//! logs a stack trace and the memory around it) may touch far memory again, fault on the
//! very server that failed, and wait for ever. So the process leaves with `exit_group(2)`,
//! which no handler sees and which touches no memory of the program.

/// The exit status of a process that [`exit_fatal`] ended (far memory failed: a server died
/// under a paged region, or the far-memory library found its own state broken). Chosen to
/// be told apart from a program's usual statuses and from the shell's `128 + signal`.
pub const FATAL_EXIT_STATUS: i32 = 86;

/// Says `nam-farmem: fatal: <message>; the program cannot continue` on standard error and
/// ends the whole process at once with [`FATAL_EXIT_STATUS`].
///
/// Safe in a signal handler and on the pager's handler thread: the line goes out with one
/// `writev(2)` to file descriptor 2 (no standard-error lock, which the interrupted code may
/// hold, and no test harness's output capture, which would swallow it), and no signal
/// handler, `atexit` function or destructor of the program runs afterwards (any of them may
/// touch far memory that can no longer be served).
pub fn exit_fatal(message: &str) -> ! {
    const HEAD: &str = "nam-farmem: fatal: ";
    const TAIL: &str = "; the program cannot continue\n";
    let parts = [HEAD, message, TAIL].map(|s| libc::iovec { iov_base: s.as_ptr() as *mut _, iov_len: s.len() });
    // SAFETY: three valid buffers; a failed or short write changes nothing here.
    unsafe { libc::writev(2, parts.as_ptr(), parts.len() as libc::c_int) };
    // SAFETY: `_exit` is `exit_group(2)` in glibc: every thread ends, nothing else runs.
    unsafe { libc::_exit(FATAL_EXIT_STATUS) }
}
