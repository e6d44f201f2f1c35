"""Fixtures: one real `tenax serve` for the session, and per-test projects, clients and queues.

Environment:
- TENAX_BIN: the tenax binary (default: target/debug/tenax under the repository root).
- TENAX_SERVE_ARGS: extra flags for `tenax serve` (split like a shell would).
- ZAQAR_TEST_URL: test a server that is already running (for example a real Zaqar, to check
  the suite itself) instead of starting tenax; tests marked `tenax_only` are then skipped.
- ZAQAR_SLOW=1: also run the tests that wait out Zaqar's 60-second minimum TTLs.

Every test gets its own project (X-Project-ID), so listings and counts see only its own queues.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest
from zaqarclient.queues import client as zaqar_client

sys.path.insert(0, str(Path(__file__).parent))

from zaqar_helpers import MailBox, RawApi, Receiver, new_client_id  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
EXTERNAL_URL = os.environ.get("ZAQAR_TEST_URL", "").strip()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slow = os.environ.get("ZAQAR_SLOW") == "1"
    for item in items:
        if EXTERNAL_URL and item.get_closest_marker("tenax_only"):
            item.add_marker(pytest.mark.skip(reason="Tenax-only behaviour; ZAQAR_TEST_URL is set"))
        if not slow and item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.skip(reason="waits a minute or more; set ZAQAR_SLOW=1"))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"tenax serve exited with status {process.returncode}:\n{log.read_text()}"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"tenax serve did not listen on port {port} in {timeout} s:\n{log.read_text()}")


@pytest.fixture(scope="session")
def mailbox() -> Iterator[MailBox]:
    """The SMTP server the server under test mails `mailto:` subscribers through."""
    started = MailBox().start()
    yield started
    started.stop()


@pytest.fixture(scope="session")
def base_url(tmp_path_factory: pytest.TempPathFactory, mailbox: MailBox) -> Iterator[str]:
    """The server under test, without a trailing slash (the client adds /v2)."""
    if EXTERNAL_URL:
        yield EXTERNAL_URL.rstrip("/")
        return
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
        # The webhook tests' receivers listen on 127.0.0.1.
        "--allow-private-endpoints",
        # The mailto tests' SMTP server.
        "--smtp-url",
        mailbox.url,
        *shlex.split(os.environ.get("TENAX_SERVE_ARGS", "")),
    ]
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        _wait_for_port(port, process, log, timeout=30)
        yield f"http://127.0.0.1:{port}"
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if os.environ.get("ZAQAR_SHOW_SERVER_LOG") == "1":
            sys.stderr.write(log.read_text())


@pytest.fixture
def project() -> str:
    return f"proj-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def make_client(base_url: str) -> Callable[..., object]:
    """The official client without Keystone: the `noauth` backend, which sends X-Project-Id."""

    def make(project: str | None, client_id: str | None = None) -> object:
        options = {} if project is None else {"os_project_id": project}
        conf: dict = {"auth_opts": {"backend": "noauth", "options": options}}
        if client_id is not None:
            conf["client_uuid"] = client_id
        return zaqar_client.Client(base_url, version=2, conf=conf)

    return make


@pytest.fixture
def client(make_client: Callable[..., object], project: str) -> object:
    return make_client(project)


@pytest.fixture
def other_client(make_client: Callable[..., object], project: str) -> object:
    """The same project, another Client-ID: it sees `client`'s messages without echo."""
    return make_client(project)


@pytest.fixture
def api(base_url: str, project: str) -> RawApi:
    return RawApi(base_url, project)


@pytest.fixture
def other_api(base_url: str, project: str) -> RawApi:
    """The same project as `api`, another Client-ID."""
    return RawApi(base_url, project, new_client_id())


@pytest.fixture
def queue_name() -> str:
    return f"q-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver().start()
    yield started
    started.stop()
