"""What a running worker knows and decides, whichever runtime runs it: its jobs, the stream
that leases them, their heartbeats, its completions, its start and shutdown, and the log line
of each (those of job outcomes are ``_worker_log``'s). :class:`tenax.Worker` (threads) and :class:`tenax.AsyncWorker` (asyncio tasks) keep
only what differs between them: who runs what, how they wait, and the blocking or awaited
requests."""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from ._convert import Duration
from ._errors import TenaxError
from ._models import TakenJob
from ._worker_acks import AckQueue
from ._worker_common import GONE, Backoff, Counter, Registry, WorkerSettings, now
from ._worker_failures import ErrorHook, FailureReport, call_error_hook
from ._worker_held import Held, HeldJobs
from ._worker_log import OutcomeLog

H = TypeVar("H")
S = TypeVar("S", bound="Stream")
S_co = TypeVar("S_co", covariant=True)


class Stream(Protocol):
    """What the worker reads of a job stream (:class:`tenax.JobStream` or its asyncio twin)."""

    @property
    def last_line_at(self) -> float: ...

    @property
    def closed(self) -> bool: ...


class StreamSource(Protocol[S_co]):
    def stream(
        self, queues: str | Iterable[str], *, max: int | None = ..., lease: Duration | None = ...
    ) -> S_co: ...


@dataclass(frozen=True, slots=True)
class Wording:
    """Where the log lines of the two runtimes differ. ``fate`` follows from the runtime (a
    thread cannot be stopped, a task can be cancelled); the flag is a difference the runtimes
    have long had, kept so that no log line changes."""

    fate: str
    """What happens to a handler still running at the shutdown deadline."""
    silence_tells_heartbeats: bool
    """Whether the warning about a silent stream says how the heartbeats fare."""


THREADS = Wording("abandoned", silence_tells_heartbeats=True)
ASYNCIO = Wording("cancelled", silence_tells_heartbeats=False)

STALE_STREAM_S = 15.0
"""A stream with room for more jobs that sends no line (not even the keep-alive the server
sends every second) for this long is taken for dead."""


def stream_dead(
    silence: float, holding: int, failing_since: float | None, settings: WorkerSettings
) -> bool:
    """Whether a stream silent for ``silence`` seconds, holding ``holding`` jobs, is dead.

    The server sends a keep-alive line every second while the stream has room, and nothing
    while it holds ``concurrency`` jobs. So: silence with room means the connection is dead;
    silence while full is normal, unless heartbeats have been failing (since monotonic time
    ``failing_since``) for a whole lease.
    """
    full = holding >= settings.concurrency
    return (not full and silence > STALE_STREAM_S) or (
        failing_since is not None and now() - failing_since > settings.lease_s
    )


class WorkerState(Generic[H, S]):
    """A worker's state (``H`` is its handler type, ``S`` its stream type), with every
    decision on it. The threaded worker calls its methods under its lock, and never while a
    handler or a request runs; the asyncio one from its event loop, which is all the exclusion
    it needs."""

    def __init__(
        self,
        settings: WorkerSettings,
        wording: Wording,
        on_error: ErrorHook | None,
        logger: logging.Logger | None,
    ) -> None:
        self.settings = settings
        self.log = logger or logging.getLogger("tenax.worker")
        self.counter = Counter()
        self.registry: Registry[H] = Registry(settings.unknown_types)
        self.held = HeldJobs()
        self.outcomes = OutcomeLog(self.log, self.registry.types)
        self.acks = AckQueue(settings, self.held, self.counter, self.log, self.outcomes)
        self.started = False
        self.stream: S | None = None
        """The stream being read, if one is open."""
        self.generation = 0
        """How many streams were opened: the one being read is the latest."""
        self._wording = wording
        self._on_error = on_error
        self._reconnect = Backoff()
        self._beats_failing_since: float | None = None
        """Monotonic time since when heartbeats have failed, None while they succeed."""

    # ---- start and shutdown -------------------------------------------------------------------

    def begin(self) -> None:
        """Marks the worker started: it runs once, and only with a handler to run."""
        if self.started:
            raise RuntimeError("this worker has already run; make a new one")
        self.started = True
        if not self.registry.types():
            raise RuntimeError("register at least one handler before running the worker")

    def log_started(self, url: str) -> None:
        self.log.info(
            "worker started: %s, queues %s, concurrency %d, types %s (jobs of other types %s)",
            url,
            self.settings.queues,
            self.settings.concurrency,
            self.registry.types(),
            "are retried" if self.settings.unknown_types == "retry" else "go dead",
        )

    def signalled(self, signum: int, stopping: bool) -> bool:
        """Logs SIGTERM or SIGINT, which asks for a stop; True when a stop was already asked
        for: that second signal skips the wait for running handlers."""
        if stopping:
            self.log.warning("second signal: not waiting for running handlers")
        else:
            self.log.info("signal %s: stopping", signal.Signals(signum).name)
        return stopping

    def log_stopping(self, running: int) -> None:
        self.log.info(
            "stopping: no new jobs; waiting up to %.1f s for %d running handler(s)",
            self.settings.shutdown_timeout_s,
            running,
        )

    def abandoned(self, count: int) -> None:
        """Counts and logs the handlers still running at the shutdown deadline (marked with
        :meth:`HeldJobs.abandon`)."""
        if count:
            self.counter.add("abandoned", count)
            self.log.warning(
                "%d handler(s) still running after %.1f s: %s, their jobs go back to the queue",
                count,
                self.settings.shutdown_timeout_s,
                self._wording.fate,
            )

    def log_stopped(self) -> None:
        self.outcomes.flush()
        stats = self.counter.snapshot()
        self.log.info(
            "worker stopped: %d completed, %d failed, %d returned, %d abandoned, %d lost",
            stats.completed,
            stats.failed,
            stats.returned,
            stats.abandoned,
            stats.lost,
        )

    # ---- the stream ---------------------------------------------------------------------------

    def new_stream(self, client: StreamSource[S]) -> S:
        """The streaming take to open: the server never holds more than ``concurrency`` jobs
        leased to this worker, so nothing waits in a local buffer while its lease runs."""
        return client.stream(
            self.settings.queues, max=self.settings.concurrency, lease=self.settings.lease
        )

    def open_failed(self, error: TenaxError) -> float:
        """Counts and logs a stream that would not open; the seconds to wait before trying again."""
        self.counter.add("stream_errors")
        delay = self._reconnect.next()
        self.log.warning("cannot open the job stream (%s); again in %.1f s", error, delay)
        return delay

    def opened(self, stream: S) -> int:
        """Makes ``stream`` the one being read; its generation, which marks the jobs it leases."""
        self.stream = stream
        self.generation += 1
        return self.generation

    def receive(self, job: TakenJob[Any], generation: int, stopping: bool) -> bool:
        """Holds a job the stream leased: True when it is to start (:meth:`HeldJobs.start`),
        False when it came during shutdown (parked: it goes back with the stream)."""
        self._reconnect.reset()
        self.counter.add("received")
        state = "parked" if stopping else "queued"
        self.held[job.lease_token] = Held(job, now() + self.settings.heartbeat_s, state, generation)
        return not stopping

    def ended(self, stream: S, stopping: bool) -> None:
        """The stream was read to its end."""
        if not stopping and not stream.closed:
            self.log.warning("the server ended the job stream; opening it again")

    def broke(self, error: TenaxError) -> None:
        self.counter.add("stream_errors")
        self.log.warning("the job stream broke: %s", error)

    def closed(self, generation: int, stopping: bool) -> None:
        """The server put the jobs of a closed stream back to ready: forgets those not started."""
        returned = self.held.forget_stream(generation, stopping)
        if returned:
            self.counter.add("returned", returned)

    def reconnect_delay(self) -> float:
        """The seconds to wait before opening the stream again after it ended or broke."""
        return self._reconnect.next()

    def dead_stream(self) -> S | None:
        """The stream being read, when it went quiet (see :func:`stream_dead`): the caller
        closes it, so that the reader opens a new one."""
        stream = self.stream
        if stream is None:
            return None
        holding = self.held.holding(self.generation)
        silence = now() - stream.last_line_at
        failing_since = self._beats_failing_since
        if not stream_dead(silence, holding, failing_since, self.settings):
            return None
        if self._wording.silence_tells_heartbeats:
            self.log.warning(
                "the job stream is silent (%.0f s, %d job(s) held) and heartbeats %s: reconnecting",
                silence,
                holding,
                "fail" if failing_since is not None else "are fine",
            )
        else:
            self.log.warning(
                "the job stream is silent (%.0f s, %d job(s) held): reconnecting", silence, holding
            )
        self._beats_failing_since = None
        return stream

    # ---- handlers -----------------------------------------------------------------------------

    def handler_raised(self, job: TakenJob[Any], error: BaseException) -> None:
        """Shows a handler's exception to the ``on_error`` hook (call it outside the lock:
        the hook is the user's code)."""
        call_error_hook(self._on_error, job, error, self.log)

    def failure_report(self, job: TakenJob[Any], error: BaseException) -> FailureReport:
        """The report of a job's failure, once :meth:`HeldJobs.take_over` made it
        ``reporting``."""
        ran_s = self.held.ran_for(job)
        return FailureReport(job, error, self.counter, self.log, self.outcomes, ran_s)

    def succeeded(self, job: TakenJob[Any], result: Any = None) -> bool:
        """A handler returned (``result``: what it returned): its completion is queued; False
        when the job is no longer this worker's to complete."""
        self.counter.add("succeeded")
        return self.acks.add(job, result)

    # ---- heartbeats ---------------------------------------------------------------------------

    def due_beats(self) -> list[TakenJob[Any]]:
        return self.held.due_beats(now())

    def beat_failed(self, job: TakenJob[Any], error: TenaxError) -> None:
        """A heartbeat failed: the lease is gone (the result will not be reported), or the
        heartbeat is tried again soon."""
        if isinstance(error, GONE):
            self.held.lose(job)
            self.counter.add("lost")
            self.log.warning("job %d lost its lease: %s; its result will not be reported", job.id, error)
            return
        self.log.warning("job %d: heartbeat failed (%s); trying again", job.id, error)
        if self._beats_failing_since is None:
            self._beats_failing_since = now()
        self.held.next_beat_in(job, self.settings.beat_retry_s)

    def beat_succeeded(self, job: TakenJob[Any], cancelled: bool = False) -> None:
        """A heartbeat held the lease; ``cancelled``: it said the job was cancelled, and the
        handler is told (``job.cancellation``)."""
        if cancelled and not job.cancellation.is_set():
            self.log.info("job %d was cancelled; its handler is told to stop", job.id)
            job.cancellation._set()
        self.counter.add("heartbeats")
        self._beats_failing_since = None
        self.held.next_beat_in(job, self.settings.heartbeat_s)
