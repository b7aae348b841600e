#!/bin/bash
# Open MPI's rsh agent for the cluster of scripts/cluster.sh:
#
#   mpirun --mca plm_rsh_agent scripts/cluster-rsh.sh --host 10.213.0.3:2,10.213.0.4:2 ...
#
# Open MPI calls it as it would call ssh: `cluster-rsh.sh [ssh options] HOST COMMAND...`. HOST
# is a node's address (10.213.0.K, or the node's name nK or $NAM_CLUSTER-nK); the command (a
# shell command line, as ssh takes it) runs on node nK through `cluster.sh exec`. The cluster
# is the one NAM_CLUSTER names (mpirun passes its environment on), as for cluster.sh.

set -euo pipefail

here=$(dirname "$(readlink -f "$0")")
# ssh-style options before the host are ignored (Open MPI passes none to an unknown agent).
while [[ $# -gt 0 && $1 == -* ]]; do
    shift
done
[[ $# -ge 2 ]] || { echo "cluster-rsh.sh: usage: cluster-rsh.sh HOST COMMAND..." >&2; exit 2; }
host=$1
shift
case $host in
    10.213.0.254) node=head ;;
    10.213.0.*) node=n${host##*.} ;;
    n[0-9]*|head) node=$host ;;
    *-n[0-9]*|*-head) node=${host##*-} ;;
    *) echo "cluster-rsh.sh: host $host is not a node of the cluster (10.213.0.K or nK)" >&2; exit 2 ;;
esac
exec "$here/cluster.sh" exec "$node" sh -c "$*"
