#!/usr/bin/env bash
# The docs' commands, run: every fenced shell block of README.md and docs/*.md that is marked
# runnable is run against a real server, so that the front door cannot rot (issue 27).
#
#   tests/docs/run.sh [-v] [FILE.md ...]     (default: README.md docs/*.md; -v: every block's output)
#
# Marking a block: a word after the language in the fence's info string (GitHub still renders
# the block as shell and shows no marker):
#
#   ```sh doctest           run it: every command must succeed
#   ```sh doctest=fails     it shows refusals on purpose: every curl and tenax command in it must
#                           be refused (curl: an HTTP error; tenax: exit status 1 or 2), and
#                           every other command must succeed
#   ```console doctest      a console block: the `$ ` lines are the commands, the rest is output
#
# Mark the blocks whose commands can run against a local server: `curl … localhost:7890 …`,
# tenax's client commands, `tenax policy preview|plot`, `tenax secrets generate-key`. Leave
# unmarked those that start long-running processes (`tenax serve`, `work`, `listen`), need
# PostgreSQL, TLS material, root or other machines, and illustrations (made-up ids, `…`).
#
# For each file with marked blocks: a fresh `tenax serve --listen 127.0.0.1:7890 --data-dir <tmp>
# --allow-private-endpoints` (the docs say localhost:7890), then the file's marked blocks in
# order in one bash session (`set -euo pipefail`, so functions and variables carry from block to
# block) in a scratch directory that has an empty docs/img/, with:
#   - `tenax` on PATH: $TENAX_BIN (default target/debug/tenax; builds nothing), and
#     `cargo run --release -p tenax --`, `./target/release/tenax`, `./target/debug/tenax`
#     rewritten to `tenax` (tests/docs/blocks.py reads the blocks);
#   - curl given --fail-with-body --show-error: an HTTP error fails the block.
# Output shown in comments is an illustration and is not checked; the commands must succeed.
# Each block is reported as `file:line ok|FAILED`; a failed block's commands, output and the
# server log's tail are printed, the file's later blocks are not run (they build on it), and
# the exit status is 1. Needs bash, curl (7.82 or newer, for --json) and Python 3.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

bin="${TENAX_BIN:-target/debug/tenax}"
if [ ! -x "$bin" ]; then
    echo "error: no tenax binary at $bin: build it (cargo build -p tenax) or set TENAX_BIN" >&2
    exit 2
fi
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
verbose=0
if [ "${1:-}" = -v ]; then
    verbose=1
    shift
fi
if [ $# -eq 0 ]; then
    set -- README.md docs/*.md
fi

# The blocks see only what they set: no TENAX_* from here, no proxy between them and loopback.
while read -r name; do unset "$name"; done < <(compgen -e | grep '^TENAX_' || true)
unset http_proxy https_proxy all_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY

tmp="$(mktemp -d "${TMPDIR:-/tmp}/tenax-docs.XXXXXX")"
server=""
stop_server() {
    if [ -n "$server" ]; then
        kill "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
        server=""
    fi
}
trap 'stop_server; rm -rf "$tmp"' EXIT
mkdir "$tmp/bin"
ln -s "$bin" "$tmp/bin/tenax"

# Sourced by each session before its blocks.
cat >"$tmp/prelude.sh" <<'EOF'
set -euo pipefail
# A `doctest=fails` block runs without `set -e`: each curl and tenax in it must be refused (and
# leaves its real status in $?), and any other command that fails ends the session.
__refused() {
    local status=0
    command "$@" || status=$?
    case "$1:$status" in
        curl:22 | tenax:1 | tenax:2) __refusal=1 ;;
        *:0) echo "doctest: expected a refusal, but this succeeded: $*" >&2; status=1 ;;
    esac
    return "$status"
}
__unless_refused() { # the ERR trap; the block's own `source` line carries its last status
    if [ "${__refusal:-0}" = 1 ]; then
        __refusal=0
    elif [[ $BASH_COMMAND != "source '$__blocks/"* ]]; then
        exit 1
    fi
}
__begin() { # block number, mode (ok or fails)
    exec >"$__logs/$1.log" 2>&1 </dev/null
    if [ "$2" = fails ]; then
        curl() { __refused curl --fail-with-body --show-error "$@"; }
        tenax() { __refused tenax "$@"; }
        set +e
        trap __unless_refused ERR
    else
        curl() { command curl --fail-with-body --show-error "$@" || return; }
        unset -f tenax
        set -e
        trap 'echo "doctest: exit status $? at line $LINENO of the block" >&2' ERR
    fi
}
__end() { echo ok >"$__logs/$1.status"; }
EOF

port_in_use() { (exec 3<>/dev/tcp/127.0.0.1/7890) 2>/dev/null; }

start=$SECONDS
ok=0
failed=0
not_run=0
file_no=0
for file in "$@"; do
    file_no=$((file_no + 1))
    dir="$tmp/$file_no"
    mkdir -p "$dir/blocks" "$dir/logs" "$dir/work/docs/img"
    python3 "$here/blocks.py" "$file" "$dir/blocks" >"$dir/index"
    if [ ! -s "$dir/index" ]; then
        continue
    fi

    if port_in_use; then
        echo "error: something already listens on 127.0.0.1:7890, which the docs use" >&2
        exit 2
    fi
    "$bin" serve --listen 127.0.0.1:7890 --data-dir "$dir/data" --allow-private-endpoints \
        >"$dir/server.log" 2>&1 &
    server=$!
    for _ in $(seq 100); do
        if curl -sf -o /dev/null http://127.0.0.1:7890/healthz; then break; fi
        if ! kill -0 "$server" 2>/dev/null; then break; fi
        sleep 0.1
    done
    if ! curl -sf -o /dev/null http://127.0.0.1:7890/healthz; then
        echo "error: the server for $file did not come up:" >&2
        cat "$dir/server.log" >&2
        exit 2
    fi

    {
        echo "__logs='$dir/logs' __blocks='$dir/blocks'"
        echo "source '$tmp/prelude.sh'"
        while read -r n line mode; do
            echo "__begin $n $mode"
            echo "source '$dir/blocks/$n.sh'"
            echo "__end $n"
        done <"$dir/index"
    } >"$dir/session.sh"
    session=0
    (cd "$dir/work" && PATH="$tmp/bin:$PATH" timeout 60 bash "$dir/session.sh") || session=$?
    stop_server

    seen_failure=0
    while read -r n line mode; do
        if [ -f "$dir/logs/$n.status" ]; then
            echo "$file:$line ok"
            ok=$((ok + 1))
            if [ "$verbose" = 1 ]; then sed -e 's/^/    /' -e '$a\' "$dir/logs/$n.log"; fi
        elif [ "$seen_failure" = 0 ]; then
            seen_failure=1
            failed=$((failed + 1))
            echo "$file:$line FAILED$([ "$session" = 124 ] && echo " (timed out)")"
            echo "---- commands, as run$([ "$mode" = fails ] && echo " (each curl and tenax must be refused)")"
            cat -n "$dir/blocks/$n.sh"
            echo "---- output"
            sed -e '$a\' "$dir/logs/$n.log" 2>/dev/null || true
            echo "---- the server's log, last lines"
            tail -n 15 "$dir/server.log"
            echo "----"
        else
            echo "$file:$line not run (an earlier block of the file failed)"
            not_run=$((not_run + 1))
        fi
    done <"$dir/index"
done

echo "docs: $ok ok, $failed FAILED, $not_run not run ($((SECONDS - start)) s)"
[ "$failed" = 0 ]
