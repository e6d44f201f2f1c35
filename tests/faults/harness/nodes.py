"""Tenax nodes for the harness: `tenax serve` in a host's namespace on the shared PostgreSQL,
each under libfaketime so that its wall clock can be moved while it runs (a clock skew fault),
its monotonic clock left alone (timers and timeouts stay true).

Faults: kill -9 and a start again, SIGSTOP and SIGCONT (a pause longer than its leases and its
leadership), and a skew of its wall clock."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request

from .net import Network

FAKETIME_LIBS = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
]
PORT = 7890
ADMIN_TOKEN = "tfx-admin-token-0123456789abcdefghijklmnopqrstuv"


def faketime_lib() -> str | None:
    return next((lib for lib in FAKETIME_LIBS if os.path.exists(lib)), None)


class Node:
    def __init__(self, name: str, net: Network, binary: str, url: str, key_file: str,
                 root: str, extra: list[str]) -> None:
        self.name = name
        self.net = net
        self.binary = binary
        self.url = url
        self.key_file = key_file
        self.dir = f"{root}/{name}"
        self.extra = extra
        self.proc: subprocess.Popen | None = None
        self.paused = False
        self.skew_s = 0
        self.starts = 0
        os.makedirs(self.dir, exist_ok=True)
        self.skew_file = f"{self.dir}/faketime"
        self.set_skew(0)

    @property
    def ip(self) -> str:
        return self.net.hosts[self.name].ip

    @property
    def base(self) -> str:
        return f"http://{self.ip}:{PORT}"

    def set_skew(self, seconds: int) -> None:
        """Moves the node's wall clock `seconds` from the true time (libfaketime reads the file
        at most once a second)."""
        with open(self.skew_file, "w") as f:
            f.write(f"{seconds:+d}s\n")
        self.skew_s = seconds

    def start(self) -> None:
        env = dict(os.environ)
        lib = faketime_lib()
        if lib:
            env.update({
                "LD_PRELOAD": lib,
                "FAKETIME_TIMESTAMP_FILE": self.skew_file,
                "FAKETIME_CACHE_DURATION": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            })
        env["TENAX_LOG"] = "info"
        log = open(f"{self.dir}/server.log", "a")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.net.hosts[self.name].ns, self.binary, "serve",
             "--listen", f"{self.ip}:{PORT}", "--data-dir", f"{self.dir}/data",
             "--database-url", self.url, "--secrets-key-file", self.key_file,
             "--admin-token", ADMIN_TOKEN, "--allow-private-endpoints",
             "--log-requests", "false", *self.extra],
            env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
        )
        self.paused = False
        self.starts += 1

    def wait_up(self, within: float = 60) -> bool:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.base}/healthz", timeout=1) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.1)
        return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """kill -9 (the whole process group: `ip netns exec` and the server)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.paused = False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            if self.paused:
                self.resume()
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.kill()

    def pause(self) -> None:
        if self.alive() and not self.paused:
            os.killpg(self.proc.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.alive() and self.paused:
            os.killpg(self.proc.pid, signal.SIGCONT)
            self.paused = False

    def heal(self) -> None:
        """Up, running and on the true time."""
        self.set_skew(0)
        self.resume()
        if not self.alive():
            self.start()
