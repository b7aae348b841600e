//! `nam-bench farmem --workload fault-latency`: every timed read is the first touch of a
//! page whose data is only on the servers (the benchmark itself fails if a page read back
//! wrong or took other than one miss), in both fault modes, with the bare get and the
//! kernel's floor (an empty handler of the same mode, `fault_floor.rs`) measured in the same
//! run. The floor borrows the process's SIGBUS disposition for a moment, after the row's
//! signal-mode region installed the pager's handler: that region's faults, timed after the
//! floor, must still reach the pager (one miss per page, every page its own value), and a
//! signal-mode row after a thread-mode one must too.

use std::process::Command;

#[test]
fn fault_latency_reports_the_fault_the_bare_get_and_the_kernel_floor_for_both_modes() {
    let out = Command::new(env!("CARGO_BIN_EXE_nam-bench"))
        .args(["farmem", "--workload", "fault-latency", "--scale", "0.125", "--json"])
        .args(["--fault-mode", "signal,thread,signal", "--transport", "shm"])
        .output()
        .expect("run nam-bench farmem");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "stdout: {stdout}\nstderr: {}", String::from_utf8_lossy(&out.stderr));
    let runs: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(runs.len(), 3, "{stdout}");
    for (run, mode) in runs.iter().zip(["signal", "thread", "signal"]) {
        assert_eq!(run["workload"], "fault-latency", "{run}");
        assert_eq!(run["fault_mode"], mode, "{run}");
        assert_eq!(run["misses"], 512, "one miss per first touch: {run}");
        for field in ["p50_us", "p99_us", "get_p50_us", "kernel_floor_p50_us"] {
            let us = run[field].as_f64().unwrap_or_else(|| panic!("{field} missing: {run}"));
            assert!(us > 0.0 && us < 100_000.0, "{field} = {us}: {run}");
        }
        assert!(run["p99_us"].as_f64() >= run["p50_us"].as_f64(), "{run}");
    }
}
