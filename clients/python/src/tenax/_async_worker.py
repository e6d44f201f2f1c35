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
from ._errors import APIError, TenaxConnectionError, TenaxError
from ._models import TakenJob
from ._worker_common import JobCancelled, UnknownTypes, WorkerSettings, WorkerStats, worker_name
from ._worker_failures import ErrorHook
from ._worker_log import shown_on_stderr
from ._worker_state import ASYNCIO, WorkerState

__all__ = ["AsyncWorker"]

P = TypeVar("P")
R = TypeVar("R")

AsyncHandler = Callable[[TakenJob[Any]], Awaitable[object]]


class AsyncWorker:
    """Runs ``async`` handlers for the jobs of some queues, as asyncio tasks.

    The same runtime as :class:`tenax.Worker` (streaming take bounded by ``concurrency``,
    heartbeats, batched completions, outcomes by exception, unknown types, logging and its
    stderr fallback, graceful shutdown), on one event loop. At the shutdown deadline, handlers still running are **cancelled** (they see
    ``asyncio.CancelledError``) and their jobs go back to the queue without using an attempt.
    It names itself to the server as a :class:`tenax.Worker` does (``name``, else the client's
    ``worker``, else ``<hostname>-<pid>``).

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
        unknown_types: UnknownTypes = "dead",
        on_error: ErrorHook | None = None,
        logger: logging.Logger | None = None,
        log: bool = True,
        name: str | None = None,
    ) -> None:
        settings = WorkerSettings.of(
            queues,
            concurrency,
            lease,
            heartbeat_every,
            ack_interval,
            ack_batch,
            shutdown_timeout,
            unknown_types,
        )
        self._state: WorkerState[AsyncHandler, AsyncJobStream] = WorkerState(
            settings, ASYNCIO, on_error, logger
        )
        self._log_to_stderr = log
        self.name = worker_name(name, client.worker if client is not None else None)
        """The name this worker gives the server."""
        self._own_client = client is None
        # A client given is shared: the worker names itself on a view of it (its connections),
        # and leaves it open. Its own is made in ``run``, on the running loop.
        self._client = client.with_worker(self.name) if client is not None else None
        self._tasks: dict[int, asyncio.Task[None]] = {}
        """The running handlers, by lease token."""
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
        self, type: str, *, payload: type[P], strict: bool = ...
    ) -> Callable[[Callable[[TakenJob[P]], Awaitable[R]]], Callable[[TakenJob[P]], Awaitable[R]]]: ...

    @overload
    def handler(
        self, type: str, *, payload: Callable[[Any], P]
    ) -> Callable[[Callable[[TakenJob[P]], Awaitable[R]]], Callable[[TakenJob[P]], Awaitable[R]]]: ...

    def handler(
        self, type: str, *, payload: Any = None, strict: bool = False
    ) -> Callable[
        [Callable[[TakenJob[Any]], Awaitable[R]]], Callable[[TakenJob[Any]], Awaitable[R]]
    ]:
        """Registers the decorated ``async`` function for jobs of ``type``; ``payload`` and
        ``strict`` as in :meth:`tenax.Worker.handler`."""

        def register(
            func: Callable[[TakenJob[Any]], Awaitable[R]],
        ) -> Callable[[TakenJob[Any]], Awaitable[R]]:
            self.register(type, func, payload=payload, strict=strict)
            return func

        return register

    def register(
        self,
        type: str,
        func: Callable[[TakenJob[Any]], Awaitable[object]],
        *,
        payload: Any = None,
        strict: bool = False,
    ) -> None:
        """Registers ``func`` (an ``async def``) for jobs of ``type``."""
        if not inspect.iscoroutinefunction(func) and not inspect.iscoroutinefunction(
            getattr(func, "__call__", None)
        ):
            raise TypeError(
                f"the handler of {type!r} must be an async function (use tenax.Worker for "
                "blocking handlers)"
            )
        self._state.registry.add(type, func, payload, strict)

    # ---- state --------------------------------------------------------------------------------

    @property
    def stats(self) -> WorkerStats:
        return self._state.counter.snapshot()

    @property
    def stopping(self) -> bool:
        return self._stop_requested

    # ---- running ------------------------------------------------------------------------------

    async def run(self, *, install_signal_handlers: bool = True) -> None:
        """Works until :meth:`stop` (or SIGTERM/SIGINT), then shuts down gracefully."""
        self._state.begin()
        with shown_on_stderr(self._state.log, self._log_to_stderr):
            await self._run(install_signal_handlers)

    async def _run(self, install_signal_handlers: bool) -> None:
        events = _Events()
        self._events = events
        if self._stop_requested:
            events.stopping.set()
        if self._hurry_requested:
            events.hurry.set()
        client = self._client if self._client is not None else AsyncClient(worker=self.name)
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
        self._state.log_started(client.url)
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
            self._state.held.abandon(self._tasks.keys())
            for task in list(self._tasks.values()):
                task.cancel()
            for task in [*helpers, acker]:
                task.cancel()
            await asyncio.gather(*helpers, acker, *self._tasks.values(), return_exceptions=True)
            if self._own_client:
                await client.aclose()
            events.stopped.set()

    def _on_signal(self, sig: int) -> None:
        if self._state.signalled(sig, self._stop_requested):
            self._hurry()
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
        state = self._state
        while not events.stopping.is_set():
            try:
                stream = await state.new_stream(client).open()
            except TenaxError as error:
                await _wait(events.stopping, state.open_failed(error))
                continue
            generation = state.opened(stream)
            try:
                # Runs until the stream ends or breaks, or until the shutdown cancels this task
                # once the handlers are done: the stream is closed only then, so the jobs of
                # running handlers stay leased to this worker.
                async for job in stream.events():
                    if job is not None:
                        self._receive(client, job, generation, events)
                state.ended(stream, events.stopping.is_set())
            except TenaxError as error:
                state.broke(error)
            finally:
                # Forgotten before the close hands them back to the server: a handler task
                # that started one while the close was awaited would run a job whose lease is
                # no longer this worker's.
                state.stream = None
                state.closed(generation, events.stopping.is_set())
                await _close_quietly(stream)
            if not events.stopping.is_set():
                await _wait(events.stopping, state.reconnect_delay())
        # Stopping with no stream open: nothing to hold.

    def _receive(
        self, client: AsyncClient, job: TakenJob[Any], generation: int, events: _Events
    ) -> None:
        if not self._state.receive(job, generation, events.stopping.is_set()):
            return
        # No queue here: every job starts at once, on a task of its own.
        self._state.held.start(job, stopping=False)
        task = asyncio.create_task(self._execute(client, job, events), name=f"tenax-job-{job.id}")
        self._tasks[job.lease_token] = task
        task.add_done_callback(lambda _: self._task_done(job.lease_token, events))

    def _task_done(self, token: int, events: _Events) -> None:
        self._tasks.pop(token, None)
        events.changed.set()

    # ---- handlers -----------------------------------------------------------------------------

    async def _execute(self, client: AsyncClient, job: TakenJob[Any], events: _Events) -> None:
        try:
            func, taken = self._state.registry.resolve(job)
            returned = await func(taken)
        except asyncio.CancelledError:
            if self._state.held.is_abandoned(job):
                raise
            # Cancelled by its own code, not by the shutdown: an ordinary failure.
            await self._report_failure(client, job, TimeoutError("the handler was cancelled"), events)
        except Exception as error:
            self._state.handler_raised(job, error)
            await self._report_failure(client, job, error, events)
        else:
            if job.cancelled:
                # Cancelled while it ran: however the handler ended, the worker reports a
                # failure, which the server finishes as cancelled.
                await self._report_failure(client, job, JobCancelled(), events)
                return
            if self._state.succeeded(job, returned):
                events.changed.set()

    async def _report_failure(
        self, client: AsyncClient, job: TakenJob[Any], error: BaseException, events: _Events
    ) -> None:
        if not self._state.held.take_over(job, "reporting"):
            return
        report = self._state.failure_report(job, error)
        try:
            for _ in range(report.ATTEMPTS):
                try:
                    result = await client.fail(job, report.message, detail=report.detail, **report.options)
                except (TenaxConnectionError, APIError) as refused:
                    delay = report.retry_in(refused)
                    if delay is None:
                        return
                    if delay:
                        await asyncio.sleep(delay)
                else:
                    report.reported(result)
                    return
            report.gave_up()
        finally:
            self._state.held.release(job)
            events.changed.set()

    # ---- acknowledgements ---------------------------------------------------------------------

    async def _ack_loop(self, client: AsyncClient, events: _Events) -> None:
        acks = self._state.acks
        while True:
            while True:
                wait = acks.due_in(idle=not self._tasks)
                if wait is None:
                    return
                if wait == 0:
                    break
                events.changed.clear()
                await _wait(events.changed, wait)
            batch = acks.take()
            try:
                results = await client.complete_many(batch.items)
            except (TenaxConnectionError, APIError) as error:
                delay = acks.unsent(batch, error, quitting=events.quit.is_set())
                events.changed.set()
                if delay is None:
                    return
                if delay:
                    await _wait(events.quit, delay)
            else:
                acks.sent(batch, results)
                events.changed.set()

    # ---- heartbeats ---------------------------------------------------------------------------

    async def _heartbeat_loop(self, client: AsyncClient, events: _Events) -> None:
        while not await _wait(events.quit, self._state.settings.beat_check_s):
            due = self._state.due_beats()
            if due:
                await asyncio.gather(*(self._beat(client, job) for job in due))
            await self._watch_stream()
            self._state.outcomes.tick()

    async def _watch_stream(self) -> None:
        """Closes a stream that went quiet, so that the reader opens a new one (see
        :meth:`WorkerState.dead_stream`)."""
        stream = self._state.dead_stream()
        if stream is not None:
            await stream.aclose()

    async def _beat(self, client: AsyncClient, job: TakenJob[Any]) -> None:
        try:
            extended = await client.heartbeat(job, lease=self._state.settings.lease)
        except TenaxError as error:
            self._state.beat_failed(job, error)
        else:
            self._state.beat_succeeded(job, extended.cancelled)

    # ---- shutdown -----------------------------------------------------------------------------

    async def _shutdown(
        self, events: _Events, acker: asyncio.Task[None], helpers: list[asyncio.Task[None]]
    ) -> None:
        state = self._state
        state.log_stopping(len(self._tasks))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + state.settings.shutdown_timeout_s
        while self._tasks and not events.hurry.is_set():
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            events.changed.clear()
            await _wait(events.changed, min(remaining, 0.1))
        # Handlers still running at the deadline are abandoned: cancelled, results not reported.
        left = {token: task for token, task in self._tasks.items() if not task.done()}
        state.held.abandon(left.keys())
        for task in left.values():
            task.cancel()
        state.abandoned(len(left))
        if left:
            await asyncio.gather(*left.values(), return_exceptions=True)
        state.acks.final = True
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
        state.log_stopped()


class _Events:
    """The worker's signals, made on the worker's own event loop."""

    def __init__(self) -> None:
        self.stopping = asyncio.Event()
        self.hurry = asyncio.Event()
        self.changed = asyncio.Event()
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
