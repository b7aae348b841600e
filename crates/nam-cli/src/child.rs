//! Child processes that must not outlive the `nam` command that started them.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes a spawned child receive SIGTERM when this process dies, even by `kill -9`, so a
/// local server started by `nam demo` or a `nam-bench` suite is never left behind.
pub trait DieWithParent {
    /// Arranges `PR_SET_PDEATHSIG` in the child.
    fn die_with_parent(&mut self) -> &mut Self;
}

impl DieWithParent for Command {
    fn die_with_parent(&mut self) -> &mut Self {
        // SAFETY: prctl is async-signal-safe, and the closure touches nothing else.
        unsafe {
            self.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        }
    }
}
