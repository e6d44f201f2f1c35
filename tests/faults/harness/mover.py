"""The mover (with pools): every few seconds a queue of the workload moves to the other pool,
with the queues a transaction ties to it, while the nemesis strikes (docs/postgres.md, "Moving
queues"). A move that stops short (its node killed, a database cut off) is asked for again, as
an operator would, until it is finished; once the faults are healed, the last one is finished
before the drain. Each move that finished is a `move` record of the history."""

from __future__ import annotations

import random
import re
import threading
import time
from typing import Any

from .client import Client, Unanswered
from .history import History

POOLS = ["a", "b"]
TIED = re.compile(r'tied to queue "([^"]+)"')
UNFINISHED = re.compile(r'the move of \[(.*?)\] to pool "([^"]+)"')


class Mover:
    def __init__(self, bases: list[str], history: History, seed: int,
                 queues: list[str]) -> None:
        self.rng = random.Random(f"{seed}-mover")
        self.client = Client(bases, random.Random(f"{seed}-mover-client"), timeout=30.0)
        self.history = history
        self.queues = queues
        # A move asked for and not known to be finished: (queue, with, pool).
        self.pending: tuple[str, list[str], str] | None = None
        self.counts: dict[str, int] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="mover", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, patience_s: float = 120.0) -> None:
        """Stops moving, then finishes a move left unfinished (its queues refuse writes until
        it is)."""
        self.stopped.set()
        self.thread.join()
        deadline = time.monotonic() + patience_s
        while self.pending is not None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the move {self.pending} could not be finished")
            self._step()
            time.sleep(0.5)

    def _run(self) -> None:
        while not self.stopped.wait(self.rng.uniform(4.0, 8.0)):
            self._step()

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def _step(self) -> None:
        if self.pending is not None:
            queue, with_, to = self.pending
        else:
            queue, with_, to = self.rng.choice(self.queues), [], self.rng.choice(POOLS)
        flipped = False
        # A tie named by a refusal joins the move; a few rounds name them all.
        for _ in range(len(self.queues) + 2):
            try:
                status, answer = self.client.request(
                    "POST", f"/api/queues/{queue}/move", {"to": to, "with": with_})
            except Unanswered:
                self._count("unanswered")
                self.pending = (queue, with_, to)
                return
            error: dict[str, Any] = (answer or {}).get("error", {}) if isinstance(
                answer, dict) else {}
            code, message = error.get("code"), error.get("message", "")
            if status == 200:
                self.pending = None
                if answer.get("from") is not None:
                    self._count("moved")
                    self.history.write({"kind": "move", "t0": time.time(), "value": answer})
                    return
                # On that pool already: to the other one, then.
                self._count("nothing to move")
                if flipped:
                    return
                flipped, to = True, POOLS[1 - POOLS.index(to)]
                continue
            if status == 409 and code == "queues_tied" and TIED.search(message):
                with_ = [*with_, TIED.search(message).group(1)]
                continue
            unfinished = UNFINISHED.search(message) if code == "move_unfinished" else None
            if status == 409 and unfinished:
                # Another move stopped short (this one's, asked through a node that died):
                # finished first, as it is.
                queues = [q.strip().strip('"') for q in unfinished.group(1).split(",")]
                queue, with_, to = queues[0], queues[1:], unfinished.group(2)
                self.pending = (queue, with_, to)
                self._count("resumed")
                continue
            if status == 409 and code == "across_pools":
                self._count("across pools")
                self.pending = None
                return
            if status == 503:
                self._count("unavailable")
                self.pending = (queue, with_, to)
                return
            raise RuntimeError(f"move {queue} to {to} with {with_}: {status} {answer}")
        raise RuntimeError(f"move {queue} to {to}: ties never ended: {with_}")
