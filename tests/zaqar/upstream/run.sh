#!/usr/bin/env bash
# Zaqar's own tests against a real `tenax serve`, the way their authors run them against Zaqar:
# - python-zaqarclient 4.7.0's functional tests (tests/functional/queues/v2 of its source
#   distribution), run one at a time: several share the queue `test_queue`, and at two at a
#   time one test's cleanup deletes another's claim (against Zaqar too);
# - Zaqar 23.0.1's own functional tests (zaqar.tests.functional): wsgi, in integration mode
#   against the server's URL (their harness also boots a Zaqar of its own, which the tests do
#   not use; it needs a Redis, so a private redis-server is started on a free port); and
#   websocket, against ws://localhost:9000/, the port those tests name (zaqar_websocket.py).
#
#   tests/zaqar/upstream/run.sh
#
# Runs $TENAX_BIN (default target/debug/tenax) on a free loopback port with a temporary data
# directory, or tests the server at ZAQAR_TEST_URL (for example a real Zaqar, to check the
# expectations). The run passes when the failing tests are exactly those in
# expected-failures.txt, each with its reason: a new failure fails the run, and so does an
# expected failure that now passes, so that the list (and docs/zaqar.md, which quotes it)
# stays true.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
cd "$root"

client_version=4.7.0
zaqar_version=23.0.1
venv="${TENAX_ZAQAR_UPSTREAM_VENV:-target/zaqar-upstream-venv}"
python="${PYTHON:-python3}"
TENAX_BIN="${TENAX_BIN:-target/debug/tenax}"
work="$(mktemp -d)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

free_port() {
    "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

source_dir="$venv/python_zaqarclient-$client_version"
stamp="$venv/.tenax-upstream-$client_version-$zaqar_version"
if [ ! -f "$stamp" ]; then
    echo "== setting up $venv (python-zaqarclient $client_version from its source distribution, zaqar $zaqar_version)"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
        --no-binary :all: --dest "$venv" "python-zaqarclient==$client_version"
    tar -xzf "$venv/python_zaqarclient-$client_version.tar.gz" -C "$venv"
    # zaqar's tests import what its test-requirements name (oslotest, ddt, pymongo for the
    # MongoDB driver's module, requests) besides zaqar itself.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "$source_dir" -r "$source_dir/test-requirements.txt" \
        "zaqar==$zaqar_version" oslotest pymongo redis requests websocket-client
    touch "$stamp"
    sync
fi

url="${ZAQAR_TEST_URL:-}"
if [ -z "$url" ]; then
    if [ ! -x "$TENAX_BIN" ]; then
        echo "error: no tenax binary at $TENAX_BIN: build it (cargo build -p tenax) or set TENAX_BIN" >&2
        exit 2
    fi
    port="$(free_port)"
    url="http://127.0.0.1:$port"
    "$TENAX_BIN" serve --listen "127.0.0.1:$port" --data-dir "$work/data" --log-requests false \
        --zaqar-websocket-listen 127.0.0.1:9000 >"$work/server.log" 2>&1 &
    pids+=($!)
    # Ready when it answers Zaqar's ping (or gone, when it could not start).
    for _ in $(seq 100); do
        if curl -fsS -o /dev/null -H "Client-ID: $(cat /proc/sys/kernel/random/uuid)" \
            -H "X-Project-ID: probe" "$url/v2/ping" 2>/dev/null; then break; fi
        if ! kill -0 "${pids[-1]}" 2>/dev/null; then cat "$work/server.log" >&2; exit 1; fi
        sleep 0.1
    done
fi

echo "== python-zaqarclient $client_version functional tests against $url"
(cd "$source_dir" && ZAQARCLIENT_TEST_FUNCTIONAL=1 ZAQAR_ENDPOINT="$url" \
    "$root/$venv/bin/python" -m stestr --test-path tests/functional run --concurrency 1 \
    >"$work/client.log" 2>&1) || true
# `stestr last` and `subunit2csv` exit 1 when the run had failures: the list decides.
(cd "$source_dir" && "$root/$venv/bin/python" -m stestr last --subunit >"$work/client.subunit") || true

echo "== zaqar $zaqar_version functional tests against $url"
redis_port="$(free_port)"
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    >"$work/redis.log" 2>&1 &
pids+=($!)
cat >"$work/zaqar.conf" <<CONF
[DEFAULT]
unreliable = True
[drivers]
transport = wsgi
message_store = redis
management_store = redis
[drivers:transport:wsgi]
bind = 127.0.0.1
port = $(free_port)
[drivers:message_store:redis]
uri = redis://127.0.0.1:$redis_port
[drivers:management_store:redis]
uri = redis://127.0.0.1:$redis_port
CONF
cat >"$work/functional-tests.conf" <<CONF
[DEFAULT]
run_tests = True
[zaqar]
url = $url
config = $work/zaqar.conf
CONF
(cd "$work" && ZAQAR_TEST_INTEGRATION=1 ZAQAR_TESTS_CONFIGS_DIR="$work" \
    "$root/$venv/bin/python" -m subunit.run \
    zaqar.tests.functional.wsgi.test_versions \
    zaqar.tests.functional.wsgi.v2.test_subscriptions \
    >"$work/zaqar.subunit" 2>"$work/zaqar.log") || true
(cd "$work" && "$root/$venv/bin/python" "$here/zaqar_websocket.py" \
    >"$work/websocket.subunit" 2>"$work/websocket.log") || true

cat "$work/client.subunit" "$work/zaqar.subunit" "$work/websocket.subunit" \
    | "$venv/bin/subunit2csv" >"$work/results.csv" || true

"$python" - "$work/results.csv" "$here/expected-failures.txt" "$work/client.log" "$work/zaqar.log" \
    "$work/websocket.log" <<'PY'
import csv
import sys

results, expected_file, *logs = sys.argv[1:]
prefixes = ("tests.functional.queues.v2.", "zaqar.tests.functional.")
outcomes = {}
with open(results, newline="") as f:
    for row in csv.DictReader(f):
        name = row["test"]
        for prefix in prefixes:
            name = name.removeprefix(prefix)
        outcomes[name] = row["status"]
expected = {}
with open(expected_file) as f:
    for line in f:
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition(" ")
            expected[name] = reason.strip()

failed = {t for t, s in outcomes.items() if s not in ("success", "skip")}
passed = {t for t, s in outcomes.items() if s == "success"}
for group, prefix in (
    ("python-zaqarclient", "test_"),
    ("zaqar (HTTP)", "wsgi."),
    ("zaqar (websocket)", "websocket."),
):
    ran = [t for t in outcomes if t.startswith(prefix)]
    ok = [t for t in ran if t in passed]
    print(f"{group}: {len(ok)} passed of {len(ran)}")
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
    for log in logs:
        print(open(log, errors="replace").read()[-20000:])
    sys.exit(1)
PY
