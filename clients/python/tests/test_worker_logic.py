"""The workers' shared rules, no server: held-job states, completion batches, failure reports,
the log lines of outcomes, the stream and heartbeat bookkeeping (what both tenax.Worker and
tenax.AsyncWorker run on)."""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pytest

import tenax
from tenax._errors import TenaxConnectionError
from tenax._models import CompleteResult, FailResult, ResultError
from tenax._worker_acks import EMPTY_WAIT_S, AckQueue
from tenax._worker_common import Counter, Registry, WorkerSettings, now
from tenax._worker_failures import FailureReport
from tenax._worker_held import Held, HeldJobs
from tenax._worker_log import BURST, OutcomeLog, shown_on_stderr
from tenax._worker_state import ASYNCIO, STALE_STREAM_S, THREADS, WorkerState, stream_dead

LOG = logging.getLogger("tenax.test")
WHEN = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def job(id: int, type: str = "t", payload: Any = None) -> tenax.TakenJob[Any]:
    return tenax.TakenJob(
        id=id, queue="q", type=type, payload=payload, priority=0, attempt=1,
        lease_token=1000 + id, lease_expires_at=WHEN, created_at=WHEN,
    )


def settings(**options: Any) -> WorkerSettings:
    given: dict[str, Any] = {
        "queues": "q", "concurrency": 2, "lease": 30.0, "heartbeat_every": None,
        "ack_interval": 0.05, "ack_batch": 100, "shutdown_timeout": 5.0,
    }
    return WorkerSettings.of(**(given | options))


def api_error(cls: type[tenax.APIError], status: int) -> tenax.APIError:
    return cls(status, "code", "no")


# ---- held jobs --------------------------------------------------------------------------------


def holding(*states: str, generation: int = 1) -> tuple[HeldJobs, list[tenax.TakenJob[Any]]]:
    held, jobs = HeldJobs(), [job(i) for i in range(len(states))]
    for j, state in zip(jobs, states):
        held[j.lease_token] = Held(j, next_beat=0.0, state=state, generation=generation)
    return held, jobs


def test_a_queued_job_starts_once_and_is_parked_when_stopping() -> None:
    held, (a, b) = holding("queued", "queued")
    assert held.start(a, stopping=False) and held[a.lease_token].state == "running"
    assert not held.start(a, stopping=False)  # already running
    assert not held.start(b, stopping=True) and held[b.lease_token].state == "parked"
    assert not held.start(job(9), stopping=False)  # not held (forgotten with its stream)
    assert held.running() == [a.lease_token]


def test_a_lost_or_abandoned_job_is_not_reported() -> None:
    held, (lost, abandoned, running) = holding("lost", "abandoned", "running")
    assert not held.take_over(lost, "acking") and lost.lease_token not in held  # forgotten
    assert not held.take_over(abandoned, "acking") and held.is_abandoned(abandoned)
    assert held.take_over(running, "acking") and held[running.lease_token].state == "acking"


def test_losing_a_lease_spares_a_result_already_on_its_way() -> None:
    held, jobs = holding("running", "acking", "reporting")
    for j in jobs:
        held.lose(j)
    assert [held[j.lease_token].state for j in jobs] == ["lost", "acking", "reporting"]


def test_lost_and_abandoned_jobs_get_no_heartbeat_and_leave_room_on_the_stream() -> None:
    held, jobs = holding("running", "lost", "abandoned", "acking")
    assert held.due_beats(now()) == [jobs[0], jobs[3]]
    assert held.holding(1) == 2 and held.holding(2) == 0
    held.abandon([jobs[0].lease_token, 12345])  # a token no longer held is passed over
    assert held.due_beats(now()) == [jobs[3]]


def test_a_closed_stream_forgets_its_jobs_not_started() -> None:
    held, jobs = holding("queued", "parked", "running")
    assert held.forget_stream(2, stopping=False) == 0 and len(held) == 3  # another stream's
    assert held.forget_stream(1, stopping=False) == 1  # the parked one counts as returned
    assert list(held) == [jobs[2].lease_token]
    held, _ = holding("queued", "parked")
    assert held.forget_stream(1, stopping=True) == 2  # while stopping, both were given back


# ---- completions ------------------------------------------------------------------------------


def acks_of(*states: str, **options: Any) -> tuple[AckQueue, HeldJobs, Counter, list[tenax.TakenJob[Any]]]:
    held, jobs = holding(*states)
    counter = Counter()
    return AckQueue(settings(**options), held, counter, LOG, OutcomeLog(LOG, list)), held, counter, jobs


def test_completions_wait_for_a_full_batch_the_interval_or_an_idle_worker() -> None:
    acks, _, _, jobs = acks_of("running", "running", "running", ack_interval=60.0, ack_batch=3)
    assert acks.due_in(idle=False) == EMPTY_WAIT_S
    acks.add(jobs[0])
    wait = acks.due_in(idle=False)
    assert wait is not None and 59 < wait <= 60  # the interval runs from the oldest
    assert acks.due_in(idle=True) == 0  # nothing running could add to the batch
    acks.add(jobs[1])
    acks.add(jobs[2])
    assert acks.due_in(idle=False) == 0  # a full batch


def test_the_final_flush_sends_at_once_then_ends_the_acknowledger() -> None:
    acks, _, _, jobs = acks_of("running", ack_interval=60.0)
    acks.add(jobs[0])
    acks.final = True
    assert acks.due_in(idle=False) == 0
    acks.take()
    assert acks.due_in(idle=False) is None


def test_a_batch_takes_the_oldest_completions() -> None:
    acks, _, _, jobs = acks_of("running", "running", "running", ack_batch=2)
    for j in jobs:
        assert acks.add(j)
    assert acks.take().jobs == jobs[:2]
    assert acks.take().jobs == jobs[2:]


def test_only_this_workers_jobs_are_queued_for_completion() -> None:
    acks, held, _, (lost, running) = acks_of("lost", "running")
    assert not acks.add(lost)
    assert acks.add(running) and held[running.lease_token].state == "acking"
    assert acks.take().jobs == [running]


def test_the_answer_to_a_batch_is_counted_and_its_jobs_let_go(caplog: pytest.LogCaptureFixture) -> None:
    acks, held, counter, (a, b) = acks_of("running", "running")
    acks.add(a)
    acks.add(b)
    refused = CompleteResult(b.id, False, ResultError("lease_lost", "taken back"))
    with caplog.at_level(logging.WARNING):
        acks.sent(acks.take(), [CompleteResult(a.id, True), refused])
    stats = counter.snapshot()
    assert (stats.ack_requests, stats.completed, stats.lost) == (1, 1, 1)
    assert not held
    assert caplog.messages == [f"job {b.id} ran, but its completion was refused: taken back"]


def test_a_refused_batch_is_dropped_and_a_failed_one_sent_again() -> None:
    acks, held, _, (a, b) = acks_of("running", "running")
    acks.add(a)
    assert acks.unsent(acks.take(), api_error(tenax.InvalidRequest, 400), quitting=False) == 0
    assert a.lease_token not in held and acks.due_in(idle=False) == EMPTY_WAIT_S
    acks.add(b)
    delays = [
        acks.unsent(acks.take(), error, quitting=False)
        for error in (api_error(tenax.RequestTimeout, 408), api_error(tenax.ServerError, 503), TenaxConnectionError("down"))
    ]
    assert delays == [0.2, 0.4, 0.8]  # back off, and the batch is back in front
    assert acks.take().jobs == [b] and b.lease_token in held


def test_returned_values_are_results_when_json_can_carry_them() -> None:
    acks, _, _, (a, b, c, d) = acks_of("running", "running", "running", "running")
    acks.add(a, {"sum": 3})
    acks.add(b, None)
    acks.add(c, object())  # returned before results existed: still ignored
    acks.add(d, float("nan"))  # JSON has no NaN
    batch = acks.take()
    assert batch.items == [(a, {"sum": 3}), b, c, d]


def test_a_refused_result_is_left_out_and_the_batch_sent_again(caplog: pytest.LogCaptureFixture) -> None:
    acks, held, _, (a, b) = acks_of("running", "running")
    acks.add(a, "small")
    acks.add(b, "x" * 100)
    refused = api_error(tenax.InvalidRequest, 400)
    refused.field = "jobs[1].result"
    with caplog.at_level(logging.ERROR):
        assert acks.unsent(acks.take(), refused, quitting=False) == 0
    assert acks.take().items == [(a, "small"), b]  # b goes again, without its result
    assert b.lease_token in held
    assert caplog.messages[0].startswith(f"job {b.id}: its result was refused")


def test_a_quitting_acknowledger_gives_up(caplog: pytest.LogCaptureFixture) -> None:
    acks, _, _, (a,) = acks_of("running")
    acks.add(a)
    with caplog.at_level(logging.ERROR):
        assert acks.unsent(acks.take(), TenaxConnectionError("down"), quitting=True) is None
    assert caplog.messages == ["1 completions could not be reported: those jobs will run again"]


# ---- failure reports --------------------------------------------------------------------------


def report() -> tuple[FailureReport, Counter]:
    counter = Counter()
    try:
        raise tenax.RetryIn(60, "busy", detail={"k": 1})
    except tenax.RetryIn as error:
        return FailureReport(job(1), error, counter, LOG, OutcomeLog(LOG, list), 0.035), counter


def test_a_report_says_what_the_exception_asks_for() -> None:
    sent, _ = report()
    assert (sent.message, sent.detail, sent.options) == ("busy", {"k": 1}, {"retry_in": 60})


def test_a_report_the_server_refuses_is_sent_plainly_at_once() -> None:
    sent, _ = report()
    assert sent.retry_in(api_error(tenax.InvalidRequest, 400)) == 0
    assert sent.message == "busy (report refused: 400 code: no)"
    assert (sent.detail, sent.options) == (None, {})


def test_a_report_stops_when_the_job_is_gone_and_backs_off_otherwise() -> None:
    for gone in (tenax.LeaseLost, tenax.NotInFlight):
        sent, counter = report()
        assert sent.retry_in(api_error(gone, 409)) is None
        assert counter.snapshot().lost == 1
    sent, _ = report()
    errors = [TenaxConnectionError("down"), api_error(tenax.ServerError, 500)] * 3
    assert [sent.retry_in(e) for e in errors] == [0.2, 0.4, 0.8, 1.6, 2.0, 2.0]


def test_a_reported_failure_is_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    sent, counter = report()
    with caplog.at_level(logging.INFO):
        sent.reported(FailResult(1, "scheduled", 1, attempt=2, run_at=WHEN, delay_ms=60_000))
        sent.reported(FailResult(1, "dead", 2, dead_reason="2 retries"))
    assert counter.snapshot().failed == 2
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "job 1 (t) failed in 35 ms: busy; attempt 2 in 60.0 s"),
        ("WARNING", "job 1 (t) failed in 35 ms and is dead: busy (2 retries)"),
    ]


# ---- the log lines of outcomes ----------------------------------------------------------------


@dataclass
class FakeClock:
    at: float = 1000.0

    def __call__(self) -> float:
        return self.at


@dataclass
class Outcomes:
    """An OutcomeLog on a clock the test moves, and the lines it wrote."""

    clock: FakeClock = field(default_factory=FakeClock)
    log: OutcomeLog = field(init=False)

    def __post_init__(self) -> None:
        self.log = OutcomeLog(LOG, lambda: ["email", "noop"], self.clock)

    def completed(self, n: int, ran_s: float = 0.01) -> None:
        for i in range(n):
            self.log.completed(job(i, "email"), ran_s)


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    seen = [(r.levelname, r.getMessage()) for r in caplog.records]
    caplog.clear()
    return seen


def test_each_outcome_gets_a_line_at_the_level_of_its_gravity(caplog: pytest.LogCaptureFixture) -> None:
    outcomes = Outcomes()
    with caplog.at_level(logging.INFO):
        outcomes.log.completed(job(1, "email"), 0.0123)
        outcomes.log.failed(
            job(2, "email"), 2.5, "ValueError: boom", FailResult(2, "scheduled", 1, attempt=2, delay_ms=200),
            snoozed=False, unknown=False,
        )
        outcomes.log.failed(
            job(3, "email"), 0.0004, "snoozed for 30s", FailResult(3, "scheduled", 0, attempt=1, delay_ms=30_000),
            snoozed=True, unknown=False,
        )
        outcomes.log.failed(
            job(4, "video"), None, "no handler for job type 'video' in this worker (it handles: 'email', 'noop')",
            FailResult(4, "dead", 1, dead_reason="the failure was marked not retryable"),
            snoozed=False, unknown=True,
        )
    assert lines(caplog) == [
        ("INFO", "job 1 (email) completed in 12 ms"),
        ("INFO", "job 2 (email) failed in 2.5 s: ValueError: boom; attempt 2 in 200 ms"),
        ("INFO", "job 3 (email) snoozed: runs again in 30.0 s"),
        ("ERROR", "job 4 (video) failed and is dead: no handler for job type 'video' in this worker "
         "(it handles: 'email', 'noop') (the failure was marked not retryable)"),
    ]


def test_past_ten_outcomes_a_second_a_summary_comes_every_five_seconds(caplog: pytest.LogCaptureFixture) -> None:
    outcomes = Outcomes()
    with caplog.at_level(logging.INFO):
        outcomes.completed(BURST)
        assert len(lines(caplog)) == BURST  # a line each
        outcomes.clock.at += 1.0  # a new second: a line each again
        outcomes.completed(BURST)
        assert len(lines(caplog)) == BURST
        outcomes.completed(1)  # the eleventh in this second
        assert lines(caplog) == [
            ("INFO", "more than 10 job outcomes a second: a summary every 5 s instead of a line per job")
        ]
        outcomes.clock.at += 2.0
        outcomes.completed(99, ran_s=0.02)
        outcomes.log.failed(
            job(7, "video"), None, "no handler", FailResult(7, "dead", 1, dead_reason="not retryable"),
            snoozed=False, unknown=True,
        )
        outcomes.log.tick()
        assert lines(caplog) == []  # not due yet
        outcomes.clock.at += 3.0
        outcomes.log.tick()
        assert lines(caplog) == [
            ("ERROR", "last 5.0 s: 100 completed (mean 20 ms, longest 20 ms), 1 dead; "
             "last failure: job 7 (video): no handler; "
             "no handler for job type 'video' (1 job) in this worker (it handles: 'email', 'noop')")
        ]
        # 101 outcomes in 5 s is above 10 a second: still summarizing. A calm window ends it.
        outcomes.completed(3)
        outcomes.clock.at += 5.0
        outcomes.log.tick()
        assert lines(caplog) == [("INFO", "last 5.0 s: 3 completed (mean 10 ms, longest 10 ms)")]
        outcomes.completed(1)
        assert lines(caplog) == [("INFO", "job 0 (email) completed in 10 ms")]


def test_the_summary_left_is_written_at_the_stop(caplog: pytest.LogCaptureFixture) -> None:
    outcomes = Outcomes()
    with caplog.at_level(logging.INFO):
        outcomes.completed(BURST + 3)
        outcomes.log.flush()
    assert lines(caplog)[-1] == ("INFO", "last 0.0 s: 3 completed (mean 10 ms, longest 10 ms)")


def test_lines_show_on_stderr_only_when_nothing_else_shows_them(capsys: pytest.CaptureFixture[str]) -> None:
    log = logging.getLogger("tenax.test.unconfigured")
    log.propagate = False  # pytest gives the root logger handlers of its own
    with shown_on_stderr(log, wanted=True):
        with shown_on_stderr(log, wanted=True):  # a second worker shares the handler
            log.info("both running")
        log.info("one running")
    log.info("none running")
    with shown_on_stderr(log, wanted=False):
        log.info("not wanted")
        log.warning("a warning")  # Python's last resort still shows these, bare
    *shown, last = capsys.readouterr().err.splitlines()
    assert [line.split(" ", 2)[2] for line in shown] == [
        "INFO tenax.test.unconfigured: both running",
        "INFO tenax.test.unconfigured: one running",
    ]
    assert last == "a warning"
    assert not log.handlers and log.level == logging.NOTSET
    configured = logging.getLogger("tenax.test.configured")
    configured.addHandler(logging.NullHandler())
    with shown_on_stderr(configured, wanted=True):
        configured.warning("shown by the application's handler only")
    assert capsys.readouterr().err == ""


# ---- handlers ---------------------------------------------------------------------------------


@dataclass
class Email:
    to: str


def test_a_job_resolves_to_its_handler_with_its_payload_converted() -> None:
    registry: Registry[str] = Registry()
    registry.add("email", "send", Email)
    registry.add("noop", "pass", None)
    assert registry.resolve(job(1, "email", {"to": "ada"})) == ("send", job(1, "email", Email("ada")))
    with pytest.raises(tenax.PayloadMismatch, match="does not fit Email"):
        registry.resolve(job(2, "email", {}))
    with pytest.raises(tenax.UnknownJobType) as unknown:
        registry.resolve(job(3, "video"))
    assert str(unknown.value) == "no handler for job type 'video' in this worker (it handles: 'email', 'noop')"
    assert unknown.value.detail == {"type": "video", "handled": ["email", "noop"]}
    assert unknown.value.fail_options() == {"retryable": False}  # dead by default


def test_unknown_types_may_be_retried_instead() -> None:
    registry: Registry[str] = Registry("retry")
    registry.add("email", "send", None)
    with pytest.raises(tenax.UnknownJobType) as unknown:
        registry.resolve(job(1, "video"))
    assert unknown.value.fail_options() == {}  # the policy decides
    with pytest.raises(ValueError, match="unknown_types"):
        settings(unknown_types="ignore")


def test_payload_keys_a_dataclass_lacks_are_ignored_unless_strict() -> None:
    registry: Registry[str] = Registry()
    registry.add("lenient", "send", Email)
    registry.add("strict", "send", Email, strict=True)
    extra = {"to": "ada", "locale": "fr"}
    assert registry.resolve(job(1, "lenient", extra))[1].payload == Email("ada")
    with pytest.raises(tenax.PayloadMismatch, match="unexpected keyword argument 'locale'"):
        registry.resolve(job(2, "strict", extra))
    with pytest.raises(tenax.PayloadMismatch, match="missing 1 required positional argument: 'to'"):
        registry.resolve(job(3, "lenient", {"locale": "fr"}))  # a missing field fails either way
    with pytest.raises(TypeError, match="strict=True applies to dataclass payloads"):
        registry.add("count", "count", int, strict=True)


# ---- the worker's state -----------------------------------------------------------------------


@dataclass
class FakeStream:
    last_line_at: float
    closed: bool = False


def state_of(wording: Any = THREADS, **options: Any) -> WorkerState[str, FakeStream]:
    state: WorkerState[str, FakeStream] = WorkerState(settings(**options), wording, None, LOG)
    state.registry.add("t", "handle", None)
    return state


def test_a_worker_runs_once_and_only_with_a_handler() -> None:
    state: WorkerState[str, FakeStream] = WorkerState(settings(), THREADS, None, LOG)
    with pytest.raises(RuntimeError, match="at least one handler"):
        state.begin()
    with pytest.raises(RuntimeError, match="already run"):
        state.begin()
    state_of().begin()


def test_a_second_signal_skips_the_wait(caplog: pytest.LogCaptureFixture) -> None:
    state = state_of()
    with caplog.at_level(logging.INFO):
        assert not state.signalled(signal.SIGTERM, stopping=False)
        assert state.signalled(signal.SIGINT, stopping=True)
    assert caplog.messages == ["signal SIGTERM: stopping", "second signal: not waiting for running handlers"]


def test_jobs_received_while_stopping_are_parked() -> None:
    state = state_of()
    generation = state.opened(FakeStream(now()))
    assert state.receive(job(1), generation, stopping=False)
    assert not state.receive(job(2), generation, stopping=True)
    assert [h.state for h in state.held.values()] == ["queued", "parked"]
    state.closed(generation, stopping=False)
    assert state.counter.snapshot().returned == 1 and not state.held


def test_reconnections_back_off_until_a_job_comes() -> None:
    state = state_of()
    assert [state.open_failed(TenaxConnectionError("down")) for _ in range(3)] == [0.2, 0.4, 0.8]
    assert state.reconnect_delay() == 1.6
    state.receive(job(1), state.opened(FakeStream(now())), stopping=False)
    assert state.reconnect_delay() == 0.2
    assert state.counter.snapshot().stream_errors == 3


def test_a_stream_silent_with_room_is_dead_and_a_full_one_is_not() -> None:
    config = settings(concurrency=2)
    assert not stream_dead(STALE_STREAM_S - 1, 0, None, config)
    assert stream_dead(STALE_STREAM_S + 1, 1, None, config)
    assert not stream_dead(600, 2, None, config)  # full: silence is normal
    assert stream_dead(600, 2, now() - config.lease_s - 1, config)  # unless heartbeats fail


@pytest.mark.parametrize(
    ("wording", "line"),
    [
        (THREADS, "the job stream is silent (20 s, 0 job(s) held) and heartbeats are fine: reconnecting"),
        (ASYNCIO, "the job stream is silent (20 s, 0 job(s) held): reconnecting"),
    ],
)
def test_a_dead_stream_is_given_up(wording: Any, line: str, caplog: pytest.LogCaptureFixture) -> None:
    state = state_of(wording)
    assert state.dead_stream() is None  # none open
    live = FakeStream(now())
    state.opened(live)
    assert state.dead_stream() is None
    live.last_line_at = now() - 20
    with caplog.at_level(logging.WARNING):
        assert state.dead_stream() is live
    assert caplog.messages == [line]


def test_heartbeat_answers(caplog: pytest.LogCaptureFixture) -> None:
    state = state_of(heartbeat_every=4.0)
    generation = state.opened(FakeStream(now()))
    for id in (1, 2):
        state.receive(job(id), generation, stopping=False)
    state.held.next_beat_in(job(1), 0)
    assert state.due_beats() == [job(1)]
    state.beat_failed(job(1), TenaxConnectionError("down"))
    assert state.due_beats() == []  # tried again in a second (a quarter of 4 s)
    assert 0.9 < state.held[job(1).lease_token].next_beat - now() <= 1.0
    state.beat_succeeded(job(1))
    assert 3.9 < state.held[job(1).lease_token].next_beat - now() <= 4.0
    with caplog.at_level(logging.WARNING):
        state.beat_failed(job(2), api_error(tenax.LeaseLost, 409))
    assert state.held[job(2).lease_token].state == "lost"
    stats = state.counter.snapshot()
    assert (stats.heartbeats, stats.lost) == (1, 1)
    assert caplog.messages[-1] == "job 2 lost its lease: 409 code: no; its result will not be reported"


def test_heartbeats_are_checked_often_enough_for_their_interval() -> None:
    assert settings(lease=60.0).beat_check_s == 0.5
    assert settings(lease=1.0, heartbeat_every=0.1).beat_check_s == 0.05
    assert settings(lease=60.0).beat_retry_s == 1.0
    assert settings(lease=1.0).beat_retry_s == 0.125


@pytest.mark.parametrize(("wording", "fate"), [(THREADS, "abandoned"), (ASYNCIO, "cancelled")])
def test_handlers_past_the_deadline_are_counted(wording: Any, fate: str, caplog: pytest.LogCaptureFixture) -> None:
    state = state_of(wording)
    with caplog.at_level(logging.WARNING):
        state.abandoned(0)
        state.abandoned(2)
    assert state.counter.snapshot().abandoned == 2
    assert caplog.messages == [f"2 handler(s) still running after 5.0 s: {fate}, their jobs go back to the queue"]
