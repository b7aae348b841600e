//! `libnam_farmem_preload.so`: run an unmodified program with its large allocations in far
//! memory.
//!
//! ```text
//! NAM_SERVERS=host:port[,host:port] NAM_FARMEM_LOCAL_BYTES=64MiB \
//!     LD_PRELOAD=target/release/libnam_farmem_preload.so memcached -m 512
//! ```
//!
//! A tour:
//! - [`hooks`]: `malloc`, `calloc`, `realloc`, `free`, `posix_memalign`, `aligned_alloc`,
//!   `memalign` and `malloc_usable_size`. Requests of at least `NAM_FARMEM_THRESHOLD` bytes
//!   (default 1 MiB) are served from the far arena; everything else goes to the program's
//!   own allocator ([`program_alloc`]: jemalloc, tcmalloc or mimalloc when the program is
//!   linked with one, glibc otherwise), and every block not in the far arena is handed
//!   back to that same allocator. What this library allocates itself goes to glibc's
//!   allocator by its internal names (`__libc_malloc`), apart from the program's.
//! - [`arena`]: a first-fit allocator of page-aligned blocks over one
//!   [`nam_farmem::PagedRegion`] of `NAM_FARMEM_BYTES` (default 4 GiB of address space)
//!   whose resident set stays within `NAM_FARMEM_LOCAL_BYTES` (default 256 MiB).
//! - [`syscalls`]: `read`, `readv`, `recv`, `recvfrom`, `recvmsg`, `write`, `writev`, `send`,
//!   `sendto` and `sendmsg`, retried after touching their far buffers when they fail with
//!   `EFAULT`, and file transfers (`read`, `write`, `pread`, `pwrite`, and the vectored
//!   ones) carried on in pieces
//!   where the kernel cut them short at a missing far page, so that the pager's signal fault
//!   mode (`NAM_FARMEM_FAULT_MODE=signal`, default `thread`) serves programs that pass far
//!   memory to those calls.
//! - [`advice`]: `madvise` and `posix_madvise` on far memory go to the pager
//!   (`MADV_WILLNEED` fetches, `MADV_PAGEOUT` writes back and drops, `MADV_DONTNEED` zeroes
//!   and drops), the rest to the kernel.
//!
//! The region is made on the first large allocation. If it cannot be made (no server,
//! userfaultfd not permitted) the library says why once on stderr and the program runs
//! with local memory. A far-memory failure the program cannot be told about (a server died
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
mod libc_alloc;
pub mod program_alloc;
pub mod syscalls;

#[global_allocator]
static ALLOCATOR: libc_alloc::LibcAllocator = libc_alloc::LibcAllocator;
