//! The kernel's floor under a remote page fault, measured in the same run as the faults: as
//! many first touches of a userfaultfd region of this process, in random order, in the same
//! fault mode, each served by a handler that does nothing but install the page with
//! `UFFDIO_COPY` from a hot local buffer (no server, no pager state). A fault that nam serves
//! cannot cost less than this plus the transfer (the row's bare get), so the row reports it:
//! a latency target reads against what the machine allows at that moment, which on a shared
//! virtual machine moves by a microsecond or more from one hour to the next.
//! `bench/farmem-fault-floor.c` is the same measurement in C, with other ways to install.

use anyhow::{Context, Result};
use nam_farmem::FaultMode;
use nam_uffd::{Fault, Uffd, FEATURE_SIGBUS};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};

const PAGE: u64 = 4096;

/// The descriptor and the source page the SIGBUS handler installs from (signal mode).
static FLOOR_FD: AtomicI32 = AtomicI32::new(-1);
static FLOOR_SOURCE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());

/// Signal mode: installs the faulting page, so that the access retries and succeeds.
extern "C" fn on_sigbus(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SIGBUS; si_addr is the faulting address.
    let page = unsafe { (*info).si_addr() } as u64 & !(PAGE - 1);
    let source = FLOOR_SOURCE.load(Ordering::Relaxed);
    if nam_uffd::copy(FLOOR_FD.load(Ordering::Relaxed), page, source, PAGE, false, false).is_err() {
        // The access would fault again forever: stop instead (nothing to unwind in a handler).
        const WHY: &[u8] = b"nam-bench farmem: fault floor: UFFDIO_COPY failed in the SIGBUS handler\n";
        // SAFETY: a write of a static message, then abort; both async-signal-safe.
        unsafe {
            libc::write(2, WHY.as_ptr().cast(), WHY.len());
            libc::abort();
        }
    }
}

/// Median time of `pages` first touches (µs) served by an empty handler in `mode`.
pub fn median_us(mode: FaultMode, pages: usize) -> Result<f64> {
    let signal = mode == FaultMode::Signal;
    let uffd = Uffd::open(if signal { FEATURE_SIGBUS } else { 0 }, true).context("fault floor: userfaultfd")?;
    let len = pages as u64 * PAGE;
    // SAFETY: a fresh private anonymous mapping, unmapped below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    anyhow::ensure!(base != libc::MAP_FAILED, "fault floor: mmap: {}", std::io::Error::last_os_error());
    let result = touch_served(&uffd, base as u64, pages, signal);
    let _ = uffd.unregister(base as u64, len);
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(base, len as usize) };
    let times = result?; // sorted
    Ok(times[times.len() / 2])
}

/// Registers the region, serves its faults (SIGBUS handler or a busy-polling thread) and
/// times the first touch of every page.
fn touch_served(uffd: &Uffd, base: u64, pages: usize, signal: bool) -> Result<Vec<f64>> {
    uffd.register(base, pages as u64 * PAGE, true, false).context("fault floor: UFFDIO_REGISTER")?;
    let source = vec![7u8; PAGE as usize];
    let mut order: Vec<usize> = (0..pages).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(4098));
    let len = pages * PAGE as usize;
    // SAFETY: the registered mapping, read only through this view until it is unmapped.
    let mem = unsafe { std::slice::from_raw_parts(base as *const u8, len) };
    // Every page installed once and dropped, as the benchmark's region was written and
    // evicted before its timed faults: page tables in place, freed pages at hand. The
    // pages hold the source's bytes, not their own numbers: the count of those is ignored.
    let touch = || {
        super::fault::touch_all(mem, &order);
        // SAFETY: our own mapping; its pages fault (and are served) again afterwards.
        if unsafe { libc::madvise(base as *mut libc::c_void, len, libc::MADV_DONTNEED) } != 0 {
            return Err(anyhow::anyhow!("fault floor: madvise: {}", std::io::Error::last_os_error()));
        }
        Ok(super::fault::touch_all(mem, &order).0)
    };
    if signal {
        FLOOR_FD.store(uffd.raw(), Ordering::Relaxed);
        FLOOR_SOURCE.store(source.as_ptr().cast_mut(), Ordering::Relaxed);
        // SAFETY: sigaction structs are plain data; the handler is async-signal-safe. The
        // previous disposition (a pager's handler, say) is restored before returning, and no
        // far-memory region faults meanwhile: the benchmark runs one thing at a time.
        let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
        ours.sa_sigaction = on_sigbus as *const () as usize;
        ours.sa_flags = libc::SA_SIGINFO;
        let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
        anyhow::ensure!(
            unsafe { libc::sigaction(libc::SIGBUS, &ours, &mut previous) } == 0,
            "fault floor: sigaction: {}",
            std::io::Error::last_os_error()
        );
        let times = touch();
        // SAFETY: restores the disposition saved above.
        unsafe { libc::sigaction(libc::SIGBUS, &previous, std::ptr::null_mut()) };
        return times;
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut faults: Vec<Fault> = Vec::with_capacity(16);
            while !stop.load(Ordering::Acquire) {
                faults.clear();
                let served = uffd.read_faults(&mut faults).and_then(|()| {
                    faults.iter().try_for_each(|f| {
                        uffd.copy(f.address & !(PAGE - 1), source.as_ptr(), PAGE, false, true).map(drop)
                    })
                });
                if let Err(e) = served {
                    // The touching thread sleeps until its page is installed: stop rather
                    // than leave it waiting forever.
                    eprintln!("nam-bench farmem: fault floor: cannot serve a fault: {e}");
                    std::process::abort();
                }
                std::hint::spin_loop(); // busy-polls, as the pager's handler does in a burst
            }
        });
        let times = touch();
        stop.store(true, Ordering::Release);
        times
    })
}
