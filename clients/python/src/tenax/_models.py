"""The server's answers as typed, immutable dataclasses.

Each class has a ``from_json`` that reads the server's JSON. Fields the server may leave out
are optional here; fields it adds in a later version are ignored, so an older client keeps
working against a newer server. Times are aware UTC datetimes; durations the server gives in
milliseconds keep their ``_ms`` name and have a ``timedelta`` property beside them.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, Mapping, TypeVar, cast

from ._convert import parse_optional_time, parse_time
from ._errors import APIError, error_class

__all__ = [
    "CompleteResult",
    "Counts",
    "DeletedJobs",
    "DeletedSubscription",
    "Delivery",
    "DeliveryAttempt",
    "DeliveryPage",
    "AttemptPage",
    "Enqueued",
    "FailResult",
    "Job",
    "JobError",
    "JobPage",
    "JobStatus",
    "LeaseExtended",
    "OnParentDead",
    "ParentResult",
    "PolicyPreview",
    "PreviewRow",
    "Queue",
    "ReplayResult",
    "ResultError",
    "Skipped",
    "Stats",
    "Subscription",
    "SubscriptionHealth",
    "TakenJob",
    "Workflow",
    "WorkflowJob",
    "WorkflowStatus",
]

JobStatus = Literal[
    "waiting", "scheduled", "ready", "in_flight", "completed", "dead", "cancelled"
]
"""Where a job is in its lifecycle (docs/api.md, "Job lifecycle"). ``waiting``: it waits for
jobs it was enqueued ``after`` (docs/workflows.md). A newer server may answer a status not
listed here; it comes through as the string the server sent."""

OnParentDead = Literal["cancel", "run"]
"""What a waiting job does when a job it waits for will not complete: ``cancel`` (the
default: it ends too, and so do the jobs waiting for it) or ``run`` (it still runs once its
other parents are done, and sees the dead parent among its ``parents``)."""

WorkflowStatus = Literal["running", "completed", "failed"]
"""A workflow's state: ``running`` while any of its jobs has not finished; then
``completed`` if every job completed, else ``failed`` (one is dead)."""

P = TypeVar("P")
P2 = TypeVar("P2")

JSONObject = Mapping[str, Any]


def _status(value: Any) -> JobStatus:
    return cast(JobStatus, str(value))


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ids(value: Any) -> list[int]:
    """A list of job ids; the server writes ids past 2^53 as strings of digits."""
    return [int(i) for i in value] if isinstance(value, list) else []


def _on_parent_dead(value: Any) -> OnParentDead | None:
    return cast(OnParentDead, value) if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class Enqueued:
    """A job as stored by an enqueue. ``created`` is false when ``on_duplicate="existing"``
    found an unfinished job holding the unique key: ``id`` is then that job's."""

    id: int
    created: bool
    status: JobStatus
    run_at: datetime

    @classmethod
    def from_json(cls, data: JSONObject) -> Enqueued:
        return cls(
            id=int(data["id"]),
            created=bool(data["created"]),
            status=_status(data["status"]),
            run_at=parse_time(data["run_at"]),
        )


@dataclass(frozen=True, slots=True)
class JobError:
    """One failed attempt of a job, as the worker reported it."""

    attempt: int
    at: datetime
    message: str
    detail: Any = None

    @classmethod
    def from_json(cls, data: JSONObject) -> JobError:
        return cls(
            attempt=int(data["attempt"]),
            at=parse_time(data["at"]),
            message=str(data["message"]),
            detail=data.get("detail"),
        )


@dataclass(frozen=True, slots=True)
class Job:
    """A job with its status and history (``GET /api/jobs/{id}``)."""

    id: int
    queue: str
    type: str
    payload: Any
    priority: int
    status: JobStatus
    attempt: int
    """The number of the next run (failures so far + 1)."""
    failures: int
    run_at: datetime
    """For a scheduled job when it becomes ready; otherwise when it last became ready."""
    created_at: datetime
    finished_at: datetime | None = None
    dead_reason: str | None = None
    policy: dict[str, Any] | None = None
    """The job's own policy in canonical native spelling (``None``: its queue's or the server's)."""
    unique_key: str | None = None
    errors: list[JobError] = field(default_factory=list)
    traceparent: str | None = None
    """The W3C trace context it was enqueued with."""
    result: Any = None
    """A completed job's result, as its worker sent it (``None``: it has none)."""
    after: list[int] = field(default_factory=list)
    """The jobs it waits (or waited) for, in the order it named them (empty: none)."""
    on_parent_dead: OnParentDead | None = None
    """With ``after``: what it does when one of those will not complete."""
    batch: int | None = None
    """The batch it is a member of (docs/workflows.md#batches)."""

    @classmethod
    def from_json(cls, data: JSONObject) -> Job:
        policy = data.get("policy")
        return cls(
            id=int(data["id"]),
            queue=str(data["queue"]),
            type=str(data.get("type", "")),
            payload=data.get("payload"),
            priority=int(data.get("priority", 0)),
            status=_status(data["status"]),
            attempt=int(data["attempt"]),
            failures=int(data["failures"]),
            run_at=parse_time(data["run_at"]),
            created_at=parse_time(data["created_at"]),
            finished_at=parse_optional_time(data.get("finished_at")),
            dead_reason=_opt_str(data.get("dead_reason")),
            policy=policy if isinstance(policy, dict) else None,
            unique_key=_opt_str(data.get("unique_key")),
            errors=[JobError.from_json(e) for e in data.get("errors") or []],
            traceparent=_opt_str(data.get("traceparent")),
            result=data.get("result"),
            after=_ids(data.get("after")),
            on_parent_dead=_on_parent_dead(data.get("on_parent_dead")),
            batch=None if data.get("batch") is None else int(data["batch"]),
        )


BatchState = Literal["open", "closed", "finished"]
"""Where a batch is: ``open`` (jobs may be added), ``closed`` (no more; its callbacks go once
its pending jobs finish), ``finished`` (its callbacks were enqueued)."""


@dataclass(frozen=True, slots=True)
class BatchCounts:
    """A batch's jobs by how far they are."""

    total: int
    pending: int
    completed: int
    dead: int
    deleted: int
    """Deleted (or expired) before they finished."""
    cancelled: int = 0
    """Cancelled before they finished."""

    @classmethod
    def from_json(cls, data: JSONObject) -> BatchCounts:
        return cls(
            total=int(data["total"]),
            pending=int(data["pending"]),
            completed=int(data["completed"]),
            dead=int(data["dead"]),
            deleted=int(data["deleted"]),
            cancelled=int(data.get("cancelled", 0)),
        )


@dataclass(frozen=True, slots=True)
class Batch:
    """A batch (``GET /api/batches/{id}``): jobs counted together, with callback jobs enqueued
    once every one has finished (``on_complete``), or only when every one completed
    (``on_success``). A callback's payload is ``{"batch": {"id", "total", "completed",
    "dead", "deleted", "succeeded", ...}, "payload": <its own payload>}``."""

    id: int
    state: str
    counts: BatchCounts
    queues: list[str]
    """The queues of its jobs and callbacks."""
    created_at: datetime
    description: str | None = None
    on_complete: dict[str, Any] | None = None
    on_success: dict[str, Any] | None = None
    on_complete_job: int | None = None
    """The ``on_complete`` callback's job, once enqueued."""
    on_success_job: int | None = None
    finished_at: datetime | None = None

    @classmethod
    def from_json(cls, data: JSONObject) -> Batch:
        def opt_int(value: Any) -> int | None:
            return None if value is None else int(value)

        def opt_dict(value: Any) -> dict[str, Any] | None:
            return value if isinstance(value, dict) else None

        return cls(
            id=int(data["id"]),
            state=str(data["state"]),
            counts=BatchCounts.from_json(data["counts"]),
            queues=[str(q) for q in data.get("queues") or []],
            created_at=parse_time(data["created_at"]),
            description=_opt_str(data.get("description")),
            on_complete=opt_dict(data.get("on_complete")),
            on_success=opt_dict(data.get("on_success")),
            on_complete_job=opt_int(data.get("on_complete_job")),
            on_success_job=opt_int(data.get("on_success_job")),
            finished_at=parse_optional_time(data.get("finished_at")),
        )


@dataclass(frozen=True, slots=True)
class BatchJobs:
    """A batch, and the jobs a request added to it, in request order."""

    batch: Batch
    jobs: list[Enqueued]

    @classmethod
    def from_json(cls, data: JSONObject) -> BatchJobs:
        return cls(
            batch=Batch.from_json(data["batch"]),
            jobs=[Enqueued.from_json(j) for j in data.get("jobs") or []],
        )


@dataclass(frozen=True, slots=True)
class JobPage:
    """A page of jobs in id order; pass ``next_after`` as ``after`` for the next page."""

    jobs: list[Job]
    next_after: int | None

    @classmethod
    def from_json(cls, data: JSONObject) -> JobPage:
        return cls(
            jobs=[Job.from_json(j) for j in data["jobs"]],
            next_after=_opt_int(data.get("next_after")),
        )


class Cancellation:
    """Whether a job was cancelled while this worker ran it (``POST /api/jobs/{id}/cancel``),
    as the worker learnt on a heartbeat. A handler checks :meth:`is_set` (or
    ``job.cancelled``), blocks on :meth:`wait` in a thread, or awaits :meth:`wait_async` in an
    asyncio handler; then it stops, by returning or raising, and the worker reports a failure,
    which the server finishes as cancelled. Set by the worker only."""

    __slots__ = ("_event", "_lock", "_waiters")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until the job is cancelled, at most ``timeout`` seconds; whether it is."""
        return self._event.wait(timeout)

    async def wait_async(self) -> None:
        """Returns once the job is cancelled (never, if it is not)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._event.is_set():
                return
            self._waiters.append((loop, future))
        try:
            await future
        finally:
            with self._lock:
                self._waiters = [(lp, f) for lp, f in self._waiters if f is not future]

    def _set(self) -> None:
        """The worker heard that the job was cancelled: wakes every waiter, in any thread or
        event loop."""
        with self._lock:
            self._event.set()
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            loop.call_soon_threadsafe(_resolve, future)

    def __repr__(self) -> str:
        return f"Cancellation(set={self.is_set()})"


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass(frozen=True, slots=True)
class ParentResult:
    """A job a taken job waited for (``after``): how it finished, and its result."""

    id: int
    type: str
    status: JobStatus
    """As it is when the job is taken: ``completed``, or ``dead`` for a parent that did not
    complete, handed to a job enqueued with ``on_parent_dead="run"``."""
    result: Any = None
    """Its worker's result (``None``: it has none)."""

    @classmethod
    def from_json(cls, data: JSONObject) -> ParentResult:
        return cls(
            id=int(data["id"]),
            type=str(data.get("type", "")),
            status=_status(data["status"]),
            result=data.get("result"),
        )


@dataclass(frozen=True, slots=True)
class TakenJob(Generic[P]):
    """A job leased to this worker by a take or a stream.

    Report on it with ``complete``, ``fail`` or ``heartbeat`` (each sends ``lease_token``, so a
    worker whose lease ran out cannot act on a job another worker now holds). In a handler of
    :class:`tenax.Worker` the ``payload`` is the converted payload (``TakenJob[EmailArgs]``).
    """

    id: int
    queue: str
    type: str
    payload: P
    priority: int
    attempt: int
    """1 for the first run; failures so far + 1."""
    lease_token: int
    lease_expires_at: datetime
    created_at: datetime
    traceparent: str | None = None
    """The W3C trace context it was enqueued with: continue the trace from it."""
    cancellation: Cancellation = field(default_factory=Cancellation, compare=False, repr=False)
    """Set when the worker learns, on a heartbeat, that the job was cancelled while it ran."""

    @property
    def cancelled(self) -> bool:
        """Whether the job was cancelled while it ran: stop soon (see :class:`Cancellation`)."""
        return self.cancellation.is_set()
    parents: tuple[ParentResult, ...] = ()
    """The jobs it waited for (``after``), in that order, each with how it finished and its
    result; empty for a job that waited for none (a parent deleted since is left out)."""

    def parent(self, id: int) -> ParentResult:
        """Parent ``id`` of this job; ``KeyError`` if it did not wait for that job."""
        for parent in self.parents:
            if parent.id == id:
                return parent
        raise KeyError(f"job {self.id} did not wait for job {id}")

    def parent_result(self, id: int) -> Any:
        """The result of parent ``id`` (``None``: it has none); ``KeyError`` if this job did
        not wait for that job."""
        return self.parent(id).result

    @classmethod
    def from_json(cls, data: JSONObject) -> TakenJob[Any]:
        return TakenJob(
            id=int(data["id"]),
            queue=str(data["queue"]),
            type=str(data.get("type", "")),
            payload=data.get("payload"),
            priority=int(data.get("priority", 0)),
            attempt=int(data["attempt"]),
            lease_token=int(data["lease_token"]),
            lease_expires_at=parse_time(data["lease_expires_at"]),
            created_at=parse_time(data["created_at"]),
            traceparent=_opt_str(data.get("traceparent")),
            parents=tuple(ParentResult.from_json(p) for p in data.get("parents") or []),
        )

    def with_payload(self, payload: P2) -> TakenJob[P2]:
        """The same job with another payload (the worker's typed conversion)."""
        return TakenJob(
            id=self.id,
            queue=self.queue,
            type=self.type,
            payload=payload,
            priority=self.priority,
            attempt=self.attempt,
            lease_token=self.lease_token,
            lease_expires_at=self.lease_expires_at,
            created_at=self.created_at,
            traceparent=self.traceparent,
            parents=self.parents,
            cancellation=self.cancellation,
        )


@dataclass(frozen=True, slots=True)
class LeaseExtended:
    """The answer of a heartbeat: the lease now ends at ``lease_expires_at``. ``cancelled``: the
    job was cancelled while in flight; stop, and report a failure (the server then finishes
    the job as cancelled)."""

    id: int
    lease_expires_at: datetime
    cancelled: bool = False

    @classmethod
    def from_json(cls, data: JSONObject) -> LeaseExtended:
        return cls(
            id=int(data["id"]),
            lease_expires_at=parse_time(data["lease_expires_at"]),
            cancelled=bool(data.get("cancelled", False)),
        )


@dataclass(frozen=True, slots=True)
class ResultError:
    """Why one job of a batch completion was not completed."""

    code: str
    message: str

    def exception(self) -> APIError:
        """The error this would have been for a single completion (``LeaseLost``, ...)."""
        status = 404 if self.code == "not_found" else 409
        return error_class(status, self.code)(status, self.code, self.message)


@dataclass(frozen=True, slots=True)
class CompleteResult:
    """The outcome of completing one job: ``completed``, or the ``error`` that prevented it."""

    id: int
    completed: bool
    error: ResultError | None = None

    @classmethod
    def from_json(cls, data: JSONObject) -> CompleteResult:
        error = data.get("error")
        return cls(
            id=int(data["id"]),
            completed=bool(data.get("completed", data.get("status") == "completed")),
            error=(
                ResultError(code=str(error.get("code")), message=str(error.get("message")))
                if isinstance(error, dict)
                else None
            ),
        )


@dataclass(frozen=True, slots=True)
class FailResult:
    """The policy's decision on a failure: scheduled again (``run_at``, after ``delay_ms``, as
    ``attempt``), ready at once, or dead (``dead_reason``)."""

    id: int
    status: JobStatus
    failures: int
    dead_reason: str | None = None
    attempt: int | None = None
    run_at: datetime | None = None
    delay_ms: int | None = None

    @property
    def dead(self) -> bool:
        return self.status == "dead"

    @property
    def cancelled(self) -> bool:
        """The job was cancelled while in flight: the failure finished it as cancelled."""
        return self.status == "cancelled"

    @property
    def delay(self) -> timedelta | None:
        return None if self.delay_ms is None else timedelta(milliseconds=self.delay_ms)

    @classmethod
    def from_json(cls, data: JSONObject) -> FailResult:
        return cls(
            id=int(data["id"]),
            status=_status(data["status"]),
            failures=int(data["failures"]),
            dead_reason=_opt_str(data.get("dead_reason")),
            attempt=_opt_int(data.get("attempt")),
            run_at=parse_optional_time(data.get("run_at")),
            delay_ms=_opt_int(data.get("delay_ms")),
        )


@dataclass(frozen=True, slots=True)
class Counts:
    """Jobs (or deliveries) by status."""

    waiting: int = 0
    """Jobs waiting for the jobs they were enqueued ``after``."""
    scheduled: int = 0
    ready: int = 0
    in_flight: int = 0
    completed: int = 0
    dead: int = 0
    cancelled: int = 0

    @property
    def unfinished(self) -> int:
        """Jobs not yet completed or dead: waiting + scheduled + ready + in flight."""
        return self.waiting + self.scheduled + self.ready + self.in_flight

    @classmethod
    def from_json(cls, data: JSONObject | None) -> Counts:
        data = data or {}
        return cls(
            waiting=int(data.get("waiting", 0)),
            scheduled=int(data.get("scheduled", 0)),
            ready=int(data.get("ready", 0)),
            in_flight=int(data.get("in_flight", 0)),
            completed=int(data.get("completed", 0)),
            dead=int(data.get("dead", 0)),
            cancelled=int(data.get("cancelled", 0)),
        )


@dataclass(frozen=True, slots=True)
class Stats:
    """Counts per queue (by name) and over every queue."""

    queues: dict[str, Counts]
    totals: Counts

    @classmethod
    def from_json(cls, data: JSONObject) -> Stats:
        return cls(
            queues={str(q["queue"]): Counts.from_json(q) for q in data.get("queues") or []},
            totals=Counts.from_json(data.get("totals")),
        )


@dataclass(frozen=True, slots=True)
class Queue:
    """A queue's settings and counts."""

    name: str
    paused: bool
    policy: dict[str, Any] | None
    counts: Counts
    disable_overrides: bool = False
    message_ttl_ms: int | None = None

    @property
    def message_ttl(self) -> timedelta | None:
        return None if self.message_ttl_ms is None else timedelta(milliseconds=self.message_ttl_ms)

    @classmethod
    def from_json(cls, data: JSONObject) -> Queue:
        policy = data.get("policy")
        return cls(
            name=str(data["name"]),
            paused=bool(data.get("paused", False)),
            policy=policy if isinstance(policy, dict) else None,
            counts=Counts.from_json(data.get("counts")),
            disable_overrides=bool(data.get("disable_overrides", False)),
            message_ttl_ms=_opt_int(data.get("message_ttl_ms")),
        )


@dataclass(frozen=True, slots=True)
class Skipped:
    """A job that a replay named or selected but did not replay, and why."""

    id: int
    reason: str


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What a dead-job replay did."""

    replayed: int
    ids: list[int]
    skipped: list[Skipped] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: JSONObject) -> ReplayResult:
        return cls(
            replayed=int(data["replayed"]),
            ids=[int(i) for i in data.get("ids") or []],
            skipped=[
                Skipped(id=int(s["id"]), reason=str(s["reason"]))
                for s in data.get("skipped") or []
            ],
        )


@dataclass(frozen=True, slots=True)
class CancelResult:
    """What ``cancel(id)`` did: ``outcome`` is ``"cancelled"`` (the job was scheduled or ready,
    and is now cancelled) or ``"marked"`` (it is in flight: its worker learns it on its next
    heartbeat); ``job`` is the job as it now is."""

    outcome: Literal["cancelled", "marked"]
    job: Job

    @classmethod
    def from_json(cls, data: JSONObject) -> CancelResult:
        outcome: Literal["cancelled", "marked"] = (
            "marked" if data["outcome"] == "marked" else "cancelled"
        )
        return cls(outcome=outcome, job=Job.from_json(data["job"]))


@dataclass(frozen=True, slots=True)
class CancelledJobs:
    """What ``cancel_jobs`` did: jobs cancelled at once, and jobs in flight whose leases were
    marked."""

    cancelled: int
    marked: int
    cancelled_ids: list[int]
    marked_ids: list[int]

    @classmethod
    def from_json(cls, data: JSONObject) -> CancelledJobs:
        return cls(
            cancelled=int(data["cancelled"]),
            marked=int(data["marked"]),
            cancelled_ids=[int(i) for i in data.get("cancelled_ids") or []],
            marked_ids=[int(i) for i in data.get("marked_ids") or []],
        )


@dataclass(frozen=True, slots=True)
class DeletedJobs:
    deleted: int
    ids: list[int]

    @classmethod
    def from_json(cls, data: JSONObject) -> DeletedJobs:
        return cls(deleted=int(data["deleted"]), ids=[int(i) for i in data.get("ids") or []])


@dataclass(frozen=True, slots=True)
class PreviewRow:
    """Retry ``retry`` of a policy: its delay, the sum so far, and the jitter band."""

    retry: int
    delay_ms: int
    cumulative_ms: int
    min_delay_ms: int
    max_delay_ms: int

    @property
    def delay(self) -> timedelta:
        return timedelta(milliseconds=self.delay_ms)


@dataclass(frozen=True, slots=True)
class PolicyPreview:
    """A policy's first retries, and the totals of all of them."""

    retries: list[PreviewRow]
    window_ms: int
    retry_count: int
    truncated: bool

    @property
    def window(self) -> timedelta:
        return timedelta(milliseconds=self.window_ms)

    @classmethod
    def from_json(cls, data: JSONObject) -> PolicyPreview:
        return cls(
            retries=[
                PreviewRow(
                    retry=int(r["retry"]),
                    delay_ms=int(r["delay_ms"]),
                    cumulative_ms=int(r["cumulative_ms"]),
                    min_delay_ms=int(r["min_delay_ms"]),
                    max_delay_ms=int(r["max_delay_ms"]),
                )
                for r in data.get("retries") or []
            ],
            window_ms=int(data["window_ms"]),
            retry_count=int(data["retry_count"]),
            truncated=bool(data.get("truncated", False)),
        )


@dataclass(frozen=True, slots=True)
class SubscriptionHealth:
    healthy: bool
    consecutive_failures: int
    recent_attempts: int
    recent_failure_rate: float
    last_success_at: datetime | None
    last_failure_at: datetime | None
    failing_since: datetime | None

    @classmethod
    def from_json(cls, data: JSONObject | None) -> SubscriptionHealth:
        data = data or {}
        return cls(
            healthy=bool(data.get("healthy", True)),
            consecutive_failures=int(data.get("consecutive_failures", 0)),
            recent_attempts=int(data.get("recent_attempts", 0)),
            recent_failure_rate=float(data.get("recent_failure_rate", 0.0)),
            last_success_at=parse_optional_time(data.get("last_success_at")),
            last_failure_at=parse_optional_time(data.get("last_failure_at")),
            failing_since=parse_optional_time(data.get("failing_since")),
        )


@dataclass(frozen=True, slots=True)
class Subscription:
    """A webhook subscription of a queue (docs/webhooks.md)."""

    id: int
    queue: str
    endpoint: str
    enabled: bool
    # Whether its subscriber confirmed it (Zaqar's confirmation): messages go only to a
    # confirmed subscription.
    confirmed: bool
    disabled_reason: str | None
    policy: dict[str, Any] | None
    effective_policy: dict[str, Any]
    policy_source: Literal["subscription", "queue", "server"]
    throttle_per_second: int | None
    content_type: str
    secret: str
    headers: dict[str, str]
    retryable_statuses: list[int] | None
    max_concurrency: int | None
    auto_disable_after_ms: int
    format: Literal["tenax", "zaqar"]
    created_at: datetime
    updated_at: datetime
    health: SubscriptionHealth
    deliveries: Counts

    @classmethod
    def from_json(cls, data: JSONObject) -> Subscription:
        policy = data.get("policy")
        statuses = data.get("retryable_statuses")
        return cls(
            id=int(data["id"]),
            queue=str(data["queue"]),
            endpoint=str(data["endpoint"]),
            enabled=bool(data.get("enabled", True)),
            confirmed=bool(data.get("confirmed", True)),
            disabled_reason=_opt_str(data.get("disabled_reason")),
            policy=policy if isinstance(policy, dict) else None,
            effective_policy=dict(data.get("effective_policy") or {}),
            policy_source=cast(
                Literal["subscription", "queue", "server"], str(data.get("policy_source"))
            ),
            throttle_per_second=_opt_int(data.get("throttle_per_second")),
            content_type=str(data.get("content_type", "application/json")),
            secret=str(data.get("secret", "")),
            headers={str(k): str(v) for k, v in (data.get("headers") or {}).items()},
            retryable_statuses=(
                [int(s) for s in statuses] if isinstance(statuses, list) else None
            ),
            max_concurrency=_opt_int(data.get("max_concurrency")),
            auto_disable_after_ms=int(data.get("auto_disable_after_ms", 0)),
            format=cast(Literal["tenax", "zaqar"], str(data.get("format", "tenax"))),
            created_at=parse_time(data["created_at"]),
            updated_at=parse_time(data["updated_at"]),
            health=SubscriptionHealth.from_json(data.get("health")),
            deliveries=Counts.from_json(data.get("deliveries")),
        )


@dataclass(frozen=True, slots=True)
class DeletedSubscription:
    deleted: int
    deliveries_deleted: int

    @classmethod
    def from_json(cls, data: JSONObject) -> DeletedSubscription:
        return cls(
            deleted=int(data["deleted"]), deliveries_deleted=int(data["deliveries_deleted"])
        )


@dataclass(frozen=True, slots=True)
class DeliveryAttempt:
    """One POST of a delivery to its endpoint."""

    delivery: int
    attempt: int
    at: datetime
    latency_ms: int
    result: Literal["delivered", "retryable", "permanent"]
    status: int | None
    error: str | None
    response: str | None
    retry_after_ms: int | None

    @classmethod
    def from_json(cls, data: JSONObject) -> DeliveryAttempt:
        return cls(
            delivery=int(data["delivery"]),
            attempt=int(data["attempt"]),
            at=parse_time(data["at"]),
            latency_ms=int(data.get("latency_ms", 0)),
            result=cast(Literal["delivered", "retryable", "permanent"], str(data["result"])),
            status=_opt_int(data.get("status")),
            error=_opt_str(data.get("error")),
            response=_opt_str(data.get("response")),
            retry_after_ms=_opt_int(data.get("retry_after_ms")),
        )


@dataclass(frozen=True, slots=True)
class Delivery:
    """A message's delivery to one subscription; ``attempts`` only from ``get_delivery``."""

    id: int
    subscription: int
    message_id: int
    queue: str
    type: str
    status: JobStatus
    failures: int
    run_at: datetime
    created_at: datetime
    finished_at: datetime | None
    dead_reason: str | None
    policy: dict[str, Any] | None
    attempts: list[DeliveryAttempt] | None = None

    @classmethod
    def from_json(cls, data: JSONObject) -> Delivery:
        policy = data.get("policy")
        attempts = data.get("attempts")
        return cls(
            id=int(data["id"]),
            subscription=int(data["subscription"]),
            message_id=int(data["message_id"]),
            queue=str(data["queue"]),
            type=str(data.get("type", "")),
            status=_status(data["status"]),
            failures=int(data.get("failures", 0)),
            run_at=parse_time(data["run_at"]),
            created_at=parse_time(data["created_at"]),
            finished_at=parse_optional_time(data.get("finished_at")),
            dead_reason=_opt_str(data.get("dead_reason")),
            policy=policy if isinstance(policy, dict) else None,
            attempts=(
                [DeliveryAttempt.from_json(a) for a in attempts]
                if isinstance(attempts, list)
                else None
            ),
        )


@dataclass(frozen=True, slots=True)
class DeliveryPage:
    deliveries: list[Delivery]
    next_after: int | None

    @classmethod
    def from_json(cls, data: JSONObject) -> DeliveryPage:
        return cls(
            deliveries=[Delivery.from_json(d) for d in data["deliveries"]],
            next_after=_opt_int(data.get("next_after")),
        )


@dataclass(frozen=True, slots=True)
class AttemptPage:
    attempts: list[DeliveryAttempt]
    next_after: int | None

    @classmethod
    def from_json(cls, data: JSONObject) -> AttemptPage:
        return cls(
            attempts=[DeliveryAttempt.from_json(a) for a in data["attempts"]],
            next_after=_opt_int(data.get("next_after")),
        )


@dataclass(frozen=True, slots=True)
class WorkflowJob:
    """One job of a :class:`Workflow`."""

    id: int
    queue: str
    type: str
    status: JobStatus
    attempt: int
    run_at: datetime
    created_at: datetime
    after: list[int] = field(default_factory=list)
    """The jobs it waits (or waited) for."""
    on_parent_dead: OnParentDead | None = None
    finished_at: datetime | None = None
    dead_reason: str | None = None
    """Why it is dead; for a job cancelled by a parent that did not complete, that parent."""
    result: Any = None

    @classmethod
    def from_json(cls, data: JSONObject) -> WorkflowJob:
        return cls(
            id=int(data["id"]),
            queue=str(data["queue"]),
            type=str(data.get("type", "")),
            status=_status(data["status"]),
            attempt=int(data.get("attempt", 1)),
            run_at=parse_time(data["run_at"]),
            created_at=parse_time(data["created_at"]),
            after=_ids(data.get("after")),
            on_parent_dead=_on_parent_dead(data.get("on_parent_dead")),
            finished_at=parse_optional_time(data.get("finished_at")),
            dead_reason=_opt_str(data.get("dead_reason")),
            result=data.get("result"),
        )


@dataclass(frozen=True, slots=True)
class Workflow:
    """A job and every job joined to it by ``after``, either way (``GET /api/workflows/{id}``)."""

    id: int
    """The job asked about."""
    status: WorkflowStatus
    counts: dict[str, int]
    """Its jobs by status name (only the statuses it has)."""
    jobs: list[WorkflowJob]
    """In id order (parents before their children)."""
    edges: list[tuple[int, int]]
    """``(parent, child)`` pairs."""
    truncated: bool = False
    """More jobs than shown (the server shows at most 1 000)."""

    def job(self, id: int) -> WorkflowJob:
        """Job ``id`` of the workflow; ``KeyError`` if it is not one of those shown."""
        for job in self.jobs:
            if job.id == id:
                return job
        raise KeyError(f"job {id} is not in the workflow of job {self.id}")

    @classmethod
    def from_json(cls, data: JSONObject) -> Workflow:
        return cls(
            id=int(data["id"]),
            status=cast(WorkflowStatus, str(data["status"])),
            counts={str(k): int(v) for k, v in (data.get("counts") or {}).items()},
            jobs=[WorkflowJob.from_json(j) for j in data.get("jobs") or []],
            edges=[(int(e[0]), int(e[1])) for e in data.get("edges") or []],
            truncated=bool(data.get("truncated", False)),
        )
