#!/usr/bin/env bash
# Issue 3: `nam-bench ckpt` under mpirun: NAM-XOR (parity computed by a memory server) against
# the partner and XOR-on-nodes schemes, all three in each run, 8 ranks on 8 emulated nodes.
# Local storage on disk (fsync) and on tmpfs; a segment-size sweep for NAM-XOR's default.
# Writes docs/benchmarks-ckpt.md from the outputs (never by hand).
set -euo pipefail
# Open MPI session directories of this run's own (leftovers or concurrent jobs in /tmp make
# mpirun abort with "orte_session_dir failed").
OMPI_MCA_orte_tmpdir_base=$(mktemp -d -t nam-bench-mpi.XXXXXX)
export OMPI_MCA_orte_tmpdir_base
cd "$(dirname "$0")/.."
cargo build --release -p nam-bench
nam=$PWD/target/release/nam-bench
out=bench/out
mkdir -p "$out"
disk=${NAM_BENCH_DISK_DIR:-$PWD/target/ckpt-bench-disk}
tmpfs=${NAM_BENCH_TMPFS_DIR:-/dev/shm/nam-ckpt-bench}
ranks=${NAM_BENCH_RANKS:-8}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun --oversubscribe --mca btl self,vader,tcp -np "$ranks" -x "NAM_EMULATE_NODES=$ranks")
# Which parts run: all (the page), tcp (only the restore-over-TCP rows, written to
# bench/out/ckpt-tcp.md and printed, not the page: to check them without the long runs), or
# page (no run: the page written again from the outputs of the last full run in bench/out).
parts=${NAM_BENCH_CKPT_PARTS:-all}
# Checkpoint bytes per rank of the restore-over-TCP rows (issue 26's case: 16 MiB).
tcp_size=${NAM_BENCH_TCP_SIZE:-16MiB}
# The UCX nam links (scripts/setup.sh installs it; .cargo/config.toml points the build there),
# for the version the page names: the system's pkg-config path finds Debian's instead.
ucx_pkgconfig=$(sed -n 's/^PKG_CONFIG_PATH = "\(.*\)"/\1/p' .cargo/config.toml)
cluster=${NAM_CLUSTER:-nbckpt}
cluster_up=
cleanup() {
    rm -rf "$disk" "$tmpfs"
    if [[ -n $cluster_up ]]; then
        NAM_CLUSTER=$cluster scripts/cluster.sh down || true
    fi
}
trap cleanup EXIT

run() { # name, then `nam-bench ckpt` arguments
    local name=$1
    shift
    echo "$name: load average before $(cut -d' ' -f1-3 /proc/loadavg)" > "$out/ckpt-$name.load"
    "${mpi[@]}" "$nam" ckpt --restores 3 --markdown "$out/ckpt-$name.md" --json-file "$out/ckpt-$name.json" "$@"
    echo "after $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/ckpt-$name.load"
}

# Issue 26: NAM-XOR's restore of one lost rank beside its checkpoint over TCP, both measured
# in one run (4 ranks, sets of 2 as in the issue's cluster: each restore rebuilds the lost
# rank from the parity and one survivor). First on this host over loopback TCP, then across
# the 4 hosts that scripts/cluster.sh emulates with network namespaces (servers on n1 and n2,
# ranks on n3 and n4, over their veth links; needs root).
tcp_args=(ckpt --scheme nam-xor --size-per-rank "$tcp_size" --set-size 2 --checkpoints 5 --restores 3
    --compute-ms 10 --no-fsync --json)
tcp_rows() {
    local json=$out/ckpt-tcp-loopback.json
    echo "loopback: load average before $(cut -d' ' -f1-3 /proc/loadavg)" > "$out/ckpt-tcp.load"
    mpirun --oversubscribe --mca btl self,vader,tcp -np 4 -x NAM_EMULATE_NODES=4 -x UCX_TLS=tcp \
        -x NAM_TRANSPORTS=tcp "$nam" "${tcp_args[@]}" --dir "$tmpfs/tcp" \
        | grep '^{' > "$json"
    echo "after $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/ckpt-tcp.load"
    rm -f "$out/ckpt-tcp-cluster.json" "$out/ckpt-tcp-cluster.skipped"
    if [[ $(id -u) -ne 0 ]]; then
        echo "network namespaces need root; run bench/ckpt.sh as root for this row" \
            > "$out/ckpt-tcp-cluster.skipped"
        return
    fi
    export NAM_CLUSTER=$cluster
    cluster_up=1
    scripts/cluster.sh up
    local node serve_pids=()
    for node in n1 n2; do
        scripts/cluster.sh exec "$node" env UCX_TLS=tcp UCX_NET_DEVICES=veth0 "$nam" serve \
            --listen "$(scripts/cluster.sh addr "$node"):7000" --capacity 512MiB > "$out/ckpt-tcp-$node.log" 2>&1 &
        serve_pids+=($!)
    done
    for node in n1 n2; do
        for _ in $(seq 100); do
            grep -qs 7000 "$out/ckpt-tcp-$node.log" && break
            sleep 0.2
        done
    done
    local session
    session=$(mktemp -d -t nam-bench-cluster.XXXXXX)
    echo "emulated hosts: load average before $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/ckpt-tcp.load"
    scripts/cluster.sh exec head mpirun --mca plm_rsh_agent "$PWD/scripts/cluster-rsh.sh" \
        --mca plm_rsh_no_tree_spawn 1 --mca orte_tmpdir_base "$session" \
        --mca pml ob1 --mca btl self,vader,tcp \
        --mca btl_tcp_if_include 10.213.0.0/24 --mca oob_tcp_if_include 10.213.0.0/24 \
        -x UCX_NET_DEVICES=veth0 -x UCX_TLS=tcp -x NAM_TRANSPORTS=tcp \
        --host 10.213.0.3:2,10.213.0.4:2 -np 4 "$nam" "${tcp_args[@]}" \
        --servers 10.213.0.1:7000,10.213.0.2:7000 --dir "/tmp/nam-bench-cluster-$cluster" \
        | grep '^{' > "$out/ckpt-tcp-cluster.json"
    echo "after $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/ckpt-tcp.load"
    kill "${serve_pids[@]}" 2>/dev/null || true
    scripts/cluster.sh down
    cluster_up=
    rm -rf "$session" "/tmp/nam-bench-cluster-$cluster"
}

# The section of the page: checkpoint and restore bandwidth side by side, from the JSON rows.
tcp_section() {
    echo "### Restore beside checkpoint over TCP (issue 26)"
    echo
    echo "NAM-XOR with 4 ranks in sets of 2, $tcp_size per rank, over UCX's TCP transport, the"
    echo "memory server rebuilding the lost rank (rank 1) from the parity and the surviving rank and"
    echo "PUTting the verified bytes into its registered buffer. Checkpoint GB/s is all ranks' bytes"
    echo "over the checkpoint's time (median of 5); restore GB/s is the lost rank's bytes over its"
    echo "restore, from its request to the server to its verified bytes (median of 3); both come from"
    echo "the same run. One host: the ranks and the server on this machine, talking over loopback"
    echo "(\`UCX_TLS=tcp\`, 4 emulated nodes). Emulated hosts: \`scripts/cluster.sh\`'s network"
    echo "namespaces, servers on n1 and n2 (one set each), ranks on n3 and n4, over veth links."
    echo
    echo "| hosts | checkpoint GB/s | restore GB/s | restore / checkpoint | bytes match |"
    echo "| --- | ---: | ---: | ---: | --- |"
    local label file
    for label in "one host (loopback TCP):$out/ckpt-tcp-loopback.json" \
        "4 emulated hosts (veth, TCP):$out/ckpt-tcp-cluster.json"; do
        file=${label#*:}
        if [[ -s $file ]]; then
            python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).readline()); print(f\"| {sys.argv[2]} | {r['aggregate_gbps']:.2f} | {r['restore_gbps']:.2f} | {r['restore_gbps']/r['aggregate_gbps']:.2f}x | {str(r['bytes_match']).lower()} |\")" "$file" "${label%%:*}"
        fi
    done
    if [[ -s $out/ckpt-tcp-cluster.skipped ]]; then
        echo
        echo "The emulated-hosts row was not run: $(cat "$out/ckpt-tcp-cluster.skipped")."
    fi
    echo
    echo "($(tr '\n' ' ' < "$out/ckpt-tcp.load"))"
}

if [[ $parts == tcp ]]; then
    tcp_rows
    tcp_section > "$out/ckpt-tcp.md"
    cat "$out/ckpt-tcp.md"
    exit 0
fi

if [[ $parts != page ]]; then
# Medians over 5 checkpoints (3 at 256 MiB on tmpfs, whose partner and XOR checkpoints take
# seconds each) and 3 restarts, so that one sample disturbed by the shared cores does not
# decide.
run disk-64MiB --size-per-rank 64MiB --dir "$disk" --checkpoints 5
run disk-512MiB --size-per-rank 512MiB --dir "$disk" --checkpoints 5
run tmpfs-64MiB --size-per-rank 64MiB --dir "$tmpfs" --no-fsync --checkpoints 5
run tmpfs-256MiB --size-per-rank 256MiB --dir "$tmpfs" --no-fsync --checkpoints 3
# NAM-XOR with the application's own arrays registered in place (ckpt_join_in) instead of
# the library's buffer: over shared memory the server cannot map them and reads them with
# CMA, or where ptrace (and so CMA) is not permitted, with GETs UCX emulates by messages.
run tmpfs-64MiB-in-place --size-per-rank 64MiB --dir "$tmpfs" --no-fsync --checkpoints 5 --nam-buffer in-place
tcp_rows
: > "$out/ckpt-segments.md"
for segment in 496 4KiB 64KiB 256KiB 1MiB; do
    "${mpi[@]}" "$nam" ckpt --scheme nam-xor --checkpoints 2 --size-per-rank 64MiB --dir "$tmpfs" \
        --no-fsync --segment "$segment" --json | sed "s/^/$segment /" >> "$out/ckpt-segments.md"
done
fi

{
    echo "# Checkpoint redundancy benchmark (issue 3)"
    echo
    echo "Generated by \`bench/ckpt.sh\` on $(date -u +%Y-%m-%d): do not edit by hand."
    echo "Machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, Linux $(uname -r),"
    echo "UCX $(PKG_CONFIG_PATH=$ucx_pkgconfig pkg-config --modversion ucx), $(mpirun --version | head -1)."
    echo
    echo "$ranks MPI ranks on $ranks emulated nodes (\`NAM_EMULATE_NODES\`), oversubscribed on this"
    echo "machine's cores together with the memory server. Each run interleaves the schemes: every"
    echo "round the mockup computes, then partner, XOR on nodes and NAM-XOR checkpoint that state,"
    echo "in an order rotated each round, so drift of the disk and of the shared cores hits them"
    echo "alike. The mockup's particle arrays live in the memory the schemes checkpoint (NAM-XOR's"
    echo "registered buffer, from which partner and XOR write and send the same bytes), as"
    echo "applications of FTI, VeloC and SCR checkpoint their arrays in place: no scheme copies into"
    echo "a staging buffer. Every scheme first writes each rank's checkpoint to its local storage. Partner and"
    echo "XOR start their redundancy once that copy is fsynced; \`nam-xor\` flags its buffer ready"
    echo "before the fsync, as the checkpoint library does, so the server pulls while the rank waits"
    echo "for its disk; with fsync, \`nam-xor-write-first\` flags after it (Schmidt 2017's order), to show"
    echo "what that overlap gives. Times are the slowest rank's,"
    echo "medians over the timed rounds and over 3 restarts (each after erasing rank 1's data"
    echo "and overwriting its buffer). \`rank CPU s\` sums the compute ranks' CPU seconds spent on"
    echo "redundancy per checkpoint. NAM-XOR's restore GB/s is timed on the lost rank, from its"
    echo "request to the server to its verified bytes; the line below each table also gives the"
    echo "rebuild with the ranks' agreement on who was lost (partner and XOR: that is their restore),"
    echo "and where the lost rank's restore spent its time (asking, the server's rebuild, the fetch);"
    echo "\`restart, no loss\` restarts with nothing lost (every rank reads its local copy back) and its"
    echo "restore GB/s is a rank's bytes over that time;"
    echo "the server's XOR rate is bytes folded per CPU second of the server's work (all its"
    echo "threads) over the bytes per CPU second of a plain in-memory XOR loop run in the same"
    echo "job: CPU time, because here the server shares the 2 cores with the 8 ranks (a memory"
    echo "server has a node of its own); the wall-time ratio is printed beside it."
    echo "The second table under each run restarts through the checkpoint library itself"
    echo "(\`Checkpointer::restart\`, what \`nam_ckpt_restart\` runs) for every scheme, Reed-Solomon"
    echo "beside XOR: one checkpoint of the mockup's state on the SSD level in the same directory,"
    echo "then, round by round, each rank reading its checkpoint file with plain \`read\` into the"
    echo "same array (the floor), a restart with nothing lost, and restarts after rank 1's files"
    echo "are erased and its array overwritten; its restore GB/s is a rank's bytes over the"
    echo "restart's time, and every restart's bytes are compared."
    echo
    for name in disk-64MiB disk-512MiB tmpfs-64MiB tmpfs-256MiB tmpfs-64MiB-in-place; do
        cat "$out/ckpt-$name.md"
        echo
        echo "($(tr '\n' ' ' < "$out/ckpt-$name.load"))"
        echo
    done
    echo "### NAM-XOR segment size (64 MiB per rank, tmpfs)"
    echo
    echo "| segment | checkpoint s | redundancy s | server XOR rate / loop (CPU) | (wall) |"
    echo "| --- | ---: | ---: | ---: | ---: |"
    while read -r segment json; do
        echo "$json" | python3 -c "import json,sys; r=json.load(sys.stdin); print(f\"| $segment | {r['checkpoint_s']:.3f} | {r['redundancy_s']:.3f} | {r['server_xor_ratio'] or 0:.2f} | {r['server_xor_wall_ratio'] or 0:.2f} |\")"
    done < <(grep '"checkpoint_s"' "$out/ckpt-segments.md")
    echo
    tcp_section
} > docs/benchmarks-ckpt.md
echo "wrote docs/benchmarks-ckpt.md"
