"""What a worker logs about its jobs' outcomes, and where its log lines show.

:class:`OutcomeLog` writes a line per outcome (completed and how long it ran, failed and what
comes next, dead) while outcomes are few, and a summary every few seconds under load.
:func:`shown_on_stderr` puts the worker's lines on stderr while it runs when the application
configured no logging at all, as Celery, RQ and Sidekiq do: a worker that prints nothing
looks like a worker that does nothing."""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ._models import FailResult, TakenJob
from ._worker_common import now

BURST = 10
"""Outcomes in one second above which the worker logs summaries instead of a line per job."""

SUMMARY_EVERY_S = 5.0
"""How often a summary line is written while the worker summarizes."""

STDERR_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def shown(seconds: float) -> str:
    """A duration in a log line: ``0.04 ms``, ``3.5 ms``, ``35 ms``, ``2.5 s``."""
    ms = seconds * 1000
    if ms < 1:
        return f"{ms:.2f} ms"
    if ms < 10:
        return f"{ms:.1f} ms"
    if ms < 1000:
        return f"{ms:.0f} ms"
    return f"{seconds:.1f} s"


def _next_run(result: FailResult, snoozed: bool) -> str:
    """When a job that failed (or was snoozed) and is not dead runs again, from the server's
    answer."""
    if result.delay_ms is not None:
        when = f"in {shown(result.delay_ms / 1000)}"
    elif result.status == "ready":
        when = "now"
    else:
        return result.status
    if snoozed or result.attempt is None:
        return f"runs again {when}"
    return f"attempt {result.attempt} {when}"


def _quoted(types: list[str]) -> str:
    return ", ".join(repr(t) for t in types) or "none"


@dataclass(slots=True)
class Tally:
    """The outcomes of one summary window."""

    started: float
    completed: int = 0
    ran_s: float = 0.0
    """Total run time of the completed jobs."""
    longest_s: float = 0.0
    retried: int = 0
    """Failed, and will run again."""
    snoozed: int = 0
    dead: int = 0
    cancelled: int = 0
    """Cancelled while they ran: their handlers stopped."""
    unknown: dict[str, int] = field(default_factory=dict)
    """Jobs of a type without a handler, by type."""
    last_failure: str | None = None

    @property
    def count(self) -> int:
        return self.completed + self.retried + self.snoozed + self.dead + self.cancelled

    @property
    def level(self) -> int:
        return logging.ERROR if self.unknown else logging.WARNING if self.dead else logging.INFO

    def line(self, seconds: float, handled: list[str]) -> str:
        parts = []
        if self.completed:
            mean = self.ran_s / self.completed
            parts.append(f"{self.completed} completed (mean {shown(mean)}, longest {shown(self.longest_s)})")
        if self.retried:
            parts.append(f"{self.retried} failed and run again")
        if self.snoozed:
            parts.append(f"{self.snoozed} snoozed")
        if self.dead:
            parts.append(f"{self.dead} dead")
        if self.cancelled:
            parts.append(f"{self.cancelled} cancelled")
        text = f"last {seconds:.1f} s: " + ", ".join(parts)
        if self.last_failure is not None:
            text += f"; last failure: {self.last_failure}"
        if self.unknown:
            types = ", ".join(
                f"{t!r} ({n} job{'' if n == 1 else 's'})" for t, n in sorted(self.unknown.items())
            )
            text += f"; no handler for job type {types} in this worker (it handles: {_quoted(handled)})"
        return text


class OutcomeLog:
    """The log lines of job outcomes, for the threads of a worker or its event loop.

    The rule: a line per outcome while there are at most :data:`BURST` in a second (counted in
    fixed one-second windows). The outcome past that switches to a summary line every
    :data:`SUMMARY_EVERY_S` seconds; a summary window with at most ``BURST`` outcomes a second
    on average switches back to a line per outcome. A line (or a summary) is at INFO, WARNING
    when a job is dead, ERROR when a job's type has no handler in this worker.
    """

    def __init__(
        self, log: logging.Logger, handled: Callable[[], list[str]], clock: Callable[[], float] = now
    ) -> None:
        self._log = log
        self._handled = handled
        self._clock = clock
        self._lock = threading.Lock()
        self._second_started = -math.inf
        self._in_second = 0
        self._tally: Tally | None = None
        """The window being summarized; None while each outcome gets a line."""

    def completed(self, job: TakenJob[Any], ran_s: float) -> None:
        def count(tally: Tally) -> None:
            tally.completed += 1
            tally.ran_s += ran_s
            tally.longest_s = max(tally.longest_s, ran_s)

        self._record(count, logging.INFO, "job %d (%s) completed in %s", job.id, job.type, shown(ran_s))

    def failed(
        self,
        job: TakenJob[Any],
        ran_s: float | None,
        message: str,
        result: FailResult,
        *,
        snoozed: bool,
        unknown: bool,
    ) -> None:
        """A failure the server recorded. ``ran_s`` is None when no handler ran (an unknown
        type, a payload that does not convert); ``unknown`` marks a type without a handler."""
        took = "" if ran_s is None else f" in {shown(ran_s)}"
        level = logging.ERROR if unknown else logging.WARNING if result.dead else logging.INFO
        args: tuple[object, ...]
        if result.cancelled:
            template, args = "job %d (%s) cancelled%s; its handler stopped", (job.id, job.type, took)
            level = logging.INFO
        elif snoozed:
            template, args = "job %d (%s) snoozed: %s", (job.id, job.type, _next_run(result, snoozed=True))
        elif result.dead:
            template = "job %d (%s) failed%s and is dead: %s (%s)"
            args = (job.id, job.type, took, message, result.dead_reason)
        else:
            template = "job %d (%s) failed%s: %s; %s"
            args = (job.id, job.type, took, message, _next_run(result, snoozed=False))

        def count(tally: Tally) -> None:
            if result.cancelled:
                tally.cancelled += 1
                return
            if snoozed:
                tally.snoozed += 1
                return
            if result.dead:
                tally.dead += 1
            else:
                tally.retried += 1
            tally.last_failure = f"job {job.id} ({job.type}): {message}"
            if unknown:
                tally.unknown[job.type] = tally.unknown.get(job.type, 0) + 1

        self._record(count, level, template, *args)

    def tick(self) -> None:
        """Writes the summary when one is due (called often, so that one comes after the load
        stops too)."""
        with self._lock:
            self._summarize_if_due(self._clock())

    def flush(self) -> None:
        """Writes the summary of what is not summarized yet (when the worker stops)."""
        with self._lock:
            if self._tally is not None:
                self._summarize(self._clock())

    def _record(self, count: Callable[[Tally], None], level: int, message: str, *args: object) -> None:
        with self._lock:
            moment = self._clock()
            if self._tally is None:
                if moment - self._second_started >= 1.0:
                    self._second_started, self._in_second = moment, 0
                self._in_second += 1
                if self._in_second <= BURST:
                    self._log.log(level, message, *args)
                    return
                self._log.info(
                    "more than %d job outcomes a second: a summary every %.0f s instead of a line per job",
                    BURST,
                    SUMMARY_EVERY_S,
                )
                self._tally = Tally(started=moment)
            count(self._tally)
            self._summarize_if_due(moment)

    def _summarize_if_due(self, moment: float) -> None:
        if self._tally is not None and moment - self._tally.started >= SUMMARY_EVERY_S:
            self._summarize(moment)

    def _summarize(self, moment: float) -> None:
        tally = self._tally
        assert tally is not None
        seconds = moment - tally.started
        if tally.count:
            self._log.log(tally.level, tally.line(seconds, self._handled()))
        calm = tally.count <= BURST * seconds
        self._tally = None if calm else Tally(started=moment)
        self._second_started = -math.inf


@dataclass(slots=True)
class _StderrHandler:
    handler: logging.Handler
    level_before: int
    users: int = 0


_installed_lock = threading.Lock()
_installed: dict[str, _StderrHandler] = {}
"""The stderr handlers added by running workers, by logger name."""


@contextlib.contextmanager
def shown_on_stderr(log: logging.Logger, wanted: bool) -> Iterator[None]:
    """While the block runs, shows ``log``'s lines from INFO up on stderr when nothing else
    would show them (no handler on the logger or its ancestors: ``tenax``, the root) and the
    worker was not told otherwise (``log=False``). Workers running at once in one process share
    the handler; the last one to stop removes it, and restores the logger's level."""
    if not wanted:
        yield
        return
    with _installed_lock:
        added = _installed.get(log.name)
        if added is None and not log.hasHandlers():
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter(STDERR_FORMAT))
            added = _installed[log.name] = _StderrHandler(handler, log.level)
            log.addHandler(handler)
            if log.level == logging.NOTSET:
                # Without a level of its own the logger inherits the root's (WARNING).
                log.setLevel(logging.INFO)
        if added is not None:
            added.users += 1
    try:
        yield
    finally:
        if added is not None:
            with _installed_lock:
                added.users -= 1
                if added.users == 0:
                    del _installed[log.name]
                    log.removeHandler(added.handler)
                    log.setLevel(added.level_before)
