//! Huge pages for a paged region ([`super::PagerConfig::huge_pages`]): the kernel's default
//! huge page size and how many are free, from `/proc/meminfo`.
//!
//! A region on huge pages maps `MAP_HUGETLB` memory, which comes from the pool the
//! administrator reserved (`vm.nr_hugepages`), never from ordinary memory. The region is
//! mapped without a reservation, since only its budget is ever present, so the budget is
//! checked against the free pool when the region is made: a pool that ran dry later (another
//! program took the pages) is a fatal error at the fault that finds it empty, as any failed
//! install is.

use crate::error::{Error, Result};

/// The kernel's default huge page size in bytes (`Hugepagesize` of `/proc/meminfo`), or
/// `None` where the kernel has no huge pages.
pub fn huge_page_bytes() -> Option<u64> {
    meminfo_value("Hugepagesize:").map(|kib| kib * 1024).filter(|&b| b > 0)
}

/// Huge pages of the default size reserved and not in use now (`HugePages_Free`).
pub fn free_huge_pages() -> u64 {
    meminfo_value("HugePages_Free:").unwrap_or(0)
}

/// The huge page size, or the typed error that says the kernel has none.
pub(super) fn page_bytes_or_err() -> Result<u64> {
    huge_page_bytes().ok_or(Error::HugePagesUnavailable { needed: 1, free: 0, page_bytes: 0 })
}

/// Whether `needed` huge pages of `page_bytes` are free for a region's budget.
pub(super) fn check_free(needed: u64, page_bytes: u64) -> Result<()> {
    let free = free_huge_pages();
    if free < needed {
        return Err(Error::HugePagesUnavailable { needed, free, page_bytes });
    }
    Ok(())
}

/// The number after `key` in `/proc/meminfo` (kB for sizes, a count for page counts).
fn meminfo_value(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_beyond_the_free_huge_pages_is_refused_with_the_counts() {
        let Some(page_bytes) = huge_page_bytes() else { return };
        let free = free_huge_pages();
        match check_free(free + 1, page_bytes) {
            Err(Error::HugePagesUnavailable { needed, free: f, page_bytes: p }) => {
                assert_eq!((needed, f, p), (free + 1, free, page_bytes));
                let text = Error::HugePagesUnavailable { needed, free: f, page_bytes: p }.to_string();
                assert!(text.contains("vm.nr_hugepages"), "{text}");
            }
            other => panic!("expected HugePagesUnavailable, got {other:?}"),
        }
        assert!(check_free(0, page_bytes).is_ok());
    }
}
