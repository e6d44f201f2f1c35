"""Completions sent in batches: which are waiting, when a batch is due, and what the server's
answer (or its failure to answer) means for the jobs in it. Each runtime only waits, takes a
batch and sends it (``POST /api/jobs/complete``)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from ._errors import APIError, TenaxConnectionError
from ._models import CompleteResult, TakenJob
from ._worker_common import Backoff, Counter, WorkerSettings, now
from ._worker_held import HeldJobs
from ._worker_log import OutcomeLog

EMPTY_WAIT_S = 0.5
"""With nothing waiting, how long the acknowledger sleeps before it looks again (a new
completion wakes it sooner)."""


@dataclass(frozen=True, slots=True)
class Waiting:
    """A completion waiting to be sent."""

    job: TakenJob[Any]
    queued_at: float
    """Monotonic time it was queued at (kept, so that a batch put back is due as soon as it
    was before)."""
    ran_s: float
    """How long the handler ran, for the log line of the completion."""
    result: Any = None
    """What the handler returned, as the job's result (``None``: none)."""


def result_of(value: Any) -> Any:
    """A handler's returned value as its job's result: the value when JSON can carry it
    (``json.dumps``, without NaN or infinities, which JSON has not), else ``None``, no result.
    Handlers returned values before results existed, and those were ignored: a value that is
    not JSON still is, and its job completes as it did."""
    if value is None:
        return None
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None
    return value


_REFUSED_RESULT = re.compile(r"^jobs\[(\d+)\]\.result$")


@dataclass(frozen=True, slots=True)
class Batch:
    """Completions taken to be sent in one request."""

    waiting: list[Waiting]

    @property
    def jobs(self) -> list[TakenJob[Any]]:
        return [w.job for w in self.waiting]

    @property
    def items(self) -> list[TakenJob[Any] | tuple[TakenJob[Any], Any]]:
        """What ``complete_many`` is sent: each job, with its result when it has one."""
        return [w.job if w.result is None else (w.job, w.result) for w in self.waiting]


class AckQueue:
    """The completions waiting to be sent, oldest first. The threaded worker calls it under
    its lock; the asyncio one from its event loop."""

    def __init__(
        self,
        settings: WorkerSettings,
        held: HeldJobs,
        counter: Counter,
        log: logging.Logger,
        outcomes: OutcomeLog,
    ) -> None:
        self._settings = settings
        self._held = held
        self._counter = counter
        self._log = log
        self._outcomes = outcomes
        self._waiting: list[Waiting] = []
        self._backoff = Backoff(first=0.2, cap=2.0)
        self.final = False
        """Set at shutdown, once no handler will add to the queue: send everything now, then
        the acknowledger ends."""

    def add(self, job: TakenJob[Any], result: Any = None) -> bool:
        """Queues the completion of a job whose handler returned (``result``: what it
        returned, see :func:`result_of`); False when the job is no longer this worker's to
        report (its lease was lost, or it was abandoned)."""
        if not self._held.take_over(job, "acking"):
            return False
        self._waiting.append(Waiting(job, now(), self._held.ran_for(job), result_of(result)))
        return True

    def due_in(self, idle: bool) -> float | None:
        """Seconds until a batch is due, 0 to take one now, or None when nothing waits and
        nothing will (after the final flush: the acknowledger ends).

        A batch is due at once when it is :attr:`final`, when nothing is running that could
        add to it (``idle``), when the waiting completions fill a batch, or when the oldest
        has waited ``ack_interval``.
        """
        if not self._waiting:
            return None if self.final else EMPTY_WAIT_S
        interval = self._settings.ack_interval_s
        age = now() - self._waiting[0].queued_at
        full = len(self._waiting) >= self._settings.ack_batch
        if self.final or idle or full or age >= interval:
            return 0.0
        return max(0.001, interval - age)

    def take(self) -> Batch:
        """The oldest ``ack_batch`` completions, out of the queue while they are sent."""
        batch = Batch(self._waiting[: self._settings.ack_batch])
        del self._waiting[: self._settings.ack_batch]
        return batch

    def sent(self, batch: Batch, results: Iterable[CompleteResult]) -> None:
        """Counts and logs the server's answer to a batch, and lets its jobs go."""
        self._counter.add("ack_requests")
        sent = {w.job.id: w for w in batch.waiting}
        for result in results:
            if result.completed:
                self._counter.add("completed")
                if (waiting := sent.get(result.id)) is not None:
                    self._outcomes.completed(waiting.job, waiting.ran_s)
            else:
                self._counter.add("lost")
                self._log.warning(
                    "job %d ran, but its completion was refused: %s",
                    result.id,
                    result.error.message if result.error else "unknown reason",
                )
        self._release(batch)
        self._backoff.reset()

    def unsent(
        self, batch: Batch, error: TenaxConnectionError | APIError, quitting: bool
    ) -> float | None:
        """A batch whose request failed. Refused for good (a 4xx other than a timeout, which
        sending again would only repeat): its jobs are let go, and the next batch goes at once
        (0). Otherwise it goes back to the front of the queue, to be sent again after the
        returned delay; or, when the worker is ``quitting``, None: the acknowledger gives up,
        and those jobs will run again once their leases go back."""
        refused = _REFUSED_RESULT.match(error.field or "") if isinstance(error, APIError) else None
        if refused is not None and int(refused.group(1)) < len(batch.waiting):
            # One job's result refused (larger than the server's payload limit): that job
            # completes without it, and the batch goes again at once.
            at = int(refused.group(1))
            waiting = batch.waiting[at]
            self._log.error(
                "job %d: its result was refused (%s); completing it without one",
                waiting.job.id,
                error,
            )
            self._waiting[:0] = [
                replace(w, result=None) if i == at else w for i, w in enumerate(batch.waiting)
            ]
            return 0.0
        if isinstance(error, APIError) and error.status < 500 and error.status != 408:
            self._log.error("completions of %d jobs refused: %s", len(batch.waiting), error)
            self._release(batch)
            self._backoff.reset()
            return 0.0
        self._log.warning("cannot report %d completions: %s", len(batch.waiting), error)
        self._waiting[:0] = batch.waiting
        if quitting:
            self._log.error(
                "%d completions could not be reported: those jobs will run again", len(self._waiting)
            )
            return None
        return self._backoff.next()

    def _release(self, batch: Batch) -> None:
        for waiting in batch.waiting:
            self._held.release(waiting.job)
