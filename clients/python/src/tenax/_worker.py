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
      is failed (retried by its policy) with a message naming the types this worker handles; a
      payload that does not convert to the handler's type makes the job dead. No exception of
      a handler stops the worker.
    - **Shutdown** (SIGTERM, SIGINT, or :meth:`stop`): the worker starts no new job; handlers
      that are running get ``shutdown_timeout`` to finish; their completions are flushed; then
      the stream is closed, which puts every job it still holds back to ``ready`` at once
      without using an attempt: the jobs received but not started, and the handlers still
      running at the deadline (**abandoned**: their threads are left to end on their own, and
      their results are not reported). A second signal skips the wait.
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
        on_error: ErrorHook | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self._settings = WorkerSettings.of(
            queues, concurrency, lease, heartbeat_every, ack_interval, ack_batch, shutdown_timeout
        )
        self._own_client = client is None
        self._client = client if client is not None else Client()
        self._on_error = on_error
        self._log = logger or logging.getLogger("tenax.worker")
        self._registry: Registry[SyncHandler] = Registry()
        self._counter = Counter()

        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._held = HeldJobs()
        """By lease token: unique per lease, while a job id may come back on a new lease."""
        self._acks: list[tuple[TakenJob[Any], float]] = []
        self._running = 0
        self._generation = 0
        self._beats_failing_since: float | None = None
        self._work: queue.Queue[tuple[TakenJob[Any], int] | None] = queue.Queue()

        self._stopping = threading.Event()
        self._hurry = threading.Event()
        self._acks_final = False
        self._close_stream = threading.Event()
        self._quit = threading.Event()
        self._stopped = threading.Event()
        self._started = False
        self._stream: JobStream | None = None
        self._threads: list[threading.Thread] = []
        self._background: threading.Thread | None = None

    # ---- registration -------------------------------------------------------------------------

    @overload
    def handler(self, type: str) -> Callable[[Callable[[TakenJob[Any]], R]], Callable[[TakenJob[Any]], R]]: ...

    @overload
    def handler(
        self, type: str, *, payload: type[P]
    ) -> Callable[[Callable[[TakenJob[P]], R]], Callable[[TakenJob[P]], R]]: ...

    @overload
    def handler(
        self, type: str, *, payload: Callable[[Any], P]
    ) -> Callable[[Callable[[TakenJob[P]], R]], Callable[[TakenJob[P]], R]]: ...

    def handler(
        self, type: str, *, payload: Any = None
    ) -> Callable[[Callable[[TakenJob[Any]], R]], Callable[[TakenJob[Any]], R]]:
        """Registers the decorated function for jobs of ``type``.

        ``payload`` converts the JSON payload before the call: a class with a ``from_dict``
        classmethod, a dataclass (built from the object's keys), or any callable. The handler
        then receives ``TakenJob[ThatType]``.
        """

        def register(func: Callable[[TakenJob[Any]], R]) -> Callable[[TakenJob[Any]], R]:
            self.register(type, func, payload=payload)
            return func

        return register

    def register(self, type: str, func: Callable[[TakenJob[Any]], object], *, payload: Any = None) -> None:
        """Registers ``func`` for jobs of ``type`` (the non-decorator form of :meth:`handler`)."""
        self._registry.add(type, func, payload)

    # ---- state --------------------------------------------------------------------------------

    @property
    def stats(self) -> WorkerStats:
        """A snapshot of the worker's counters."""
        return self._counter.snapshot()

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
            if self._started:
                raise RuntimeError("this worker has already run; make a new one")
            self._started = True
        if not self._registry.types():
            raise RuntimeError("register at least one handler before running the worker")
        restore = self._install_signals() if install_signal_handlers else None
        try:
            self._start_threads()
            self._log.info(
                "worker started: queues %s, types %s, concurrency %d",
                self._settings.queues,
                self._registry.types(),
                self._settings.concurrency,
            )
            try:
                while not self._stopping.wait(0.5):
                    pass
            except KeyboardInterrupt:  # Ctrl-C without our signal handlers: stop gracefully
                self._log.info("interrupted: stopping")
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
        elif self._started:
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
            if self._stopping.is_set():
                self._log.warning("second signal: not waiting for running handlers")
                self._hurry.set()
            else:
                self._log.info("signal %s: stopping", signal.Signals(signum).name)
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

        for i in range(self._settings.concurrency):
            spawn(self._run_loop, f"tenax-handler-{i}")
        spawn(self._ack_loop, "tenax-acks")
        spawn(self._heartbeat_loop, "tenax-heartbeats")
        spawn(self._read_loop, "tenax-stream")

    # ---- the stream ---------------------------------------------------------------------------

    def _read_loop(self) -> None:
        backoff = Backoff()
        while not self._close_stream.is_set():
            if self._stopping.is_set() and self._stream is None:
                return
            try:
                # No read timeout: a full stream is silent for as long as its jobs run; the
                # heartbeat thread watches for a stream that went quiet (see _watch_stream).
                stream = self._client.stream(
                    self._settings.queues,
                    max=self._settings.concurrency,
                    lease=self._settings.lease,
                ).open()
            except TenaxError as error:
                self._counter.add("stream_errors")
                delay = backoff.next()
                self._log.warning("cannot open the job stream (%s); again in %.1f s", error, delay)
                self._stopping.wait(delay)
                continue
            with self._lock:
                self._stream = stream
                self._generation += 1
                generation = self._generation
            try:
                for job in stream.events():
                    if job is not None:
                        backoff.reset()
                        self._receive(job, generation)
                    if self._close_stream.is_set():
                        break
                else:
                    if not self._stopping.is_set() and not stream.closed:
                        self._log.warning("the server ended the job stream; opening it again")
            except TenaxError as error:
                if not self._close_stream.is_set():
                    self._counter.add("stream_errors")
                    self._log.warning("the job stream broke: %s", error)
            finally:
                with self._lock:
                    self._stream = None
                stream.close()
                self._stream_closed(generation)
            if not self._close_stream.is_set() and not self._stopping.is_set():
                self._stopping.wait(backoff.next())

    def _receive(self, job: TakenJob[Any], generation: int) -> None:
        self._counter.add("received")
        with self._lock:
            parked = self._stopping.is_set()
            self._held[job.lease_token] = Held(
                job, now() + self._settings.heartbeat_s, "parked" if parked else "queued", generation
            )
        if not parked:
            self._work.put((job, generation))

    def _stream_closed(self, generation: int) -> None:
        """The server put the jobs of a closed stream back to ready: forget those not started."""
        with self._lock:
            returned = self._held.forget_stream(generation, self._stopping.is_set())
            if returned:
                self._counter.add("returned", returned)
            self._changed.notify_all()

    # ---- handlers -----------------------------------------------------------------------------

    def _run_loop(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            job, _ = item
            with self._lock:
                held = self._held.get(job.lease_token)
                if held is None or held.state != "queued":
                    continue
                if self._stopping.is_set():
                    held.state = "parked"
                    continue
                held.state = "running"
                self._running += 1
            try:
                self._execute(job)
            finally:
                with self._lock:
                    self._running -= 1
                    self._changed.notify_all()

    def _execute(self, job: TakenJob[Any]) -> None:
        try:
            func, taken = self._registry.resolve(job)
            func(taken)
        except BaseException as error:  # noqa: BLE001 - a handler never kills its thread
            call_error_hook(self._on_error, job, error, self._log)
            self._report_failure(job, error)
        else:
            self._counter.add("succeeded")
            self._queue_ack(job)

    def _take_over(self, job: TakenJob[Any], state: str) -> bool:
        """Moves a held job to ``state``; False when it is no longer this worker's to report."""
        with self._lock:
            return self._held.take_over(job, state)

    def _release(self, job: TakenJob[Any]) -> None:
        with self._lock:
            self._held.pop(job.lease_token, None)
            self._changed.notify_all()

    def _report_failure(self, job: TakenJob[Any], error: BaseException) -> None:
        if not self._take_over(job, "reporting"):
            return
        message, detail, options = describe(error)
        backoff = Backoff(first=0.2, cap=2.0)
        try:
            for attempt in range(5):
                try:
                    result = self._client.fail(job, message, detail=detail, **options)
                except GONE as gone:
                    self._counter.add("lost")
                    self._log.warning("job %d: cannot report its failure: %s", job.id, gone)
                    return
                except InvalidRequest as refused:
                    # The report itself was refused (a detail the server cannot store, a retry
                    # time too far ahead): report the failure plainly, with the reason.
                    self._log.error("job %d: failure report refused (%s); sent plainly", job.id, refused)
                    message = f"{message} (report refused: {refused})"
                    detail, options = None, {}
                    continue
                except (TenaxConnectionError, APIError) as broken:
                    delay = backoff.next()
                    self._log.warning(
                        "job %d: cannot report its failure (%s); again in %.1f s", job.id, broken, delay
                    )
                    if self._quit.wait(delay):
                        return
                    continue
                self._counter.add("failed")
                if result.dead:
                    self._log.warning(
                        "job %d (%s) failed and is dead: %s (%s)", job.id, job.type, message, result.dead_reason
                    )
                else:
                    self._log.info(
                        "job %d (%s) failed: %s; %s", job.id, job.type, message,
                        f"runs again at {result.run_at:%H:%M:%S.%f}" if result.run_at else result.status,
                    )
                return
            self._log.error("job %d: gave up reporting its failure; its lease will expire", job.id)
        finally:
            self._release(job)

    # ---- acknowledgements ---------------------------------------------------------------------

    def _queue_ack(self, job: TakenJob[Any]) -> None:
        if not self._take_over(job, "acking"):
            return
        with self._lock:
            self._acks.append((job, now()))
            self._changed.notify_all()

    def _ack_loop(self) -> None:
        backoff = Backoff(first=0.2, cap=2.0)
        while True:
            with self._lock:
                while True:
                    if not self._acks:
                        if self._acks_final:
                            return
                        self._changed.wait(0.5)
                        continue
                    idle = self._running == 0 and self._work.empty()
                    wait = ack_wait(
                        self._acks[0][1], len(self._acks), self._settings, self._acks_final or idle
                    )
                    if wait == 0:
                        break
                    self._changed.wait(wait)
                batch = self._acks[: self._settings.ack_batch]
                del self._acks[: self._settings.ack_batch]
            if self._send_acks(batch):
                backoff.reset()
            else:
                with self._lock:
                    self._acks[:0] = batch
                    final = self._acks_final
                if final and self._quit.is_set():
                    self._log.error(
                        "%d completions could not be reported: those jobs will run again", len(self._acks)
                    )
                    return
                self._quit.wait(backoff.next())

    def _send_acks(self, batch: list[tuple[TakenJob[Any], float]]) -> bool:
        jobs = [job for job, _ in batch]
        try:
            results = self._client.complete_many(jobs)
        except (TenaxConnectionError, APIError) as error:
            if completions_refused(error):
                self._log.error("completions of %d jobs refused: %s", len(jobs), error)
                for job in jobs:
                    self._release(job)
                return True
            self._log.warning("cannot report %d completions: %s", len(jobs), error)
            return False
        record_completions(results, self._counter, self._log)
        for job in jobs:
            self._release(job)
        return True

    # ---- heartbeats ---------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while not self._quit.wait(self._settings.beat_check_s):
            moment = now()
            with self._lock:
                due = self._held.due_beats(moment)
            for job in due:
                if self._quit.is_set():
                    return
                self._beat(job)
            self._watch_stream()

    def _watch_stream(self) -> None:
        """Closes a stream that went quiet (see :func:`stream_dead`), so that the reader opens
        a new one."""
        with self._lock:
            stream = self._stream
            generation = self._generation
            holding = self._held.holding(generation)
            failing_since = self._beats_failing_since
        if stream is None or self._close_stream.is_set():
            return
        silence = now() - stream.last_line_at
        if stream_dead(silence, holding, failing_since, self._settings):
            self._log.warning(
                "the job stream is silent (%.0f s, %d job(s) held) and heartbeats %s: reconnecting",
                silence,
                holding,
                "fail" if failing_since is not None else "are fine",
            )
            with self._lock:
                self._beats_failing_since = None
            stream.close()

    def _beat(self, job: TakenJob[Any]) -> None:
        try:
            self._client.heartbeat(job, lease=self._settings.lease)
        except GONE as gone:
            with self._lock:
                self._held.lose(job)
            self._counter.add("lost")
            self._log.warning("job %d lost its lease: %s; its result will not be reported", job.id, gone)
            return
        except TenaxError as error:
            self._log.warning("job %d: heartbeat failed (%s); trying again", job.id, error)
            with self._lock:
                if self._beats_failing_since is None:
                    self._beats_failing_since = now()
                self._held.next_beat_in(job, self._settings.beat_retry_s)
            return
        self._counter.add("heartbeats")
        with self._lock:
            self._beats_failing_since = None
            self._held.next_beat_in(job, self._settings.heartbeat_s)

    # ---- shutdown -----------------------------------------------------------------------------

    def _shutdown(self) -> None:
        settings = self._settings
        with self._lock:
            running = self._running
        self._log.info(
            "stopping: no new jobs; waiting up to %.1f s for %d running handler(s)",
            settings.shutdown_timeout_s,
            running,
        )
        for _ in range(settings.concurrency):
            self._work.put(None)
        deadline = now() + settings.shutdown_timeout_s
        with self._lock:
            while self._running > 0 and not self._hurry.is_set():
                left = deadline - now()
                if left <= 0:
                    break
                self._changed.wait(min(0.1, left))
            abandoned = 0
            for held in self._held.values():
                if held.state == "running":
                    held.state = "abandoned"
                    abandoned += 1
            # Flush every completion, then let the acknowledger end.
            self._acks_final = True
            self._changed.notify_all()
        if abandoned:
            self._counter.add("abandoned", abandoned)
            self._log.warning(
                "%d handler(s) still running after %.1f s: abandoned, their jobs go back to the queue",
                abandoned,
                settings.shutdown_timeout_s,
            )
        threads = {t.name: t for t in self._threads}
        acks = threads["tenax-acks"]
        acks.join(10.0)
        if acks.is_alive():
            self._quit.set()
            acks.join(2.0)
        # Close the stream: the server puts what it still holds back to ready (no attempt used).
        self._close_stream.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()  # wakes the reader, which ends
        threads["tenax-stream"].join(5.0)
        self._quit.set()
        threads["tenax-heartbeats"].join(2.0)
        log_stopped(self._log, self.stats)
