#!/usr/bin/env bash
# The webhook tests whose guarantees rest on the order of commits, on a slow disk: every fsync
# and fdatasync of the test process takes SLOW_DISK_MS longer (default 60), by strace's fault
# injection. On a fast disk a commit takes well under a millisecond, and a defect of order (a
# disable stored after the retry it should have stopped, a retry's delay counted from the end of
# the bookkeeping after an answer) hides in that millisecond.
#
#   tests/slow-disk/run.sh            # each test RUNS times (default 3)
#
# Needs strace (Debian: apt-get install strace) and the ptrace permission root has.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"

delay_us=$(( ${SLOW_DISK_MS:-60} * 1000 ))
runs=${RUNS:-3}
tests=(
    health_marks_and_disabling_survive_concurrent_changes
    a_retry_counts_from_the_answer_not_from_the_bookkeeping_after_it
)

if ! command -v strace >/dev/null; then
    echo "error: strace is missing (apt-get install strace)" >&2
    exit 2
fi

executable=$(cargo test -p tenax --test webhooks --no-run 2>&1 |
    sed -n 's/.*Executable tests\/webhooks\.rs (\(.*\))$/\1/p' | tail -1)
if [ ! -x "$executable" ]; then
    echo "error: could not find the webhooks test executable" >&2
    exit 2
fi

echo "== webhook ordering tests with every sync ${SLOW_DISK_MS:-60} ms slow ($runs runs each)"
for test in "${tests[@]}"; do
    for run in $(seq 1 "$runs"); do
        echo "-- $test ($run/$runs)"
        # --seccomp-bpf: only the syncs stop in strace; every other call runs at full speed.
        strace -f -qq --seccomp-bpf -o /dev/null -e trace=fsync,fdatasync \
            -e inject=fsync,fdatasync:delay_exit="$delay_us" \
            "$executable" --exact "$test" --quiet
    done
done
