//! Far memory from C: the explicit cache (`nam_farmem_t`) and the paged region
//! (`nam_region_t`) of `nam-farmem`, each over its own connection to the servers of a
//! `nam_config_t` (or the `NAM_*` environment when it is NULL).

use crate::client::client_config;
use crate::ffi::{deref, deref_mut, guard, sink, source, write_optional, Failure};
use crate::status::nam_status_t::{self, NAM_OK};
use nam_client::{Client, ClientConfig};
use nam_farmem::{FarConfig, FarMemory, FaultMode, PagedRegion, PagerConfig, Stats};
use std::ffi::c_void;
use std::sync::Arc;

/// Far memory reached through a client-side cache (opaque); from `nam_farmem_create`.
/// Use it from one thread at a time.
pub struct nam_farmem_t {
    far: FarMemory,
}

/// A paged far-memory region (opaque); from `nam_region_create`. Its memory, at
/// `nam_region_ptr`, may be used from any thread.
pub struct nam_region_t {
    region: PagedRegion,
}

/// Parameters of a far-memory cache or region. Zero fields take the defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct nam_farmem_params_t {
    /// Bytes of far memory (required).
    pub far_bytes: u64,
    /// Local memory for cached data or resident pages (required).
    pub local_bytes: u64,
    /// Cache line in bytes, a power of two in 64..=65536; 0 means 4096 (cache only).
    pub line_bytes: u32,
    /// Ways per set; 0 means 8 (cache only).
    pub ways: u32,
    /// Entries of the metadata cache, 0 or a power of two (cache only).
    pub metadata_cache_entries: u32,
    /// 1 disables the stream prefetcher.
    pub prefetch_off: u32,
    /// 1 serves a region's page faults in a handler thread (region only). Needed when region
    /// memory is passed to system calls (`read(fd, ptr, n)`): in the default signal mode the
    /// faulting thread serves its own fault in a SIGBUS handler, about four times faster, but
    /// a system call that meets a page not resident fails with `EFAULT`. Signal mode falls
    /// back to the handler thread by itself where the kernel lacks it.
    pub fault_thread: u32,
    /// 1 keeps idle cores polling instead of sleeping while the region lives (a CPU latency
    /// bound of 0 us through `/dev/cpu_dma_latency`; region only): a handler-thread fault
    /// then wakes the faulting thread in a few microseconds instead of tens. Needs root or
    /// write access to the device (`NAM_ERR_SYSTEM` otherwise) and costs power.
    pub poll_idle_cores: u32,
    /// 1 backs the region with the kernel's huge pages (2 MiB on x86-64; region only): a
    /// fault, an install and an eviction each move a whole huge page, which suits programs
    /// that stream through memory and not those that touch it at random. `local_bytes` must
    /// fit in the huge pages reserved and free (`NAM_ERR_HUGE_PAGES_UNAVAILABLE` otherwise;
    /// reserve them as root with `sysctl vm.nr_hugepages=N`).
    pub huge_pages: u32,
}

/// What a far-memory cache or region did so far (`nam_farmem_stats`, `nam_region_stats`).
/// A field that does not apply to one of them (a cache takes no write faults, a region has
/// no metadata cache) stays 0.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct nam_farmem_stats_t {
    /// Accesses found in local memory (cache).
    pub hits: u64,
    /// Accesses that had to fetch: cache misses, or page faults on missing pages.
    pub misses: u64,
    /// Misses merged into a fetch already in flight for the same line (cache).
    pub merged: u64,
    /// Lines or pages fetched ahead of their first access: by the prefetcher, and for a
    /// region also those asked for with `nam_region_fetch`.
    pub prefetches: u64,
    /// Prefetched lines or pages the program then used.
    pub prefetch_hits: u64,
    /// Prefetched lines or pages that left local memory unused.
    pub prefetch_wasted: u64,
    /// Lines or pages removed from local memory.
    pub evictions: u64,
    /// Dirty lines or pages written back to the servers.
    pub writebacks: u64,
    /// Streaming reads served from a staging copy without taking a line (cache).
    pub bypassed: u64,
    /// Streaming reads served in place in a server's memory mapped here (cache).
    pub in_place: u64,
    /// Whole-line writes that skipped the fetch (cache).
    pub full_line_writes: u64,
    /// Lookups answered by the metadata cache (cache).
    pub metadata_hits: u64,
    /// Lookups that scanned a set's tags (cache).
    pub metadata_misses: u64,
    /// First writes to clean, write-protected pages (region).
    pub write_faults: u64,
    /// Read misses installed writable because their zone is usually written (region).
    pub predicted_writes: u64,
    /// Pages moved in on recycled pages instead of copied into new ones (region).
    pub recycled: u64,
    /// Misses in flight now.
    pub inflight: u64,
    /// Most misses ever in flight at once.
    pub inflight_max: u64,
}

impl From<Stats> for nam_farmem_stats_t {
    fn from(s: Stats) -> Self {
        nam_farmem_stats_t {
            hits: s.hits,
            misses: s.misses,
            merged: s.merged,
            prefetches: s.prefetches,
            prefetch_hits: s.prefetch_hits,
            prefetch_wasted: s.prefetch_wasted,
            evictions: s.evictions,
            writebacks: s.writebacks,
            bypassed: s.bypassed,
            in_place: s.in_place,
            full_line_writes: s.full_line_writes,
            metadata_hits: s.metadata_hits,
            metadata_misses: s.metadata_misses,
            write_faults: s.write_faults,
            predicted_writes: s.predicted_writes,
            recycled: s.recycled,
            inflight: s.inflight,
            inflight_max: s.inflight_max,
        }
    }
}

unsafe fn connect(config: *const crate::client::nam_config_t) -> Result<Arc<Client>, Failure> {
    let config = match config.as_ref() {
        Some(c) => client_config(c)?,
        None => ClientConfig::from_env()?,
    };
    Ok(Arc::new(Client::connect(config)?))
}

/// Creates far memory of `params->far_bytes` striped over the servers, cached in
/// `params->local_bytes` of local memory. Blocking (connects). Errors:
/// `NAM_ERR_BUDGET_TOO_SMALL` (local memory below one set of lines), `NAM_ERR_CONFIG`
/// (a parameter out of range), and the connection errors of `nam_init`. `*out` is NULL on
/// failure. Release with `nam_farmem_destroy`.
///
/// # Safety
/// `config` is NULL or valid as for `nam_init`; `params` and `out` are valid pointers.
#[no_mangle]
pub unsafe extern "C" fn nam_farmem_create(
    config: *const crate::client::nam_config_t,
    params: *const nam_farmem_params_t,
    out: *mut *mut nam_farmem_t,
) -> nam_status_t {
    guard("nam_farmem_create", || {
        let out = deref_mut(out, "out")?;
        *out = std::ptr::null_mut();
        let p = deref(params, "params")?;
        let mut fc = FarConfig::new(p.far_bytes, p.local_bytes);
        if p.line_bytes != 0 {
            fc.line_bytes = p.line_bytes as u64;
        }
        if p.ways != 0 {
            fc.ways = p.ways as usize;
        }
        fc.metadata_cache_entries = p.metadata_cache_entries as usize;
        fc.prefetch.enabled = p.prefetch_off == 0;
        fc.validate().map_err(Failure::Far)?;
        let far = FarMemory::new(connect(config)?, fc).map_err(Failure::Far)?;
        *out = Box::into_raw(Box::new(nam_farmem_t { far }));
        Ok(NAM_OK)
    })
}

/// Reads `len` bytes at far address `addr` into `buf`. `NAM_ERR_OUT_OF_BOUNDS` when the
/// range leaves the far memory (nothing read); a failed server gives its transport or
/// timeout code, with the server named in `nam_last_error_message`.
///
/// # Safety
/// `far` is from `nam_farmem_create`; `buf` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nam_farmem_read(
    far: *mut nam_farmem_t,
    addr: u64,
    buf: *mut c_void,
    len: usize,
) -> nam_status_t {
    guard("nam_farmem_read", || {
        let far = deref_mut(far, "far")?;
        far.far.read(addr, sink(buf, len)?).map_err(Failure::Far)?;
        Ok(NAM_OK)
    })
}

/// Writes `len` bytes from `buf` at far address `addr` (into the cache; `nam_farmem_flush`
/// makes them reach the servers). Errors as `nam_farmem_read`, plus `NAM_ERR_POOL_EXHAUSTED`
/// when a server has no room for an evicted line (the data stays in the cache).
///
/// # Safety
/// `far` is from `nam_farmem_create`; `buf` is readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nam_farmem_write(
    far: *mut nam_farmem_t,
    addr: u64,
    buf: *const c_void,
    len: usize,
) -> nam_status_t {
    guard("nam_farmem_write", || {
        let far = deref_mut(far, "far")?;
        far.far.write(addr, source(buf, len)?).map_err(Failure::Far)?;
        Ok(NAM_OK)
    })
}

/// Writes every dirty line back and waits until the servers have them.
///
/// # Safety
/// `far` is from `nam_farmem_create`.
#[no_mangle]
pub unsafe extern "C" fn nam_farmem_flush(far: *mut nam_farmem_t) -> nam_status_t {
    guard("nam_farmem_flush", || {
        deref_mut(far, "far")?.far.flush().map_err(Failure::Far)?;
        Ok(NAM_OK)
    })
}

/// Destroys `far`, freeing its far memory on the servers (unflushed writes are lost).
///
/// # Safety
/// `far` is NULL or from `nam_farmem_create`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn nam_farmem_destroy(far: *mut nam_farmem_t) -> nam_status_t {
    guard("nam_farmem_destroy", || {
        if far.is_null() {
            return Err(Failure::Null("far"));
        }
        let far = Box::from_raw(far);
        far.far.spans().release().map_err(Failure::Far)?;
        Ok(NAM_OK)
    })
}

/// Creates a paged region of `params->far_bytes` with at most `params->local_bytes`
/// resident, and writes its address to `*ptr`: plain loads and stores reach far memory.
/// Errors: `NAM_ERR_USERFAULTFD_DENIED` (the process may not use userfaultfd),
/// `NAM_ERR_BUDGET_TOO_SMALL` (below two pages), `NAM_ERR_HUGE_PAGES_UNAVAILABLE`
/// (`huge_pages` asked for and too few free), `NAM_ERR_SYSTEM` (also: `poll_idle_cores`
/// refused), connection errors. If a
/// page cannot be fetched later (its server died) the process is aborted with a message.
///
/// # Safety
/// `config` as for `nam_init`; `params`, `out` and `ptr` are valid pointers.
#[no_mangle]
pub unsafe extern "C" fn nam_region_create(
    config: *const crate::client::nam_config_t,
    params: *const nam_farmem_params_t,
    out: *mut *mut nam_region_t,
    ptr: *mut *mut c_void,
) -> nam_status_t {
    guard("nam_region_create", || {
        let out = deref_mut(out, "out")?;
        *out = std::ptr::null_mut();
        let ptr = deref_mut(ptr, "ptr")?;
        *ptr = std::ptr::null_mut();
        let p = deref(params, "params")?;
        let mut pc = PagerConfig::new(p.far_bytes, p.local_bytes);
        if p.huge_pages != 0 {
            pc = pc.with_huge_pages();
        }
        pc.prefetch.enabled = p.prefetch_off == 0;
        if p.fault_thread != 0 {
            pc.fault_mode = FaultMode::Thread;
        }
        if p.poll_idle_cores != 0 {
            pc.cpu_latency_us = Some(0);
        }
        let region = PagedRegion::new(connect(config)?, pc).map_err(Failure::Far)?;
        *ptr = region.as_ptr().cast();
        *out = Box::into_raw(Box::new(nam_region_t { region }));
        Ok(NAM_OK)
    })
}

/// Writes every dirty page of the region back and waits until the servers have them.
///
/// # Safety
/// `region` is from `nam_region_create`.
#[no_mangle]
pub unsafe extern "C" fn nam_region_flush(region: *mut nam_region_t) -> nam_status_t {
    guard("nam_region_flush", || {
        deref(region, "region")?.region.flush().map_err(Failure::Far)?;
        Ok(NAM_OK)
    })
}

/// Fetches the missing pages of `len` bytes at byte `offset` of the region now (as
/// `madvise(MADV_WILLNEED)` would), so that the accesses that follow do not fault; at most
/// half the local budget per call. `*installed` (if not NULL) gets the number of pages
/// brought in. `NAM_ERR_OUT_OF_BOUNDS` if the range leaves the region (nothing fetched).
///
/// # Safety
/// `region` is from `nam_region_create`; `installed` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_region_fetch(
    region: *mut nam_region_t,
    offset: u64,
    len: u64,
    installed: *mut u64,
) -> nam_status_t {
    guard("nam_region_fetch", || {
        let n = deref(region, "region")?.region.fetch_ranges(&[(offset, len)]).map_err(Failure::Far)?;
        write_optional(installed, n);
        Ok(NAM_OK)
    })
}

/// Writes the dirty pages of `len` bytes at byte `offset` of the region back and drops every
/// resident page there from local memory (as `madvise(MADV_PAGEOUT)` would). `*evicted` (if
/// not NULL) gets the number of pages dropped. `NAM_ERR_OUT_OF_BOUNDS` if the range leaves
/// the region; after a server's failure the pages not yet written back stay resident.
///
/// # Safety
/// `region` is from `nam_region_create`; `evicted` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nam_region_evict(
    region: *mut nam_region_t,
    offset: u64,
    len: u64,
    evicted: *mut u64,
) -> nam_status_t {
    guard("nam_region_evict", || {
        let n = deref(region, "region")?.region.evict_range(offset, len).map_err(Failure::Far)?;
        write_optional(evicted, n);
        Ok(NAM_OK)
    })
}

/// The counters of the cache `far` so far, into `*out`.
///
/// # Safety
/// `far` is from `nam_farmem_create`; `out` is a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn nam_farmem_stats(far: *const nam_farmem_t, out: *mut nam_farmem_stats_t) -> nam_status_t {
    guard("nam_farmem_stats", || {
        let stats = deref(far, "far")?.far.stats();
        *deref_mut(out, "out")? = stats.into();
        Ok(NAM_OK)
    })
}

/// The counters of the paged region so far, into `*out`; `*resident` (if not NULL) gets the
/// number of pages resident now.
///
/// # Safety
/// `region` is from `nam_region_create`; `out` is a valid pointer; `resident` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn nam_region_stats(
    region: *const nam_region_t,
    out: *mut nam_farmem_stats_t,
    resident: *mut u64,
) -> nam_status_t {
    guard("nam_region_stats", || {
        let region = &deref(region, "region")?.region;
        *deref_mut(out, "out")? = region.stats().into();
        write_optional(resident, region.resident_pages() as u64);
        Ok(NAM_OK)
    })
}

/// Unmaps the region and frees its far memory; its memory must not be touched afterwards.
///
/// # Safety
/// `region` is NULL or from `nam_region_create`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn nam_region_destroy(region: *mut nam_region_t) -> nam_status_t {
    guard("nam_region_destroy", || {
        if region.is_null() {
            return Err(Failure::Null("region"));
        }
        drop(Box::from_raw(region));
        Ok(NAM_OK)
    })
}
