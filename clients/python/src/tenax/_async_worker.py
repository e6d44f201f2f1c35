"""The asyncio worker runtime, :class:`AsyncWorker`."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import signal
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import Any, TypeVar, overload

from ._async_client import AsyncClient, AsyncJobStream
from ._convert import Duration
from ._errors import (
    APIError,
    InvalidRequest,
    TenaxConnectionError,
    TenaxError,
)
from ._models import TakenJob
from ._outcomes import describe
from ._worker_common import (
    GONE,
    Backoff,
    Counter,
    ErrorHook,
    Held,
    HeldJobs,
    Registry,
    WorkerSettings,
    WorkerStats,
    ack_wait,
    call_error_hook,
    completions_refused,
    log_stopped,
    now,
    record_completions,
    stream_dead,
)

__all__ = ["AsyncWorker"]

P = TypeVar("P")
R = TypeVar("R")

AsyncHandler = Callable[[TakenJob[Any]], Awaitable[object]]


class AsyncWorker:
    """Runs ``async`` handlers for the jobs of some queues, as asyncio tasks.

    The same runtime as :class:`tenax.Worker` (streaming take bounded by ``concurrency``,
    heartbeats, batched completions, outcomes by exception, graceful shutdown), on one event
    loop. At the shutdown deadline, handlers still running are **cancelled** (they see
    ``asyncio.CancelledError``) and their jobs go back to the queue without using an attempt.

    ::

        worker = tenax.AsyncWorker("emails", concurrency=100)

        @worker.handler("email.send", payload=Email)
        async def send(job: tenax.TakenJob[Email]) -> None:
            await smtp.send(job.payload.to, job.payload.subject)

        asyncio.run(worker.run())
    """

    def __init__(
        self,
        queues: str | Iterable[str],
        *,
        client: AsyncClient | None = None,
        concurrency: int = 10,
        lease: Duration = timedelta(seconds=30),
        heartbeat_every: Duration | None = None,
        ack_interval: Duration = 0.05,
        ack_batch: int = 100,
        shutdown_timeout: Duration = 25.0,
        on_error: ErrorHook | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self._settings = WorkerSettings.of(
            queues, concurrency, lease, heartbeat_every, ack_interval, ack_batch, shutdown_timeout
        )
        self._own_client = client is None
        self._client = client
        self._on_error = on_error
        self._log = logger or logging.getLogger("tenax.worker")
        self._registry: Registry[AsyncHandler] = Registry()
        self._counter = Counter()
        self._held = HeldJobs()
        self._acks: list[tuple[TakenJob[Any], float]] = []
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._generation = 0
        self._stream: AsyncJobStream | None = None
        self._beats_failing_since: float | None = None
        self._started = False
        self._stop_requested = False
        self._hurry_requested = False
        self._events: _Events | None = None

    # ---- registration -------------------------------------------------------------------------

    @overload
    def handler(
        self, type: str
    ) -> Callable[
        [Callable[[TakenJob[Any]], Awaitable[R]]], Callable[[TakenJob[Any]], Awaitable[R]]
    ]: ...

    @overload
    def handler(
        self, type: str, *, payload: type[P]
    ) -> Callable[[Callable[[TakenJob[P]], Awaitable[R]]], Callable[[TakenJob[P]], Awaitable[R]]]: ...

    @overload
    def handler(
        self, type: str, *, payload: Callable[[Any], P]
    ) -> Callable[[Callable[[TakenJob[P]], Awaitable[R]]], Callable[[TakenJob[P]], Awaitable[R]]]: ...

    def handler(
        self, type: str, *, payload: Any = None
    ) -> Callable[
        [Callable[[TakenJob[Any]], Awaitable[R]]], Callable[[TakenJob[Any]], Awaitable[R]]
    ]:
        """Registers the decorated ``async`` function for jobs of ``type``; ``payload`` as in
        :meth:`tenax.Worker.handler`."""

        def register(
            func: Callable[[TakenJob[Any]], Awaitable[R]],
        ) -> Callable[[TakenJob[Any]], Awaitable[R]]:
            self.register(type, func, payload=payload)
            return func

        return register

    def register(
        self, type: str, func: Callable[[TakenJob[Any]], Awaitable[object]], *, payload: Any = None
    ) -> None:
        """Registers ``func`` (an ``async def``) for jobs of ``type``."""
        if not inspect.iscoroutinefunction(func) and not inspect.iscoroutinefunction(
            getattr(func, "__call__", None)
        ):
            raise TypeError(
                f"the handler of {type!r} must be an async function (use tenax.Worker for "
                "blocking handlers)"
            )
        self._registry.add(type, func, payload)

    # ---- state --------------------------------------------------------------------------------

    @property
    def stats(self) -> WorkerStats:
        return self._counter.snapshot()

    @property
    def stopping(self) -> bool:
        return self._stop_requested

    # ---- running ------------------------------------------------------------------------------

    async def run(self, *, install_signal_handlers: bool = True) -> None:
        """Works until :meth:`stop` (or SIGTERM/SIGINT), then shuts down gracefully."""
        if self._started:
            raise RuntimeError("this worker has already run; make a new one")
        self._started = True
        if not self._registry.types():
            raise RuntimeError("register at least one handler before running the worker")
        events = _Events()
        self._events = events
        if self._stop_requested:
            events.stopping.set()
        if self._hurry_requested:
            events.hurry.set()
        client = self._client if self._client is not None else AsyncClient()
        self._client = client
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, self._on_signal, sig)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError, ValueError):
                    pass
        self._log.info(
            "worker started: queues %s, types %s, concurrency %d",
            self._settings.queues,
            self._registry.types(),
            self._settings.concurrency,
        )
        helpers = [
            asyncio.create_task(self._read_loop(client, events), name="tenax-stream"),
            asyncio.create_task(self._heartbeat_loop(client, events), name="tenax-heartbeats"),
        ]
        acker = asyncio.create_task(self._ack_loop(client, events), name="tenax-acks")
        try:
            await events.stopping.wait()
            await self._shutdown(events, acker, helpers)
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            # Only left when run() itself was cancelled: a hard stop. Handlers are cancelled
            # and the stream closed, which gives their jobs back to the queue.
            for token, task in list(self._tasks.items()):
                held = self._held.get(token)
                if held is not None:
                    held.state = "abandoned"
                task.cancel()
            for task in [*helpers, acker]:
                task.cancel()
            await asyncio.gather(*helpers, acker, *self._tasks.values(), return_exceptions=True)
            if self._own_client:
                await client.aclose()
            events.stopped.set()

    def _on_signal(self, sig: int) -> None:
        if self._stop_requested:
            self._log.warning("second signal: not waiting for running handlers")
            self._hurry()
        else:
            self._log.info("signal %s: stopping", signal.Signals(sig).name)
        self.request_stop()

    def _hurry(self) -> None:
        self._hurry_requested = True
        if self._events is not None:
            self._events.hurry.set()

    def request_stop(self) -> None:
        """Asks the worker to stop, without waiting (safe from a handler)."""
        self._stop_requested = True
        if self._events is not None:
            self._events.stopping.set()

    async def stop(self) -> None:
        """Asks the worker to stop and waits until it has shut down (from outside handlers)."""
        self.request_stop()
        if self._events is not None:
            await self._events.stopped.wait()

    # ---- the stream ---------------------------------------------------------------------------

    async def _read_loop(self, client: AsyncClient, events: _Events) -> None:
        backoff = Backoff()
        while not events.stopping.is_set():
            try:
                stream = await client.stream(
                    self._settings.queues,
                    max=self._settings.concurrency,
                    lease=self._settings.lease,
                ).open()
            except TenaxError as error:
                self._counter.add("stream_errors")
                delay = backoff.next()
                self._log.warning("cannot open the job stream (%s); again in %.1f s", error, delay)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(events.stopping.wait(), delay)
                continue
            self._generation += 1
            generation = self._generation
            self._stream = stream
            try:
                # Runs until the stream ends or breaks, or until the shutdown cancels this task
                # once the handlers are done: the stream is closed only then, so the jobs of
                # running handlers stay leased to this worker.
                async for job in stream.events():
                    if job is not None:
                        backoff.reset()
                        self._receive(client, job, generation, events)
                if not events.stopping.is_set() and not stream.closed:
                    self._log.warning("the server ended the job stream; opening it again")
            except TenaxError as error:
                self._counter.add("stream_errors")
                self._log.warning("the job stream broke: %s", error)
            finally:
                self._stream = None
                await _close_quietly(stream)
                self._stream_closed(generation, events)
            if not events.stopping.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(events.stopping.wait(), backoff.next())
        # Stopping with no stream open: nothing to hold.

    def _receive(
        self, client: AsyncClient, job: TakenJob[Any], generation: int, events: _Events
    ) -> None:
        self._counter.add("received")
        if events.stopping.is_set():
            self._held[job.lease_token] = Held(job, now() + self._settings.heartbeat_s, "parked", generation)
            return
        self._held[job.lease_token] = Held(job, now() + self._settings.heartbeat_s, "running", generation)
        task = asyncio.create_task(self._execute(client, job, events), name=f"tenax-job-{job.id}")
        self._tasks[job.lease_token] = task
        task.add_done_callback(lambda _: self._task_done(job.lease_token, events))

    def _task_done(self, token: int, events: _Events) -> None:
        self._tasks.pop(token, None)
        events.changed.set()

    def _stream_closed(self, generation: int, events: _Events) -> None:
        returned = self._held.forget_stream(generation, events.stopping.is_set())
        if returned:
            self._counter.add("returned", returned)

    # ---- handlers -----------------------------------------------------------------------------

    async def _execute(self, client: AsyncClient, job: TakenJob[Any], events: _Events) -> None:
        try:
            func, taken = self._registry.resolve(job)
            await func(taken)
        except asyncio.CancelledError:
            held = self._held.get(job.lease_token)
            if held is not None and held.state == "abandoned":
                raise
            # Cancelled by its own code, not by the shutdown: an ordinary failure.
            await self._report_failure(client, job, TimeoutError("the handler was cancelled"), events)
        except Exception as error:
            call_error_hook(self._on_error, job, error, self._log)
            await self._report_failure(client, job, error, events)
        else:
            self._counter.add("succeeded")
            self._queue_ack(job, events)

    def _take_over(self, job: TakenJob[Any], state: str) -> bool:
        return self._held.take_over(job, state)

    def _release(self, job: TakenJob[Any], events: _Events) -> None:
        self._held.pop(job.lease_token, None)
        events.changed.set()

    async def _report_failure(
        self, client: AsyncClient, job: TakenJob[Any], error: BaseException, events: _Events
    ) -> None:
        if not self._take_over(job, "reporting"):
            return
        message, detail, options = describe(error)
        backoff = Backoff(first=0.2, cap=2.0)
        try:
            for _ in range(5):
                try:
                    result = await client.fail(job, message, detail=detail, **options)
                except GONE as gone:
                    self._counter.add("lost")
                    self._log.warning("job %d: cannot report its failure: %s", job.id, gone)
                    return
                except InvalidRequest as refused:
                    self._log.error("job %d: failure report refused (%s); sent plainly", job.id, refused)
                    message = f"{message} (report refused: {refused})"
                    detail, options = None, {}
                    continue
                except (TenaxConnectionError, APIError) as broken:
                    delay = backoff.next()
                    self._log.warning(
                        "job %d: cannot report its failure (%s); again in %.1f s", job.id, broken, delay
                    )
                    await asyncio.sleep(delay)
                    continue
                self._counter.add("failed")
                if result.dead:
                    self._log.warning(
                        "job %d (%s) failed and is dead: %s (%s)", job.id, job.type, message, result.dead_reason
                    )
                else:
                    self._log.info("job %d (%s) failed: %s; %s", job.id, job.type, message, result.status)
                return
            self._log.error("job %d: gave up reporting its failure; its lease will expire", job.id)
        finally:
            self._release(job, events)

    # ---- acknowledgements ---------------------------------------------------------------------

    def _queue_ack(self, job: TakenJob[Any], events: _Events) -> None:
        if not self._take_over(job, "acking"):
            return
        self._acks.append((job, now()))
        events.changed.set()

    async def _ack_loop(self, client: AsyncClient, events: _Events) -> None:
        backoff = Backoff(first=0.2, cap=2.0)
        while True:
            while True:
                if not self._acks:
                    if events.acks_final.is_set():
                        return
                    events.changed.clear()
                    await _wait(events.changed, 0.5)
                    continue
                idle = not self._tasks
                wait = ack_wait(
                    self._acks[0][1],
                    len(self._acks),
                    self._settings,
                    events.acks_final.is_set() or idle,
                )
                if wait == 0:
                    break
                events.changed.clear()
                await _wait(events.changed, wait)
            batch = self._acks[: self._settings.ack_batch]
            del self._acks[: self._settings.ack_batch]
            if await self._send_acks(client, batch, events):
                backoff.reset()
                continue
            self._acks[:0] = batch
            if events.quit.is_set():
                self._log.error(
                    "%d completions could not be reported: those jobs will run again", len(self._acks)
                )
                return
            await _wait(events.quit, backoff.next())

    async def _send_acks(
        self, client: AsyncClient, batch: list[tuple[TakenJob[Any], float]], events: _Events
    ) -> bool:
        jobs = [job for job, _ in batch]
        try:
            results = await client.complete_many(jobs)
        except (TenaxConnectionError, APIError) as error:
            if completions_refused(error):
                self._log.error("completions of %d jobs refused: %s", len(jobs), error)
                for job in jobs:
                    self._release(job, events)
                return True
            self._log.warning("cannot report %d completions: %s", len(jobs), error)
            return False
        record_completions(results, self._counter, self._log)
        for job in jobs:
            self._release(job, events)
        return True

    # ---- heartbeats ---------------------------------------------------------------------------

    async def _heartbeat_loop(self, client: AsyncClient, events: _Events) -> None:
        while not await _wait(events.quit, self._settings.beat_check_s):
            moment = now()
            due = self._held.due_beats(moment)
            if due:
                await asyncio.gather(*(self._beat(client, job) for job in due))
            await self._watch_stream()

    async def _watch_stream(self) -> None:
        """Closes a stream that went quiet, so that the reader opens a new one (see
        :func:`stream_dead`)."""
        stream = self._stream
        if stream is None:
            return
        holding = self._held.holding(self._generation)
        silence = now() - stream.last_line_at
        if stream_dead(silence, holding, self._beats_failing_since, self._settings):
            self._log.warning(
                "the job stream is silent (%.0f s, %d job(s) held): reconnecting", silence, holding
            )
            self._beats_failing_since = None
            await stream.aclose()

    async def _beat(self, client: AsyncClient, job: TakenJob[Any]) -> None:
        try:
            await client.heartbeat(job, lease=self._settings.lease)
        except GONE as gone:
            self._held.lose(job)
            self._counter.add("lost")
            self._log.warning("job %d lost its lease: %s; its result will not be reported", job.id, gone)
            return
        except TenaxError as error:
            self._log.warning("job %d: heartbeat failed (%s); trying again", job.id, error)
            if self._beats_failing_since is None:
                self._beats_failing_since = now()
            self._held.next_beat_in(job, self._settings.beat_retry_s)
            return
        self._counter.add("heartbeats")
        self._beats_failing_since = None
        self._held.next_beat_in(job, self._settings.heartbeat_s)

    # ---- shutdown -----------------------------------------------------------------------------

    async def _shutdown(
        self, events: _Events, acker: asyncio.Task[None], helpers: list[asyncio.Task[None]]
    ) -> None:
        settings = self._settings
        self._log.info(
            "stopping: no new jobs; waiting up to %.1f s for %d running handler(s)",
            settings.shutdown_timeout_s,
            len(self._tasks),
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.shutdown_timeout_s
        while self._tasks and not events.hurry.is_set():
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            events.changed.clear()
            await _wait(events.changed, min(remaining, 0.1))
        # Handlers still running at the deadline are abandoned: cancelled, results not reported.
        left = [(token, task) for token, task in self._tasks.items() if not task.done()]
        for token, task in left:
            held = self._held.get(token)
            if held is not None:
                held.state = "abandoned"
            task.cancel()
        if left:
            self._counter.add("abandoned", len(left))
            self._log.warning(
                "%d handler(s) still running after %.1f s: cancelled, their jobs go back to the queue",
                len(left),
                settings.shutdown_timeout_s,
            )
            await asyncio.gather(*(task for _, task in left), return_exceptions=True)
        events.acks_final.set()
        events.changed.set()
        try:
            await asyncio.wait_for(asyncio.shield(acker), 10.0)
        except (asyncio.TimeoutError, Exception):
            events.quit.set()
            with contextlib.suppress(asyncio.TimeoutError, Exception):
                await asyncio.wait_for(acker, 2.0)
        # Close the stream (by ending its reader): what it still holds goes back to ready.
        events.quit.set()
        for task in helpers:
            task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
        log_stopped(self._log, self.stats)


class _Events:
    """The worker's signals, made on the worker's own event loop."""

    def __init__(self) -> None:
        self.stopping = asyncio.Event()
        self.hurry = asyncio.Event()
        self.changed = asyncio.Event()
        self.acks_final = asyncio.Event()
        self.quit = asyncio.Event()
        self.stopped = asyncio.Event()


async def _wait(event: asyncio.Event, timeout: float) -> bool:
    """Waits for ``event`` at most ``timeout`` seconds; True if it is set."""
    if event.is_set():
        return True
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(event.wait(), timeout)
    return event.is_set()


async def _close_quietly(stream: AsyncJobStream) -> None:
    with contextlib.suppress(Exception):
        await asyncio.shield(stream.aclose())
