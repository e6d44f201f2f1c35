"""A small HTTP client for the workload: one keep-alive connection per client thread to one
node at a time, JSON in and out, the admin token, and a bounded time per request. A request
that cannot be sent or answered raises `Unanswered`; the caller records its outcome as unknown.
"""

from __future__ import annotations

import http.client
import json
import random
from typing import Any

from .nodes import ADMIN_TOKEN


class Unanswered(Exception):
    """No answer: the connection failed, broke or timed out (the request may have taken effect)."""


class Client:
    def __init__(self, bases: list[str], rng: random.Random, timeout: float = 5.0) -> None:
        self.bases = bases
        self.rng = rng
        self.timeout = timeout
        self.base = rng.choice(bases)
        self.conn: http.client.HTTPConnection | None = None

    def switch(self) -> None:
        """Another node, as a client does after an error."""
        self.close()
        self.base = self.rng.choice(self.bases)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None,
                timeout: float | None = None) -> tuple[int, Any]:
        host = self.base.removeprefix("http://")
        if self.conn is None:
            self.conn = http.client.HTTPConnection(host, timeout=timeout or self.timeout)
        else:
            self.conn.timeout = timeout or self.timeout
            if self.conn.sock is not None:
                self.conn.sock.settimeout(timeout or self.timeout)
        sent = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        try:
            self.conn.request(method, path, body=data, headers=sent)
            response = self.conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as error:
            self.switch()
            raise Unanswered(f"{type(error).__name__}: {error}") from error
        if response.will_close:
            self.close()
        try:
            answer = json.loads(raw) if raw else None
        except ValueError:
            answer = raw.decode(errors="replace")
        if response.status >= 500:
            self.switch()
        return response.status, answer


def outcome(status: int) -> bool | None:
    """What a status says of an operation: done, certainly not done, or unknown (a 5xx: the
    server may have committed before it failed to answer)."""
    if 200 <= status < 300:
        return True
    if 400 <= status < 500:
        return False
    return None
