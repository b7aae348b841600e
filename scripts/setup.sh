#!/usr/bin/env bash
# Installs what nam needs on Debian 12 (only what is missing; safe to rerun), builds nam and
# runs `nam demo`. With --deps-only it stops after installing (the test command uses that).
set -euo pipefail
cd "$(dirname "$0")/.."

deps_only=false
[ "${1:-}" = "--deps-only" ] && deps_only=true

# System packages: bindgen's libclang, Open MPI, a C
# toolchain for the C API and its tests, the font the benchmark plots use, iproute2 for the
# 4-node cluster of network namespaces (scripts/cluster.sh) that a test builds, and the
# programs and allocators the far-memory tests run under the LD_PRELOAD library (memcached,
# Redis with its jemalloc, tcmalloc and mimalloc). The tests start their own memcached and
# Redis; the services these packages install are not used.
packages=(pkg-config clang libclang-dev openmpi-bin libopenmpi-dev
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
# The Python package (python/, docs/python.md) builds and tests in the virtual environment
# .venv at the repository root, with Debian's Python (the one python3-dev belongs to);
# mpi4py builds against Open MPI (libopenmpi-dev above).
[ -x .venv/bin/python ] || /usr/bin/python3 -m venv .venv
.venv/bin/python -c "import numpy, pytest, mpi4py" 2>/dev/null && [ -x .venv/bin/maturin ] ||
    .venv/bin/pip install -q maturin numpy pytest mpi4py
# UCX 1.22: Debian 12's UCX 1.13 aborts a server on an assertion when a flood of connections
# makes its event thread miss an event and deliver it later, stale (fixed in UCX 1.22, "Filter
# stale missed fd events"; docs/architecture.md, "UCX version"). The only build of 1.22 a
# Debian 12 machine can fetch from a package registry is the libucx wheel on PyPI (built
# without verbs: on an RDMA cluster point PKG_CONFIG_PATH and the rpath in
# .cargo/config.toml at the site's UCX >= 1.22 instead). It goes to $ucx_prefix, which
# .cargo/config.toml names for pkg-config and as every binary's rpath.
ucx_version=1.22.0
ucx_wheel_sha256=5cbbef0c140a0a158ae3486089af659b38822b2234cd3dc90ba40a5e6553402a
ucx_prefix=/opt/nam/ucx
if [ "$(cat "$ucx_prefix/VERSION" 2>/dev/null)" != "$ucx_version" ]; then
    echo "setup: installing UCX $ucx_version in $ucx_prefix (PyPI libucx-cu12 wheel, CUDA modules left out)"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    work=$(mktemp -d)
    # pip (of .venv, made above) knows this machine's package index.
    .venv/bin/pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
        -d "$work" "libucx-cu12==$ucx_version"
    echo "$ucx_wheel_sha256  $(ls "$work"/libucx_cu12-*.whl)" | sha256sum -c --quiet ||
        { echo "setup: the UCX wheel does not have the expected sha256" >&2; exit 1; }
    /usr/bin/python3 -m zipfile -e "$work"/libucx_cu12-*.whl "$work/x"
    x=$work/x
    # No GPU here: the CUDA modules would look for the driver at every start.
    rm -f "$x"/libucx/lib/ucx/*cuda* "$x"/libucx/lib/*.a "$x"/libucx/lib/ucx/*.a
    # ucx_perftest's OpenMP runtime.
    cp "$x"/libucx_cu12.libs/libgomp-*.so* "$x/libucx/lib/"
    chmod +x "$x"/libucx/bin/*
    # The wheel's rpaths name its build machine's directories.
    for f in "$x"/libucx/bin/* "$x"/libucx/lib/*.so.* "$x"/libucx/lib/ucx/*.so.*; do
        [ -L "$f" ] || patchelf --set-rpath '$ORIGIN/../lib:$ORIGIN:$ORIGIN/..' "$f"
    done
    sed -i "s|^prefix *=.*|prefix = $ucx_prefix|" "$x"/libucx/lib/pkgconfig/*.pc
    echo "$ucx_version" > "$x/libucx/VERSION"
    $sudo rm -rf "$ucx_prefix"
    $sudo mkdir -p "$(dirname "$ucx_prefix")"
    $sudo cp -a "$x/libucx" "$ucx_prefix"
    rm -rf "$work"
fi
export PKG_CONFIG_PATH=$ucx_prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
pkg-config --atleast-version=1.22 ucx || { echo "setup: pkg-config cannot find UCX >= 1.22" >&2; exit 1; }
echo "setup: dependencies present (UCX $(pkg-config --modversion ucx), $(cargo --version))"

$deps_only && exit 0
cargo build --release -p nam-cli
exec ./target/release/nam demo
