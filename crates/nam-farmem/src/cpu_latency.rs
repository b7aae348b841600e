//! Keeping idle cores quick to wake: the kernel's CPU latency QoS (`/dev/cpu_dma_latency`).
//!
//! In thread fault mode a fault puts the faulting thread to sleep until the handler thread
//! has installed the page. Its core then goes idle, and an idle core in a deep sleep state
//! (a halted virtual CPU, a package C-state on bare metal) takes tens of microseconds to
//! wake again, far more than the fault itself. On the benchmark machine (a 2-vCPU virtual
//! machine whose cpuidle driver halts the vCPU) a thread-mode fault over shared memory took
//! 15.9 us; with a bound of 0 us held, so that idle cores poll instead of halting, 6.0 us,
//! against 5.5 us in signal mode (`nam-bench farmem --workload fault-latency --fault-mode
//! thread,signal` without and with `--cpu-latency-us 0`, docs/farmem.md).
//!
//! The bound is the documented interface of Linux's PM QoS ("CPU latency QoS"): a process
//! writes the most microseconds it tolerates to the device, and the kernel keeps every idle
//! core in states that wake within it for as long as the file stays open (the lowest of all
//! open requests wins). It costs power, and on a virtual machine the host's cycles, while
//! cores idle, so it is opt-in: [`crate::PagerConfig::cpu_latency_us`] holds one for a
//! region's lifetime, and `nam-bench farmem --cpu-latency-us` for a whole benchmark (the
//! local runs included, so the ratios compare like with like). Writing the device needs
//! root, or write access given to it (a udev rule), as tuned's latency profiles do.

use crate::error::{Error, Result};
use std::io::{Read, Write};
use std::sync::Arc;

/// The kernel's CPU latency QoS device.
pub const CPU_LATENCY_DEVICE: &str = "/dev/cpu_dma_latency";

/// A CPU latency bound, held until dropped.
#[derive(Debug)]
pub struct CpuLatencyBound {
    /// Kept open: closing it withdraws the request.
    _file: std::fs::File,
    us: u32,
}

impl CpuLatencyBound {
    /// Asks the kernel to keep idle cores within `us` microseconds of waking, until the
    /// returned value is dropped. `Err` names the device and the kernel's refusal (most
    /// often: permission denied, without root), or the value out of the kernel's range.
    pub fn hold(us: u32) -> Result<CpuLatencyBound> {
        let value = i32::try_from(us).map_err(|_| {
            Error::Config(format!("CPU latency bound of {us} us is above the kernel's limit of {} us", i32::MAX))
        })?;
        let failed = |source| Error::System {
            what:
                "holding a CPU latency bound through /dev/cpu_dma_latency (it needs root or write access to the device)",
            source: Arc::new(source),
        };
        let mut file = std::fs::OpenOptions::new().write(true).open(CPU_LATENCY_DEVICE).map_err(failed)?;
        // The device takes the bound as a binary s32 (or as a hexadecimal string).
        file.write_all(&value.to_ne_bytes()).map_err(failed)?;
        Ok(CpuLatencyBound { _file: file, us })
    }

    /// The bound this request asked for, in microseconds.
    pub fn us(&self) -> u32 {
        self.us
    }
}

/// The bound in force now, in microseconds: the lowest of all processes' requests, or the
/// kernel's default (2,000,000,000 us: none) without any. Reading needs read access to the
/// device.
pub fn cpu_latency_in_force_us() -> Result<i64> {
    let mut bytes = [0u8; 4];
    std::fs::File::open(CPU_LATENCY_DEVICE)
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|source| Error::System { what: "reading /dev/cpu_dma_latency", source: Arc::new(source) })?;
    Ok(i32::from_ne_bytes(bytes) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_above_the_kernels_range_is_refused_before_the_device_is_touched() {
        let e = CpuLatencyBound::hold(u32::MAX).unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e}");
        assert!(e.to_string().contains("4294967295 us"), "{e}");
    }

    #[test]
    fn a_held_bound_is_in_force_until_dropped_or_the_refusal_names_the_device() {
        let before = cpu_latency_in_force_us();
        match CpuLatencyBound::hold(3) {
            Ok(bound) => {
                let before = before.expect("a writable device is readable");
                assert_eq!(bound.us(), 3);
                let held = cpu_latency_in_force_us().expect("readable");
                assert_eq!(held, before.min(3), "the bound in force while held");
                drop(bound);
                assert_eq!(cpu_latency_in_force_us().expect("readable"), before, "the bound outlived its request");
            }
            Err(e) => {
                // Not root, or no such device: the error says which device and why.
                assert!(matches!(e, Error::System { .. }), "{e}");
                assert!(e.to_string().contains("/dev/cpu_dma_latency"), "{e}");
            }
        }
    }
}
