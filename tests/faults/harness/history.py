"""The history: every operation a client invoked, with its outcome, and every fault the nemesis
injected, one JSON object per line, written as they happen (a run cut short keeps what it had).

An operation is {"kind": "op", "process", "f", "t0", "t1", "ok", "value"}: `t0` and `t1` are
the client's wall clock (seconds since 1970; the clients all run on the true time) when it was
invoked and when its outcome came; `ok` is true (it took effect), false (it certainly did not:
a 4xx, or a 503 the server says changed nothing) or null (unknown: a timeout, a broken
connection, a 5xx that may have committed). A fault is {"kind": "fault", "f", "t0", "t1",
"value"}."""

from __future__ import annotations

import json
import threading
import time
from typing import Any


class History:
    def __init__(self, path: str) -> None:
        self._file = open(path, "w", buffering=1)
        self._lock = threading.Lock()
        self.ops = 0
        self.faults = 0

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")
            if record["kind"] == "op":
                self.ops += 1
            else:
                self.faults += 1

    def op(self, process: str, f: str, t0: float, ok: bool | None, value: Any) -> None:
        self.write({"kind": "op", "process": process, "f": f, "t0": t0, "t1": time.time(),
                    "ok": ok, "value": value})

    def fault(self, f: str, t0: float, value: Any) -> None:
        self.write({"kind": "fault", "f": f, "t0": t0, "t1": time.time(), "value": value})

    def close(self) -> None:
        with self._lock:
            self._file.close()
