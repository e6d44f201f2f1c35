"""The threaded worker runtime, :class:`Worker`."""

from __future__ import annotations

import logging
import queue
import signal
import threading
from collections.abc import Callable, Iterable
from datetime import timedelta
from types import FrameType, TracebackType
from typing import Any, TypeVar, overload

from ._client import Client, JobStream
from ._convert import Duration
from ._errors import APIError, TenaxConnectionError, TenaxError
from ._models import TakenJob
from ._worker_common import JobCancelled, UnknownTypes, WorkerSettings, WorkerStats, now, worker_name
from ._worker_failures import ErrorHook
from ._worker_log import shown_on_stderr
from ._worker_state import THREADS, WorkerState

__all__ = ["Worker"]

P = TypeVar("P")
R = TypeVar("R")

SyncHandler = Callable[[TakenJob[Any]], object]


class Worker:
    """Runs handlers for the jobs of some queues, on threads.

    ::

        worker = tenax.Worker("emails", concurrency=20)

        @worker.handler("email.send", payload=Email)
        def send(job: tenax.TakenJob[Email]) -> None:
            smtp.send(job.payload.to, job.payload.subject)

        worker.run()  # until SIGTERM / SIGINT, or worker.stop()

    How it works:

    - **Taking.** One streaming take (``POST /api/take/stream``) with ``max=concurrency``:
      the server pushes jobs as they become ready and never holds more than ``concurrency``
      leased to this worker, so nothing waits in a local buffer while its lease runs.
    - **Heartbeats.** Every job the worker holds gets a heartbeat each ``heartbeat_every``
      (default half the lease), so a handler may run longer than its lease. A job whose
      heartbeat says the lease is gone is counted ``lost``; its result is not reported.
    - **Acknowledgements.** Completions are batched: one ``POST /api/jobs/complete`` for
      every ``ack_batch`` jobs, or after ``ack_interval``, or at once when no handler is
      running, and always before shutdown. Failures are reported at once.
    - **Outcomes.** A handler that returns completes its job. An exception fails it: a plain
      exception or :class:`tenax.Retry` lets the policy decide, :class:`tenax.NotRetryable`
      makes it dead, :class:`tenax.RetryIn`/:class:`tenax.RetryAt` choose when it runs again,
      :class:`tenax.Snooze` puts it off without using an attempt. The message, and the type and
      traceback tail as ``detail``, are recorded on the job. A job of a type without a handler
      is dead at once (``unknown_types="retry"``: retried by its policy), with a message
      naming the types this worker handles, logged at ERROR; a payload that does not convert
      to the handler's type makes the job dead. No exception of a handler stops the worker.
    - **Logging** (logger ``tenax.worker``, or ``logger``): the start (server, queues,
      concurrency, types), each job's outcome at INFO (completed and how long it ran, failed
      and when it runs again; dead at WARNING), and the stop. Past 10 outcomes in a second,
      a summary line every 5 s replaces the line per job, until a 5 s window averages 10 a
      second or fewer. When the application configured no logging (no handler on the logger,
      on ``tenax`` or on the root logger), :meth:`run` shows these lines on stderr;
      ``log=False``, or any logging configuration, turns that off.
    - **Shutdown** (SIGTERM, SIGINT, or :meth:`stop`): the worker starts no new job; handlers
      that are running get ``shutdown_timeout`` to finish; their completions are flushed; then
      the stream is closed, which puts every job it still holds back to ``ready`` at once
      without using an attempt: the jobs received but not started, and the handlers still
      running at the deadline (**abandoned**: their threads are left to end on their own, and
      their results are not reported). A second signal skips the wait.
    - **Name.** Every request says which worker sends it (``X-Tenax-Worker``): ``name``, else
      the ``worker`` of the client given, else ``<hostname>-<pid>``. ``client.cluster()`` lists
      the worker under it, with its queues and the jobs it holds.
    """

    def __init__(
        self,
        queues: str | Iterable[str],
        *,
        client: Client | None = None,
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
        self._state: WorkerState[SyncHandler, JobStream] = WorkerState(
            settings, THREADS, on_error, logger
        )
        self._log_to_stderr = log
        self.name = worker_name(name, client.worker if client is not None else None)
        """The name this worker gives the server."""
        self._own_client = client is None
        # A client given is shared: the worker names itself on a view of it, which uses its
        # connections, and leaves it open.
        self._client = (
            client.with_worker(self.name) if client is not None else Client(worker=self.name)
        )

        self._lock = threading.Lock()
        """Guards ``_state`` and ``_running``."""
        self._changed = threading.Condition(self._lock)
        """Notified on the changes the loops wait for: completions queued, handlers ended, jobs
        let go."""
        self._running = 0
        self._work: queue.Queue[TakenJob[Any] | None] = queue.Queue()
        """Jobs received, for the handler threads; a None per thread ends them."""

        self._stopping = threading.Event()
        self._hurry = threading.Event()
        self._close_stream = threading.Event()
        self._quit = threading.Event()
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._background: threading.Thread | None = None

    # ---- registration -------------------------------------------------------------------------

    @overload
    def handler(self, type: str) -> Callable[[Callable[[TakenJob[Any]], R]], Callable[[TakenJob[Any]], R]]: ...

    @overload
    def handler(
        self, type: str, *, payload: type[P], strict: bool = ...
    ) -> Callable[[Callable[[TakenJob[P]], R]], Callable[[TakenJob[P]], R]]: ...

    @overload
    def handler(
        self, type: str, *, payload: Callable[[Any], P]
    ) -> Callable[[Callable[[TakenJob[P]], R]], Callable[[TakenJob[P]], R]]: ...

    def handler(
        self, type: str, *, payload: Any = None, strict: bool = False
    ) -> Callable[[Callable[[TakenJob[Any]], R]], Callable[[TakenJob[Any]], R]]:
        """Registers the decorated function for jobs of ``type``.

        ``payload`` converts the JSON payload before the call: a class with a ``from_dict``
        classmethod, a dataclass, or any callable. The handler then receives
        ``TakenJob[ThatType]``. A dataclass is built from the keys its constructor takes, and
        the payload's other keys are ignored (a producer may add one before every worker knows
        it); with ``strict=True`` an unknown key makes the job dead with
        :class:`tenax.PayloadMismatch`, as a missing required field always does.
        """

        def register(func: Callable[[TakenJob[Any]], R]) -> Callable[[TakenJob[Any]], R]:
            self.register(type, func, payload=payload, strict=strict)
            return func

        return register

    def register(
        self,
        type: str,
        func: Callable[[TakenJob[Any]], object],
        *,
        payload: Any = None,
        strict: bool = False,
    ) -> None:
        """Registers ``func`` for jobs of ``type`` (the non-decorator form of :meth:`handler`)."""
        self._state.registry.add(type, func, payload, strict)

    # ---- state --------------------------------------------------------------------------------

    @property
    def stats(self) -> WorkerStats:
        """A snapshot of the worker's counters."""
        return self._state.counter.snapshot()

    @property
    def client(self) -> Client:
        return self._client

    @property
    def stopping(self) -> bool:
        """True once a stop was asked for: handlers may check it to give up long work early."""
        return self._stopping.is_set()

    # ---- running ------------------------------------------------------------------------------

    def run(self, *, install_signal_handlers: bool = True) -> None:
        """Works until a stop is asked for, then shuts down gracefully and returns.

        With ``install_signal_handlers`` (and on the main thread), SIGTERM and SIGINT ask for
        the stop; a second one skips the wait for running handlers.
        """
        with self._lock:
            self._state.begin()
        with shown_on_stderr(self._state.log, self._log_to_stderr):
            self._run(install_signal_handlers)

    def _run(self, install_signal_handlers: bool) -> None:
        restore = self._install_signals() if install_signal_handlers else None
        try:
            self._start_threads()
            self._state.log_started(self._client.url)
            try:
                while not self._stopping.wait(0.5):
                    pass
            except KeyboardInterrupt:  # Ctrl-C without our signal handlers: stop gracefully
                self._state.log.info("interrupted: stopping")
                self._stopping.set()
            self._shutdown()
        finally:
            if restore is not None:
                restore()
            if self._own_client:
                self._client.close()
            self._stopped.set()

    def start(self) -> Worker:
        """Runs the worker on a background thread (no signal handlers) and returns at once."""
        thread = threading.Thread(
            target=self.run, kwargs={"install_signal_handlers": False}, name="tenax-worker", daemon=True
        )
        self._background = thread
        thread.start()
        return self

    def stop(self, *, wait: bool = True) -> None:
        """Asks the worker to stop and, with ``wait``, returns once it has shut down. Safe to
        call from a handler (it then does not wait) and more than once."""
        self._stopping.set()
        if not wait or threading.current_thread() in self._threads:
            return
        if self._background is not None and self._background is not threading.current_thread():
            self._background.join()
        elif self._state.started:
            self._stopped.wait()

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _install_signals(self) -> Callable[[], None] | None:
        if threading.current_thread() is not threading.main_thread():
            return None

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if self._state.signalled(signum, self._stopping.is_set()):
                self._hurry.set()
            self._stopping.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}

        def restore() -> None:
            for s, handler in previous.items():
                signal.signal(s, handler)

        return restore

    def _start_threads(self) -> None:
        def spawn(target: Callable[[], None], name: str) -> None:
            thread = threading.Thread(target=target, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()

        for i in range(self._state.settings.concurrency):
            spawn(self._run_loop, f"tenax-handler-{i}")
        spawn(self._ack_loop, "tenax-acks")
        spawn(self._heartbeat_loop, "tenax-heartbeats")
        spawn(self._read_loop, "tenax-stream")

    # ---- the stream ---------------------------------------------------------------------------

    def _read_loop(self) -> None:
        state = self._state
        while not self._close_stream.is_set():
            if self._stopping.is_set() and state.stream is None:
                return
            try:
                # No read timeout: a full stream is silent for as long as its jobs run; the
                # heartbeat thread watches for a stream that went quiet (see _watch_stream).
                stream = state.new_stream(self._client).open()
            except TenaxError as error:
                with self._lock:
                    delay = state.open_failed(error)
                self._stopping.wait(delay)
                continue
            with self._lock:
                generation = state.opened(stream)
            try:
                for job in stream.events():
                    if job is not None:
                        self._receive(job, generation)
                    if self._close_stream.is_set():
                        break
                else:
                    with self._lock:
                        state.ended(stream, self._stopping.is_set())
            except TenaxError as error:
                if not self._close_stream.is_set():
                    with self._lock:
                        state.broke(error)
            finally:
                # The jobs received but not started are forgotten before the stream closes:
                # the close hands them back to the server, and a handler thread that started
                # one in between would run a job whose lease is no longer this worker's.
                with self._lock:
                    state.stream = None
                    state.closed(generation, self._stopping.is_set())
                    self._changed.notify_all()
                stream.close()
            if not self._close_stream.is_set() and not self._stopping.is_set():
                with self._lock:
                    delay = state.reconnect_delay()
                self._stopping.wait(delay)

    def _receive(self, job: TakenJob[Any], generation: int) -> None:
        with self._lock:
            start = self._state.receive(job, generation, self._stopping.is_set())
        if start:
            self._work.put(job)

    # ---- handlers -----------------------------------------------------------------------------

    def _run_loop(self) -> None:
        while True:
            job = self._work.get()
            if job is None:
                return
            with self._lock:
                if not self._state.held.start(job, self._stopping.is_set()):
                    continue
                self._running += 1
            try:
                self._execute(job)
            finally:
                with self._lock:
                    self._running -= 1
                    self._changed.notify_all()

    def _execute(self, job: TakenJob[Any]) -> None:
        try:
            func, taken = self._state.registry.resolve(job)
            returned = func(taken)
        except BaseException as error:  # noqa: BLE001 - a handler never kills its thread
            self._state.handler_raised(job, error)
            self._report_failure(job, error)
        else:
            if job.cancelled:
                # Cancelled while it ran: however the handler ended, the worker reports a
                # failure, which the server finishes as cancelled.
                self._report_failure(job, JobCancelled())
                return
            with self._lock:
                if self._state.succeeded(job, returned):
                    self._changed.notify_all()

    def _report_failure(self, job: TakenJob[Any], error: BaseException) -> None:
        with self._lock:
            if not self._state.held.take_over(job, "reporting"):
                return
        report = self._state.failure_report(job, error)
        try:
            for _ in range(report.ATTEMPTS):
                try:
                    result = self._client.fail(job, report.message, detail=report.detail, **report.options)
                except (TenaxConnectionError, APIError) as refused:
                    delay = report.retry_in(refused)
                    if delay is None or (delay and self._quit.wait(delay)):
                        return  # the job is gone, or the worker quits: its lease will expire
                else:
                    report.reported(result)
                    return
            report.gave_up()
        finally:
            with self._lock:
                self._state.held.release(job)
                self._changed.notify_all()

    # ---- acknowledgements ---------------------------------------------------------------------

    def _ack_loop(self) -> None:
        acks = self._state.acks
        while True:
            with self._lock:
                while True:
                    wait = acks.due_in(idle=self._running == 0 and self._work.empty())
                    if wait is None:
                        return
                    if wait == 0:
                        break
                    self._changed.wait(wait)
                batch = acks.take()
            try:
                results = self._client.complete_many(batch.items)
            except (TenaxConnectionError, APIError) as error:
                with self._lock:
                    delay = acks.unsent(batch, error, quitting=self._quit.is_set())
                    self._changed.notify_all()
                if delay is None:
                    return
                if delay:
                    self._quit.wait(delay)
            else:
                with self._lock:
                    acks.sent(batch, results)
                    self._changed.notify_all()

    # ---- heartbeats ---------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while not self._quit.wait(self._state.settings.beat_check_s):
            with self._lock:
                due = self._state.due_beats()
            for job in due:
                if self._quit.is_set():
                    return
                self._beat(job)
            self._watch_stream()
            self._state.outcomes.tick()

    def _watch_stream(self) -> None:
        """Closes a stream that went quiet (see :meth:`WorkerState.dead_stream`), so that the
        reader opens a new one."""
        if self._close_stream.is_set():
            return
        with self._lock:
            stream = self._state.dead_stream()
        if stream is not None:
            stream.close()

    def _beat(self, job: TakenJob[Any]) -> None:
        try:
            extended = self._client.heartbeat(job, lease=self._state.settings.lease)
        except TenaxError as error:
            with self._lock:
                self._state.beat_failed(job, error)
        else:
            with self._lock:
                self._state.beat_succeeded(job, extended.cancelled)

    # ---- shutdown -----------------------------------------------------------------------------

    def _shutdown(self) -> None:
        state = self._state
        with self._lock:
            state.log_stopping(self._running)
        for _ in range(state.settings.concurrency):
            self._work.put(None)
        deadline = now() + state.settings.shutdown_timeout_s
        with self._lock:
            while self._running > 0 and not self._hurry.is_set():
                left = deadline - now()
                if left <= 0:
                    break
                self._changed.wait(min(0.1, left))
            running = state.held.running()
            state.held.abandon(running)
            # Flush every completion, then let the acknowledger end.
            state.acks.final = True
            self._changed.notify_all()
            state.abandoned(len(running))
        threads = {t.name: t for t in self._threads}
        acks = threads["tenax-acks"]
        acks.join(10.0)
        if acks.is_alive():
            self._quit.set()
            acks.join(2.0)
        # Close the stream: the server puts what it still holds back to ready (no attempt used).
        self._close_stream.set()
        with self._lock:
            stream = state.stream
        if stream is not None:
            stream.close()  # wakes the reader, which ends
        threads["tenax-stream"].join(5.0)
        self._quit.set()
        threads["tenax-heartbeats"].join(2.0)
        state.log_stopped()
