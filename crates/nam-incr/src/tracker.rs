//! Choosing and running the write tracker: asynchronous userfaultfd write-protection with
//! PAGEMAP_SCAN when the kernel has it (6.7+; the incremental modes), synchronous userfaultfd
//! write-protect faults served by a thread otherwise (and for fork, which counts faults), else
//! mprotect + SIGSEGV. See docs/checkpoint.md, "Write tracking", for why. Soft-dirty bits are not a fallback here: they only tell which
//! pages were written, they cannot hold a write back until its page is persisted, which the
//! non-blocking modes need (and kernels built without CONFIG_MEM_SOFT_DIRTY, like this
//! project's CI kernel, do not have them at all).

use crate::pages;
use nam_uffd::{OpenError, Uffd, FAULT_WP, FEATURE_PAGEFAULT_FLAG_WP, FEATURE_WP_ASYNC, FEATURE_WP_UNPOPULATED};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};
use std::thread::JoinHandle;

/// How writes to protected regions are noticed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackerKind {
    /// userfaultfd write-protect faults, served by a handler thread.
    Userfaultfd,
    /// userfaultfd write-protection resolved by the kernel (`UFFD_FEATURE_WP_ASYNC`): a first
    /// write is a minor fault, PAGEMAP_SCAN reads and re-arms the written bits in batches; pages
    /// whose previous version is not persisted yet are held with mprotect + SIGSEGV.
    UserfaultfdAsync,
    /// mprotect(PROT_READ) and a SIGSEGV handler.
    Mprotect,
}

impl std::fmt::Display for TrackerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TrackerKind::Userfaultfd => "userfaultfd write-protect",
            TrackerKind::UserfaultfdAsync => "userfaultfd async wp + PAGEMAP_SCAN",
            TrackerKind::Mprotect => "mprotect + SIGSEGV",
        })
    }
}

/// Which tracker to try.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrackerChoice {
    /// userfaultfd, falling back to mprotect (the default; `NAM_INCR_TRACKER` overrides).
    #[default]
    Auto,
    /// userfaultfd faults served by a thread (no asynchronous tracking), falling back to
    /// mprotect.
    UserfaultfdSync,
    /// mprotect + SIGSEGV only.
    Mprotect,
}

/// A running tracker.
pub struct Tracker {
    kind: TrackerKind,
    fallback_reason: Option<String>,
    uffd: Option<Uffd>,
    /// `/proc/self/pagemap`, for the asynchronous tracker.
    pagemap: Option<OwnedFd>,
    stop: Arc<AtomicBool>,
    handler: Option<JoinHandle<()>>,
}

impl Tracker {
    /// Starts the tracker `choice` asks for, falling back with a logged reason. With
    /// `asynchronous` (the incremental modes) the kernel-resolved userfaultfd tracker is tried
    /// first; `NAM_INCR_TRACKER=sync` skips it, `NAM_INCR_TRACKER=mprotect` forces mprotect.
    pub fn start(choice: TrackerChoice, asynchronous: bool) -> Tracker {
        let forced = std::env::var("NAM_INCR_TRACKER").unwrap_or_default();
        if choice == TrackerChoice::Mprotect || forced == "mprotect" {
            install_segv_handler();
            return Tracker::mprotect(Some("mprotect requested".into()));
        }
        if asynchronous && forced != "sync" && choice != TrackerChoice::UserfaultfdSync {
            // FEATURE_WP_ASYNC (Linux 6.7+): a write to a protected page costs a minor fault
            // that clears its protection bit, no message and no thread; `pagemap_scan` reads
            // (and re-arms) those bits in one call. WP_UNPOPULATED lets untouched pages be
            // protected too.
            let opened = Uffd::open(FEATURE_WP_ASYNC | FEATURE_WP_UNPOPULATED, false)
                .map_err(|e| e.to_string())
                .and_then(|fd| Ok((fd, nam_uffd::open_pagemap().map_err(|e| format!("/proc/self/pagemap: {e}"))?)));
            match opened {
                Ok((fd, pagemap)) => {
                    install_segv_handler();
                    return Tracker {
                        kind: TrackerKind::UserfaultfdAsync,
                        fallback_reason: None,
                        uffd: Some(fd),
                        pagemap: Some(pagemap),
                        stop: Arc::new(AtomicBool::new(false)),
                        handler: None,
                    };
                }
                Err(e) => log::info!("asynchronous userfaultfd write-protect unavailable ({e}); using faults"),
            }
        }
        match Uffd::open(FEATURE_PAGEFAULT_FLAG_WP | FEATURE_WP_UNPOPULATED, false) {
            Ok(fd) => {
                let stop = Arc::new(AtomicBool::new(false));
                let handler = spawn_handler(fd.raw(), stop.clone());
                let kind = TrackerKind::Userfaultfd;
                Tracker { kind, fallback_reason: None, uffd: Some(fd), pagemap: None, stop, handler }
            }
            Err(e) => {
                let reason = if matches!(e, OpenError::NotPermitted(_)) {
                    format!(
                        "{e} (vm.unprivileged_userfaultfd=0 needs CAP_SYS_PTRACE, or read-write access to \
                         /dev/userfaultfd); using mprotect + SIGSEGV write tracking"
                    )
                } else {
                    format!("userfaultfd write-protect unavailable ({e}); using mprotect + SIGSEGV write tracking")
                };
                log::warn!("{reason}");
                install_segv_handler();
                Tracker::mprotect(Some(reason))
            }
        }
    }

    fn mprotect(reason: Option<String>) -> Tracker {
        Tracker {
            kind: TrackerKind::Mprotect,
            fallback_reason: reason,
            uffd: None,
            pagemap: None,
            stop: Arc::new(AtomicBool::new(false)),
            handler: None,
        }
    }

    /// The tracker in use.
    pub fn kind(&self) -> TrackerKind {
        self.kind
    }

    /// Why the preferred tracker is not in use, if it is not.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// The userfaultfd descriptor, or -1.
    pub fn uffd(&self) -> i32 {
        self.uffd.as_ref().map_or(-1, Uffd::raw)
    }

    /// `/proc/self/pagemap` of the asynchronous tracker, or -1.
    pub fn pagemap(&self) -> i32 {
        self.pagemap.as_ref().map_or(-1, |fd| fd.as_raw_fd())
    }

    /// Registers a page-aligned span for tracking.
    pub fn register(&self, start: usize, len: usize) -> std::io::Result<()> {
        match self.kind {
            TrackerKind::Userfaultfd | TrackerKind::UserfaultfdAsync => {
                nam_uffd::register(self.uffd(), start as u64, len as u64, false, true)
            }
            TrackerKind::Mprotect => Ok(()),
        }
    }

    /// Stops tracking a span and leaves it writable (a write held meanwhile goes on).
    pub fn unregister(&self, start: usize, len: usize) {
        match self.kind {
            TrackerKind::Userfaultfd => {
                let _ = nam_uffd::write_protect(self.uffd(), start as u64, len as u64, false);
                let _ = nam_uffd::unregister(self.uffd(), start as u64, len as u64);
            }
            TrackerKind::UserfaultfdAsync => {
                // Writable first, so no write held by mprotect faults once the span is gone.
                // SAFETY: the span was vouched for at `Engine::protect`; restores write access.
                unsafe { libc::mprotect(start as *mut libc::c_void, len, libc::PROT_READ | libc::PROT_WRITE) };
                let _ = nam_uffd::write_protect(self.uffd(), start as u64, len as u64, false);
                let _ = nam_uffd::unregister(self.uffd(), start as u64, len as u64);
            }
            TrackerKind::Mprotect => {
                // SAFETY: the span was vouched for at `Engine::protect`; restores write access.
                unsafe { libc::mprotect(start as *mut libc::c_void, len, libc::PROT_READ | libc::PROT_WRITE) };
            }
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handler.take() {
            let _ = h.join();
        }
    }
}

fn spawn_handler(fd: i32, stop: Arc<AtomicBool>) -> Option<JoinHandle<()>> {
    let body = move || {
        let mut faults = Vec::new();
        while !stop.load(Ordering::Acquire) {
            let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
            // SAFETY: one pollfd we own; the timeout lets `stop` be seen promptly.
            if unsafe { libc::poll(&mut pfd, 1, crate::constants::TRACKER_POLL_MS) } <= 0 {
                continue;
            }
            faults.clear();
            let _ = nam_uffd::read_faults(fd, &mut faults);
            for fault in faults.iter().filter(|f| f.flags & FAULT_WP != 0) {
                let addr = fault.address as usize;
                match pages::lookup(addr) {
                    Some(table) => pages::on_write_fault(table, addr),
                    // The region was unprotected meanwhile: release the page so the write goes on.
                    None => {
                        let page = addr & !(crate::geometry::PAGE_BYTES - 1);
                        let _ = nam_uffd::write_protect(fd, page as u64, crate::geometry::PAGE_BYTES as u64, false);
                    }
                }
            }
        }
    };
    std::thread::Builder::new().name("nam-incr-uffd".into()).spawn(body).ok()
}

static mut PREVIOUS_SEGV: Option<libc::sigaction> = None;
static SEGV_ONCE: Once = Once::new();

extern "C" fn segv_handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SIGSEGV.
    let addr = unsafe { (*info).si_addr() } as usize;
    if let Some(table) = pages::lookup(addr).filter(|t| t.holds_by_mprotect()) {
        pages::on_write_fault(table, addr);
        return;
    }
    // Not a tracked page: hand the fault to the previous handler (Rust's stack-overflow
    // handler, or the default action, which re-raises it when the instruction repeats).
    // SAFETY: PREVIOUS_SEGV is written once, before this handler is installed.
    let previous = unsafe { (*std::ptr::addr_of!(PREVIOUS_SEGV)).as_ref().copied() };
    match previous {
        Some(prev) if prev.sa_sigaction != libc::SIG_DFL && prev.sa_sigaction != libc::SIG_IGN => {
            if prev.sa_flags & libc::SA_SIGINFO != 0 {
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    // SAFETY: with SA_SIGINFO the field holds a three-argument handler.
                    unsafe { std::mem::transmute(prev.sa_sigaction) };
                f(sig, info, ctx);
            } else {
                // SAFETY: without SA_SIGINFO the field holds a one-argument handler.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(prev.sa_sigaction) };
                f(sig);
            }
        }
        _ => {
            // SAFETY: resetting to the default action; the faulting instruction then kills us.
            unsafe { libc::signal(libc::SIGSEGV, libc::SIG_DFL) };
        }
    }
}

fn install_segv_handler() {
    SEGV_ONCE.call_once(|| {
        // SAFETY: zeroed sigaction is valid; we set handler, flags and an empty mask, and save
        // the previous action before ours can run.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = segv_handler as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut previous);
            *std::ptr::addr_of_mut!(PREVIOUS_SEGV) = Some(previous);
            libc::sigaction(libc::SIGSEGV, &action, std::ptr::null_mut());
        }
    });
}
