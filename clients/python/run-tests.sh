#!/usr/bin/env bash
# The Python client's checks: mypy --strict on the package, then its pytest suite against a
# real `tenax serve`.
#
#   clients/python/run-tests.sh [pytest arguments...]
#
# Builds nothing: the suite starts $TENAX_BIN (default target/debug/tenax) itself, on a free
# loopback port with a temporary data directory (cargo build -p tenax first). The package and
# its test extras go into a venv at ${TENAX_PYTHON_VENV:-target/python-client-venv}, created on
# first use and refreshed when pyproject.toml changes; the package itself is reinstalled from
# the working tree on every run (pip install ./clients/python, as a user would). Other knobs:
# PYTHON (the interpreter for the venv, 3.10 or newer), TENAX_SERVE_ARGS (extra server
# flags), TENAX_SHOW_SERVER_LOG=1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

venv="${TENAX_PYTHON_VENV:-target/python-client-venv}"
python="${PYTHON:-python3}"
export TENAX_BIN="${TENAX_BIN:-target/debug/tenax}"
pip=(--quiet --disable-pip-version-check)

if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' 2>/dev/null; then
    echo "error: the tenax package needs Python 3.10 or newer; $python is $("$python" --version 2>&1)" >&2
    exit 2
fi

stamp="$venv/.tenax-pyproject.toml"
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$here/pyproject.toml" "$stamp"; then
    echo "== setting up $venv"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install "${pip[@]}" --upgrade pip
    # hatchling too, so that the reinstall below builds without reaching the index.
    "$venv/bin/python" -m pip install "${pip[@]}" "hatchling>=1.24" "$here[test]"
    cp "$here/pyproject.toml" "$stamp"
fi
# CI makes every suite's venv while Rust builds (.ci/run): with TENAX_SETUP_ONLY set, stop here.
[ -z "${TENAX_SETUP_ONLY:-}" ] || exit 0

venv="$(cd "$venv" && pwd)"

echo "== installing the package from $here"
"$venv/bin/python" -m pip install "${pip[@]}" --no-deps --no-build-isolation --force-reinstall "$here"

if [ ! -x "$TENAX_BIN" ]; then
    echo "error: no tenax binary at $TENAX_BIN: build it (cargo build -p tenax) or set TENAX_BIN" >&2
    exit 2
fi

export PYTHONDONTWRITEBYTECODE=1
export MYPY_CACHE_DIR="$venv/.mypy_cache"

echo "== mypy --strict (the package, and typed uses of it through its py.typed marker)"
"$venv/bin/python" -m mypy --strict --config-file "$here/pyproject.toml" "$here/src/tenax"
# From outside the source tree: `import tenax` is the installed package.
(cd "$here/tests" && "$venv/bin/python" -m mypy --strict typing_examples.py)

echo "== pytest against $TENAX_BIN"
has_path=0
for arg in "$@"; do
    case "$arg" in
        -*) ;;
        *) if [ -e "${arg%%::*}" ]; then has_path=1; fi ;;
    esac
done
if [ "$has_path" = 0 ]; then
    set -- "$here/tests" "$@"
fi
exec "$venv/bin/python" -m pytest -c "$here/pyproject.toml" --rootdir "$here" -p no:cacheprovider "$@"
