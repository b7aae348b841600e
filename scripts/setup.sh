#!/usr/bin/env bash
# Installs what nam needs on Debian 12 (only what is missing; safe to rerun), builds nam and
# runs `nam demo`. With --deps-only it stops after installing (the test command uses that).
set -euo pipefail
cd "$(dirname "$0")/.."

deps_only=false
[ "${1:-}" = "--deps-only" ] && deps_only=true

# System packages: UCX (library, headers, ucx_perftest), bindgen's libclang, Open MPI, a C
# toolchain for the C API and its tests, the font the benchmark plots use, iproute2 for the
# 4-node cluster of network namespaces (scripts/cluster.sh) that a test builds, and the
# programs and allocators the far-memory tests run under the LD_PRELOAD library (memcached,
# Redis with its jemalloc, tcmalloc and mimalloc). The tests start their own memcached and
# Redis; the services these packages install are not used.
packages=(libucx-dev ucx-utils pkg-config clang libclang-dev openmpi-bin libopenmpi-dev
          build-essential binutils fonts-dejavu-core ca-certificates memcached iproute2
          redis-server redis-tools libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0
          python3-venv python3-dev patchelf gfortran)

# A rustup toolchain in ~/.cargo counts as installed even if this shell has not sourced it.
if [ -f "$HOME/.cargo/env" ]; then
    # shellcheck disable=SC1091
    . "$HOME/.cargo/env"
fi
rust_ok() {
    command -v cargo >/dev/null 2>&1 || return 1
    local minor
    minor=$(cargo --version | sed -E 's/^cargo 1\.([0-9]+).*/\1/')
    [ "${minor:-0}" -ge 87 ]
}
# Debian 12's own rustc is too old; its rustc-web/cargo-web packages are current.
rust_ok || packages+=(rustc-web cargo-web)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
rust_ok || { echo "setup: no cargo >= 1.87 after installing; install Rust (rustup or cargo-web)" >&2; exit 1; }
# The test command checks formatting and lints (cargo fmt, cargo clippy).
for tool in fmt clippy; do
    if ! cargo "$tool" --version >/dev/null 2>&1; then
        component=$([ "$tool" = fmt ] && echo rustfmt || echo clippy)
        command -v rustup >/dev/null 2>&1 && rustup component add "$component"
        cargo "$tool" --version >/dev/null 2>&1 ||
            { echo "setup: cargo $tool is missing (rustup component add $component)" >&2; exit 1; }
    fi
done
pkg-config --exists ucx || { echo "setup: pkg-config cannot find ucx" >&2; exit 1; }
# The Python package (python/, docs/python.md) builds and tests in the virtual environment
# .venv at the repository root, with Debian's Python (the one python3-dev belongs to);
# mpi4py builds against Open MPI (libopenmpi-dev above).
[ -x .venv/bin/python ] || /usr/bin/python3 -m venv .venv
.venv/bin/python -c "import numpy, pytest, mpi4py" 2>/dev/null && [ -x .venv/bin/maturin ] ||
    .venv/bin/pip install -q maturin numpy pytest mpi4py
echo "setup: dependencies present (UCX $(pkg-config --modversion ucx), $(cargo --version))"

$deps_only && exit 0
cargo build --release -p nam-cli
exec ./target/release/nam demo
