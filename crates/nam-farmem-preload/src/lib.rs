//! `libnam_farmem_preload.so`: run an unmodified program with its heap beyond a local budget
//! in far memory.
//!
//! ```text
//! NAM_SERVERS=host:port[,host:port] NAM_FARMEM_LOCAL_BYTES=64MiB \
//!     LD_PRELOAD=target/release/libnam_farmem_preload.so memcached -m 512
//! ```
//!
//! A tour:
//! - [`hooks`]: `malloc`, `calloc`, `realloc`, `free`, `posix_memalign`, `aligned_alloc`,
//!   `memalign` and `malloc_usable_size`. Requests of at least `NAM_FARMEM_THRESHOLD` bytes
//!   (default 64 KiB) are served from the far arena; everything else goes to the program's
//!   own allocator ([`program_alloc`]: jemalloc, tcmalloc or mimalloc when the program is
//!   linked with one, glibc otherwise), and every block not in the far arena is handed
//!   back to that same allocator. What this library allocates itself goes to glibc's
//!   allocator by its internal names (`__libc_malloc`), apart from the program's; what the
//!   C code on its own threads (UCX on the pager's handler) allocates goes to [`internal`],
//!   a local heap, when the program's allocator is not glibc's.
//! - [`arena`]: a first-fit allocator of page-aligned blocks over one
//!   [`nam_farmem::PagedRegion`] of `NAM_FARMEM_BYTES` (default twice the machine's memory
//!   in address space, 4 GiB at least: [`arena::far_bytes_default`])
//!   whose resident set stays within `NAM_FARMEM_LOCAL_BYTES` (default 256 MiB).
//! - [`syscalls`]: `read`, `readv`, `recv`, `recvfrom`, `recvmsg`, `write`, `writev`, `send`,
//!   `sendto` and `sendmsg`, retried after touching their far buffers when they fail with
//!   `EFAULT`, and file transfers (`read`, `write`, `pread`, `pwrite`, and the vectored
//!   ones) carried on in pieces
//!   where the kernel cut them short at a missing far page, so that the pager's signal fault
//!   mode (`NAM_FARMEM_FAULT_MODE=signal`, default `thread`) serves programs that pass far
//!   memory to those calls.
//! - [`maps`]: `mmap` places the anonymous mappings allocators build their heaps from in
//!   far memory; `munmap`, `mremap`, `mprotect`, `mlock` and `fork` behave on far memory as
//!   on local memory. [`report`] counts what stayed local and why.
//! - [`advice`]: `madvise` and `posix_madvise` on far memory go to the pager
//!   (`MADV_WILLNEED` fetches, `MADV_PAGEOUT` writes back and drops, `MADV_DONTNEED` zeroes
//!   and drops), the rest to the kernel.
//!
//! The region is made on the first large allocation (for a program on glibc's `malloc`, or
//! its first large anonymous mapping), and says so in one line on stderr. If it cannot be
//! made (no server, userfaultfd not permitted) the library says why once on stderr and the
//! program runs with local memory. A far-memory failure the program cannot be told about (a server died
//! under a page it needs, a panic in this library) ends the process with
//! [`nam_farmem::FATAL_EXIT_STATUS`] after one line on stderr, whatever signal handlers the
//! program installed. `NAM_FARMEM_STATS=1` prints the pager's counters at exit;
//! `NAM_FARMEM_PREFETCH=off` turns the prefetcher off; `NAM_FARMEM_SPIN_US` sets how long the
//! pager's handler busy-polls after its last fault (`PagerConfig::spin_us`);
//! `NAM_FARMEM_PREDICT_WRITES=off`, `NAM_FARMEM_EVICT_AHEAD=off` and `NAM_FARMEM_THROTTLE=off`
//! turn off the pager's write prediction, eviction ahead and prefetch throttling
//! (`PagerConfig::predict_writes`, `PagerConfig::evict_ahead`, `PagerConfig::throttle`);
//! `NAM_FARMEM_WATERMARKS=LOW,HIGH` sets the percentages of the budget that background
//! reclaim keeps free (`nam_farmem::Watermarks`, default `2,5`).
//! `NAM_FARMEM_CPU_LATENCY_US=0` keeps idle cores polling instead of sleeping while the
//! program runs (`nam_farmem::CpuLatencyBound`; needs root or write access to
//! `/dev/cpu_dma_latency`): thread-mode faults then wake the faulting thread in a few
//! microseconds instead of tens. `NAM_FARMEM_HUGE_PAGES=1` backs the far arena with the
//! kernel's huge pages (`PagerConfig::with_huge_pages`; `NAM_FARMEM_LOCAL_BYTES` must fit in
//! the huge pages reserved and free): for programs that stream through their large arrays.
//!
//! ```no_run
//! // The library is used through LD_PRELOAD; from Rust its arena is reachable directly:
//! let p = nam_farmem_preload::arena::allocate(8 << 20, 4096);
//! assert!(p.is_null() || nam_farmem_preload::arena::contains(p));
//! ```
#![deny(missing_docs)]

pub mod advice;
pub mod arena;
pub mod constants;
pub mod hooks;
pub mod internal;
mod libc_alloc;
pub mod maps;
pub mod program_alloc;
pub mod report;
pub mod syscalls;

/// Runs first when the library is loaded: see [`without_ucx_memory_hooks`].
#[used]
#[link_section = ".init_array"]
static START: extern "C" fn(libc::c_int, *const *const libc::c_char, *const *const libc::c_char) =
    without_ucx_memory_hooks;

/// Starts the program again with `UCX_MEM_EVENTS=no` when far memory is asked for
/// (`NAM_SERVERS` set) and the user did not choose `UCX_MEM_EVENTS` themselves.
///
/// UCX's memory hooks patch the first instructions of the `mmap`, `munmap`, `mremap` and
/// `madvise` that the program's calls reach (this library's) into jumps to UCX's own, which
/// make the system calls directly: a program's huge-page advice or partial `munmap` then
/// reaches the kernel on far pages, and the allocators' heaps never reach far memory. UCX
/// reads that setting when it is loaded, before any code of this library runs, and
/// installs the hooks when the region's client starts; the one reliable way to turn them
/// off is the environment of a fresh start. They serve only UCX's RDMA registration cache.
/// The program is executed again at once (`/proc/self/exe`, same arguments), before its
/// `main`; if that fails the library says so and the program goes on with the hooks.
extern "C" fn without_ucx_memory_hooks(
    _argc: libc::c_int,
    argv: *const *const libc::c_char,
    _env: *const *const libc::c_char,
) {
    // SAFETY: getenv/setenv with NUL-terminated names, before the program's own threads.
    unsafe {
        if libc::getenv(c"NAM_SERVERS".as_ptr()).is_null() || !libc::getenv(c"UCX_MEM_EVENTS".as_ptr()).is_null() {
            return;
        }
        libc::setenv(c"UCX_MEM_EVENTS".as_ptr(), c"no".as_ptr(), 1);
        if !argv.is_null() {
            libc::execv(c"/proc/self/exe".as_ptr(), argv);
        }
    }
    eprintln!(
        "nam-farmem-preload: could not restart with UCX_MEM_EVENTS=no ({}): set it yourself, or the \
         program's memory-map calls bypass this library",
        std::io::Error::last_os_error()
    );
}

#[global_allocator]
static ALLOCATOR: libc_alloc::LibcAllocator = libc_alloc::LibcAllocator;
