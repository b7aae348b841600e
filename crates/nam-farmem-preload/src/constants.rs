//! Every limit and tuning value of nam-farmem-preload, in one place (the model is
//! TigerBeetle's `constants.zig`): the defaults of its `NAM_FARMEM_*` variables, the
//! bootstrap allocator's size, and the retry and piece sizes of the system-call hooks. Where
//! one bounds another, a compile-time assertion at the end says so.

/// Page size the hooks align to: the far-memory pager's page.
pub const PAGE: usize = nam_farmem::constants::PAGE_BYTES as usize;

/// Default smallest block or anonymous mapping placed in far memory (`NAM_FARMEM_THRESHOLD`):
/// 64 KiB. Far blocks are whole pages, so a block of the threshold wastes at most a page in
/// sixteen; smaller blocks go to the program's allocator, whose heap mappings (jemalloc's
/// extents, Python's arenas) are far themselves when they are this large.
pub const THRESHOLD_DEFAULT: u64 = 64 << 10;

/// Smallest default far address space of the region (`NAM_FARMEM_BYTES` unset): 4 GiB, or
/// twice the machine's memory if that is more ([`crate::arena::far_bytes_default`]).
pub const FAR_BYTES_DEFAULT: u64 = 4 << 30;

/// Default local-memory budget of the region (`NAM_FARMEM_LOCAL_BYTES`): 256 MiB.
pub const LOCAL_BYTES_DEFAULT: u64 = 256 << 20;

/// Bytes of the bootstrap buffer: the few small blocks the lookup needs, with room to spare.
pub const BOOTSTRAP_BYTES: usize = 64 << 10;

/// Alignment of bootstrap blocks, and the header before each, which holds its size.
pub const BOOTSTRAP_ALIGN: usize = 16;

/// glibc's malloc alignment.
pub const MALLOC_ALIGN: usize = 16;

/// Most times one call is retried after touching its far buffers.
pub const RETRIES: usize = 16;

/// Bytes touched and moved per round when a file transfer is completed in pieces: 16 pages,
/// which stay resident together under any budget of more than 16 pages.
pub const PIECE: usize = 16 * PAGE;

// The bootstrap allocator gives what glibc's malloc promises, and its header fits in front.
const _: () = assert!(BOOTSTRAP_ALIGN >= MALLOC_ALIGN && BOOTSTRAP_ALIGN >= std::mem::size_of::<usize>());
// A transfer piece is whole pages; the threshold is at least one page.
const _: () = assert!(PIECE.is_multiple_of(PAGE) && THRESHOLD_DEFAULT >= PAGE as u64);
// The default budget is within the default far space and above the pager's smallest budget.
const _: () = assert!(LOCAL_BYTES_DEFAULT <= FAR_BYTES_DEFAULT);
const _: () = assert!(LOCAL_BYTES_DEFAULT >= nam_farmem::constants::BUDGET_PAGES_MIN * PAGE as u64);

/// Address space reserved for the heap of the library's own threads when the program's
/// allocator is not glibc's ([`crate::internal`]): only the pages written cost memory.
pub const INTERNAL_HEAP_BYTES: usize = 4 << 30;

/// Smallest and largest block of that heap, as powers of two: 16 bytes (glibc's alignment)
/// to 256 MiB (larger requests go to the program's allocator, as before the heap existed).
pub const INTERNAL_CLASS_MIN: u32 = 4;
/// See [`INTERNAL_CLASS_MIN`].
pub const INTERNAL_CLASS_MAX: u32 = 28;

// The internal heap's smallest block holds a free list's link and has malloc's alignment.
const _: () = assert!(1 << INTERNAL_CLASS_MIN >= MALLOC_ALIGN && INTERNAL_CLASS_MAX < usize::BITS);
const _: () = assert!(1usize << INTERNAL_CLASS_MAX <= INTERNAL_HEAP_BYTES);
