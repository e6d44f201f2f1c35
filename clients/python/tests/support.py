"""Helpers of the tests: polling with deadlines, a request-counting transport, a webhook
receiver."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

import tenax

T = TypeVar("T")

# A short policy for tests: two retries, 200 ms apart, then dead.
SHORT_POLICY: dict[str, Any] = {"type": "list", "delays": ["200ms", "200ms"]}


def wait_for(check: Callable[[], T | None], *, timeout: float = 10.0, what: str = "the condition") -> T:
    """Polls ``check`` until it returns something truthy; fails the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def job_in(client: tenax.Client, id: int, *statuses: str) -> Callable[[], tenax.Job | None]:
    """A check for ``wait_for``: the job, once in one of ``statuses`` with every error recorded.

    The server shows a job's new status and failure count (kept in memory) a moment before
    the error entry of that failure (read from disk, written by the same commit), so a job
    can read ``dead, failures=1, errors=[]`` for a few milliseconds.
    """

    def check() -> tenax.Job | None:
        job = client.get_job(id)
        return job if job.status in statuses and len(job.errors) >= job.failures else None

    return check


class CountingTransport(httpx.HTTPTransport):
    """Counts requests by (method, path) and keeps the bodies of batch completions."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.counts: dict[tuple[str, str], int] = {}
        self.complete_batches: list[list[int]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        key = (request.method, request.url.path)
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            if key == ("POST", "/api/jobs/complete"):
                self.complete_batches.append([j["id"] for j in json.loads(request.content)["jobs"]])
        return super().handle_request(request)

    def count(self, method: str, path: str) -> int:
        with self.lock:
            return self.counts.get((method, path), 0)


class Receiver:
    """A webhook endpoint on 127.0.0.1 that answers each POST with the next status of a list
    (the last one repeats) and keeps the bodies."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.bodies: list[Any] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", "0"))
                owner.bodies.append(json.loads(self.rfile.read(length)))
                index = min(len(owner.bodies) - 1, len(owner.statuses) - 1)
                self.send_response(owner.statuses[index])
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
