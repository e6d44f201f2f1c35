#!/usr/bin/env bash
# Schemathesis against a real `tenax serve` with authentication on: every operation of the
# native API's own OpenAPI description (/api/openapi.json), with a fixed example budget and seed. It fails on any 5xx,
# any dropped connection or timeout, and any answer whose status, content type, headers or body
# the description does not allow.
#
#   tests/schemathesis/run.sh [schemathesis arguments...]
#
# Runs $TENAX_BIN (default target/debug/tenax) on a free loopback port with a temporary data
# directory. The Python packages go into a venv at ${TENAX_SCHEMATHESIS_VENV:-target/schemathesis-venv},
# created on first use and refreshed when requirements.txt changes. Knobs: SCHEMATHESIS_EXAMPLES
# (per operation, default 50), SCHEMATHESIS_SEED (default 1), PYTHON (the venv's interpreter).
#
# Left out: POST /api/take/stream, whose answer is an endless NDJSON stream (no response to
# check; tests/it/api.rs covers it).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

venv="${TENAX_SCHEMATHESIS_VENV:-target/schemathesis-venv}"
python="${PYTHON:-python3}"
bin="${TENAX_BIN:-target/debug/tenax}"
examples="${SCHEMATHESIS_EXAMPLES:-50}"
seed="${SCHEMATHESIS_SEED:-1}"

stamp="$venv/.tenax-requirements.txt"
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$here/requirements.txt" "$stamp"; then
    echo "== setting up $venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
    cp "$here/requirements.txt" "$stamp"
fi
# CI makes every suite's venv while Rust builds (.ci/run): with TENAX_SETUP_ONLY set, stop here.
[ -z "${TENAX_SETUP_ONLY:-}" ] || exit 0
if [ ! -x "$bin" ]; then
    echo "error: no tenax binary at $bin: build it (cargo build -p tenax) or set TENAX_BIN" >&2
    exit 2
fi

data="$(mktemp -d)"
log="$data/server.log"
port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
# With authentication on, as on any network; the run uses an admin token.
token="schemathesis-$("$python" -c 'import secrets; print(secrets.token_hex(24))')"
"$bin" serve --listen "127.0.0.1:$port" --data-dir "$data/store" --auth on --admin-token "$token" \
    >"$log" 2>&1 &
server=$!
cleanup() {
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    rm -rf "$data"
}
trap cleanup EXIT
"$python" - "$port" <<'PY'
import sys, time, urllib.request
for _ in range(200):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/healthz", timeout=1)
        break
    except OSError:
        time.sleep(0.1)
else:
    sys.exit("the server did not start")
PY

echo "== schemathesis against $bin ($examples examples per operation, seed $seed)"
status=0
SCHEMATHESIS_HOOKS=hooks PYTHONPATH="$here" "$venv/bin/schemathesis" run \
    "http://127.0.0.1:$port/api/openapi.json" \
    --header "Authorization: Bearer $token" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
    --exclude-path /api/take/stream \
    --max-examples "$examples" \
    --seed "$seed" \
    --request-timeout 10 \
    --workers 2 \
    --generation-database none \
    --no-color \
    "$@" || status=$?
if ! kill -0 "$server" 2>/dev/null; then
    echo "error: the server died during the run; its log:" >&2
    cat "$log" >&2
    exit 1
fi
if grep -q '"level":"ERROR"\|ERROR' "$log"; then
    echo "error: the server logged errors during the run:" >&2
    grep 'ERROR' "$log" | head -20 >&2
    exit 1
fi
exit "$status"
