"""Helpers shared by the Zaqar v2 suite: a raw HTTP client, error checks, a webhook receiver,
and an SMTP server for mailto subscribers.

The official python-zaqarclient hides status codes, headers and error bodies, so every check
of those goes through `RawApi` (plain `requests`), which sends the same headers the client does.
"""

from __future__ import annotations

import email
import email.message
import json
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import requests

JSON_PATCH = "application/openstack-messaging-v2.0-json-patch"

# The keys a message object may carry in Zaqar's responses; the client's Message constructor
# raises TypeError on any other key.
MESSAGE_KEYS = {"id", "href", "ttl", "age", "body", "claim_id", "claim_count", "checksum"}

# What GET /v2/queues/{name} answers for a queue without user metadata (Zaqar's defaults).
DEFAULT_QUEUE_METADATA = {
    "_max_messages_post_size": 262144,
    "_default_message_ttl": 3600,
    "_default_message_delay": 0,
    "_dead_letter_queue": None,
    "_dead_letter_queue_messages_ttl": None,
    "_max_claim_count": None,
    "_enable_encrypt_messages": False,
}


def new_client_id(dashed: bool = True) -> str:
    value = uuid.uuid4()
    return str(value) if dashed else value.hex


class RawApi:
    """`requests` against the server's /v2 API with a project and a Client-ID."""

    def __init__(self, base_url: str, project: str | None, client_id: str | None = None):
        self.base_url = base_url.rstrip("/")
        self.project = project
        self.client_id = client_id or new_client_id()
        self.session = requests.Session()

    def headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {"Client-ID": self.client_id}
        if self.project is not None:
            headers["X-Project-ID"] = self.project
        headers.update(extra or {})
        return headers

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: str | bytes | None = None,
        headers: dict[str, str] | None = None,
        replace_headers: dict[str, str] | None = None,
        params: dict[str, Any] | None = None,
    ) -> requests.Response:
        """`path` is absolute (`/v2/...`). `replace_headers` sends exactly those headers."""
        if json_body is not None:
            data = json.dumps(json_body)
        if replace_headers is not None:
            sent = dict(replace_headers)
        else:
            sent = self.headers(headers)
        if data is not None:
            sent.setdefault("Content-Type", "application/json")
        return self.session.request(
            method, self.base_url + path, data=data, headers=sent, params=params, timeout=30
        )

    def get(self, path: str, **kw: Any) -> requests.Response:
        return self.request("GET", path, **kw)

    def head(self, path: str, **kw: Any) -> requests.Response:
        return self.request("HEAD", path, **kw)

    def put(self, path: str, **kw: Any) -> requests.Response:
        return self.request("PUT", path, **kw)

    def post(self, path: str, **kw: Any) -> requests.Response:
        return self.request("POST", path, **kw)

    def patch(self, path: str, **kw: Any) -> requests.Response:
        return self.request("PATCH", path, **kw)

    def delete(self, path: str, **kw: Any) -> requests.Response:
        return self.request("DELETE", path, **kw)

    def patch_metadata(self, queue: str, changes: list[dict[str, Any]]) -> requests.Response:
        return self.patch(
            f"/v2/queues/{queue}", json_body=changes, headers={"Content-Type": JSON_PATCH}
        )

    def post_messages(self, queue: str, messages: list[dict[str, Any]]) -> list[str]:
        """Posts and returns the new messages' ids, in order."""
        response = self.post(f"/v2/queues/{queue}/messages", json_body={"messages": messages})
        assert response.status_code == 201, response.text
        return [href.rsplit("/", 1)[1] for href in response.json()["resources"]]

    def claim(self, queue: str, ttl: int = 60, grace: int = 60, limit: int | None = None):
        params = None if limit is None else {"limit": limit}
        return self.post(
            f"/v2/queues/{queue}/claims", json_body={"ttl": ttl, "grace": grace}, params=params
        )


def assert_error(
    response: requests.Response,
    status: int,
    title: str | None = None,
    description: str | None = None,
) -> dict[str, Any]:
    """A Zaqar-shaped error: the status, a JSON object with `title` (and `description`)."""
    assert response.status_code == status, (
        f"expected {status}, got {response.status_code}: {response.text}"
    )
    assert response.headers.get("Content-Type", "").startswith("application/json"), (
        response.headers
    )
    body = response.json()
    assert isinstance(body, dict) and "title" in body, body
    if title is not None:
        assert body["title"] == title, body
    if description is not None:
        assert body.get("description") == description, body
    return body


def message_id(href: str) -> str:
    """The id in a message href, with any `?claim_id=` dropped."""
    return href.split("?", 1)[0].rsplit("/", 1)[1]


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


# --------------------------------------------------------------------------------------------
# Webhook receiver
# --------------------------------------------------------------------------------------------

RESET = "reset"
"""A planned answer: read the request, then reset the connection without a response."""


@dataclass
class Delivery:
    at: float  # time.monotonic() when the request had been read
    path: str
    headers: dict[str, str]  # names lower-cased: HTTP header names are case-insensitive
    body: bytes
    answer: int | str

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A local HTTP endpoint that records every POST and answers from a plan.

    `plan(n)` gives the answer to the n-th request (1-based): an HTTP status, or RESET.
    """

    plan: Callable[[int], int | str] = lambda n: 204
    deliveries: list[Delivery] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/hook"

    def start(self) -> "Receiver":
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with receiver._lock:
                    n = len(receiver.deliveries) + 1
                    answer = receiver.plan(n)
                    receiver.deliveries.append(
                        Delivery(
                            time.monotonic(),
                            self.path,
                            {name.lower(): value for name, value in self.headers.items()},
                            body,
                            answer,
                        )
                    )
                if answer == RESET:
                    # SO_LINGER 0: close() sends RST, the sender sees a connection error.
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.close_connection = True
                    try:
                        self.connection.close()
                    except OSError:
                        pass
                    return
                self.send_response(int(answer))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def handle_one_request(self) -> None:
                try:
                    super().handle_one_request()
                except (OSError, ValueError):
                    self.close_connection = True

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def snapshot(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)

    def wait_for(self, count: int, timeout: float) -> list[Delivery]:
        wait_until(lambda: len(self.snapshot()) >= count, timeout)
        return self.snapshot()


@dataclass
class Mail:
    """A mail the SMTP server accepted: its envelope and the parsed message."""

    sender: str
    recipients: list[str]
    message: email.message.Message

    def text(self) -> str:
        payload = self.message.get_payload(decode=True)
        return payload.decode(self.message.get_content_charset() or "utf-8")


@dataclass
class MailBox:
    """A real SMTP server (aiosmtpd) on 127.0.0.1 that records every mail it accepts.

    `refuse(recipient, codes)` makes it answer the next mails to `recipient` with those SMTP
    codes (4xx or 5xx) at the end of their data, one each, before it accepts again; each test
    mails recipients of its own, so the session's one server serves them all.
    """

    mails: list[Mail] = field(default_factory=list)
    refusals: dict[str, list[int]] = field(default_factory=dict)
    refused: list[tuple[str, int]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _controller: Any = None

    @property
    def url(self) -> str:
        assert self._controller is not None
        return f"smtp://127.0.0.1:{self._controller.port}"

    def start(self) -> "MailBox":
        from aiosmtpd.controller import Controller

        box = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
                with box._lock:
                    for recipient in envelope.rcpt_tos:
                        planned = box.refusals.get(recipient)
                        if planned:
                            code = planned.pop(0)
                            box.refused.append((recipient, code))
                            return f"{code} {'4.3.0 try again later' if code < 500 else '5.7.1 refused'}"
                    box.mails.append(
                        Mail(
                            envelope.mail_from,
                            list(envelope.rcpt_tos),
                            email.message_from_bytes(envelope.content),
                        )
                    )
                return "250 OK"

        # aiosmtpd checks its server by connecting to the port it was given: a free one, not 0.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self._controller = Controller(Handler(), hostname="127.0.0.1", port=port)
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()

    def refuse(self, recipient: str, codes: list[int]) -> None:
        with self._lock:
            self.refusals[recipient] = list(codes)

    def to(self, recipient: str) -> list[Mail]:
        with self._lock:
            return [mail for mail in self.mails if recipient in mail.recipients]

    def wait_for(self, recipient: str, count: int, timeout: float) -> list[Mail]:
        wait_until(lambda: len(self.to(recipient)) >= count, timeout)
        return self.to(recipient)
