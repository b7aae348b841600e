#!/bin/sh
# Writes a concrete nam.pc from nam.pc.in.
#
#   scripts/gen-pc.sh PREFIX OUT_DIR
#       an installed tree: libdir=PREFIX/lib, includedir=PREFIX/include
#   scripts/gen-pc.sh --libdir DIR --includedir DIR OUT_DIR
#       explicit directories, e.g. a build tree: --libdir target/debug --includedir include
#
# Directories are made absolute. The version comes from the workspace Cargo.toml.
set -eu

usage() {
    echo "usage: $0 PREFIX OUT_DIR | $0 --libdir DIR --includedir DIR [--prefix DIR] OUT_DIR" >&2
    exit 2
}

root=$(cd "$(dirname "$0")/.." && pwd)
prefix= libdir= includedir=
while [ $# -gt 1 ]; do
    case $1 in
        --prefix) prefix=$2; shift 2 ;;
        --libdir) libdir=$2; shift 2 ;;
        --includedir) includedir=$2; shift 2 ;;
        --*) usage ;;
        *) [ -z "$prefix" ] || usage; prefix=$1; shift ;;
    esac
done
[ $# -eq 1 ] || usage
out_dir=$1

absolute() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$(pwd)" "$1" ;; esac; }
if [ -n "$prefix" ]; then
    prefix=$(absolute "$prefix")
    : "${libdir:=$prefix/lib}" "${includedir:=$prefix/include}"
fi
[ -n "$libdir" ] && [ -n "$includedir" ] || usage
libdir=$(absolute "$libdir")
includedir=$(absolute "$includedir")
: "${prefix:=$(dirname "$libdir")}"

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml")
[ -n "$version" ] || { echo "$0: no version in $root/Cargo.toml [workspace.package]" >&2; exit 1; }

# UCX as nam was built against it: the 1.22 that scripts/setup.sh installs in /opt/nam/ucx
# (.cargo/config.toml points the build there too), unless PKG_CONFIG_PATH names another.
PKG_CONFIG_PATH=${PKG_CONFIG_PATH:-/opt/nam/ucx/lib/pkgconfig}
export PKG_CONFIG_PATH
ucx_libdir=$(pkg-config --variable=libdir ucx) ||
    { echo "$0: pkg-config cannot find UCX (run scripts/setup.sh)" >&2; exit 1; }
ucx_libs="-Wl,-rpath,$ucx_libdir $(pkg-config --static --libs ucx)"

mkdir -p "$out_dir"
sed -e "s|@UCX_LIBS@|$ucx_libs|" -e "s|@PREFIX@|$prefix|" -e "s|@LIBDIR@|$libdir|" -e "s|@INCLUDEDIR@|$includedir|" -e "s|@VERSION@|$version|" \
    "$root/nam.pc.in" >"$out_dir/nam.pc"
echo "$out_dir/nam.pc"
