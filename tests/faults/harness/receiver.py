"""The webhook receiver of the harness: a real HTTP server on the bridge, where every node can
reach it, that fails a share of the requests (500) and records each one in the history as a
`delivery` record: when it arrived and ended, the message and delivery ids, the subscription,
the attempt, and how many of that subscription's requests were in flight with it."""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .history import History


class Receiver:
    def __init__(self, ip: str, history: History, seed: int, fail_share: float,
                 hold_s: float = 0.02) -> None:
        self.history = history
        self.rng = random.Random(seed)
        self.rng_lock = threading.Lock()
        self.fail_share = fail_share
        self.hold_s = hold_s
        self.in_flight: dict[str, int] = {}
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (the standard library's name)
                receiver.handle(self)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                # A sender cut off by a partition or killed mid-request resets its connection:
                # an expected event here, not a traceback for the run's output.
                if not isinstance(sys.exc_info()[1], ConnectionError):
                    super().handle_error(request, client_address)

        self.server = Server((ip, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://{ip}:{self.port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        t0 = time.time()
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length)
        subscription = request.headers.get("tenax-subscription", "")
        with self.lock:
            self.in_flight[subscription] = self.in_flight.get(subscription, 0) + 1
            concurrent = self.in_flight[subscription]
        try:
            envelope = json.loads(body)
        except ValueError:
            envelope = {}
        with self.rng_lock:
            fail = self.rng.random() < self.fail_share
        # Held a moment, so that concurrent requests overlap and the bound can be seen.
        time.sleep(self.hold_s)
        status = 500 if fail else 200
        request.send_response(status)
        request.send_header("Content-Length", "0")
        request.end_headers()
        with self.lock:
            self.in_flight[subscription] -= 1
        message = envelope.get("message") or {}
        self.history.write({
            "kind": "delivery", "t0": t0, "t1": time.time(), "status": status,
            "subscription": subscription, "concurrent": concurrent,
            "webhook_id": request.headers.get("webhook-id", ""),
            "delivery": envelope.get("delivery_id"), "attempt": envelope.get("attempt"),
            "message": message.get("id"), "queue": envelope.get("queue"),
        })
