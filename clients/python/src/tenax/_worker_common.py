"""What :class:`tenax.Worker` and :class:`tenax.AsyncWorker` are made of before they run:
settings, counters, and the handler registry with payload conversion; and the small pieces
every part of a running worker uses (the clock, backoff, the answers that mean a job is gone).

The rest of what the two share is by subject: ``_worker_held`` (the held jobs and their
states), ``_worker_acks`` (batched completions), ``_worker_failures`` (reporting a handler's
failure), ``_worker_state`` (the stream, heartbeats, shutdown, and the log lines of each)."""

from __future__ import annotations

import dataclasses
import inspect
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, Literal, TypeVar

from ._convert import Duration, duration_ms
from ._errors import LeaseLost, NotFound, NotInFlight
from ._models import TakenJob
from ._outcomes import JobOutcome, NotRetryable, Retry
from ._transport import check_worker_name, default_worker_name

H = TypeVar("H")
P = TypeVar("P")

__all__ = ["WorkerSettings", "WorkerStats"]

UnknownTypes = Literal["dead", "retry"]


def worker_name(given: str | None, client_worker: str | None) -> str:
    """The name a worker gives the server: ``given``, else its client's, else
    ``<hostname>-<pid>``. A name a header cannot carry is refused (``ValueError``)."""
    if given is not None:
        return check_worker_name(given)
    return client_worker if client_worker is not None else default_worker_name()


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
    unknown_types: UnknownTypes = "dead"

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
        unknown_types: UnknownTypes = "dead",
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
        if unknown_types not in ("dead", "retry"):
            raise ValueError(f'unknown_types must be "dead" or "retry", got {unknown_types!r}')
        return cls(
            queues=names,
            concurrency=concurrency,
            lease_s=lease_s,
            heartbeat_s=heartbeat_s,
            ack_interval_s=_seconds(ack_interval, "ack_interval"),
            ack_batch=ack_batch,
            shutdown_timeout_s=_seconds(shutdown_timeout, "shutdown_timeout"),
            unknown_types=unknown_types,
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


class UnknownJobType(JobOutcome):
    """A job whose type has no handler in this worker. Dead at once by default, so that it
    shows (in the log, and among the dead jobs) instead of being retried unseen for the
    policy's weeks; with ``unknown_types="retry"`` its policy retries it (for queues shared
    with workers of other versions, which may know the type)."""

    def __init__(self, message: str, *, retryable: bool, detail: Any = None) -> None:
        super().__init__(message, detail=detail)
        self.retryable = retryable

    def fail_options(self) -> dict[str, Any]:
        return {} if self.retryable else {"retryable": False}


def converter(payload: Any, strict: bool = False) -> Callable[[Any], Any] | None:
    """How to turn a JSON payload into a handler's type: a class's ``from_dict``, a dataclass
    built from the object's keys, or any callable given the JSON value.

    A dataclass takes the keys its constructor knows and ignores the others, so that a
    producer may add a key before every worker knows it; ``strict`` refuses them instead.
    Missing required fields fail either way."""
    if payload is None:
        return None
    from_dict = getattr(payload, "from_dict", None)
    has_from_dict = isinstance(payload, type) and callable(from_dict)
    is_dataclass = isinstance(payload, type) and dataclasses.is_dataclass(payload) and not has_from_dict
    if strict and not is_dataclass:
        raise TypeError(
            f"strict=True applies to dataclass payloads; {payload!r} reads the whole payload itself"
        )
    if has_from_dict:
        return from_dict
    if is_dataclass:
        cls = payload
        parameters = inspect.signature(cls).parameters.values()
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
        known = None if strict or takes_any else {p.name for p in parameters}

        def build(data: Any) -> Any:
            if not isinstance(data, Mapping):
                raise TypeError(f"expected a JSON object, got {type(data).__name__}")
            if known is None:
                return cls(**data)
            return cls(**{key: value for key, value in data.items() if key in known})

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
    def __init__(self, unknown_types: UnknownTypes = "dead") -> None:
        self._handlers: dict[str, Handler[H]] = {}
        self._unknown_types = unknown_types

    def add(self, type: str, func: H, payload: Any, strict: bool = False) -> None:
        if type in self._handlers:
            raise ValueError(f"a handler for job type {type!r} is already registered")
        name = getattr(payload, "__qualname__", None) or repr(payload)
        self._handlers[type] = Handler(type, func, converter(payload, strict), name)

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
                retryable=self._unknown_types == "retry",
                detail={"type": job.type, "handled": self.types()},
            )
        return handler.func, handler.job_for(job)


GONE = (LeaseLost, NotInFlight, NotFound)
"""Answers that say the job is no longer this worker's."""


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


class JobCancelled(Exception):
    """What a worker reports when a cancelled job's handler returned normally: the job was
    cancelled while it ran (``job.cancelled``), and its handler stopped."""

    def __init__(self) -> None:
        super().__init__("the job was cancelled while it ran; its handler stopped")
