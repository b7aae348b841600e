#!/usr/bin/env bash
# Benchmark of nam-incr (issue 5); regenerates docs/benchmarks-ckpt-incr.md and
# docs/img/ckpt-incr.png. Never edit that file by hand.
#
#   bench/ckpt-incr.sh                       # 16 MiB regions, 10 intervals, 3 repetitions, SSD level (fsync)
#   MIB=8 REPEAT=1 bench/ckpt-incr.sh        # quicker
#
# Measures, in one run on this machine, every mode (stop-and-copy, fork, consolidate,
# non-blocking, early-late, early-late+cons) on five workloads against the same workload run
# without checkpoints (the baseline), and prints the ratio and whether the issue's targets are met.
set -euo pipefail
cd "$(dirname "$0")/.."

MIB="${MIB:-16}"
INTERVALS="${INTERVALS:-10}"
REPEAT="${REPEAT:-3}"
COMPUTE="${COMPUTE:-20}"
DIR="${DIR:-/var/tmp/nam-ckpt-incr-bench}"
OUT="${OUT:-docs/benchmarks-ckpt-incr.md}"

cargo build --release -q -p nam-bench
NAM="${CARGO_TARGET_DIR:-target}/release/nam-bench"
mkdir -p docs/img
"$NAM" ckpt-incr --mib "$MIB" --intervals "$INTERVALS" --repeat "$REPEAT" --compute "$COMPUTE" --dir "$DIR" \
  --plot docs/img/ckpt-incr.png --markdown "$OUT"
echo "wrote $OUT and docs/img/ckpt-incr.png"
