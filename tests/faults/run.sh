#!/usr/bin/env bash
# The fault harness: three Tenax nodes on a PostgreSQL primary and synchronous standby, each in a
# network namespace of its own, a workload that records every operation, and a nemesis that
# combines faults (partitions, loss, slow links, pauses, kill -9, PostgreSQL restarts and
# failovers, clock skew); then the checker (tests/faults/checker.py) checks every promise of
# docs/guarantees.md against what happened.
#
#   tests/faults/run.sh [--minutes 3] [--seed N] [--out DIR] [--kinds k1,k2] [--pools 2]
#
# --pools 2: the nodes' database is a catalogue with two pools, the second on a cluster of its
# own (docs/postgres.md, "Pools"), and PostgreSQL's faults strike either cluster.
#
# Needs root (namespaces), PostgreSQL's server binaries, nftables, iproute2 and faketime
# (Debian's packages: postgresql nftables iproute2 faketime). Runs $TENAX_BIN (default
# target/debug/tenax; build it first). A seed is printed at the start: --seed replays the same
# faults and operations (the times differ). The run's files stay in --out (default
# target/faults/<seed>): history.jsonl, final.json, and every server's log.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

minutes=3
seed=""
out=""
kinds=""
pools=0
while [ $# -gt 0 ]; do
    case "$1" in
        --minutes) minutes=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --kinds) kinds=$2; shift 2 ;;
        --pools) pools=$2; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "$seed" ] || seed=$(python3 -c 'import random; print(random.SystemRandom().randrange(1, 10**9))')
[ -n "$out" ] || out="target/faults/$seed"
mkdir -p "$out"
out="$(realpath "$out")"
# The PostgreSQL servers run as the postgres user, in the run's directory.
chmod 755 "$out"
bin="${TENAX_BIN:-target/debug/tenax}"
if [ ! -x "$bin" ]; then
    echo "no tenax binary at $bin: cargo build -p tenax first, or set TENAX_BIN" >&2
    exit 2
fi
bin="$(realpath "$bin")"
args=(--minutes "$minutes" --seed "$seed" --out "$out" --bin "$bin" --pools "$pools")
[ -z "$kinds" ] || args+=(--kinds "$kinds")
cd "$here"
status=0
python3 -m harness.main "${args[@]}" || status=$?
if [ "$status" -ne 0 ]; then
    echo "the run failed (status $status); its files are in $out" >&2
    exit "$status"
fi
python3 "$here/checker.py" "$out"
