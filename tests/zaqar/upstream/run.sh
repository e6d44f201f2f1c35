#!/usr/bin/env bash
# python-zaqarclient's own functional tests (tests/functional/queues/v2 of its source
# distribution) against a real `tenax serve`, the way its authors run them against Zaqar.
#
#   tests/zaqar/upstream/run.sh
#
# Runs $TENAX_BIN (default target/debug/tenax) on a free loopback port with a temporary data
# directory, or the server at ZAQAR_TEST_URL (for example a real Zaqar, to check the
# expectations). The tests run one at a time: several of them share the queue `test_queue`,
# and at two at a time one test's cleanup deletes another's claim (against Zaqar too).
#
# The run passes when the failing tests are exactly those in expected-failures.txt, each with
# its reason: a new failure fails the run, and so does an expected failure that now passes, so
# that the list (and docs/zaqar.md, which quotes it) stays true.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
cd "$root"

version=4.7.0
venv="${TENAX_ZAQAR_UPSTREAM_VENV:-target/zaqar-upstream-venv}"
python="${PYTHON:-python3}"
TENAX_BIN="${TENAX_BIN:-target/debug/tenax}"
work="$(mktemp -d)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

source_dir="$venv/python_zaqarclient-$version"
if [ ! -d "$source_dir/tests/functional" ]; then
    echo "== setting up $venv (python-zaqarclient $version from its source distribution)"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
        --no-binary :all: --dest "$venv" "python-zaqarclient==$version"
    tar -xzf "$venv/python_zaqarclient-$version.tar.gz" -C "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "$source_dir" -r "$source_dir/test-requirements.txt"
    sync
fi

url="${ZAQAR_TEST_URL:-}"
if [ -z "$url" ]; then
    if [ ! -x "$TENAX_BIN" ]; then
        echo "error: no tenax binary at $TENAX_BIN: build it (cargo build -p tenax) or set TENAX_BIN" >&2
        exit 2
    fi
    port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    url="http://127.0.0.1:$port"
    "$TENAX_BIN" serve --listen "127.0.0.1:$port" --data-dir "$work/data" --log-requests false \
        >"$work/server.log" 2>&1 &
    server_pid=$!
    # Ready when it answers Zaqar's ping (or gone, when it could not start).
    for _ in $(seq 100); do
        if curl -fsS -o /dev/null -H "Client-ID: $(cat /proc/sys/kernel/random/uuid)" \
            -H "X-Project-ID: probe" "$url/v2/ping" 2>/dev/null; then break; fi
        if ! kill -0 "$server_pid" 2>/dev/null; then cat "$work/server.log" >&2; exit 1; fi
        sleep 0.1
    done
fi

echo "== python-zaqarclient $version functional tests against $url"
set +e
(cd "$source_dir" && ZAQARCLIENT_TEST_FUNCTIONAL=1 ZAQAR_ENDPOINT="$url" \
    "$root/$venv/bin/python" -m stestr --test-path tests/functional run --concurrency 1 \
    >"$work/stestr.log" 2>&1)
set -e
# `stestr last` and `subunit2csv` exit 1 when the run had failures: the list below decides.
(cd "$source_dir" && "$root/$venv/bin/python" -m stestr last --subunit >"$work/results.subunit") || true
"$venv/bin/subunit2csv" <"$work/results.subunit" >"$work/results.csv" || true

"$python" - "$work/results.csv" "$here/expected-failures.txt" "$work/stestr.log" <<'PY'
import csv
import sys

results, expected_file, log = sys.argv[1:]
prefix = "tests.functional.queues.v2."
outcomes = {}
with open(results, newline="") as f:
    for row in csv.DictReader(f):
        outcomes[row["test"].removeprefix(prefix)] = row["status"]
expected = {}
with open(expected_file) as f:
    for line in f:
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition(" ")
            expected[name] = reason.strip()

failed = {t for t, s in outcomes.items() if s not in ("success", "skip")}
passed = {t for t, s in outcomes.items() if s == "success"}
print(f"{len(passed)} passed, {len(failed)} failed, of {len(outcomes)}")
for test in sorted(failed & expected.keys()):
    print(f"  expected failure: {test}  ({expected[test]})")
unexpected = sorted(failed - expected.keys())
fixed = sorted(expected.keys() & passed)
missing = sorted(expected.keys() - outcomes.keys())
for test in unexpected:
    print(f"FAILED (not expected): {test}")
for test in fixed:
    print(f"PASSED but listed in expected-failures.txt: {test}: remove it (and update docs/zaqar.md)")
for test in missing:
    print(f"NOT RUN but listed in expected-failures.txt: {test}")
if unexpected or fixed or missing or not outcomes:
    print(open(log).read()[-20000:])
    sys.exit(1)
PY
