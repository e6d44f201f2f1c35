"""What :class:`tenax.Worker` and :class:`tenax.AsyncWorker` share: settings, the handler
registry with payload conversion, the bookkeeping of held jobs, and counters."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeVar

from ._convert import Duration, duration_ms
from ._errors import APIError, LeaseLost, NotFound, NotInFlight, TenaxConnectionError
from ._models import CompleteResult, TakenJob
from ._outcomes import NotRetryable, Retry

H = TypeVar("H")
P = TypeVar("P")

__all__ = ["WorkerSettings", "WorkerStats"]


def _seconds(value: Duration, name: str) -> float:
    if isinstance(value, str):
        raise TypeError(
            f"{name}: give a timedelta or seconds here (the worker schedules with it), not {value!r}"
        )
    return duration_ms(value) / 1000


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    queues: list[str]
    concurrency: int
    lease_s: float
    heartbeat_s: float
    ack_interval_s: float
    ack_batch: int
    shutdown_timeout_s: float

    @classmethod
    def of(
        cls,
        queues: str | Iterable[str],
        concurrency: int,
        lease: Duration,
        heartbeat_every: Duration | None,
        ack_interval: Duration,
        ack_batch: int,
        shutdown_timeout: Duration,
    ) -> WorkerSettings:
        names = [queues] if isinstance(queues, str) else list(queues)
        if not names:
            raise ValueError("a worker needs at least one queue")
        if not 1 <= concurrency <= 1000:
            raise ValueError(f"concurrency must be from 1 to 1000, got {concurrency}")
        lease_s = _seconds(lease, "lease")
        if lease_s < 0.5:
            raise ValueError(f"lease must be at least 0.5 s, got {lease_s} s")
        heartbeat_s = lease_s / 2 if heartbeat_every is None else _seconds(heartbeat_every, "heartbeat_every")
        if not 0 < heartbeat_s < lease_s:
            raise ValueError(
                f"heartbeat_every must be above 0 and below the lease ({lease_s} s), got {heartbeat_s} s"
            )
        if not 1 <= ack_batch <= 10_000:
            raise ValueError(f"ack_batch must be from 1 to 10000, got {ack_batch}")
        return cls(
            queues=names,
            concurrency=concurrency,
            lease_s=lease_s,
            heartbeat_s=heartbeat_s,
            ack_interval_s=_seconds(ack_interval, "ack_interval"),
            ack_batch=ack_batch,
            shutdown_timeout_s=_seconds(shutdown_timeout, "shutdown_timeout"),
        )

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=self.lease_s)

    @property
    def beat_check_s(self) -> float:
        """How often the heartbeat loop looks for due heartbeats: a quarter of the interval,
        from 50 ms to 0.5 s."""
        return max(0.05, min(0.5, self.heartbeat_s / 4))

    @property
    def beat_retry_s(self) -> float:
        """How soon a failed heartbeat is tried again: a quarter of the interval, 1 s at most."""
        return min(1.0, self.heartbeat_s / 4)


@dataclass(slots=True)
class WorkerStats:
    """Counters of a worker since it started (read them any time; they only grow)."""

    received: int = 0
    """Jobs the stream handed to this worker."""
    succeeded: int = 0
    """Handlers that returned."""
    failed: int = 0
    """Failures reported to the server (handler exceptions, unknown types, bad payloads)."""
    completed: int = 0
    """Completions the server confirmed."""
    ack_requests: int = 0
    """Batch completion requests sent (``POST /api/jobs/complete``)."""
    heartbeats: int = 0
    """Lease extensions the server confirmed."""
    lost: int = 0
    """Jobs whose lease this worker lost (expired, or taken back): their result was not kept."""
    abandoned: int = 0
    """Jobs still running at the shutdown deadline: given back to the queue unreported."""
    returned: int = 0
    """Jobs received but not started before shutdown: given back to the queue."""
    stream_errors: int = 0
    """Times the stream broke and was opened again."""


class Counter:
    """:class:`WorkerStats` behind a lock (threads) or not (asyncio: one thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.stats = WorkerStats()

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + n)

    def snapshot(self) -> WorkerStats:
        with self._lock:
            return dataclasses.replace(self.stats)


class PayloadMismatch(NotRetryable):
    """The payload does not convert to the handler's type: no retry will change that (fix the
    code or the job, then replay it)."""


class UnknownJobType(Retry):
    """A job whose type has no handler in this worker: retried by its policy (another worker,
    or a later version of this one, may know the type)."""


def converter(payload: Any) -> Callable[[Any], Any] | None:
    """How to turn a JSON payload into a handler's type: a class's ``from_dict``, a dataclass
    built from the object's keys, or any callable given the JSON value."""
    if payload is None:
        return None
    from_dict = getattr(payload, "from_dict", None)
    if isinstance(payload, type) and callable(from_dict):
        return from_dict  # type: ignore[no-any-return]
    if isinstance(payload, type) and dataclasses.is_dataclass(payload):
        cls = payload

        def build(data: Any) -> Any:
            if not isinstance(data, Mapping):
                raise TypeError(f"expected a JSON object, got {type(data).__name__}")
            return cls(**data)

        return build
    if callable(payload):
        return payload  # type: ignore[no-any-return]
    raise TypeError(f"payload must be a class or a callable, got {payload!r}")


@dataclass(frozen=True, slots=True)
class Handler(Generic[H]):
    type: str
    func: H
    convert: Callable[[Any], Any] | None
    payload_name: str

    def job_for(self, job: TakenJob[Any]) -> TakenJob[Any]:
        """The job with its converted payload; :class:`PayloadMismatch` when it does not fit."""
        if self.convert is None:
            return job
        try:
            return job.with_payload(self.convert(job.payload))
        except Exception as error:
            raise PayloadMismatch(
                f"the payload of job type {self.type!r} does not fit {self.payload_name}: "
                f"{type(error).__name__}: {error}"
            ) from error


class Registry(Generic[H]):
    def __init__(self) -> None:
        self._handlers: dict[str, Handler[H]] = {}

    def add(self, type: str, func: H, payload: Any) -> None:
        if type in self._handlers:
            raise ValueError(f"a handler for job type {type!r} is already registered")
        name = getattr(payload, "__qualname__", None) or repr(payload)
        self._handlers[type] = Handler(type, func, converter(payload), name)

    def types(self) -> list[str]:
        return sorted(self._handlers)

    def resolve(self, job: TakenJob[Any]) -> tuple[H, TakenJob[Any]]:
        """The handler of ``job`` and the job as it takes it (its payload converted). Raises
        :class:`UnknownJobType` or :class:`PayloadMismatch`: the job's failure to report, as a
        handler's exception would be."""
        handler = self._handlers.get(job.type)
        if handler is None:
            known = ", ".join(repr(t) for t in self.types()) or "none"
            raise UnknownJobType(
                f"no handler for job type {job.type!r} in this worker (it handles: {known})",
                detail={"type": job.type, "handled": self.types()},
            )
        return handler.func, handler.job_for(job)


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



class HeldJobs(dict[int, Held]):
    """The held jobs by lease token, with the state changes both workers make to them, so the
    two cannot come to disagree on them. The threaded worker calls these under its lock; the
    asyncio one from its event loop, which is all the exclusion it needs."""

    def take_over(self, job: TakenJob[Any], state: str) -> bool:
        """Moves a held job to ``state``; False when it is no longer this worker's to report."""
        held = self.get(job.lease_token)
        if held is None or held.state in ("lost", "abandoned"):
            if held is not None and held.state == "lost":
                del self[job.lease_token]
            return False
        held.state = state
        return True

    def lose(self, job: TakenJob[Any]) -> None:
        """The lease is gone: the result will not be reported. A job whose result is already
        on its way keeps its state, so the report still goes (and is refused by the server)."""
        held = self.get(job.lease_token)
        if held is not None and held.state not in ("acking", "reporting"):
            held.state = "lost"

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


def completions_refused(error: TenaxConnectionError | APIError) -> bool:
    """True when the server refused a batch of completions for good (a 4xx other than a
    timeout): sending it again would only be refused again."""
    return isinstance(error, APIError) and error.status < 500 and error.status != 408


def record_completions(
    results: Iterable[CompleteResult], counter: Counter, log: logging.Logger
) -> None:
    """Counts and logs the answer to a batch of completions."""
    counter.add("ack_requests")
    for result in results:
        if result.completed:
            counter.add("completed")
        else:
            counter.add("lost")
            log.warning(
                "job %d ran, but its completion was refused: %s",
                result.id,
                result.error.message if result.error else "unknown reason",
            )


ErrorHook = Callable[[TakenJob[Any], BaseException], object]

GONE = (LeaseLost, NotInFlight, NotFound)
"""Answers that say the job is no longer this worker's."""


def call_error_hook(
    hook: ErrorHook | None,
    job: TakenJob[Any],
    error: BaseException,
    log: logging.Logger,
) -> None:
    """Shows a handler's failure to the ``on_error`` hook; the hook's own failure is only
    logged, so that the job's failure is still reported."""
    if hook is None:
        return
    try:
        hook(job, error)
    except Exception:
        log.exception("the on_error hook raised")


def log_stopped(log: logging.Logger, stats: WorkerStats) -> None:
    log.info(
        "worker stopped: %d completed, %d failed, %d returned, %d abandoned, %d lost",
        stats.completed,
        stats.failed,
        stats.returned,
        stats.abandoned,
        stats.lost,
    )


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


def ack_wait(oldest: float, count: int, settings: WorkerSettings, flush: bool) -> float:
    """Seconds until the waiting completions are due to be sent, 0 for now: when ``flush``
    (shutting down, or nothing running that could add to the batch), when they fill a batch,
    or when the oldest (queued at monotonic time ``oldest``) has waited ``ack_interval``."""
    age = now() - oldest
    if flush or count >= settings.ack_batch or age >= settings.ack_interval_s:
        return 0.0
    return max(0.001, settings.ack_interval_s - age)


def now() -> float:
    return time.monotonic()


@dataclass(slots=True)
class Backoff:
    """Delays between reconnections: 0.2 s doubling to ``cap``; reset after a success."""

    first: float = 0.2
    cap: float = 5.0
    current: float = field(default=0.0)

    def next(self) -> float:
        self.current = self.first if self.current == 0 else min(self.cap, self.current * 2)
        return self.current

    def reset(self) -> None:
        self.current = 0.0
