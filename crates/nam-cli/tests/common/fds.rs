//! Children that do not inherit the test process's descriptors.
//!
//! UCX opens its sockets without `O_CLOEXEC`, so every process a test spawns (a `nam serve`,
//! `mpirun`) would otherwise hold copies of the TCP connections of the clients other tests
//! run in this process at the time: a client's close would not end its connection (the
//! server would not see the client go), and the socket would outlive the endpoint UCX
//! registered it for.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// `close_range`'s flag that marks the range close-on-exec instead of closing it.
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// Marks every descriptor above stderr close-on-exec in the child before it execs.
pub trait NoInheritedFds {
    /// Arranges it.
    fn no_inherited_fds(&mut self) -> &mut Self;
}

impl NoInheritedFds for Command {
    fn no_inherited_fds(&mut self) -> &mut Self {
        // SAFETY: close_range is async-signal-safe, and the closure touches nothing else.
        // Marking (not closing) keeps std's own exec-error pipe, already close-on-exec, intact.
        unsafe {
            self.pre_exec(|| {
                if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        }
    }
}
