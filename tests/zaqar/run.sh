#!/usr/bin/env bash
# The Zaqar v2 compatibility suite: the official python-zaqarclient against a real `tenax serve`.
#
#   tests/zaqar/run.sh [pytest arguments...]
#
# Builds nothing: it runs $TENAX_BIN (default target/debug/tenax), which the suite starts itself
# on a free loopback port with a temporary data directory. The Python packages go into a venv at
# ${TENAX_ZAQAR_VENV:-target/zaqar-venv}, created on first use and refreshed when
# requirements.txt changes. Other knobs (see conftest.py): TENAX_SERVE_ARGS, ZAQAR_TEST_URL
# (test an already-running server instead), ZAQAR_SLOW=1 (also the minute-long TTL tests),
# ZAQAR_WEBHOOK_LATE_TOLERANCE, ZAQAR_SHOW_SERVER_LOG=1, PYTHON (the interpreter for the venv).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

venv="${TENAX_ZAQAR_VENV:-target/zaqar-venv}"
python="${PYTHON:-python3}"
export TENAX_BIN="${TENAX_BIN:-target/debug/tenax}"

if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
    echo "error: python-zaqarclient needs Python 3.11 or newer; $python is $("$python" --version 2>&1)" >&2
    exit 2
fi

stamp="$venv/.tenax-requirements.txt"
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$here/requirements.txt" "$stamp"; then
    echo "== setting up $venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
    cp "$here/requirements.txt" "$stamp"
    # The venv is ~150 MB of fresh files, which the kernel writes back about 30 s later: in the
    # middle of the suite's webhook timing tests, whose server syncs every commit. Flushed now.
    sync
fi
# CI makes every suite's venv while Rust builds (.ci/run): with TENAX_SETUP_ONLY set, stop here.
[ -z "${TENAX_SETUP_ONLY:-}" ] || exit 0

if [ -z "${ZAQAR_TEST_URL:-}" ] && [ ! -x "$TENAX_BIN" ]; then
    echo "error: no tenax binary at $TENAX_BIN: build it (cargo build -p tenax) or set TENAX_BIN" >&2
    exit 2
fi

echo "== zaqar v2 suite (python-zaqarclient) against ${ZAQAR_TEST_URL:-$TENAX_BIN}"
# The whole suite unless a test path is given (tests/zaqar/test_webhooks.py, ...::test_name).
has_path=0
for arg in "$@"; do
    case "$arg" in
        -*) ;;
        *) if [ -e "${arg%%::*}" ]; then has_path=1; fi ;;
    esac
done
if [ "$has_path" = 0 ]; then
    set -- "$here" "$@"
fi
export PYTHONDONTWRITEBYTECODE=1
exec "$venv/bin/python" -m pytest -c "$here/pytest.ini" --rootdir "$here" "$@"
