#!/usr/bin/env bash
# Builds the Debian package (`cargo deb`, release), installs it with dpkg, verifies its systemd
# unit, runs the installed server as the unit would and waits for /healthz, then removes and
# purges the package. Run as root, on a machine where /var/lib/tenax and port 7890 are free.
# CI runs it (.ci/run); docs/operations.md#installing says what it checks and what it cannot.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" != 0 ]; then
    echo "check.sh: run it as root (it installs and removes the package)" >&2
    exit 1
fi
if ! cargo deb --version >/dev/null 2>&1; then
    cargo install --locked cargo-deb
fi
for tool in curl setpriv python3; do
    command -v "$tool" >/dev/null || { echo "check.sh: $tool is missing" >&2; exit 1; }
done

# The user the server runs as: systemd makes a dynamic one; here a system user of our own.
user=tenax-check
data=/var/lib/tenax
unit=tenax.service
server_pid=
cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    dpkg -P tenax >/dev/null 2>&1 || true
    if [ -n "${made_data:-}" ]; then rm -rf "$data"; fi
    if id "$user" >/dev/null 2>&1; then userdel "$user" || true; fi
}
trap cleanup EXIT

echo "== cargo deb (release build and package)"
started=$(date +%s)
# TENAX_DEB_PROFILE=dev packages the debug build instead, as it is (CI: it is built already, and
# a release build would add five minutes to a check of the packaging, not of the optimiser;
# cargo deb's own build of it would build every crate of the workspace again).
deb=$(cargo deb -p tenax ${TENAX_DEB_PROFILE:+--profile "$TENAX_DEB_PROFILE" --no-build} | tail -n 1)
echo "built $deb in $(( $(date +%s) - started )) s; $(stat -c %s "$deb") bytes"
# The binary ships stripped; its debug symbols go to a .ddeb of their own (dbgsym = true).
dbgsym=$(dirname "$deb")/$(basename "$deb" .deb | sed 's/^tenax_/tenax-dbgsym_/').ddeb
if [ ! -s "$dbgsym" ]; then
    echo "check.sh: no debug symbols package $dbgsym" >&2
    exit 1
fi
echo "debug symbols: $dbgsym, $(stat -c %s "$dbgsym") bytes"
dpkg-deb --info "$deb"
contents=$(dpkg-deb --contents "$deb")
for path in ./usr/bin/tenax ./etc/default/tenax "/$unit" ./usr/share/man/man1/tenax-serve.1; do
    if ! grep -q -- "$path" <<<"$contents"; then
        echo "check.sh: the package holds no $path:" >&2
        echo "$contents" >&2
        exit 1
    fi
done

echo "== dpkg -i"
dpkg -i "$deb"
unit_file=$(dpkg -L tenax | grep "/$unit\$")
test -x /usr/bin/tenax
grep -q '^TENAX_DATA_DIR=/var/lib/tenax$' /etc/default/tenax
grep -q '/etc/default/tenax' /var/lib/dpkg/info/tenax.conffiles
/usr/bin/tenax --version

echo "== systemd-analyze verify $unit_file"
if ! command -v systemd-analyze >/dev/null; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y systemd
fi
# verify loads the unit in a manager of its own: it needs no running systemd. It also opens the
# unit's Documentation= page with man(1), where man is installed.
man_check=--man=yes
if ! command -v man >/dev/null; then
    man_check=--man=no
    echo "no man(1) here: Documentation=man:tenax-serve(1) not opened"
fi
if ! verify=$(systemd-analyze verify "$man_check" "$unit_file" 2>&1); then
    echo "$verify" >&2
    echo "check.sh: systemd-analyze verify refused $unit_file" >&2
    exit 1
fi
if [ -n "$verify" ]; then
    echo "$verify"
    # Warnings about the unit itself fail the check; it prints nothing for a clean unit.
    if grep -q "$unit" <<<"$verify"; then
        echo "check.sh: systemd-analyze verify warns about $unit_file" >&2
        exit 1
    fi
fi
echo "systemd-analyze verify: clean"
if [ "$(cat /proc/1/comm)" = systemd ]; then
    echo "systemd runs as PID 1 here, but this check does not start the unit (it would own port 7890 and /var/lib/tenax beyond this script)"
else
    echo "no systemd as PID 1 here ($(cat /proc/1/comm)): the unit's sandbox cannot be applied; the server runs below as the unit would run it, without the sandbox but with MemoryDenyWriteExecute's rule (prctl PR_SET_MDWE)"
fi

echo "== the installed server, as the unit runs it"
if curl -s -o /dev/null --max-time 2 http://127.0.0.1:7890/healthz; then
    echo "check.sh: something already answers on 127.0.0.1:7890" >&2
    exit 1
fi
if [ -e "$data" ]; then
    echo "check.sh: $data exists; this check makes it and removes it, so it must not" >&2
    exit 1
fi
useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$user"
# StateDirectory=tenax, StateDirectoryMode=0700: the service's user owns it, nobody else reads.
made_data=1
install -d -m 0700 -o "$user" -g "$user" "$data"
# EnvironmentFile=/etc/default/tenax: its KEY=value lines, and no other variable of ours.
mapfile -t settings < <(grep -E '^[A-Z_][A-Z0-9_]*=' /etc/default/tenax)
echo "settings: ${settings[*]}"
log=$(mktemp)
# User, no capabilities, no new privileges, UMask=0077, WorkingDirectory=/var/lib/tenax, and
# MemoryDenyWriteExecute (the kernel's PR_SET_MDWE refuses memory both writable and executable,
# as systemd's seccomp rule does; it holds across the exec).
(
    cd "$data"
    umask 0077
    exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "${settings[@]}" \
        setpriv --reuid="$user" --regid="$user" --clear-groups --no-new-privs \
        --inh-caps=-all --bounding-set=-all \
        python3 -c 'import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:  # PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN
    sys.exit("prctl(PR_SET_MDWE): errno %d" % ctypes.get_errno())
os.execv("/usr/bin/tenax", ["/usr/bin/tenax", "serve"])'
) >"$log" 2>&1 &
server_pid=$!
healthy=
for _ in $(seq 1 300); do
    if ! kill -0 "$server_pid" 2>/dev/null; then
        break
    fi
    if [ "$(curl -s --max-time 2 http://127.0.0.1:7890/healthz || true)" = ok ]; then
        healthy=1
        break
    fi
    sleep 0.1
done
if [ -z "$healthy" ]; then
    echo "check.sh: the installed server did not answer /healthz within 30 s; its log:" >&2
    cat "$log" >&2
    exit 1
fi
echo "/healthz: ok"
# The installed binary's own health check (the container image's HEALTHCHECK) agrees.
[ "$(/usr/bin/tenax health --url http://127.0.0.1:7890)" = ok ]
# The process answering is /usr/bin/tenax itself (each step above execs the next), as $user.
if [ "$(readlink /proc/"$server_pid"/exe)" != /usr/bin/tenax ] ||
    [ "$(stat -c %U /proc/"$server_pid")" != "$user" ]; then
    echo "check.sh: the server is not /usr/bin/tenax running as $user" >&2
    exit 1
fi
created=$(curl -s --fail http://127.0.0.1:7890/api/jobs --json '{"queue": "check", "payload": {"n": 1}}')
echo "enqueued: $created"
grep -q '"created":true' <<<"$created"
owner=$(stat -c '%U %a' "$data/tenax.redb")
if [ "$owner" != "$user 600" ]; then
    echo "check.sh: $data/tenax.redb is '$owner', not owned by $user with mode 600" >&2
    exit 1
fi
kill -TERM "$server_pid"
status=0
wait "$server_pid" || status=$?
server_pid=
if [ "$status" != 0 ]; then
    echo "check.sh: the server exited $status on SIGTERM; its log:" >&2
    cat "$log" >&2
    exit 1
fi
echo "stopped by SIGTERM, exit 0"

echo "== dpkg -r, then -P"
dpkg -r tenax
test ! -e /usr/bin/tenax
test ! -e "$unit_file"
test -e /etc/default/tenax # a conffile stays until purge
dpkg -P tenax
test ! -e /etc/default/tenax
echo "check.sh: package $(basename "$deb") ($(stat -c %s "$deb") bytes) installs, verifies, serves and removes cleanly"
