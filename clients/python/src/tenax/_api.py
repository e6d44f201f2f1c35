"""Every API operation as a :class:`Call`: method, path, body, query, and how to read the
answer. :class:`tenax.Client` and :class:`tenax.AsyncClient` only differ in how they send a
Call, so both have the same surface and the same checks."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final, Generic, Literal, TypeVar, Union
from urllib.parse import quote

from ._cluster import Activity, Cluster
from ._convert import Duration, Time, duration_value, time_value
from ._models import (
    AttemptPage,
    CancelledJobs,
    CancelResult,
    Batch,
    BatchJobs,
    CompleteResult,
    DeletedJobs,
    DeletedSubscription,
    Delivery,
    DeliveryAttempt,
    DeliveryPage,
    Enqueued,
    FailResult,
    Job,
    JobPage,
    JobStatus,
    LeaseExtended,
    OnParentDead,
    PolicyPreview,
    Queue,
    ReplayResult,
    Stats,
    Subscription,
    TakenJob,
    Workflow,
)

T = TypeVar("T")

Policy = Mapping[str, Any]
"""A retry policy in any of the server's spellings (docs/policies.md): native
``{"type": "exponential", "initial": "1s", ...}``, AWS SNS ``{"healthyRetryPolicy": {...}}`` or
Zaqar ``{"_retry_policy": {...}}``. Durations inside are the server's: milliseconds or
strings with units."""

OnDuplicate = Literal["refuse", "existing"]

JobRef = Union[TakenJob[Any], int]
"""A taken job, or a job id (then the ``lease_token`` must be given too)."""


class _Unset(enum.Enum):
    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset.UNSET
"""The default of update fields: leave the value as it is (``None`` resets or removes it)."""

Unset = Literal[_Unset.UNSET]


class _NoBody(enum.Enum):
    NO_BODY = "NO_BODY"


NO_BODY: Final = _NoBody.NO_BODY


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request and the reading of its answer (decoded JSON, or ``None`` for no body)."""

    method: str
    path: str
    parse: Callable[[Any], T]
    body: Any = NO_BODY
    params: Mapping[str, str | int] | None = None
    wait: float = 0.0
    """Seconds the server may hold the request before answering (a long poll)."""


@dataclass(frozen=True, slots=True)
class Parent:
    """Another job of the same batch that a job waits for: by its position in the batch
    (``Parent.index(0)``) or by its ``step`` name (``Parent.step("extract")``). A stored job is
    named by its id (an ``int``) instead."""

    index_: int | None = None
    step_: str | None = None

    @classmethod
    def index(cls, index: int) -> Parent:
        """The job at ``index`` (from 0) of the same batch."""
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"a batch index is an int from 0, got {index!r}")
        return cls(index_=index)

    @classmethod
    def step(cls, name: str) -> Parent:
        """The job of the same batch whose ``step`` is ``name``."""
        if not isinstance(name, str):
            raise TypeError(f"a step name is a str, got {name!r}")
        return cls(step_=name)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index_} if self.step_ is None else {"step": self.step_}

    def __repr__(self) -> str:
        return f"Parent.step({self.step_!r})" if self.step_ is not None else f"Parent.index({self.index_})"


def _after(after: Iterable[int | Parent], field: str) -> list[Any]:
    """``after`` as the server reads it: ids as numbers, batch jobs as ``{"index"}``/``{"step"}``."""
    if isinstance(after, (str, bytes, Mapping)) or isinstance(after, (int, Parent)):
        raise TypeError(f"{field}: a list of job ids or tenax.Parent, got {after!r}")
    out: list[Any] = []
    for i, parent in enumerate(after):
        if isinstance(parent, Parent):
            out.append(parent.to_json())
        elif isinstance(parent, int) and not isinstance(parent, bool):
            out.append(parent)
        else:
            raise TypeError(f"{field}[{i}]: a job id (int) or a tenax.Parent, got {parent!r}")
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class NewJob:
    """One job of :meth:`tenax.Client.enqueue_many`; the fields are those of ``enqueue``, and
    ``step``, a name (1 to 128 characters) by which other jobs of the batch wait for it
    (``Parent.step(name)``). ``after`` may name stored jobs by id and jobs of the same batch
    (``Parent.index(i)``, ``Parent.step(name)``), before or after it in the list: the server
    stores parents first and answers in the list's order."""

    queue: str
    type: str = ""
    payload: Any = None
    priority: int | None = None
    run_at: Time | None = None
    delay: Duration | None = None
    policy: Policy | None = None
    retry_limit: int | None = None
    unique_key: str | None = None
    traceparent: str | None = None
    after: Sequence[int | Parent] | None = None
    on_parent_dead: OnParentDead | None = None
    step: str | None = None

    def to_json(self) -> dict[str, Any]:
        body = job_body(
            self.queue,
            self.type,
            self.payload,
            priority=self.priority,
            run_at=self.run_at,
            delay=self.delay,
            policy=self.policy,
            retry_limit=self.retry_limit,
            unique_key=self.unique_key,
            traceparent=self.traceparent,
            after=self.after,
            on_parent_dead=self.on_parent_dead,
        )
        if self.step is not None:
            body["step"] = self.step
        return body


_NEW_JOB_FIELDS = frozenset(f.name for f in fields(NewJob))


def seg(value: str | int) -> str:
    """One path segment, percent-encoded."""
    return quote(str(value), safe=":")


def _ignore(_: Any) -> None:
    return None


def _id_of(job: JobRef, lease_token: int | None, what: str) -> tuple[int, int]:
    if isinstance(job, TakenJob):
        return job.id, job.lease_token if lease_token is None else lease_token
    if isinstance(job, bool) or not isinstance(job, int):
        raise TypeError(f"{what}: expected a TakenJob or a job id, got {job!r}")
    if lease_token is None:
        raise TypeError(
            f"{what}: the lease_token of the take is required with a job id "
            "(it protects a job that another worker now holds)"
        )
    return job, lease_token


def _clean(params: Mapping[str, str | int | None]) -> dict[str, str | int]:
    return {k: v for k, v in params.items() if v is not None}


# ---- jobs -------------------------------------------------------------------------------------


def job_body(
    queue: str,
    type: str,
    payload: Any,
    *,
    priority: int | None,
    run_at: Time | None,
    delay: Duration | None,
    policy: Policy | None,
    retry_limit: int | None,
    unique_key: str | None,
    traceparent: str | None = None,
    after: Iterable[int | Parent] | None = None,
    on_parent_dead: OnParentDead | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"queue": queue}
    if type:
        body["type"] = type
    if payload is not None:
        body["payload"] = payload
    if priority is not None:
        body["priority"] = priority
    if run_at is not None:
        body["run_at"] = time_value(run_at)
    if delay is not None:
        body["delay"] = duration_value(delay)
    if policy is not None:
        body["policy"] = dict(policy)
    if retry_limit is not None:
        body["retry_limit"] = retry_limit
    if unique_key is not None:
        body["unique_key"] = unique_key
    if traceparent is not None:
        body["traceparent"] = traceparent
    if after is not None:
        body["after"] = _after(after, "after")
    if on_parent_dead is not None:
        body["on_parent_dead"] = on_parent_dead
    return body


def enqueue(
    queue: str,
    type: str,
    payload: Any,
    *,
    priority: int | None,
    run_at: Time | None,
    delay: Duration | None,
    policy: Policy | None,
    retry_limit: int | None,
    unique_key: str | None,
    on_duplicate: OnDuplicate | None,
    traceparent: str | None = None,
    after: Iterable[int] | None = None,
    on_parent_dead: OnParentDead | None = None,
) -> Call[Enqueued]:
    body = job_body(
        queue,
        type,
        payload,
        priority=priority,
        run_at=run_at,
        delay=delay,
        policy=policy,
        retry_limit=retry_limit,
        unique_key=unique_key,
        traceparent=traceparent,
        after=after,
        on_parent_dead=on_parent_dead,
    )
    if on_duplicate is not None:
        body["on_duplicate"] = on_duplicate
    return Call("POST", "/api/jobs", Enqueued.from_json, body)


def _new_job(job: NewJob | Mapping[str, Any], index: int) -> NewJob:
    if isinstance(job, NewJob):
        return job
    if isinstance(job, Mapping):
        unknown = set(job) - _NEW_JOB_FIELDS
        if unknown:
            raise TypeError(f"jobs[{index}]: unknown field(s) {sorted(unknown)}")
        return NewJob(**job)
    raise TypeError(f"jobs[{index}]: expected a NewJob or a mapping, got {job!r}")


def enqueue_many(
    jobs: Iterable[NewJob | Mapping[str, Any]], on_duplicate: OnDuplicate | None
) -> Call[list[Enqueued]]:
    items = []
    for i, job in enumerate(jobs):
        try:
            items.append(_new_job(job, i).to_json())
        except TypeError as error:
            message = str(error)
            raise TypeError(message if message.startswith("jobs[") else f"jobs[{i}].{message}") from None
    body: dict[str, Any] = {"jobs": items}
    if on_duplicate is not None:
        body["on_duplicate"] = on_duplicate
    return Call(
        "POST",
        "/api/jobs/batch",
        lambda data: [Enqueued.from_json(j) for j in data["jobs"]],
        body,
    )


def _jobs_json(jobs: Iterable[NewJob | Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [_new_job(j, i).to_json() for i, j in enumerate(jobs)]


def create_batch(
    *,
    jobs: Iterable[NewJob | Mapping[str, Any]],
    on_complete: Mapping[str, Any] | None,
    on_success: Mapping[str, Any] | None,
    description: str | None,
    open: bool,
) -> Call[BatchJobs]:
    body: dict[str, Any] = {"jobs": _jobs_json(jobs)}
    if on_complete is not None:
        body["on_complete"] = dict(on_complete)
    if on_success is not None:
        body["on_success"] = dict(on_success)
    if description is not None:
        body["description"] = description
    if open:
        body["open"] = True
    return Call("POST", "/api/batches", BatchJobs.from_json, body)


def add_to_batch(
    id: int, jobs: Iterable[NewJob | Mapping[str, Any]], close: bool
) -> Call[BatchJobs]:
    body: dict[str, Any] = {"jobs": _jobs_json(jobs)}
    if close:
        body["close"] = True
    return Call("POST", f"/api/batches/{seg(id)}/jobs", BatchJobs.from_json, body)


def close_batch(id: int) -> Call[Batch]:
    return Call("POST", f"/api/batches/{seg(id)}/close", Batch.from_json, {})


def get_batch(id: int) -> Call[Batch]:
    return Call("GET", f"/api/batches/{seg(id)}", Batch.from_json)


def list_batches(*, after: int | None, limit: int | None) -> Call[list[Batch]]:
    params: dict[str, Any] = {}
    if after is not None:
        params["after"] = after
    if limit is not None:
        params["limit"] = limit
    return Call(
        "GET",
        "/api/batches",
        lambda data: [Batch.from_json(b) for b in data["batches"]],
        params=params,
    )


def delete_batch(id: int) -> Call[None]:
    return Call("DELETE", f"/api/batches/{seg(id)}", _ignore)


def get_job(id: int, wait: Duration | None = None) -> Call[Job]:
    if wait is None:
        return Call("GET", f"/api/jobs/{seg(id)}", Job.from_json)
    value = duration_value(wait)
    # How long the server may hold the request, for the read timeout. A string is the server's
    # to read: allow its longest wait.
    wait_s = 60.0 if isinstance(value, str) else value / 1000
    return Call(
        "GET", f"/api/jobs/{seg(id)}", Job.from_json, params={"wait": value}, wait=wait_s
    )


def get_workflow(id: int) -> Call[Workflow]:
    return Call("GET", f"/api/workflows/{seg(id)}", Workflow.from_json)


def delete_job(id: int) -> Call[None]:
    return Call("DELETE", f"/api/jobs/{seg(id)}", _ignore)


def cancel_job(id: int) -> Call[CancelResult]:
    return Call("POST", f"/api/jobs/{seg(id)}/cancel", CancelResult.from_json, {})


def cancel_jobs(
    ids: Iterable[int] | None, *, queue: str | None, type: str | None, all: bool
) -> Call[CancelledJobs]:
    return Call(
        "POST", "/api/jobs/cancel", CancelledJobs.from_json, dead_selection(ids, queue, type, all)
    )


def list_jobs(
    *,
    queue: str | None,
    status: JobStatus | None,
    type: str | None,
    limit: int | None,
    after: int | None,
) -> Call[JobPage]:
    params = _clean(
        {"queue": queue, "status": status, "type": type, "limit": limit, "after": after}
    )
    return Call("GET", "/api/jobs", JobPage.from_json, params=params)


def stats() -> Call[Stats]:
    return Call("GET", "/api/stats", Stats.from_json)


# ---- work -------------------------------------------------------------------------------------


def take_body(
    queues: str | Iterable[str],
    max: int | None,
    lease: Duration | None,
    worker: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"queues": [queues] if isinstance(queues, str) else list(queues)}
    if max is not None:
        body["max"] = max
    if lease is not None:
        body["lease"] = duration_value(lease)
    if worker is not None:
        body["worker"] = worker
    return body


def take(
    queues: str | Iterable[str],
    *,
    max: int | None,
    lease: Duration | None,
    wait: Duration | None,
    worker: str | None = None,
) -> Call[list[TakenJob[Any]]]:
    body = take_body(queues, max, lease, worker)
    wait_s = 0.0
    if wait is not None:
        body["wait"] = duration_value(wait)
        # How long the server may hold the request, for the read timeout. A string is the
        # server's to read: allow its longest wait.
        wait_s = 60.0 if isinstance(wait, str) else int(body["wait"]) / 1000
    return Call(
        "POST",
        "/api/take",
        lambda data: [TakenJob.from_json(j) for j in data["jobs"]],
        body,
        wait=wait_s,
    )


def heartbeat(job: JobRef, lease_token: int | None, lease: Duration | None) -> Call[LeaseExtended]:
    id, token = _id_of(job, lease_token, "heartbeat")
    body: dict[str, Any] = {"lease_token": token}
    if lease is not None:
        body["lease"] = duration_value(lease)
    return Call("POST", f"/api/jobs/{seg(id)}/heartbeat", LeaseExtended.from_json, body)


def complete(job: JobRef, lease_token: int | None, result: Any = None) -> Call[CompleteResult]:
    id, token = _id_of(job, lease_token, "complete")
    body: dict[str, Any] = {"lease_token": token}
    if result is not None:
        body["result"] = result
    return Call("POST", f"/api/jobs/{seg(id)}/complete", CompleteResult.from_json, body)


def complete_many(
    jobs: Iterable[TakenJob[Any] | tuple[int, int] | tuple[TakenJob[Any], Any] | tuple[int, int, Any]],
) -> Call[list[CompleteResult]]:
    items = []
    for i, job in enumerate(jobs):
        if isinstance(job, TakenJob):
            items.append({"id": job.id, "lease_token": job.lease_token})
        elif isinstance(job, tuple) and len(job) == 2 and isinstance(job[0], TakenJob):
            item = {"id": job[0].id, "lease_token": job[0].lease_token}
            if job[1] is not None:
                item["result"] = job[1]
            items.append(item)
        elif isinstance(job, tuple) and len(job) in (2, 3):
            item = {"id": int(job[0]), "lease_token": int(job[1])}
            if len(job) == 3 and job[2] is not None:
                item["result"] = job[2]
            items.append(item)
        else:
            raise TypeError(
                f"jobs[{i}]: expected a TakenJob, (job, result), (id, lease_token) or"
                f" (id, lease_token, result), got {job!r}"
            )
    return Call(
        "POST",
        "/api/jobs/complete",
        lambda data: [CompleteResult.from_json(r) for r in data["results"]],
        {"jobs": items},
    )


def fail(
    job: JobRef,
    error: str,
    *,
    lease_token: int | None,
    detail: Any,
    retryable: bool,
    retry_at: Time | None,
    retry_in: Duration | None,
    snooze: Duration | None,
) -> Call[FailResult]:
    id, token = _id_of(job, lease_token, "fail")
    body: dict[str, Any] = {
        "lease_token": token,
        "error": error if detail is None else {"message": error, "detail": detail},
    }
    if not retryable:
        body["retryable"] = False
    if retry_at is not None:
        body["retry_at"] = time_value(retry_at)
    if retry_in is not None:
        body["retry_in"] = duration_value(retry_in)
    if snooze is not None:
        body["snooze"] = duration_value(snooze)
    return Call("POST", f"/api/jobs/{seg(id)}/fail", FailResult.from_json, body)


# ---- dead jobs --------------------------------------------------------------------------------


def list_dead(
    *, queue: str | None, type: str | None, limit: int | None, after: int | None
) -> Call[JobPage]:
    params = _clean({"queue": queue, "type": type, "limit": limit, "after": after})
    return Call("GET", "/api/dead", JobPage.from_json, params=params)


def dead_selection(
    ids: Iterable[int] | None, queue: str | None, type: str | None, all: bool
) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if ids is not None:
        body["ids"] = [int(i) for i in ids]
    if queue is not None:
        body["queue"] = queue
    if type is not None:
        body["type"] = type
    if all:
        body["all"] = True
    return body


def replay_dead(
    ids: Iterable[int] | None,
    *,
    queue: str | None,
    type: str | None,
    all: bool,
    policy: Policy | None,
    reset_attempts: bool,
) -> Call[ReplayResult]:
    body = dead_selection(ids, queue, type, all)
    if policy is not None:
        body["policy"] = dict(policy)
    if reset_attempts:
        body["reset_attempts"] = True
    return Call("POST", "/api/dead/replay", ReplayResult.from_json, body)


def delete_dead(
    ids: Iterable[int] | None, *, queue: str | None, type: str | None, all: bool
) -> Call[DeletedJobs]:
    return Call(
        "POST", "/api/dead/delete", DeletedJobs.from_json, dead_selection(ids, queue, type, all)
    )


# ---- queues -----------------------------------------------------------------------------------


def list_queues() -> Call[list[Queue]]:
    return Call("GET", "/api/queues", lambda data: [Queue.from_json(q) for q in data["queues"]])


def get_queue(name: str) -> Call[Queue]:
    return Call("GET", f"/api/queues/{seg(name)}", Queue.from_json)


def update_queue(
    name: str,
    *,
    policy: Policy | None | Unset,
    paused: bool | None,
    disable_overrides: bool | None,
    message_ttl: Duration | None | Unset,
    create: bool,
) -> Call[Queue]:
    body: dict[str, Any] = {}
    if policy is not UNSET:
        body["policy"] = None if policy is None else dict(policy)
    if paused is not None:
        body["paused"] = paused
    if disable_overrides is not None:
        body["disable_overrides"] = disable_overrides
    if message_ttl is not UNSET:
        body["message_ttl"] = None if message_ttl is None else duration_value(message_ttl)
    params = {"create": "true"} if create else None
    return Call("PUT", f"/api/queues/{seg(name)}", Queue.from_json, body, params=params)


def pause_queue(name: str) -> Call[Queue]:
    return Call("POST", f"/api/queues/{seg(name)}/pause", Queue.from_json)


def resume_queue(name: str) -> Call[Queue]:
    return Call("POST", f"/api/queues/{seg(name)}/resume", Queue.from_json)


# ---- policies ---------------------------------------------------------------------------------


def preview_policy(policy: Policy, rows: int | None) -> Call[PolicyPreview]:
    params = _clean({"rows": rows})
    return Call(
        "POST", "/api/policy/preview", PolicyPreview.from_json, dict(policy), params=params
    )


# ---- subscriptions and deliveries -------------------------------------------------------------


def subscription_body(
    *,
    endpoint: str | Unset,
    policy: Policy | None | Unset,
    throttle_per_second: int | None | Unset,
    content_type: str | None | Unset,
    secret: str | None | Unset,
    headers: Mapping[str, str] | None | Unset,
    enabled: bool | None | Unset,
    retryable_statuses: Iterable[int] | None | Unset,
    max_concurrency: int | None | Unset,
    auto_disable_after: Duration | None | Unset,
    format: Literal["tenax", "zaqar"] | None | Unset,
) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if endpoint is not UNSET:
        body["endpoint"] = endpoint
    if policy is not UNSET:
        body["policy"] = None if policy is None else dict(policy)
    if throttle_per_second is not UNSET:
        body["throttle_per_second"] = throttle_per_second
    if content_type is not UNSET:
        body["content_type"] = content_type
    if secret is not UNSET:
        body["secret"] = secret
    if headers is not UNSET:
        body["headers"] = None if headers is None else dict(headers)
    if enabled is not UNSET:
        body["enabled"] = enabled
    if retryable_statuses is not UNSET:
        body["retryable_statuses"] = (
            None if retryable_statuses is None else [int(s) for s in retryable_statuses]
        )
    if max_concurrency is not UNSET:
        body["max_concurrency"] = max_concurrency
    if auto_disable_after is not UNSET:
        body["auto_disable_after"] = (
            None if auto_disable_after is None else duration_value(auto_disable_after)
        )
    if format is not UNSET:
        body["format"] = format
    return body


def create_subscription(queue: str, body: dict[str, Any]) -> Call[Subscription]:
    return Call(
        "POST", f"/api/queues/{seg(queue)}/subscriptions", Subscription.from_json, body
    )


def _subscriptions(data: Any) -> list[Subscription]:
    return [Subscription.from_json(s) for s in data["subscriptions"]]


def list_subscriptions(queue: str | None) -> Call[list[Subscription]]:
    if queue is None:
        return Call("GET", "/api/subscriptions", _subscriptions)
    return Call("GET", f"/api/queues/{seg(queue)}/subscriptions", _subscriptions)


def get_subscription(id: int) -> Call[Subscription]:
    return Call("GET", f"/api/subscriptions/{seg(id)}", Subscription.from_json)


def update_subscription(id: int, body: dict[str, Any]) -> Call[Subscription]:
    return Call("PATCH", f"/api/subscriptions/{seg(id)}", Subscription.from_json, body)


def enable_subscription(id: int, enabled: bool) -> Call[Subscription]:
    action = "enable" if enabled else "disable"
    return Call("POST", f"/api/subscriptions/{seg(id)}/{action}", Subscription.from_json)


def delete_subscription(id: int) -> Call[DeletedSubscription]:
    return Call("DELETE", f"/api/subscriptions/{seg(id)}", DeletedSubscription.from_json)


def list_deliveries(
    subscription_id: int, *, status: JobStatus | None, after: int | None, limit: int | None
) -> Call[DeliveryPage]:
    params = _clean({"status": status, "after": after, "limit": limit})
    return Call(
        "GET",
        f"/api/subscriptions/{seg(subscription_id)}/deliveries",
        DeliveryPage.from_json,
        params=params,
    )


def list_subscription_attempts(
    subscription_id: int, *, after: int | None, limit: int | None
) -> Call[AttemptPage]:
    params = _clean({"after": after, "limit": limit})
    return Call(
        "GET",
        f"/api/subscriptions/{seg(subscription_id)}/attempts",
        AttemptPage.from_json,
        params=params,
    )


def get_delivery(id: int) -> Call[Delivery]:
    return Call("GET", f"/api/deliveries/{seg(id)}", Delivery.from_json)


def list_delivery_attempts(id: int) -> Call[list[DeliveryAttempt]]:
    return Call(
        "GET",
        f"/api/deliveries/{seg(id)}/attempts",
        lambda data: [DeliveryAttempt.from_json(a) for a in data["attempts"]],
    )


def _replay_body(policy: Policy | None, reset_attempts: bool | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if policy is not None:
        body["policy"] = dict(policy)
    if reset_attempts is not None:
        body["reset_attempts"] = reset_attempts
    return body


def _replayed(data: Any) -> list[int]:
    return [int(i) for i in data["replayed"]]


def replay_delivery(
    id: int, *, policy: Policy | None, reset_attempts: bool | None
) -> Call[list[int]]:
    return Call(
        "POST", f"/api/deliveries/{seg(id)}/replay", _replayed, _replay_body(policy, reset_attempts)
    )


def replay_subscription(
    id: int, *, since: Time | None, policy: Policy | None, reset_attempts: bool | None
) -> Call[list[int]]:
    body = _replay_body(policy, reset_attempts)
    if since is not None:
        body["since"] = time_value(since)
    return Call("POST", f"/api/subscriptions/{seg(id)}/replay", _replayed, body)


# ---- the cluster ------------------------------------------------------------------------------


def cluster() -> Call[Cluster]:
    return Call("GET", "/api/cluster", Cluster.from_json)


def activity(minutes: int | None) -> Call[Activity]:
    params = None if minutes is None else {"minutes": minutes}
    return Call("GET", "/api/activity", Activity.from_json, params=params)
