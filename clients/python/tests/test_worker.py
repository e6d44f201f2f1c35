"""The threaded worker against a real server: outcomes, heartbeats, batching, shutdown, and
what it logs."""

from __future__ import annotations

import logging
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from support import SHORT_POLICY, CountingTransport, job_in, wait_for

import tenax


def make_worker(client: tenax.Client, queue: str, **options: Any) -> tenax.Worker:
    options.setdefault("shutdown_timeout", 5.0)
    return tenax.Worker(queue, client=client, **options)


def test_jobs_are_handled_and_completed(client: tenax.Client, queue: str) -> None:
    ids = [client.enqueue(queue, "greet", {"n": n}).id for n in range(5)]
    seen: list[int] = []
    worker = make_worker(client, queue, concurrency=3)

    @worker.handler("greet")
    def greet(job: tenax.TakenJob[Any]) -> None:
        assert job.queue == queue and job.attempt == 1
        seen.append(job.payload["n"])

    with worker:
        for id in ids:
            wait_for(job_in(client, id, "completed"), what=f"job {id} completed")
    assert sorted(seen) == [0, 1, 2, 3, 4]
    stats = worker.stats
    assert (stats.received, stats.succeeded, stats.completed, stats.failed) == (5, 5, 5, 0)


def test_a_failing_handler_is_retried_by_the_policy_until_dead(client: tenax.Client, queue: str) -> None:
    id = client.enqueue(queue, "flaky", policy=SHORT_POLICY).id
    attempts: list[int] = []
    worker = make_worker(client, queue)

    @worker.handler("flaky")
    def flaky(job: tenax.TakenJob[Any]) -> None:
        attempts.append(job.attempt)
        raise ValueError(f"boom {job.attempt}")

    with worker:
        job = wait_for(job_in(client, id, "dead"), what="the job dead")
    assert attempts == [1, 2, 3]
    assert job.failures == 3
    assert job.dead_reason is not None and "2 retries" in job.dead_reason
    assert [e.message for e in job.errors] == ["ValueError: boom 1", "ValueError: boom 2", "ValueError: boom 3"]
    assert [e.attempt for e in job.errors] == [1, 2, 3]
    detail = job.errors[0].detail
    assert detail["type"] == "ValueError"
    assert "in flaky" in detail["traceback"] and "boom 1" in detail["traceback"]
    # The retries followed the policy: 200 ms after each failure.
    assert job.errors[1].at - job.errors[0].at >= timedelta(milliseconds=200)
    assert id in [j.id for j in client.list_dead(queue=queue).jobs]
    assert worker.stats.failed == 3


def test_not_retryable_makes_the_job_dead_at_once(client: tenax.Client, queue: str) -> None:
    id = client.enqueue(queue, "charge", {"card": "x"}).id  # default policy: 25 retries
    worker = make_worker(client, queue)

    @worker.handler("charge")
    def charge(job: tenax.TakenJob[Any]) -> None:
        raise tenax.NotRetryable("card declined", detail={"code": "declined"})

    with worker:
        job = wait_for(job_in(client, id, "dead"), what="the job dead")
    assert job.failures == 1
    assert [(e.message, e.detail) for e in job.errors] == [("card declined", {"code": "declined"})]


def test_retry_in_and_retry_at_choose_the_next_run(client: tenax.Client, queue: str) -> None:
    later = client.enqueue(queue, "in").id
    at = client.enqueue(queue, "at").id
    when = datetime.now(timezone.utc) + timedelta(milliseconds=700)
    runs: dict[str, int] = {"in": 0, "at": 0}
    worker = make_worker(client, queue)

    @worker.handler("in")
    def retry_in(job: tenax.TakenJob[Any]) -> None:
        runs["in"] += 1
        if job.attempt == 1:
            raise tenax.RetryIn(timedelta(milliseconds=600), "busy")

    @worker.handler("at")
    def retry_at(job: tenax.TakenJob[Any]) -> None:
        runs["at"] += 1
        if job.attempt == 1:
            raise tenax.RetryAt(when)

    with worker:
        first = wait_for(job_in(client, later, "completed"), what="the RetryIn job completed")
        second = wait_for(job_in(client, at, "completed"), what="the RetryAt job completed")
    assert runs == {"in": 2, "at": 2}
    # run_at is when the job last became ready: the failure's time plus the delay asked for.
    assert first.failures == 1 and first.errors[0].message == "busy"
    assert first.run_at - first.errors[0].at == timedelta(milliseconds=600)
    assert second.failures == 1 and second.errors[0].message.startswith("retry at ")
    assert abs(second.run_at - when) < timedelta(milliseconds=1)


def test_snooze_puts_the_job_off_without_using_an_attempt(client: tenax.Client, queue: str) -> None:
    id = client.enqueue(queue, "poll", retry_limit=0).id  # any real failure would kill it
    attempts: list[int] = []
    snoozed_at: list[float] = []
    worker = make_worker(client, queue)

    @worker.handler("poll")
    def poll(job: tenax.TakenJob[Any]) -> None:
        attempts.append(job.attempt)
        if len(attempts) < 3:
            snoozed_at.append(time.monotonic())
            raise tenax.Snooze(0.3)

    with worker:
        job = wait_for(job_in(client, id, "completed"), what="the job completed")
    assert attempts == [1, 1, 1]
    assert job.failures == 0 and job.errors == []
    assert snoozed_at[1] - snoozed_at[0] >= 0.3


def test_an_unknown_type_is_dead_at_once_and_logged_as_an_error(
    client: tenax.Client, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    id = client.enqueue(queue, "video.encode").id  # the default policy would retry it for weeks
    worker = make_worker(client, queue)

    @worker.handler("email.send")
    def send(job: tenax.TakenJob[Any]) -> None:
        pass

    message = "no handler for job type 'video.encode' in this worker (it handles: 'email.send')"
    with caplog.at_level(logging.ERROR), worker:
        job = wait_for(job_in(client, id, "dead"), what="the job dead")
        errors = wait_for(
            lambda: [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR],
            what="the error logged",
        )
    assert job.failures == 1 and job.dead_reason == "the failure was marked not retryable"
    assert job.errors[0].message == message
    assert errors == [f"job {id} (video.encode) failed and is dead: {message} (the failure was marked not retryable)"]


def test_an_unknown_type_is_retried_when_the_worker_says_so(client: tenax.Client, queue: str) -> None:
    id = client.enqueue(queue, "video.encode", policy={"type": "list", "delays": ["1h"]}).id
    worker = make_worker(client, queue, unknown_types="retry")

    @worker.handler("email.send")
    def send(job: tenax.TakenJob[Any]) -> None:
        pass

    with worker:
        job = wait_for(job_in(client, id, "scheduled"), what="the job scheduled again")
    assert job.failures == 1 and job.attempt == 2
    assert job.errors[0].message.startswith("no handler for job type 'video.encode'")


@dataclass
class Email:
    to: str
    subject: str


class Invoice:
    def __init__(self, number: int) -> None:
        self.number = number

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Invoice:
        return cls(int(data["number"]))


def test_typed_payloads(client: tenax.Client, queue: str) -> None:
    ok = client.enqueue(queue, "email", {"to": "ada@example.com", "subject": "hi"}).id
    invoice = client.enqueue(queue, "invoice", {"number": "42"}).id
    bad = client.enqueue(queue, "email", {"to": "bob@example.com"}).id  # no subject
    got: list[Any] = []
    worker = make_worker(client, queue)

    @worker.handler("email", payload=Email)
    def email(job: tenax.TakenJob[Email]) -> None:
        got.append(job.payload)

    @worker.handler("invoice", payload=Invoice)
    def bill(job: tenax.TakenJob[Invoice]) -> None:
        got.append(job.payload.number)

    with worker:
        wait_for(job_in(client, ok, "completed"), what="the email completed")
        wait_for(job_in(client, invoice, "completed"), what="the invoice completed")
        dead = wait_for(job_in(client, bad, "dead"), what="the bad payload dead")
    assert Email("ada@example.com", "hi") in got and 42 in got
    assert len(got) == 2
    assert dead.failures == 1
    assert dead.errors[0].message.startswith("the payload of job type 'email' does not fit Email: TypeError")


def test_payload_keys_a_dataclass_lacks_are_ignored_unless_strict(client: tenax.Client, queue: str) -> None:
    payload = {"to": "ada@example.com", "subject": "hi", "locale": "fr"}  # locale: new, not in Email
    lenient = client.enqueue(queue, "email", payload).id
    strict = client.enqueue(queue, "email.strict", payload).id
    got: list[Email] = []
    worker = make_worker(client, queue)

    @worker.handler("email", payload=Email)
    def email(job: tenax.TakenJob[Email]) -> None:
        got.append(job.payload)

    @worker.handler("email.strict", payload=Email, strict=True)
    def strict_email(job: tenax.TakenJob[Email]) -> None:
        got.append(job.payload)

    with worker:
        wait_for(job_in(client, lenient, "completed"), what="the lenient job completed")
        dead = wait_for(job_in(client, strict, "dead"), what="the strict job dead")
    assert got == [Email("ada@example.com", "hi")]
    assert dead.failures == 1
    assert dead.errors[0].message.startswith("the payload of job type 'email.strict' does not fit Email: TypeError")
    assert "unexpected keyword argument 'locale'" in dead.errors[0].message


def test_lease_expires_without_heartbeats(client: tenax.Client, queue: str) -> None:
    """The control of the next test: a job held past its 1 s lease goes back to the queue."""
    id = client.enqueue(queue, "slow").id
    [taken] = client.take(queue, lease=1.0)
    job = wait_for(job_in(client, id, "ready"), timeout=5, what="the lease to expire")
    assert len(job.errors) == 1 and job.errors[0].message.startswith("lease expired")
    with pytest.raises(tenax.NotInFlight):
        client.complete(taken)


def test_heartbeats_keep_a_job_that_runs_longer_than_its_lease(client: tenax.Client, queue: str) -> None:
    id = client.enqueue(queue, "slow").id
    executions: list[int] = []
    worker = make_worker(client, queue, concurrency=2, lease=1.0)

    @worker.handler("slow")
    def slow(job: tenax.TakenJob[Any]) -> None:
        executions.append(job.id)
        time.sleep(3)

    with worker:
        job = wait_for(job_in(client, id, "completed"), timeout=10, what="the job completed")
    assert executions == [id], "the job ran more than once: its lease expired"
    assert job.failures == 0 and job.errors == []
    assert worker.stats.heartbeats >= 2  # every half second; the lease is one second
    assert worker.stats.lost == 0


def test_completions_are_batched(server_url: str, queue: str) -> None:
    transport = CountingTransport()
    with tenax.Client(server_url, transport=transport) as client:
        ids = [j.id for j in client.enqueue_many([tenax.NewJob(queue=queue, type="noop") for _ in range(20)])]
        release = threading.Event()
        worker = make_worker(client, queue, concurrency=20, ack_interval=0.5)

        @worker.handler("noop")
        def noop(job: tenax.TakenJob[Any]) -> None:
            release.wait(5)

        with worker:
            wait_for(lambda: worker.stats.received == 20, what="all 20 jobs received")
            release.set()
            for id in ids:
                wait_for(job_in(client, id, "completed"), what=f"job {id} completed")
        batches = transport.complete_batches
        assert sorted(i for batch in batches for i in batch) == sorted(ids)
        assert len(batches) < 20 and max(len(b) for b in batches) > 1, batches
        assert worker.stats.ack_requests == len(batches)
        assert all(transport.count("POST", f"/api/jobs/{i}/complete") == 0 for i in ids)


def test_graceful_shutdown_finishes_handlers_and_loses_nothing(client: tenax.Client, queue: str) -> None:
    ids = [client.enqueue(queue, "work", {"n": n}).id for n in range(6)]
    started: list[int] = []
    finished: list[int] = []
    all_started = threading.Event()
    worker = make_worker(client, queue, concurrency=3, shutdown_timeout=10)

    @worker.handler("work")
    def work(job: tenax.TakenJob[Any]) -> None:
        started.append(job.id)
        if len(started) == 3:
            all_started.set()
        time.sleep(0.5)
        finished.append(job.id)

    worker.start()
    assert all_started.wait(10), "three handlers did not start"
    worker.stop()  # returns once shut down
    assert len(started) == 3 and sorted(finished) == sorted(started)
    for id in ids:
        job = client.get_job(id)
        if id in started:
            assert job.status == "completed", job  # the acknowledgements were flushed
        else:
            # Back in the queue, no attempt used (the server releases a closed stream's jobs
            # as soon as it sees the connection end).
            job = wait_for(job_in(client, id, "ready"), timeout=5, what=f"job {id} back in the queue")
            assert job.failures == 0 and job.errors == [], job
    stats = worker.stats
    assert stats.completed == 3 and stats.abandoned == 0 and stats.lost == 0


def test_shutdown_deadline_gives_running_jobs_back(client: tenax.Client, queue: str) -> None:
    id = client.enqueue(queue, "stuck").id
    running = threading.Event()
    release = threading.Event()
    returned = threading.Event()
    worker = make_worker(client, queue, shutdown_timeout=0.3)

    @worker.handler("stuck")
    def stuck(job: tenax.TakenJob[Any]) -> None:
        running.set()
        release.wait(10)
        returned.set()

    worker.start()
    assert running.wait(10)
    started = time.monotonic()
    worker.stop()
    assert time.monotonic() - started < 3, "stop() waited for the stuck handler"
    job = wait_for(job_in(client, id, "ready"), timeout=5, what="the job back in the queue")
    assert job.failures == 0 and job.errors == []
    assert worker.stats.abandoned == 1
    # The abandoned handler ends later: its result is not reported.
    release.set()
    assert returned.wait(5)
    assert client.get_job(id).status == "ready"
    assert worker.stats.completed == 0


def test_a_raising_handler_never_kills_the_worker(client: tenax.Client, queue: str) -> None:
    exits = [client.enqueue(queue, "exit", retry_limit=0).id for _ in range(2)]
    good = client.enqueue(queue, "good").id
    errors: list[tuple[int, str]] = []
    worker = make_worker(client, queue, concurrency=1, on_error=lambda job, e: errors.append((job.id, type(e).__name__)))

    @worker.handler("exit")
    def leave(job: tenax.TakenJob[Any]) -> None:
        raise SystemExit(3)

    @worker.handler("good")
    def fine(job: tenax.TakenJob[Any]) -> None:
        pass

    with worker:
        wait_for(job_in(client, good, "completed"), what="the good job completed")
        dead = [wait_for(job_in(client, id, "dead"), what="the exit job dead") for id in exits]
    assert [d.errors[0].message for d in dead] == ["SystemExit: 3", "SystemExit: 3"]
    assert sorted(errors) == sorted((id, "SystemExit") for id in exits)


def test_stop_from_a_handler(client: tenax.Client, queue: str) -> None:
    id = client.enqueue(queue, "last").id
    worker = make_worker(client, queue)

    @worker.handler("last")
    def last(job: tenax.TakenJob[Any]) -> None:
        worker.stop()  # does not wait for itself
        assert worker.stopping

    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    thread.join(15)
    assert not thread.is_alive()
    assert client.get_job(id).status == "completed"


def test_worker_settings_are_checked(client: tenax.Client) -> None:
    with pytest.raises(ValueError, match="concurrency"):
        tenax.Worker("q", client=client, concurrency=0)
    with pytest.raises(ValueError, match="heartbeat_every"):
        tenax.Worker("q", client=client, lease=1.0, heartbeat_every=2.0)
    worker = tenax.Worker("q", client=client)
    with pytest.raises(RuntimeError, match="at least one handler"):
        worker.run(install_signal_handlers=False)
    worker = tenax.Worker("q", client=client)
    worker.register("a", lambda job: None)
    with pytest.raises(ValueError, match="already registered"):
        worker.register("a", lambda job: None)


SIGNAL_SCRIPT = """
import asyncio, sys, time, tenax

url, queue, kind = sys.argv[1], sys.argv[2], sys.argv[3]
client = tenax.Client(url) if kind == "threads" else tenax.AsyncClient(url)
Worker = tenax.Worker if kind == "threads" else tenax.AsyncWorker
worker = Worker(queue, client=client, concurrency=1, shutdown_timeout=10)

if kind == "threads":
    @worker.handler("work")
    def work(job):
        print("started", job.id, flush=True)
        time.sleep(1)
    worker.run()
else:
    @worker.handler("work")
    async def work(job):
        print("started", job.id, flush=True)
        await asyncio.sleep(1)
    asyncio.run(worker.run())
print("stopped", worker.stats.completed, flush=True)
"""


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_sigterm_stops_the_worker_gracefully(client: tenax.Client, queue: str, kind: str, tmp_path: Any) -> None:
    import subprocess
    import sys

    first, second = (client.enqueue(queue, "work").id for _ in range(2))
    script = tmp_path / "worker.py"
    script.write_text(SIGNAL_SCRIPT)
    process = subprocess.Popen(
        [sys.executable, str(script), client.url, queue, kind], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().split() == ["started", str(first)]
        process.send_signal(15)  # SIGTERM while the handler runs
        out, _ = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    assert out.split() == ["stopped", "1"]
    assert client.get_job(first).status == "completed"  # it finished and was acknowledged
    job = wait_for(job_in(client, second, "ready"), timeout=5, what="the second job back in the queue")
    assert job.failures == 0


LOG_SCRIPT = """
import asyncio, sys, tenax

url, queue, kind, log = sys.argv[1:5]
options = dict(concurrency=2, shutdown_timeout=5, log=log == "on")
if kind == "threads":
    worker = tenax.Worker(queue, client=tenax.Client(url), **options)

    @worker.handler("greet")
    def greet(job):
        pass

    worker.run()
else:
    worker = tenax.AsyncWorker(queue, client=tenax.AsyncClient(url), **options)

    @worker.handler("greet")
    async def greet(job):
        pass

    asyncio.run(worker.run())
"""


def run_logging_worker(client: tenax.Client, queue: str, kind: str, log: str, tmp_path: Any) -> tuple[list[str], int, int]:
    """Runs LOG_SCRIPT with a "greet" job and a "video.encode" one (a type it has no handler
    for) until both are done, then stops it with SIGTERM: its stderr, and the two job ids."""
    greet = client.enqueue(queue, "greet").id
    video = client.enqueue(queue, "video.encode").id
    script = tmp_path / "worker.py"
    script.write_text(LOG_SCRIPT)
    process = subprocess.Popen(
        [sys.executable, str(script), client.url, queue, kind, log], stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    try:
        wait_for(job_in(client, greet, "completed"), what="the greet job completed")
        wait_for(job_in(client, video, "dead"), what="the video job dead")
        if log == "on":
            # A job's line comes once the server has answered the worker: wait for both lines.
            assert process.stderr is not None
            for line in process.stderr:
                lines.append(line.rstrip("\n"))
                if sum(f"job {id} " in seen for seen in lines for id in (greet, video)) == 2:
                    break
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    lines += rest.splitlines()
    assert process.returncode == 0, lines
    return lines, greet, video


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_a_worker_without_logging_configured_logs_to_stderr(
    client: tenax.Client, queue: str, kind: str, tmp_path: Any
) -> None:
    lines, greet, video = run_logging_worker(client, queue, kind, "on", tmp_path)
    # "2026-01-02 10:00:00,123 INFO tenax.worker: ...": the time, then what matters.
    shown = [line.split(" ", 2)[2] for line in lines]
    assert shown[0] == (
        f"INFO tenax.worker: worker started: {client.url}, queues [{queue!r}], concurrency 2, "
        "types ['greet'] (jobs of other types go dead)"
    ), shown
    assert any(re.fullmatch(rf"INFO tenax\.worker: job {greet} \(greet\) completed in [\d.]+ m?s", s) for s in shown), shown
    assert (
        f"ERROR tenax.worker: job {video} (video.encode) failed and is dead: no handler for job type "
        "'video.encode' in this worker (it handles: 'greet') (the failure was marked not retryable)"
    ) in shown
    assert shown[-1] == "INFO tenax.worker: worker stopped: 1 completed, 1 failed, 0 returned, 0 abandoned, 0 lost"


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_log_false_leaves_stderr_to_the_application(client: tenax.Client, queue: str, kind: str, tmp_path: Any) -> None:
    lines, _, video = run_logging_worker(client, queue, kind, "off", tmp_path)
    # Only Python's last resort, which shows WARNING and above of unconfigured logging, bare.
    assert lines == [
        f"job {video} (video.encode) failed and is dead: no handler for job type 'video.encode' in this "
        "worker (it handles: 'greet') (the failure was marked not retryable)"
    ]


def test_a_handlers_returned_value_is_the_jobs_result(client: tenax.Client, queue: str) -> None:
    """A JSON value is the result; ``None`` (no return) or a value JSON cannot carry (which a
    handler could return before results existed) is none, and the job completes either way."""
    square = client.enqueue(queue, "square", 12).id
    silent = client.enqueue(queue, "silent").id
    other = client.enqueue(queue, "other").id
    worker = make_worker(client, queue)

    @worker.handler("square")
    def square_it(job: tenax.TakenJob[Any]) -> dict[str, int]:
        return {"square": job.payload * job.payload}

    @worker.handler("silent")
    def say_nothing(job: tenax.TakenJob[Any]) -> None:
        pass

    @worker.handler("other")
    def return_an_object(job: tenax.TakenJob[Any]) -> object:
        return object()

    with worker:
        done = [wait_for(job_in(client, id, "completed"), what=f"job {id}") for id in (square, silent, other)]
    assert [j.result for j in done] == [{"square": 144}, None, None]


def test_a_cancelled_jobs_handler_is_told_and_the_job_ends_cancelled(client: tenax.Client, queue: str) -> None:
    # One handler stops by raising, one by returning: either way the job ends cancelled.
    ids = [client.enqueue(queue, "wait", {"raise": flag}).id for flag in (True, False)]
    started: list[int] = []
    told: list[tuple[int, bool]] = []
    worker = make_worker(client, queue, concurrency=2, lease=1.0)

    @worker.handler("wait")
    def wait(job: tenax.TakenJob[Any]) -> None:
        assert not job.cancelled
        started.append(job.id)
        # Waits for nothing but its cancellation (at most 10 s, so that a broken test ends).
        told.append((job.id, job.cancellation.wait(10)))
        if job.payload["raise"]:
            raise RuntimeError("stopped: cancelled")

    with worker:
        wait_for(lambda: len(started) == 2 or None, what="both handlers started")
        for id in ids:
            answer = client.cancel(id)
            assert answer.outcome == "marked" and answer.job.status == "in_flight"
        jobs = [wait_for(job_in(client, id, "cancelled"), what=f"job {id} cancelled") for id in ids]
    assert sorted(told) == [(ids[0], True), (ids[1], True)]
    assert [len(job.errors) for job in jobs] == [1, 1]
    assert (worker.stats.failed, worker.stats.completed) == (2, 0)
    # A finished job cannot be cancelled; a ready one is cancelled by selection.
    with pytest.raises(tenax.Conflict, match="is cancelled"):
        client.cancel(ids[0])
    ready = client.enqueue(queue, "wait", {"raise": True}).id
    done = client.cancel_jobs(queue=queue)
    assert (done.cancelled_ids, done.marked) == ([ready], 0)
    assert client.get_job(ready).status == "cancelled"
    assert client.stats().queues[queue].cancelled == 3
