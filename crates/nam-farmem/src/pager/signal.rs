//! Signal fault mode: the faulting thread serves its own fault.
//!
//! In the default thread mode a fault costs two thread switches: the kernel queues it and
//! puts the faulting thread to sleep, the handler thread reads it, installs the page and
//! wakes the faulting thread, which must then be scheduled again. With
//! `UFFD_FEATURE_SIGBUS` the kernel instead raises SIGBUS in the faulting thread, whose
//! handler here fetches the page and installs it with `UFFDIO_COPY`; returning from the
//! handler retries the access. Measured on the benchmark machine, a remote fault over shared
//! memory takes about 5.5 us instead of about 21 us (docs/benchmarks-farmem-paging.md).
//!
//! It is the default mode. The price:
//! - a system call that reads or writes a missing page (`read(fd, region, n)`) fails with
//!   `EFAULT` instead of waiting: the kernel cannot run a signal handler in the middle of
//!   its own access. The `LD_PRELOAD` library, whose memory goes to arbitrary system calls,
//!   uses thread mode unless told otherwise (`NAM_FARMEM_FAULT_MODE=signal`), and then wraps
//!   the calls that move data (`read`, `sendmsg`, ...) to touch their far buffers and retry;
//! - the handler takes the region's lock and calls the client: a thread must not touch a
//!   missing page of the region while it is inside a nam call itself (for example by
//!   passing region memory to `Client::put`), or it would wait on itself;
//! - SIGBUS is process-wide: a SIGBUS outside every signal-mode region goes to the
//!   disposition that was installed before (the default one ends the process as usual).

use super::{fatal, Shared};
use crate::constants::SIGNAL_REGIONS_MAX;
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, Once};

static REGIONS: [AtomicPtr<Shared>; SIGNAL_REGIONS_MAX] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; SIGNAL_REGIONS_MAX];
static INSTALL: Once = Once::new();
/// The disposition SIGBUS had before ours (read in the handler after `INSTALL`).
static mut PREVIOUS: Option<libc::sigaction> = None;
static INSTALL_ERROR: Mutex<Option<String>> = Mutex::new(None);

/// Whether a signal-mode region can be made now: installs the SIGBUS handler on first use
/// and looks for a free slot. `Err` says why not.
pub(super) fn available() -> std::result::Result<(), String> {
    INSTALL.call_once(install);
    if let Some(e) = INSTALL_ERROR.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        return Err(format!("cannot install the SIGBUS handler of signal fault mode: {e}"));
    }
    if REGIONS.iter().all(|slot| !slot.load(Ordering::Acquire).is_null()) {
        return Err(format!("{SIGNAL_REGIONS_MAX} signal-mode regions exist already"));
    }
    Ok(())
}

/// Makes `shared` reachable from the SIGBUS handler (installed on first use). The caller
/// keeps `shared` alive until [`unregister`].
pub(super) fn register(shared: *const Shared) -> Result<()> {
    INSTALL.call_once(install);
    if let Some(e) = INSTALL_ERROR.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        return Err(Error::Config(format!("cannot install the SIGBUS handler of signal fault mode: {e}")));
    }
    for slot in &REGIONS {
        let free = std::ptr::null_mut();
        if slot.compare_exchange(free, shared as *mut Shared, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            return Ok(());
        }
    }
    Err(Error::Config(format!("more than {SIGNAL_REGIONS_MAX} signal-mode regions at once")))
}

/// Removes `shared` from the handler's regions.
pub(super) fn unregister(shared: *const Shared) {
    for slot in &REGIONS {
        let _ = slot.compare_exchange(shared as *mut Shared, std::ptr::null_mut(), Ordering::AcqRel, Ordering::Acquire);
    }
}

fn install() {
    // SAFETY: a zeroed sigaction is valid; the handler has the SA_SIGINFO signature.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        let mut previous: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, &action, &mut previous) != 0 {
            *INSTALL_ERROR.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(std::io::Error::last_os_error().to_string());
            return;
        }
        PREVIOUS = Some(previous);
    }
}

/// What the faulting access was.
#[derive(Clone, Copy)]
struct Access {
    /// A write (the page-fault error code's write bit).
    write: bool,
    /// To a page that was there (the error code's present bit: a write-protect fault). On
    /// other architectures than x86-64, unknown (taken as false).
    present: bool,
}

fn access(context: *mut libc::c_void) -> Access {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the kernel passes a ucontext_t to SA_SIGINFO handlers.
        let uc = unsafe { &*(context as *const libc::ucontext_t) };
        let error = uc.uc_mcontext.gregs[libc::REG_ERR as usize];
        Access { write: error & 2 != 0, present: error & 1 != 0 }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = context;
        // Installed read-only; a write then faults once more and marks it dirty.
        Access { write: false, present: false }
    }
}

extern "C" fn on_sigbus(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // The interrupted code may be about to read errno (a failed call's, say), and serving
    // the fault makes system calls of its own: give errno back as it was.
    // SAFETY: glibc's per-thread errno location.
    let errno = unsafe { *libc::__errno_location() };
    // A panic cannot unwind out of a signal handler (the process would abort with its
    // message left in a test harness's capture): say what it was, then stop.
    if let Err(panic) = std::panic::catch_unwind(|| on_fault(signal, info, context)) {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        fatal(&format!("panic while serving a page fault of a far-memory region: {what}"));
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

fn on_fault(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t.
    let addr = unsafe { (*info).si_addr() } as u64;
    for slot in &REGIONS {
        let p = slot.load(Ordering::Acquire);
        if p.is_null() {
            continue;
        }
        // SAFETY: registered regions stay alive until they unregister.
        let shared = unsafe { &*p };
        if addr >= shared.base && addr < shared.base + shared.pages * shared.page_bytes {
            if let Err(e) = super::serving(|| shared.serve_signal(addr, access(context))) {
                fatal(&format!("cannot serve the page fault at {addr:#x} of a far-memory region: {e}"));
            }
            return;
        }
    }
    chain(signal, info, context);
}

/// A SIGBUS that is not ours: hand it to the disposition installed before.
fn chain(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: PREVIOUS was written before the handler was installed.
    let previous = unsafe { (*std::ptr::addr_of!(PREVIOUS)).as_ref().copied() };
    match previous {
        Some(p) if p.sa_flags & libc::SA_SIGINFO != 0 && p.sa_sigaction > libc::SIG_IGN => {
            // SAFETY: an SA_SIGINFO handler someone installed before us.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(p.sa_sigaction) };
            f(signal, info, context)
        }
        Some(p) if p.sa_sigaction > libc::SIG_IGN => {
            // SAFETY: a plain handler someone installed before us.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(p.sa_sigaction) };
            f(signal)
        }
        _ => {
            // Default disposition: restore it; returning retries the access, which raises
            // SIGBUS again and ends the process as it would have without us.
            // SAFETY: a zeroed sigaction with SIG_DFL.
            unsafe {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
            }
        }
    }
}

impl Shared {
    /// Serves a fault of this thread at `addr` (signal mode). The handler thread is not
    /// woken for the prefetch window a miss queues: the faulting threads install windows
    /// themselves, a run at a time, as their demand reaches them ([`Shared::serve_missing`]).
    /// A woken handler thread made the program's memory map live on a second core, so that
    /// every eviction and write-protect change of either thread cost a TLB-shootdown IPI to
    /// the other (docs/farmem.md, "Signal mode installs its prefetches itself").
    fn serve_signal(&self, addr: u64, access: Access) -> Result<()> {
        let page = self.fault_page(addr)?;
        let mut pages = self.state.lock();
        let state = pages.state[page as usize];
        if state == super::MISSING {
            return self.serve_missing(&mut pages, page, access.write);
        }
        // A fault on a page the pager holds resident: a write to a write-protected page, or
        // a page that another thread installed meanwhile (retry the access), or one that the
        // program dropped itself.
        if !access.present && self.serve_dropped(&mut pages, page, access.write)? {
            return Ok(());
        }
        if state == super::CLEAN {
            self.handle_write_protect(&mut pages, page, super::CLEAN)?;
        }
        Ok(())
    }
}
