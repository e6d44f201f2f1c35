"""The jobs a worker holds, by lease token, and the one set of state changes both runtimes
make to them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ._models import TakenJob
from ._worker_common import now


@dataclass(slots=True)
class Held:
    """A job the stream leased to this worker, until it is acknowledged or given up."""

    job: TakenJob[Any]
    next_beat: float
    """Monotonic time of the next heartbeat."""
    state: str = "queued"
    """queued (received, not started), running, acking (waiting for its completion to be
    flushed), reporting (its failure is being sent), parked (received during shutdown, not to
    be started), lost (the lease is gone), abandoned (still running at the shutdown deadline)."""
    generation: int = 0
    """Which stream connection it came on."""
    started: float = 0.0
    """Monotonic time its handler started."""


class HeldJobs(dict[int, Held]):
    """The held jobs by lease token (unique per lease, while a job id may come back on a new
    lease), with the state changes both workers make to them, so the two cannot come to
    disagree on them. The threaded worker calls these under its lock; the asyncio one from its
    event loop, which is all the exclusion it needs."""

    def take_over(self, job: TakenJob[Any], state: str) -> bool:
        """Moves a held job to ``state``; False when it is no longer this worker's to report."""
        held = self.get(job.lease_token)
        if held is None or held.state in ("lost", "abandoned"):
            if held is not None and held.state == "lost":
                del self[job.lease_token]
            return False
        held.state = state
        return True

    def start(self, job: TakenJob[Any], stopping: bool) -> bool:
        """Moves a queued job to running; False when it is not to run: gone meanwhile, or
        parked because the worker is stopping (it goes back to the queue with its stream)."""
        held = self.get(job.lease_token)
        if held is None or held.state != "queued":
            return False
        if stopping:
            held.state = "parked"
            return False
        held.state = "running"
        held.started = now()
        return True

    def ran_for(self, job: TakenJob[Any]) -> float:
        """Seconds since the job's handler started."""
        held = self.get(job.lease_token)
        return 0.0 if held is None else now() - held.started

    def release(self, job: TakenJob[Any]) -> None:
        """Forgets a job whose outcome was reported (or given up on)."""
        self.pop(job.lease_token, None)

    def lose(self, job: TakenJob[Any]) -> None:
        """The lease is gone: the result will not be reported. A job whose result is already
        on its way keeps its state, so the report still goes (and is refused by the server)."""
        held = self.get(job.lease_token)
        if held is not None and held.state not in ("acking", "reporting"):
            held.state = "lost"

    def running(self) -> list[int]:
        """The lease tokens of the jobs whose handler is running."""
        return [token for token, held in self.items() if held.state == "running"]

    def abandon(self, tokens: Iterable[int]) -> None:
        """Marks handlers still running at the shutdown deadline: their results are not
        reported, and their jobs go back to the queue with the stream."""
        for token in tokens:
            held = self.get(token)
            if held is not None:
                held.state = "abandoned"

    def is_abandoned(self, job: TakenJob[Any]) -> bool:
        held = self.get(job.lease_token)
        return held is not None and held.state == "abandoned"

    def next_beat_in(self, job: TakenJob[Any], seconds: float) -> None:
        held = self.get(job.lease_token)
        if held is not None:
            held.next_beat = now() + seconds

    def due_beats(self, moment: float) -> list[TakenJob[Any]]:
        """The jobs whose heartbeat is due at ``moment`` and whose lease is still worth keeping."""
        return [
            h.job
            for h in self.values()
            if h.next_beat <= moment and h.state not in ("lost", "abandoned")
        ]

    def holding(self, generation: int) -> int:
        """How many jobs stream connection ``generation`` leased to this worker that still
        count against the stream's ``max``."""
        return sum(
            1
            for h in self.values()
            if h.generation == generation and h.state not in ("lost", "abandoned")
        )

    def forget_stream(self, generation: int, stopping: bool) -> int:
        """The server put the jobs of a closed stream back to ready: forgets those not started,
        and returns how many of them count as returned (parked, or dropped while stopping)."""
        returned = 0
        for token, held in list(self.items()):
            if held.generation == generation and held.state in ("queued", "parked"):
                del self[token]
                if held.state == "parked" or stopping:
                    returned += 1
        return returned
