#!/usr/bin/env bash
# The tests whose guarantees rest on the order of commits, on a slow disk: every fsync and
# fdatasync of the test process takes SLOW_DISK_MS longer (default 60), by strace's fault
# injection. On a fast disk a commit takes well under a millisecond, and a defect of order hides
# in that millisecond: a disable stored after the retry it should have stopped, a retry's delay
# counted from the end of the bookkeeping after an answer, a read that shows a change in memory
# before the file holds the rest of it.
#
#   tests/slow-disk/run.sh            # each test RUNS times (default 3)
#
# Needs strace (Debian: apt-get install strace) and the ptrace permission root has.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"

delay_us=$(( ${SLOW_DISK_MS:-60} * 1000 ))
runs=${RUNS:-3}
# suite:test
tests=(
    webhooks:health_marks_and_disabling_survive_concurrent_changes
    webhooks:a_retry_counts_from_the_answer_not_from_the_bookkeeping_after_it
    webhooks:a_delivery_shows_every_attempt_its_status_tells_of
    api:a_job_shows_every_error_its_state_counts
)

if ! command -v strace >/dev/null; then
    echo "error: strace is missing (apt-get install strace)" >&2
    exit 2
fi

# The test executable of the integration suites (crates/tenax/tests/it: one binary, a module
# per suite), built if need be.
executable() {
    local built
    built=$(cargo test -p tenax --test it --no-run 2>&1 |
        sed -n 's/.*Executable tests\/it\/main\.rs (\(.*\))$/\1/p' | tail -1)
    if [ ! -x "$built" ]; then
        echo "error: could not find the test executable of crates/tenax/tests/it" >&2
        exit 2
    fi
    echo "$built"
}

binary=$(executable)
echo "== tests of commit order with every sync ${SLOW_DISK_MS:-60} ms slow ($runs runs each)"
for entry in "${tests[@]}"; do
    suite=${entry%%:*}
    test=${entry#*:}
    for run in $(seq 1 "$runs"); do
        echo "-- $suite::$test ($run/$runs)"
        # --seccomp-bpf: only the syncs stop in strace; every other call runs at full speed.
        strace -f -qq --seccomp-bpf -o /dev/null -e trace=fsync,fdatasync \
            -e inject=fsync,fdatasync:delay_exit="$delay_us" \
            "$binary" --exact "$suite::$test" --quiet
    done
done
