"""The blocking client, :class:`Client`, and its job stream."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, Literal, TypeVar

import httpx

from . import _api as api
from ._api import UNSET, Call, JobRef, NewJob, OnDuplicate, Policy, Unset
from ._cluster import Activity, Cluster
from ._convert import Duration, Time
from ._errors import TenaxError, error_from_response
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
from ._transport import (
    check_worker_name,
    worker_headers,
    DEFAULT_TIMEOUT,
    Settings,
    TimeoutSetting,
    build_request,
    connection_error,
    read_answer,
    resolve_settings,
)

T = TypeVar("T")

__all__ = ["Client", "JobStream"]


def parse_stream_line(line: str) -> TakenJob[Any] | None:
    """A job of the NDJSON stream, or ``None`` for the empty keep-alive line."""
    if not line.strip():
        return None
    try:
        return TakenJob.from_json(json.loads(line))
    except (ValueError, KeyError, TypeError) as error:
        raise TenaxError(f"unreadable line in the job stream: {line[:300]!r}") from error


def stream_timeout(base: httpx.Timeout, read: float | None) -> httpx.Timeout:
    """The timeout of a stream: the client's for connecting and sending, ``read`` for the wait
    between two lines (``None``: no limit). The server sends a keep-alive line every second
    while the stream has room for more jobs, but nothing while it holds ``max`` of them, so a
    read timeout must be longer than the stream may stay full."""
    return httpx.Timeout(connect=base.connect, read=read, write=base.write, pool=base.pool)


def shutdown_socket(response: httpx.Response | None) -> None:
    """Shuts the response's connection down for both directions. Unlike a close, this wakes a
    thread blocked reading it, and the server sees the end of the stream at once."""
    if response is None:
        return
    stream = response.extensions.get("network_stream")
    get = getattr(stream, "get_extra_info", None)
    sock = get("socket") if callable(get) else None
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class JobStream:
    """A streaming take (``POST /api/take/stream``): an iterator of :class:`TakenJob` pushed as
    they become ready. The server holds at most ``max`` jobs leased to the stream at once:
    complete or fail some to receive more. Closing the stream puts the jobs it still holds back
    to ``ready`` at once, with no attempt used.

    ::

        with client.stream("emails", max=10) as jobs:
            for job in jobs:
                send(job.payload)
                client.complete(job)

    :meth:`close` may be called from another thread: it wakes the thread that is iterating,
    whose loop then ends.
    """

    def __init__(self, http: httpx.Client, request: httpx.Request) -> None:
        self._http = http
        self._request = request
        self._response: httpx.Response | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._events: Iterator[TakenJob[Any] | None] | None = None
        self.last_line_at = time.monotonic()
        """Monotonic time of the last line (job or keep-alive) received."""

    def open(self) -> JobStream:
        """Sends the request; raises the server's error if it refuses the stream."""
        if self._response is not None or self._closed:
            return self
        url = str(self._request.url)
        try:
            response = self._http.send(self._request, stream=True)
        except httpx.TransportError as error:
            raise connection_error(error, "POST", url) from error
        if response.status_code != 200:
            try:
                content = response.read()
            finally:
                response.close()
            raise error_from_response(
                response.status_code, content, response.headers.get("x-request-id")
            )
        with self._lock:
            self._response = response
            closed = self._closed
        if closed:
            response.close()
        self.last_line_at = time.monotonic()
        return self

    def events(self) -> Iterator[TakenJob[Any] | None]:
        """Jobs as they arrive, and ``None`` for each keep-alive line (about one a second while
        the stream has room): a loop that must notice a stop request gets a turn that often.
        Every call continues the same iteration."""
        if self._events is None:
            self._events = self._read()
        return self._events

    def _read(self) -> Iterator[TakenJob[Any] | None]:
        self.open()
        response = self._response
        if response is None:
            return
        lines = response.iter_lines()
        try:
            while True:
                with self._lock:
                    if self._closed:
                        return
                    self._reader = threading.current_thread()
                try:
                    line = next(lines)
                except StopIteration:
                    return
                finally:
                    with self._lock:
                        self._reader = None
                self.last_line_at = time.monotonic()
                yield parse_stream_line(line)
        except (httpx.TransportError, httpx.StreamError) as error:
            if self._closed:
                return
            if isinstance(error, httpx.TransportError):
                raise connection_error(error, "POST", str(self._request.url)) from error
            raise TenaxError(f"the job stream failed: {error}") from error
        finally:
            if self._closed:
                response.close()

    def __iter__(self) -> JobStream:
        return self

    def __next__(self) -> TakenJob[Any]:
        """The next job (keep-alive lines are skipped); ``StopIteration`` once closed."""
        for job in self.events():
            if job is not None:
                return job
        raise StopIteration

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Closes the connection: the server puts the jobs the stream holds back to ready."""
        with self._lock:
            self._closed = True
            response = self._response
            reader = self._reader
        if response is None:
            return
        shutdown_socket(response)
        if reader is None:
            response.close()
        # Otherwise a thread is blocked reading: it wakes up and closes the response itself.

    def __enter__(self) -> JobStream:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Client:
    """A blocking client of the Tenax API. Thread-safe: one client can serve many threads.

    Args:
        url: the server, default ``$TENAX_URL`` or ``http://127.0.0.1:7890``.
        token: sent as ``Authorization: Bearer <token>``; default ``$TENAX_TOKEN``.
        timeout: seconds per request (an ``httpx.Timeout`` for each phase; a long poll adds
            its ``wait`` to the read timeout).
        ca_file: a PEM file of the CA that signed an ``https`` server's certificate (default
            ``$TENAX_CA_FILE``), trusted in addition to nothing else.
        verify: ``False`` to skip certificate checks, or an ``ssl.SSLContext``.
        headers: extra headers for every request.
        worker: a worker name, sent as ``X-Tenax-Worker`` with every request, under which the
            server lists this client's takes, streams and heartbeats (``cluster()``); 1 to 128
            visible ASCII characters or spaces. Without one, the server knows it by its address
            and User-Agent. A worker runtime names its client itself.
        transport: an ``httpx`` transport (for tests, proxies, or Unix sockets).

    Every method raises a :class:`tenax.APIError` subclass for an error answer and
    :class:`tenax.TenaxConnectionError` when no answer arrives.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        timeout: TimeoutSetting = DEFAULT_TIMEOUT,
        ca_file: str | os.PathLike[str] | None = None,
        verify: bool | ssl.SSLContext = True,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        worker: str | None = None,
    ) -> None:
        self._settings: Settings = resolve_settings(
            url, token, timeout, ca_file, verify, headers, worker
        )
        self._http = httpx.Client(
            base_url=self._settings.base_url,
            headers=self._settings.headers,
            timeout=self._settings.timeout,
            verify=self._settings.verify,
            transport=transport,
        )

    @property
    def url(self) -> str:
        """The server's base URL."""
        return self._settings.base_url

    @property
    def worker(self) -> str | None:
        """The worker name this client sends (``X-Tenax-Worker``), if any."""
        return self._settings.worker

    def with_worker(self, name: str) -> Client:
        """This client, sending ``name`` as ``X-Tenax-Worker`` with every request. It shares
        this client's connections: close this one, not it."""
        named = copy.copy(self)
        named._settings = dataclasses.replace(self._settings, worker=check_worker_name(name))
        return named

    def __repr__(self) -> str:
        return f"tenax.Client({self.url!r})"

    def close(self) -> None:
        """Closes the connection pool."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, call: Call[T]) -> T:
        request = build_request(self._http, call, self._settings)
        try:
            response = self._http.send(request)
        except httpx.TransportError as error:
            raise connection_error(error, call.method, str(request.url)) from error
        return read_answer(call, response)

    # ---- health -------------------------------------------------------------------------------

    def ping(self) -> bool:
        """True when ``GET /healthz`` answers ``ok``; False when the server is not reachable."""
        try:
            response = self._http.get("/healthz")
        except httpx.TransportError:
            return False
        return response.status_code == 200

    # ---- API methods (AsyncClient's are written from these: tests/async_from_sync.py)

    # ---- jobs ---------------------------------------------------------------------------------

    def enqueue(
        self,
        queue: str,
        type: str = "",
        payload: Any = None,
        *,
        priority: int | None = None,
        run_at: Time | None = None,
        delay: Duration | None = None,
        policy: Policy | None = None,
        retry_limit: int | None = None,
        unique_key: str | None = None,
        on_duplicate: OnDuplicate | None = None,
        traceparent: str | None = None,
        after: Iterable[int] | None = None,
        on_parent_dead: OnParentDead | None = None,
    ) -> Enqueued:
        """Enqueues one job; the answer says once it is on disk.

        ``run_at`` (datetime or ms since 1970) or ``delay`` (timedelta, seconds or ``"5s"``)
        put it off; ``policy`` (any spelling) and ``retry_limit`` replace its queue's retry
        policy; ``unique_key`` allows one unfinished job per queue and key, and
        ``on_duplicate="existing"`` returns that job instead of raising :class:`Duplicate`.
        ``traceparent`` (a W3C trace context) goes with the job to its workers and webhook
        deliveries.

        ``after`` names stored jobs (by id) it waits for: it is ``waiting`` until each has
        completed, then runs with their results in its ``parents``. When one of them will not
        complete, ``on_parent_dead="cancel"`` (the default) ends it too and ``"run"`` runs it
        anyway. A whole graph of new jobs goes in one :meth:`enqueue_many`
        (docs/workflows.md).
        """
        return self._call(
            api.enqueue(
                queue,
                type,
                payload,
                priority=priority,
                run_at=run_at,
                delay=delay,
                policy=policy,
                retry_limit=retry_limit,
                unique_key=unique_key,
                on_duplicate=on_duplicate,
                traceparent=traceparent,
                after=after,
                on_parent_dead=on_parent_dead,
            )
        )

    def enqueue_many(
        self,
        jobs: Iterable[NewJob | Mapping[str, Any]],
        *,
        on_duplicate: OnDuplicate | None = None,
    ) -> list[Enqueued]:
        """Enqueues jobs atomically (all or none), answered in request order. A refused job's
        error names it: ``field == "jobs[2].policy.max_delay"``.

        A batch may be a graph: a job's ``after`` names others of the batch by position
        (``tenax.Parent.index(0)``) or by their ``step`` (``tenax.Parent.step("extract")``),
        in any order; a cycle is refused naming the job whose ``after`` closes it
        (``jobs[0].after``)."""
        return self._call(api.enqueue_many(jobs, on_duplicate))

    # --- batches ------------------------------------------------------------------------

    def create_batch(
        self,
        *,
        jobs: Iterable[NewJob | Mapping[str, Any]] = (),
        on_complete: Mapping[str, Any] | None = None,
        on_success: Mapping[str, Any] | None = None,
        description: str | None = None,
        open: bool = False,
    ) -> BatchJobs:
        """Makes a batch and its first jobs in one commit (docs/workflows.md#batches).

        ``on_complete`` is enqueued once every job has finished, ``on_success`` only if every
        one completed (give either or both); each is a job template: ``{"queue", "type",
        "payload", "priority", "policy", "retry_limit"}``. Closed as it is made unless
        ``open``: an open batch takes more jobs (:meth:`add_to_batch`) until it is closed."""
        return self._call(
            api.create_batch(
                jobs=jobs,
                on_complete=on_complete,
                on_success=on_success,
                description=description,
                open=open,
            )
        )

    def add_to_batch(
        self, id: int, jobs: Iterable[NewJob | Mapping[str, Any]], *, close: bool = False
    ) -> BatchJobs:
        """Adds jobs to an open batch, closing it in the same commit when ``close``. A closed
        batch refuses them (:class:`tenax.Conflict`, code ``batch_closed``)."""
        return self._call(api.add_to_batch(id, jobs, close))

    def close_batch(self, id: int) -> Batch:
        """Closes a batch: it finishes (its callbacks enqueued) once its pending jobs have,
        at once if none is pending."""
        return self._call(api.close_batch(id))

    def get_batch(self, id: int) -> Batch:
        return self._call(api.get_batch(id))

    def list_batches(self, *, after: int | None = None, limit: int | None = None) -> list[Batch]:
        """A page of batches in id order, after ``after``."""
        return self._call(api.list_batches(after=after, limit=limit))

    def delete_batch(self, id: int) -> None:
        """Forgets a batch; its jobs stay. An unfinished batch deleted never fires."""
        self._call(api.delete_batch(id))

    def get_job(self, id: int, *, wait: Duration | None = None) -> Job:
        """One job with its status, errors, policy and (completed) result.

        With ``wait`` (at most 60 s), the server answers once the job has finished (completed
        or dead), or as it is when ``wait`` has passed: how a producer waits for a job's
        result without polling. Check ``status``: an unfinished job means the wait ran out."""
        return self._call(api.get_job(id, wait))

    def get_workflow(self, id: int) -> Workflow:
        """The workflow job ``id`` belongs to: every job joined to it by ``after``, either
        way, with its state, and the edges between them."""
        return self._call(api.get_workflow(id))

    def list_jobs(
        self,
        *,
        queue: str | None = None,
        status: JobStatus | None = None,
        type: str | None = None,
        limit: int | None = None,
        after: int | None = None,
    ) -> JobPage:
        """One page of jobs in id order (``limit`` 1-1000, default 100)."""
        return self._call(
            api.list_jobs(queue=queue, status=status, type=type, limit=limit, after=after)
        )

    def iter_jobs(
        self,
        *,
        queue: str | None = None,
        status: JobStatus | None = None,
        type: str | None = None,
        page_size: int = 100,
    ) -> Iterator[Job]:
        """Every job that matches, fetched a page at a time."""
        after: int | None = None
        while True:
            page = self.list_jobs(
                queue=queue, status=status, type=type, limit=page_size, after=after
            )
            yield from page.jobs
            if page.next_after is None:
                return
            after = page.next_after

    def delete_job(self, id: int) -> None:
        """Removes a job in any status."""
        self._call(api.delete_job(id))

    def cancel(self, id: int) -> CancelResult:
        """Cancels a job: at once if it is scheduled or ready (``outcome == "cancelled"``); if
        it is in flight, its lease is marked (``outcome == "marked"``) and its worker learns it
        on its next heartbeat. A finished job raises ``Conflict`` naming its status."""
        return self._call(api.cancel_job(id))

    def cancel_jobs(
        self,
        ids: Iterable[int] | None = None,
        *,
        queue: str | None = None,
        type: str | None = None,
        all: bool = False,
    ) -> CancelledJobs:
        """Cancels the unfinished jobs named by ``ids``, by ``queue``/``type``, or ``all=True``:
        scheduled and ready ones at once, those in flight by marking their leases."""
        return self._call(api.cancel_jobs(ids, queue=queue, type=type, all=all))

    def stats(self) -> Stats:
        """Job counts per queue and in total."""
        return self._call(api.stats())

    # ---- work ---------------------------------------------------------------------------------

    def take(
        self,
        queues: str | Iterable[str],
        *,
        max: int | None = None,
        lease: Duration | None = None,
        wait: Duration | None = None,
        worker: str | None = None,
    ) -> list[TakenJob[Any]]:
        """Leases up to ``max`` ready jobs (default 1), best first across ``queues``. With
        ``wait`` (at most 60 s) it long-polls for the first job; an empty list means none came.
        ``worker`` names the worker taking them (else the client's ``worker``).
        """
        return self._call(api.take(queues, max=max, lease=lease, wait=wait, worker=worker))

    def stream(
        self,
        queues: str | Iterable[str],
        *,
        max: int | None = None,
        lease: Duration | None = None,
        read_timeout: float | None = None,
        worker: str | None = None,
    ) -> JobStream:
        """A streaming take: jobs pushed as they become ready, at most ``max`` (default 100)
        leased at once. Use it in a ``with`` block; see :class:`JobStream`.

        ``read_timeout`` bounds the wait for the next line (default: none). The server sends
        an empty keep-alive line every second while the stream has room, and nothing at all
        while it holds ``max`` jobs, so keep it above the time your jobs may take. ``worker``
        names the worker (else the client's ``worker``).
        """
        request = self._http.build_request(
            "POST",
            "/api/take/stream",
            json=api.take_body(queues, max, lease, worker),
            headers=worker_headers(self._settings),
            timeout=stream_timeout(self._settings.timeout, read_timeout),
        )
        return JobStream(self._http, request)

    def heartbeat(
        self, job: JobRef, lease_token: int | None = None, *, lease: Duration | None = None
    ) -> LeaseExtended:
        """Extends a job's lease to ``lease`` from now (default: the server's default lease)."""
        return self._call(api.heartbeat(job, lease_token, lease))

    def complete(
        self, job: JobRef, lease_token: int | None = None, *, result: Any = None
    ) -> CompleteResult:
        """Completes a job: a :class:`TakenJob`, or its id and ``lease_token``; with its
        ``result`` (any JSON value; ``None``: none), kept with the completed job and shown by
        :meth:`get_job`. Raises :class:`LeaseLost` or :class:`NotInFlight` when the job is no
        longer this worker's."""
        return self._call(api.complete(job, lease_token, result))

    def complete_many(
        self,
        jobs: Iterable[
            TakenJob[Any] | tuple[int, int] | tuple[TakenJob[Any], Any] | tuple[int, int, Any]
        ],
    ) -> list[CompleteResult]:
        """Completes many jobs in one durable commit; each gets its own answer, in order. A
        job with a result is given as ``(job, result)`` or ``(id, lease_token, result)``."""
        return self._call(api.complete_many(jobs))

    def fail(
        self,
        job: JobRef,
        error: str,
        *,
        lease_token: int | None = None,
        detail: Any = None,
        retryable: bool = True,
        retry_at: Time | None = None,
        retry_in: Duration | None = None,
        snooze: Duration | None = None,
    ) -> FailResult:
        """Reports a failure; the answer is the policy's decision. At most one outcome:
        ``retryable=False`` (dead at once), ``retry_at``/``retry_in`` (retry then; uses an
        attempt), ``snooze`` (run again later without using an attempt; nothing is recorded).
        ``detail`` is any JSON recorded beside the message."""
        return self._call(
            api.fail(
                job,
                error,
                lease_token=lease_token,
                detail=detail,
                retryable=retryable,
                retry_at=retry_at,
                retry_in=retry_in,
                snooze=snooze,
            )
        )

    # ---- dead jobs ----------------------------------------------------------------------------

    def list_dead(
        self,
        *,
        queue: str | None = None,
        type: str | None = None,
        limit: int | None = None,
        after: int | None = None,
    ) -> JobPage:
        """One page of dead jobs in id order."""
        return self._call(api.list_dead(queue=queue, type=type, limit=limit, after=after))

    def iter_dead(
        self, *, queue: str | None = None, type: str | None = None, page_size: int = 100
    ) -> Iterator[Job]:
        """Every dead job that matches, fetched a page at a time."""
        after: int | None = None
        while True:
            page = self.list_dead(queue=queue, type=type, limit=page_size, after=after)
            yield from page.jobs
            if page.next_after is None:
                return
            after = page.next_after

    def replay_dead(
        self,
        ids: Iterable[int] | None = None,
        *,
        queue: str | None = None,
        type: str | None = None,
        all: bool = False,
        policy: Policy | None = None,
        reset_attempts: bool = False,
    ) -> ReplayResult:
        """Makes dead jobs ready again: by ``ids``, by ``queue``/``type``, or ``all=True``.
        ``reset_attempts`` starts their retries from 1; ``policy`` gives them a new one. The
        answer says which were replayed and why the others were skipped."""
        return self._call(
            api.replay_dead(
                ids, queue=queue, type=type, all=all, policy=policy, reset_attempts=reset_attempts
            )
        )

    def delete_dead(
        self,
        ids: Iterable[int] | None = None,
        *,
        queue: str | None = None,
        type: str | None = None,
        all: bool = False,
    ) -> DeletedJobs:
        """Deletes dead jobs, selected as for :meth:`replay_dead`."""
        return self._call(api.delete_dead(ids, queue=queue, type=type, all=all))

    # ---- queues -------------------------------------------------------------------------------

    def list_queues(self) -> list[Queue]:
        """Every queue with settings or jobs."""
        return self._call(api.list_queues())

    def get_queue(self, name: str) -> Queue:
        """A queue's settings and counts (any valid name: queues exist once named)."""
        return self._call(api.get_queue(name))

    def update_queue(
        self,
        name: str,
        *,
        policy: Policy | None | Unset = UNSET,
        paused: bool | None = None,
        disable_overrides: bool | None = None,
        message_ttl: Duration | None | Unset = UNSET,
        create: bool = False,
    ) -> Queue:
        """Changes the settings named; ``policy=None`` / ``message_ttl=None`` remove them. A
        queue that has never existed is refused (:class:`NotFound`, naming the closest ones,
        so a misspelt name is never made into a queue) unless ``create=True``."""
        return self._call(
            api.update_queue(
                name,
                policy=policy,
                paused=paused,
                disable_overrides=disable_overrides,
                message_ttl=message_ttl,
                create=create,
            )
        )

    def pause_queue(self, name: str) -> Queue:
        """A paused queue accepts jobs but hands none out. A queue that has never existed is
        refused (:class:`NotFound`); ``update_queue(name, paused=True, create=True)`` sets one
        up paused."""
        return self._call(api.pause_queue(name))

    def resume_queue(self, name: str) -> Queue:
        return self._call(api.resume_queue(name))

    # ---- policies -----------------------------------------------------------------------------

    def preview_policy(self, policy: Policy, *, rows: int | None = None) -> PolicyPreview:
        """A policy's first ``rows`` retries (default 100), its window and retry count."""
        return self._call(api.preview_policy(policy, rows))

    # ---- subscriptions and deliveries ---------------------------------------------------------

    def create_subscription(
        self,
        queue: str,
        endpoint: str,
        *,
        policy: Policy | None | Unset = UNSET,
        throttle_per_second: int | None | Unset = UNSET,
        content_type: str | None | Unset = UNSET,
        secret: str | None | Unset = UNSET,
        headers: Mapping[str, str] | None | Unset = UNSET,
        enabled: bool | None | Unset = UNSET,
        retryable_statuses: Iterable[int] | None | Unset = UNSET,
        max_concurrency: int | None | Unset = UNSET,
        auto_disable_after: Duration | None | Unset = UNSET,
        format: Literal["tenax", "zaqar"] | None | Unset = UNSET,
    ) -> Subscription:
        """Subscribes a webhook endpoint to a queue (docs/webhooks.md). Keep the ``secret`` of
        the answer: the endpoint verifies signatures with it."""
        return self._call(
            api.create_subscription(
                queue,
                api.subscription_body(
                    endpoint=endpoint,
                    policy=policy,
                    throttle_per_second=throttle_per_second,
                    content_type=content_type,
                    secret=secret,
                    headers=headers,
                    enabled=enabled,
                    retryable_statuses=retryable_statuses,
                    max_concurrency=max_concurrency,
                    auto_disable_after=auto_disable_after,
                    format=format,
                ),
            )
        )

    def list_subscriptions(self, queue: str | None = None) -> list[Subscription]:
        """Every subscription, or a queue's, in id order."""
        return self._call(api.list_subscriptions(queue))

    def get_subscription(self, id: int) -> Subscription:
        return self._call(api.get_subscription(id))

    def update_subscription(
        self,
        id: int,
        *,
        endpoint: str | Unset = UNSET,
        policy: Policy | None | Unset = UNSET,
        throttle_per_second: int | None | Unset = UNSET,
        content_type: str | None | Unset = UNSET,
        secret: str | None | Unset = UNSET,
        headers: Mapping[str, str] | None | Unset = UNSET,
        enabled: bool | None | Unset = UNSET,
        retryable_statuses: Iterable[int] | None | Unset = UNSET,
        max_concurrency: int | None | Unset = UNSET,
        auto_disable_after: Duration | None | Unset = UNSET,
        format: Literal["tenax", "zaqar"] | None | Unset = UNSET,
    ) -> Subscription:
        """Changes the fields named (``PATCH``); ``None`` resets a field to its default."""
        return self._call(
            api.update_subscription(
                id,
                api.subscription_body(
                    endpoint=endpoint,
                    policy=policy,
                    throttle_per_second=throttle_per_second,
                    content_type=content_type,
                    secret=secret,
                    headers=headers,
                    enabled=enabled,
                    retryable_statuses=retryable_statuses,
                    max_concurrency=max_concurrency,
                    auto_disable_after=auto_disable_after,
                    format=format,
                ),
            )
        )

    def enable_subscription(self, id: int) -> Subscription:
        return self._call(api.enable_subscription(id, True))

    def disable_subscription(self, id: int) -> Subscription:
        """A disabled subscription's deliveries wait until it is enabled again."""
        return self._call(api.enable_subscription(id, False))

    def delete_subscription(self, id: int) -> DeletedSubscription:
        """Removes a subscription and its deliveries."""
        return self._call(api.delete_subscription(id))

    def list_deliveries(
        self,
        subscription_id: int,
        *,
        status: JobStatus | None = None,
        after: int | None = None,
        limit: int | None = None,
    ) -> DeliveryPage:
        """One page of a subscription's deliveries in id order."""
        return self._call(
            api.list_deliveries(subscription_id, status=status, after=after, limit=limit)
        )

    def iter_deliveries(
        self, subscription_id: int, *, status: JobStatus | None = None, page_size: int = 100
    ) -> Iterator[Delivery]:
        """Every delivery of a subscription, fetched a page at a time."""
        after: int | None = None
        while True:
            page = self.list_deliveries(
                subscription_id, status=status, after=after, limit=page_size
            )
            yield from page.deliveries
            if page.next_after is None:
                return
            after = page.next_after

    def list_subscription_attempts(
        self, subscription_id: int, *, after: int | None = None, limit: int | None = None
    ) -> AttemptPage:
        """The attempts of a page of ``limit`` deliveries after delivery ``after``."""
        return self._call(
            api.list_subscription_attempts(subscription_id, after=after, limit=limit)
        )

    def get_delivery(self, id: int) -> Delivery:
        """One delivery with every attempt."""
        return self._call(api.get_delivery(id))

    def list_delivery_attempts(self, id: int) -> list[DeliveryAttempt]:
        return self._call(api.list_delivery_attempts(id))

    def replay_delivery(
        self, id: int, *, policy: Policy | None = None, reset_attempts: bool | None = None
    ) -> list[int]:
        """Replays a dead delivery (:class:`NotDead` if it is not dead)."""
        return self._call(api.replay_delivery(id, policy=policy, reset_attempts=reset_attempts))

    def replay_subscription(
        self,
        id: int,
        *,
        since: Time | None = None,
        policy: Policy | None = None,
        reset_attempts: bool | None = None,
    ) -> list[int]:
        """Replays a subscription's dead deliveries (those that died at or after ``since``)."""
        return self._call(
            api.replay_subscription(
                id, since=since, policy=policy, reset_attempts=reset_attempts
            )
        )

    # ---- the cluster --------------------------------------------------------------------------

    def cluster(self) -> Cluster:
        """Every live server of the cluster with the workers each has seen. On PostgreSQL every
        server answers the same, as of the last second; a token scoped to some queues sees the
        workers of those queues only."""
        return self._call(api.cluster())

    def activity(self, minutes: int | None = None) -> Activity:
        """The cluster's activity per minute over the last ``minutes`` minutes (1 to 1440;
        default the server's, 60), oldest first, with the sums."""
        return self._call(api.activity(minutes))
