#!/usr/bin/env bash
# Issue 7 benchmark: nam-netsim fidelity (against the analytic models and the seeds' numbers)
# and speed (8x8 mesh cycles/s; parallel sweep against a 1-thread baseline measured in the same
# run). Regenerates docs/benchmarks-netsim.md and the plots in docs/img/.
#   bench/netsim.sh            full run (a few minutes on 2 cores)
#   bench/netsim.sh --quick    shorter windows
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p nam-cli
target="${CARGO_TARGET_DIR:-target}"
mkdir -p docs/img
"$target/release/nam" sim bench --out docs/benchmarks-netsim.md --doc docs/netsim.md --plot-dir docs/img "$@"
"$target/release/nam" sim exanest-latency --plot docs/img/netsim-exanest.png
