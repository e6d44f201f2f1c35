"""PostgreSQL for the harness: a primary and a synchronous streaming standby (made with
`pg_basebackup -R`), each in the namespace of its host, run as the `postgres` user.

Faults: a server killed (-9) and started again, and a failover: the primary killed, the
standby promoted, and the old primary made again as the new primary's standby (a fresh
`pg_basebackup`), so that the next failover has a standby to promote.

Replication is synchronous (`synchronous_standby_names = '*'`, `synchronous_commit = on`): a
commit is acknowledged once the standby has it, so a failover loses nothing acknowledged. While
no standby is connected the primary waits in every commit (PostgreSQL's choice: durability over
availability); the harness makes the standby again at once."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass

from .net import Network, sh

PORT = 5432


def bindir() -> str:
    try:
        found = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        if found.returncode == 0 and os.path.exists(os.path.join(found.stdout.strip(), "initdb")):
            return found.stdout.strip()
    except FileNotFoundError:
        pass
    for version in sorted(os.listdir("/usr/lib/postgresql"), reverse=True):
        candidate = f"/usr/lib/postgresql/{version}/bin"
        if os.path.exists(f"{candidate}/initdb"):
            return candidate
    raise RuntimeError("no PostgreSQL server binaries (apt-get install postgresql)")


@dataclass
class Server:
    host: str
    ip: str
    data: str
    log: str


class Cluster:
    """A primary and a standby on `hosts` (two host names of the network)."""

    def __init__(self, net: Network, hosts: list[str], root: str) -> None:
        self.net = net
        self.bin = bindir()
        self.root = root
        self.servers = {
            h: Server(h, net.hosts[h].ip, f"{root}/{h}/data", f"{root}/{h}/log") for h in hosts
        }
        self.primary, self.standby = hosts[0], hosts[1]
        self.uid = pwd.getpwnam("postgres").pw_uid
        self.gid = pwd.getpwnam("postgres").pw_gid
        self.failovers = 0

    # --- running PostgreSQL in a host's namespace as its own user ------------------------------

    def _run(self, host: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("runuser", "-u", "postgres", "--", *args, ns=self.net.hosts[host].ns,
                  check=check)

    def _own(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        os.chown(path, self.uid, self.gid)

    def url(self, database: str = "tenax") -> str:
        """The URL every node uses: both servers, the one that takes writes chosen."""
        hosts = ",".join(f"{s.ip}:{PORT}" for s in self.servers.values())
        return (f"postgres://postgres@{hosts}/{database}"
                "?target_session_attrs=read-write&connect_timeout=3")

    def admin_url(self, host: str | None = None) -> str:
        s = self.servers[host or self.primary]
        return f"postgres://postgres@{s.ip}:{PORT}/postgres"

    def _start(self, host: str) -> None:
        s = self.servers[host]
        self._run(host, f"{self.bin}/pg_ctl", "-D", s.data, "-l", s.log, "-w", "-t", "60",
                  "-o", f"-c listen_addresses={s.ip} -c port={PORT} "
                  f"-c unix_socket_directories={self.root}/{host}", "start")

    def create(self) -> None:
        for s in self.servers.values():
            shutil.rmtree(f"{self.root}/{s.host}", ignore_errors=True)
            self._own(f"{self.root}/{s.host}")
        primary = self.servers[self.primary]
        self._run(self.primary, f"{self.bin}/initdb", "-D", primary.data, "-U", "postgres",
                  "-A", "trust", "--no-sync")
        with open(f"{primary.data}/postgresql.conf", "a") as conf:
            conf.write(
                "wal_level = replica\nmax_wal_senders = 10\nhot_standby = on\n"
                "synchronous_commit = on\nsynchronous_standby_names = '*'\n"
                "max_connections = 200\nfsync = on\nwal_keep_size = 256MB\n"
                "shared_buffers = 64MB\n"
            )
        with open(f"{primary.data}/pg_hba.conf", "a") as hba:
            hba.write("host all all 10.77.0.0/24 trust\nhost replication all 10.77.0.0/24 trust\n")
        self._start(self.primary)
        self._make_standby(self.standby)
        sh(f"{self.bin}/psql", self.admin_url(), "-qc", "CREATE DATABASE tenax")

    def _make_standby(self, host: str) -> None:
        """Makes `host` the standby of the current primary, from a fresh base backup."""
        s = self.servers[host]
        shutil.rmtree(s.data, ignore_errors=True)
        primary = self.servers[self.primary]
        self._run(host, f"{self.bin}/pg_basebackup", "-h", primary.ip, "-p", str(PORT),
                  "-U", "postgres", "-D", s.data, "-R", "-X", "stream", "-c", "fast",
                  "--no-sync")
        self._start(host)

    # --- faults ------------------------------------------------------------------------------

    def pid(self, host: str) -> int | None:
        try:
            with open(f"{self.servers[host].data}/postmaster.pid") as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def kill(self, host: str) -> None:
        pid = self.pid(host)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # Its backends die with it (they watch the postmaster): wait until no process works in
        # its data directory, so that a start finds its shared memory free.
        deadline = time.monotonic() + 30
        while self._processes(host) and time.monotonic() < deadline:
            time.sleep(0.05)
        # The killed postmaster may stay a zombie (nothing reaps orphans in some containers),
        # which `postmaster.pid` would name as a server still running: it is not.
        if pid and not self.running(host):
            for stale in (f"{self.servers[host].data}/postmaster.pid",
                          f"{self.root}/{host}/.s.PGSQL.{PORT}.lock",
                          f"{self.root}/{host}/.s.PGSQL.{PORT}"):
                try:
                    os.remove(stale)
                except FileNotFoundError:
                    pass

    def _processes(self, host: str) -> list[int]:
        data = os.path.realpath(self.servers[host].data)
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.readlink(f"/proc/{entry}/cwd") == data:
                        found.append(int(entry))
                except OSError:
                    pass
        return found

    def restart(self, host: str) -> None:
        """A server killed and started again, as a crash and a restart of its machine."""
        self.kill(host)
        self._start(host)

    def failover(self) -> float:
        """Kills the primary, promotes the standby, and makes the old primary its standby.
        Returns how long the cluster had no primary, in seconds."""
        old, new = self.primary, self.standby
        self.kill(old)
        began = time.monotonic()
        self._run(new, f"{self.bin}/pg_ctl", "-D", self.servers[new].data, "-w", "promote")
        promoted = time.monotonic() - began
        self.primary, self.standby = new, old
        self._make_standby(old)
        self.failovers += 1
        return promoted

    def running(self, host: str) -> bool:
        """Whether the server's postmaster runs (a zombie does not)."""
        pid = self.pid(host)
        if not pid:
            return False
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    def heal(self) -> None:
        """Both servers up: the primary, and its standby."""
        if not self.running(self.primary):
            self._start(self.primary)
        if not self.running(self.standby):
            self._make_standby(self.standby)

    def stop(self) -> None:
        for host in self.servers:
            self.kill(host)
