"""Fixtures: one real `tenax serve` for the session, on a free loopback port with a temporary
data directory; a client and a fresh queue per test (helpers are in support.py).

Environment:
- TENAX_BIN: the server binary (default: <repo>/target/debug/tenax).
- TENAX_SERVE_ARGS: extra flags for `tenax serve`.
- TENAX_SHOW_SERVER_LOG=1: print the server's log after the session.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import tenax

REPO_ROOT = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_for_health(url: str, process: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"tenax serve exited with status {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{url}/healthz", timeout=0.5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"tenax serve did not answer at {url} within {timeout} s:\n{log.read_text()}")


@pytest.fixture(scope="session")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = Path(os.environ.get("TENAX_BIN", "target/debug/tenax"))
    if not binary.is_absolute():
        binary = REPO_ROOT / binary
    if not binary.is_file():
        pytest.exit(f"no tenax binary at {binary}: build it (cargo build -p tenax) or set TENAX_BIN", 2)
    workdir = tmp_path_factory.mktemp("tenax")
    log = workdir / "tenax.log"
    port = _free_port()
    command = [
        str(binary),
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--data-dir",
        str(workdir / "data"),
        # The webhook test's receiver listens on 127.0.0.1.
        "--allow-private-endpoints",
        *shlex.split(os.environ.get("TENAX_SERVE_ARGS", "")),
    ]
    with log.open("wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for_health(url, process, log, timeout=30)
        yield url
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if os.environ.get("TENAX_SHOW_SERVER_LOG") == "1":
            sys.stderr.write(log.read_text())


@pytest.fixture
def client(server_url: str) -> Iterator[tenax.Client]:
    with tenax.Client(server_url) as c:
        yield c


@pytest.fixture
def queue() -> str:
    """A queue of this test's own."""
    return f"q-{uuid.uuid4().hex[:12]}"


