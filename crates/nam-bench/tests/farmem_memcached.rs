//! An unmodified program on far memory: Debian's memcached under the `LD_PRELOAD` library,
//! driven by `nam-bench farmem --workload memcached`, whose load generator checks every
//! value it gets back (every get must hit: memcached's own limit is above the data set).
//! The local budget is 10% of the data set, so most of memcached's slab memory is remote.
//! Both fault modes: in signal mode memcached's `read` into and `sendmsg` from far items
//! fail with `EFAULT` on missing pages, which the library's wrappers retry after touching
//! the pages (a wrong or lost value would fail the load generator's check). memcached runs
//! with its default segmented LRU, whose maintainer thread also faults on far items in the
//! background, the busier case (the benchmark's default is the classic LRU).

use std::process::Command;

#[test]
fn memcached_serves_checked_values_with_most_of_its_memory_remote() {
    let nam = env!("CARGO_BIN_EXE_nam-bench");
    let preload = std::path::Path::new(nam).with_file_name("libnam_farmem_preload.so");
    assert!(preload.exists(), "{} missing: cargo build --workspace builds it", preload.display());
    let out = Command::new(nam)
        .args(["farmem", "--workload", "memcached", "--local-fraction", "0.1", "--scale", "0.5", "--json"])
        .args(["--fault-mode", "thread,signal", "--memcached-lru", "segmented"])
        .output()
        .expect("run nam-bench farmem");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {}", String::from_utf8_lossy(&out.stderr));
    let runs: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(runs.len(), 2, "{stdout}");
    for (run, mode) in runs.iter().zip(["thread", "signal"]) {
        assert_eq!(run["workload"], "memcached");
        assert_eq!(run["fault_mode"], mode, "{run}");
        assert_eq!(run["memcached_lru"], "segmented", "{run}");
        assert!(run["values_checked"].as_u64().unwrap() > 1000, "{run}");
        let far = run["far_bytes"].as_u64().unwrap();
        let resident = run["far_resident_bytes"].as_u64().unwrap();
        assert!(far >= 16 << 20, "memcached put only {far} bytes in far memory");
        assert!(4 * resident <= far, "most of memcached's memory should be remote: {far} far, {resident} local");
        assert!(run["throughput_ratio"].as_f64().unwrap() > 0.0);
    }
}
