"""Pure functions, no server: what a handler's exception reports, and value conversions."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import tenax
from tenax._convert import duration_value, parse_time, time_value
from tenax._errors import error_from_response
from tenax._outcomes import describe


def raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as caught:  # noqa: BLE001
        return caught


def test_plain_exceptions_report_type_and_message() -> None:
    message, detail, options = describe(raised(ValueError("bad input")))
    assert message == "ValueError: bad input" and options == {}
    assert detail["type"] == "ValueError" and "raise error" in detail["traceback"]
    assert describe(raised(KeyError()))[0] == "KeyError"


def test_outcomes_report_their_message_cause_or_default() -> None:
    assert describe(raised(tenax.Retry("try later")))[0] == "try later"
    assert describe(raised(tenax.RetryIn(timedelta(minutes=1))))[:3:2] == ("retry in 60s", {"retry_in": timedelta(minutes=1)})
    assert describe(raised(tenax.Snooze("30s")))[0] == "snoozed for 30s"
    assert describe(raised(tenax.NotRetryable()))[2] == {"retryable": False}
    when = datetime(2030, 1, 1, tzinfo=timezone.utc)
    assert describe(raised(tenax.RetryAt(when)))[2] == {"retry_at": when}

    def from_cause() -> None:
        try:
            {}["user"]
        except KeyError as error:
            raise tenax.NotRetryable() from error

    message, detail, _ = describe(raised_by(from_cause))
    assert message == "KeyError: 'user'"
    assert detail["type"] == "tenax.NotRetryable" and "KeyError" in detail["traceback"]
    assert describe(raised(tenax.Retry("x", detail={"code": 7})))[1] == {"code": 7}


def raised_by(function: Any) -> BaseException:
    try:
        function()
    except BaseException as caught:  # noqa: BLE001
        return caught
    raise AssertionError("nothing was raised")


def test_long_messages_are_cut() -> None:
    message = describe(raised(RuntimeError("x" * 100_000)))[0]
    assert len(message) == 8_000 and message.endswith("…")


def test_durations_and_times() -> None:
    assert duration_value(1.5) == 1500
    assert duration_value(timedelta(milliseconds=250)) == 250
    assert duration_value(2) == 2000
    assert duration_value("1h30m") == "1h30m"
    with pytest.raises(ValueError):
        duration_value(-1)
    with pytest.raises(TypeError):
        duration_value(True)
    assert time_value(datetime(2030, 1, 2, 3, 4, 5, 678_000, tzinfo=timezone.utc)) == "2030-01-02T03:04:05.678Z"
    assert time_value(datetime(2030, 1, 2, 3, 4, 5)) == "2030-01-02T03:04:05.000Z"  # naive: UTC
    assert time_value(1_700_000_000_000) == 1_700_000_000_000
    assert parse_time("2026-11-21T12:00:00.000Z") == datetime(2026, 11, 21, 12, tzinfo=timezone.utc)


def test_error_classes_follow_the_code_then_the_status() -> None:
    body = b'{"error": {"status": 409, "code": "lease_lost", "message": "gone"}}'
    error = error_from_response(409, body)
    assert type(error) is tenax.LeaseLost and error.message == "gone" and error.field is None
    assert type(error_from_response(409, b'{"error": {"status": 409, "code": "new_code", "message": "m"}}')) is tenax.Conflict
    assert type(error_from_response(503, b"")) is tenax.ServerError
    assert type(error_from_response(418, b"teapot")) is tenax.APIError
    served = error_from_response(500, b'{"error": {"status": 500, "code": "internal", "message": "bug", "request_id": "r1"}}')
    assert isinstance(served, tenax.ServerError) and served.request_id == "r1"


def test_new_job_mappings_are_checked() -> None:
    with pytest.raises(TypeError, match="unknown field"):
        tenax.Client("http://127.0.0.1:1").enqueue_many([{"queue": "q", "payload": 1, "delay_ms": 5}])
