#!/usr/bin/env bash
# Zaqar's own tests against a real `tenax serve`, the way their authors run them against Zaqar:
# - python-zaqarclient 4.7.0's functional tests (tests/functional/queues/v2 of its source
#   distribution), run one at a time: several share the queue `test_queue`, and at two at a
#   time one test's cleanup deletes another's claim (against Zaqar too);
# - Zaqar 23.0.1's own functional tests (zaqar.tests.functional): wsgi, in integration mode
#   against the server's URL (their harness also boots a Zaqar of its own, which the tests do
#   not use; it needs a Redis, so a private redis-server is started on a free port); and
#   websocket, against ws://localhost:9000/, the port those tests name (zaqar_websocket.py);
# - Zaqar 23.0.1's unit tests of pools, flavors and messages in a pooled deployment
#   (zaqar.tests.unit.transport.wsgi.v2_0: TestPoolsMongoDB, TestFlavorsMongoDB,
#   TestMessagesMongoDBPooled), over HTTP (unit_over_http.py), against a server on PostgreSQL
#   whose pools are databases of that PostgreSQL server: only when $TENAX_PG_URL names one
#   (tests/postgres/with-cluster.sh starts a throwaway one and sets it), else skipped.
#
#   tests/zaqar/upstream/run.sh
#   tests/postgres/with-cluster.sh tests/zaqar/upstream/run.sh    (with the unit tests)
#   ZAQAR_UPSTREAM_ONLY=unit tests/postgres/with-cluster.sh tests/zaqar/upstream/run.sh
#                                                                 (only the unit tests)
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

# Returns once the server at URL $1 answers Zaqar's ping; when its process $2 is gone (it could
# not start), shows its log $3 and fails the run.
wait_ready() {
    for _ in $(seq 300); do
        if curl -fsS -o /dev/null -H "Client-ID: $(cat /proc/sys/kernel/random/uuid)" \
            -H "X-Project-ID: probe" "$1/v2/ping" 2>/dev/null; then return 0; fi
        if ! kill -0 "$2" 2>/dev/null; then cat "$3" >&2; exit 1; fi
        sleep 0.1
    done
}

# ZAQAR_UPSTREAM_ONLY=unit runs only the unit tests, to iterate on them.
only="${ZAQAR_UPSTREAM_ONLY:-}"
case "$only" in
    "" | unit) ;;
    *) echo "error: ZAQAR_UPSTREAM_ONLY is \"unit\" or unset, not \"$only\"" >&2; exit 2 ;;
esac
# The summary's groups that ran (by the prefix of their tests' names), and their results as
# subunit streams (empty for a group that did not run).
groups=()
for stream in client zaqar websocket unit; do : >"$work/$stream.subunit"; done

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
# CI makes every suite's venv while Rust builds (.ci/run): with TENAX_SETUP_ONLY set, stop here.
[ -z "${TENAX_SETUP_ONLY:-}" ] || exit 0

if [ "$only" != unit ]; then
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
        wait_ready "$url" "${pids[-1]}" "$work/server.log"
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
    groups+=(test_ wsgi. websocket.)
fi

# One server per test module, each on a catalogue database of its own, so that what one
# module leaves behind (the tear-downs clean up as best they can) cannot fail the next. The
# pools the tests make name databases of the same PostgreSQL server by URL
# (TENAX_POOL_BASE_URL, the server's URL without a database, to which the tests append
# /<database>): a uuid, `test`, `test0`..., `zaqar_test_pools_0`...
unit_tests=(
    test_pools_new.TestPoolsMongoDB
    test_flavors_new.TestFlavorsMongoDB
    test_messages.TestMessagesMongoDBPooled
)
if [ -n "${TENAX_PG_URL:-}" ]; then
    echo "== zaqar $zaqar_version unit tests of pools, flavors and pooled messages, over HTTP"
    if ! command -v psql >/dev/null; then
        echo "error: psql (PostgreSQL's client) is needed to make the catalogue databases" >&2
        exit 2
    fi
    if [ ! -x "$TENAX_BIN" ]; then
        echo "error: no tenax binary at $TENAX_BIN: build it (cargo build -p tenax) or set TENAX_BIN" >&2
        exit 2
    fi
    # The PostgreSQL server's URL without its database (nor parameters).
    pg_server="$("$python" -c 'import sys, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
print(f"{u.scheme}://{u.netloc}")' "$TENAX_PG_URL")"
    # Servers on PostgreSQL need a secrets key file (with-cluster.sh gives one).
    secrets_key="${TENAX_SECRETS_KEY_FILE:-$work/secrets.key}"
    [ -f "$secrets_key" ] || (umask 077 && head -c 32 /dev/urandom | base64 >"$secrets_key")
    for test_class in "${unit_tests[@]}"; do
        module="${test_class%%.*}"
        catalogue="tenax_zaqar_unit_${module}_$$"
        psql "$TENAX_PG_URL" -qX -v ON_ERROR_STOP=1 -c "CREATE DATABASE $catalogue" >/dev/null
        unit_port="$(free_port)"
        unit_url="http://127.0.0.1:$unit_port"
        "$TENAX_BIN" serve --listen "127.0.0.1:$unit_port" --database-url "$pg_server/$catalogue" \
            --secrets-key-file "$secrets_key" --log-requests false \
            >"$work/unit-$module-server.log" 2>&1 &
        pids+=($!)
        wait_ready "$unit_url" "${pids[-1]}" "$work/unit-$module-server.log"
        (cd "$work" && ZAQAR_UNIT_URL="$unit_url" TENAX_POOL_BASE_URL="$pg_server" \
            "$root/$venv/bin/python" "$here/unit_over_http.py" \
            "zaqar.tests.unit.transport.wsgi.v2_0.$test_class" \
            >>"$work/unit.subunit" 2>>"$work/unit.log") || true
        kill "${pids[-1]}" 2>/dev/null || true
        wait "${pids[-1]}" 2>/dev/null || true
        unset 'pids[-1]'
        # Only the catalogue: the pools' databases are the server's to make and drop.
        psql "$TENAX_PG_URL" -qX -c "DROP DATABASE IF EXISTS $catalogue" >/dev/null 2>&1 || true
    done
    # Each failure with its traceback and its requests (method, path, bodies, status), to read.
    "$venv/bin/subunit-filter" --no-passthrough <"$work/unit.subunit" \
        | "$venv/bin/subunit2pyunit" --no-passthrough >"$work/unit-failures.log" 2>&1 || true
    groups+=(unit.)
elif [ "$only" = unit ]; then
    echo "error: the unit tests need a PostgreSQL server: TENAX_PG_URL is not set (run under" \
        "tests/postgres/with-cluster.sh)" >&2
    exit 2
else
    echo "== zaqar $zaqar_version unit tests of pools, flavors and pooled messages: skipped, no" \
        "PostgreSQL (TENAX_PG_URL is not set; tests/postgres/with-cluster.sh sets it)"
fi

cat "$work/client.subunit" "$work/zaqar.subunit" "$work/websocket.subunit" "$work/unit.subunit" \
    | "$venv/bin/subunit2csv" >"$work/results.csv" || true

"$python" - "$work/results.csv" "$here/expected-failures.txt" "${groups[*]}" "$work/client.log" \
    "$work/zaqar.log" "$work/websocket.log" "$work/unit-failures.log" "$work/unit.log" \
    "$work"/unit-*-server.log <<'PY'
import csv
import os
import sys

results, expected_file, ran_groups, *logs = sys.argv[1:]
ran_groups = ran_groups.split()
# Test ids as the summary and expected-failures.txt name them.
renames = (
    ("tests.functional.queues.v2.", ""),
    ("zaqar.tests.functional.", ""),
    ("zaqar.tests.unit.transport.wsgi.v2_0.", "unit."),
)
outcomes = {}
with open(results, newline="") as f:
    for row in csv.DictReader(f):
        name = row["test"]
        for prefix, replacement in renames:
            if name.startswith(prefix):
                name = replacement + name.removeprefix(prefix)
        outcomes[name] = row["status"]
expected = {}
with open(expected_file) as f:
    for line in f:
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition(" ")
            expected[name] = reason.strip()

# Only the groups that ran are judged: their expected failures, and that they ran any test.
expected = {t: r for t, r in expected.items() if t.startswith(tuple(ran_groups))}

failed = {t for t, s in outcomes.items() if s not in ("success", "skip")}
passed = {t for t, s in outcomes.items() if s == "success"}
empty = []
for group, prefix in (
    ("python-zaqarclient", "test_"),
    ("zaqar (HTTP)", "wsgi."),
    ("zaqar (websocket)", "websocket."),
    ("zaqar (unit, pooled)", "unit."),
):
    if prefix not in ran_groups:
        continue
    ran = [t for t in outcomes if t.startswith(prefix)]
    ok = [t for t in ran if t in passed]
    skipped = [t for t in ran if outcomes[t] == "skip"]
    note = f" ({len(skipped)} skipped)" if skipped else ""
    print(f"{group}: {len(ok)} passed of {len(ran)}{note}")
    if not ran:
        empty.append(group)
for group in empty:
    print(f"NO TESTS RAN in group {group}")
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
if unexpected or fixed or missing or empty or not outcomes:
    for log in logs:
        if os.path.exists(log):
            print(f"== {os.path.basename(log)} (its end)")
            print(open(log, errors="replace").read()[-20000:])
    sys.exit(1)
PY
