#!/usr/bin/env bash
# Issue 7 benchmark: nam-netsim fidelity (against the analytic models and the numbers of Abeyratne 2017
# and Ploumidis et al. 2023)
# and speed (8x8 mesh cycles/s; parallel sweep against a 1-thread baseline measured in the same
# run). Regenerates docs/benchmarks-netsim.md and the plots in docs/img/.
#   bench/netsim.sh            full run (a few minutes on 2 cores)
#   bench/netsim.sh --quick    shorter windows
#   BOOKSIM=/path/to/booksim bench/netsim.sh   also runs a BookSim2 binary (built outside the
#                              repository) on the speed row's configuration, in CPU-seconds
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p nam-bench
target="${CARGO_TARGET_DIR:-target}"
mkdir -p docs/img
booksim=()
if [ -n "${BOOKSIM:-}" ]; then booksim=(--booksim "$BOOKSIM"); fi
"$target/release/nam-bench" sim --markdown docs/benchmarks-netsim.md --plot docs/img "${booksim[@]}" "$@"
"$target/release/nam-bench" sim exanest-latency --plot docs/img/netsim-exanest.png
