#!/bin/bash
# A 4-node cluster on one machine, for testing nam across hosts (root only).
#
#   scripts/cluster.sh up              create it (removing a stale cluster of the same name first)
#   scripts/cluster.sh down            remove it (killing whatever still runs in its namespaces)
#   scripts/cluster.sh exec NODE CMD.. run CMD on NODE (n1..n4, or head)
#   scripts/cluster.sh link NODE up|down   bring NODE's only link up or take it down
#   scripts/cluster.sh addr NODE       print NODE's address
#   scripts/cluster.sh status          namespaces, addresses and link states
#
# Layout. Each node nK (K = 1..4) is a network namespace "$NAM_CLUSTER-nK" whose only
# interface besides lo is `veth0`, address 10.213.0.K/24, the end of a veth pair whose other
# end is a port of the bridge `br0`. The bridge lives in a fifth namespace, "$NAM_CLUSTER-head"
# (address 10.213.0.254 on br0): the head node, where `mpirun` runs, like a cluster's login
# node. The root namespace gets no interface and no address, so the subnet exists only inside
# the cluster, and two clusters of different names (concurrent test processes) never see each
# other even though both use 10.213.0.0/24.
#
# Host names. Every command that `exec` runs gets a UTS namespace of its own whose host name is
# the node's name ("$NAM_CLUSTER-nK"; "$NAM_CLUSTER-head" on the head), so `hostname` differs
# per node and nam and Open MPI see four hosts.
#
# MPI. `scripts/cluster-rsh.sh` is an rsh agent for Open MPI: it maps a node's address (used
# as the host name in `--host`) to `cluster.sh exec NODE`. From the head:
#
#   export NAM_CLUSTER=namc OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
#   scripts/cluster.sh up
#   scripts/cluster.sh exec n1 nam serve --listen 10.213.0.1:7000 &
#   scripts/cluster.sh exec head mpirun --mca plm_rsh_agent scripts/cluster-rsh.sh \
#       --mca plm_rsh_no_tree_spawn 1 --mca orte_tmpdir_base /tmp/ompi-$$ \
#       --mca pml ob1 --mca btl self,vader,tcp \
#       --mca btl_tcp_if_include 10.213.0.0/24 --mca oob_tcp_if_include 10.213.0.0/24 \
#       -x UCX_NET_DEVICES=veth0 -x UCX_TLS=tcp -x NAM_TRANSPORTS=tcp \
#       --host 10.213.0.3:2,10.213.0.4:2 -np 4 nam-bench ckpt --scheme nam-xor \
#       --servers 10.213.0.1:7000 --dir /tmp/ckpt-bench --size-per-rank 4MiB
#   scripts/cluster.sh down
#
# NAM_CLUSTER names the cluster (default "namc"; at most 10 characters, letters, digits, -).
# The test suite (crates/nam-bench/tests/cluster.rs) uses a name of its own per test process.

set -euo pipefail

CLUSTER=${NAM_CLUSTER:-namc}
SUBNET=10.213.0
NODES=4
HEAD_HOST=254

if ! [[ $CLUSTER =~ ^[A-Za-z0-9-]{1,10}$ ]]; then
    echo "cluster.sh: NAM_CLUSTER=$CLUSTER: use 1 to 10 letters, digits or -" >&2
    exit 2
fi

usage() {
    sed -n '3,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# The namespace of NODE (n1..n4 or head).
ns_of() {
    case $1 in
        head) echo "$CLUSTER-head" ;;
        n[1-9]) [[ ${1#n} -le $NODES ]] || { echo "cluster.sh: no node $1 (n1..n$NODES, head)" >&2; exit 2; }
                echo "$CLUSTER-$1" ;;
        *) echo "cluster.sh: no node $1 (n1..n$NODES, head)" >&2; exit 2 ;;
    esac
}

addr_of() {
    case $1 in
        head) echo "$SUBNET.$HEAD_HOST" ;;
        *) ns_of "$1" >/dev/null; echo "$SUBNET.${1#n}" ;;
    esac
}

# Namespaces of this cluster that exist now.
existing() {
    ip netns list | awk '{print $1}' | grep -E "^$CLUSTER-(head|n[0-9]+)\$" || true
}

down() {
    local ns pids
    for ns in $(existing); do
        pids=$(ip netns pids "$ns" || true)
        if [[ -n $pids ]]; then
            # shellcheck disable=SC2086
            kill -9 $pids 2>/dev/null || true
        fi
        ip netns del "$ns"
    done
}

up() {
    down
    local head i ns
    head=$(ns_of head)
    ip netns add "$head"
    ip -n "$head" link set lo up
    ip -n "$head" link add br0 type bridge
    ip -n "$head" addr add "$SUBNET.$HEAD_HOST/24" dev br0
    ip -n "$head" link set br0 up
    for i in $(seq 1 $NODES); do
        ns=$(ns_of "n$i")
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip -n "$head" link add "h$i" type veth peer name veth0 netns "$ns"
        ip -n "$head" link set "h$i" master br0
        ip -n "$head" link set "h$i" up
        ip -n "$ns" addr add "$SUBNET.$i/24" dev veth0
        ip -n "$ns" link set veth0 up
    done
}

status() {
    local node ns
    for node in head $(seq -f 'n%g' 1 $NODES); do
        ns=$(ns_of "$node")
        if ip netns list | awk '{print $1}' | grep -qx "$ns"; then
            local dev=veth0
            [[ $node == head ]] && dev=br0
            printf '%-5s %-16s %-14s %s\n' "$node" "$ns" "$(addr_of "$node")" \
                "$(ip -n "$ns" -br link show "$dev" | awk '{print $2}')"
        else
            printf '%-5s %-16s absent\n' "$node" "$ns"
        fi
    done
}

cmd=${1:-}
[[ -n $cmd ]] || usage
shift
case $cmd in
    up) up ;;
    down) down ;;
    status) status ;;
    addr) [[ $# -eq 1 ]] || usage; addr_of "$1" ;;
    link)
        [[ $# -eq 2 && ( $2 == up || $2 == down ) && $1 != head ]] || usage
        ns_of "$1" >/dev/null
        # The bridge's port of the node: the node keeps its address and its sockets, as a
        # host whose cable is pulled does.
        ip -n "$(ns_of head)" link set "h${1#n}" "$2"
        ;;
    exec)
        [[ $# -ge 2 ]] || usage
        node=$1
        shift
        ns=$(ns_of "$node")
        # ip netns exec also mounts the namespace's own /sys (UCX reads its interfaces there);
        # unshare gives the command the node's host name.
        exec ip netns exec "$ns" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "$ns" "$@"
        ;;
    *) usage ;;
esac
