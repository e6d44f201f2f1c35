#!/usr/bin/env bash
# Runs a command with a throwaway PostgreSQL cluster: initdb in a temporary directory (as the
# postgres user when run as root), a free loopback port, trust authentication; the cluster's
# URL is in $TENAX_PG_URL for the command, and a secrets key file for its servers in
# $TENAX_SECRETS_KEY_FILE (which `tenax serve` reads); the cluster is stopped and removed afterwards.
# Usage: tests/postgres/with-cluster.sh COMMAND [ARGS...]
set -euo pipefail

bindir=""
for dir in "$(pg_config --bindir 2>/dev/null || true)" $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ]; then
        bindir=$dir
        break
    fi
done
if [ -z "$bindir" ]; then
    echo "error: no PostgreSQL server programs (initdb, pg_ctl, postgres) found" >&2
    exit 1
fi

as_owner=()
if [ "$(id -u)" = 0 ]; then
    as_owner=(runuser -u postgres --)
fi
base=$(mktemp -d /tmp/tenax-pgcluster-XXXXXX)
chmod 700 "$base"
[ "$(id -u)" = 0 ] && chown postgres "$base"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

stop() {
    "${as_owner[@]}" "$bindir/pg_ctl" -D "$base/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$base"
}
trap stop EXIT

"${as_owner[@]}" "$bindir/initdb" -D "$base/data" -U postgres --auth=trust --no-sync >/dev/null
"${as_owner[@]}" "$bindir/pg_ctl" -D "$base/data" -l "$base/server.log" -w \
    -o "-p $port -k $base -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null

export TENAX_PG_URL="postgres://postgres@127.0.0.1:$port/postgres"
# Servers on PostgreSQL need a secrets key file, the same for all (docs/security.md): a key is 32
# random bytes in base64, one per line.
(umask 077 && head -c 32 /dev/urandom | base64 >"$base/secrets.key")
export TENAX_SECRETS_KEY_FILE="$base/secrets.key"
echo "== PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') at $TENAX_PG_URL"
"$@"
