"""Exceptions a handler raises to choose what happens to its job.

Any other exception is a plain failure, the same as :class:`Retry`: the job's policy decides
when it runs again, and when it is dead. The message (``str(exception)``, or the exception's
type when it has none) is recorded on the job; its type and the tail of its traceback go into
the error's ``detail``.
"""

from __future__ import annotations

import traceback
from datetime import datetime, timedelta
from typing import Any

from ._convert import Duration, Time

__all__ = ["JobOutcome", "NotRetryable", "Retry", "RetryAt", "RetryIn", "Snooze", "describe"]


class JobOutcome(Exception):
    """Base class of the outcomes a handler can raise. ``detail`` is any JSON recorded with the
    error (``None``: the exception's type and traceback tail)."""

    def __init__(self, message: str = "", *, detail: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail

    def fail_options(self) -> dict[str, Any]:
        """The outcome fields of ``fail`` for this exception."""
        return {}


class Retry(JobOutcome):
    """Fail this attempt; the job's policy decides when it runs again (the default for any
    exception)."""


class NotRetryable(JobOutcome):
    """Fail, and make the job dead at once whatever its policy (it can be replayed)."""

    def fail_options(self) -> dict[str, Any]:
        return {"retryable": False}


class RetryIn(JobOutcome):
    """Fail, and retry after ``delay`` (a timedelta, seconds, or ``"30s"``) instead of the
    policy's delay. It uses an attempt: the retry limit and window still apply."""

    def __init__(self, delay: Duration, message: str = "", *, detail: Any = None) -> None:
        super().__init__(message or f"retry in {_show(delay)}", detail=detail)
        self.delay = delay

    def fail_options(self) -> dict[str, Any]:
        return {"retry_in": self.delay}


class RetryAt(JobOutcome):
    """Fail, and retry at ``at`` (a datetime, or ms since 1970). It uses an attempt."""

    def __init__(self, at: Time, message: str = "", *, detail: Any = None) -> None:
        super().__init__(message or f"retry at {_show(at)}", detail=detail)
        self.at = at

    def fail_options(self) -> dict[str, Any]:
        return {"retry_at": self.at}


class Snooze(JobOutcome):
    """Put the job off for ``delay`` without using an attempt (nothing is recorded on the job):
    for "not now" rather than "failed", such as a rate limit or a resource that is busy."""

    def __init__(self, delay: Duration, message: str = "", *, detail: Any = None) -> None:
        super().__init__(message or f"snoozed for {_show(delay)}", detail=detail)
        self.delay = delay

    def fail_options(self) -> dict[str, Any]:
        return {"snooze": self.delay}


def _show(value: object) -> str:
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}s"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:g}s"
    return str(value)


MAX_MESSAGE = 8_000
TRACEBACK_LINES = 30


def describe(error: BaseException) -> tuple[str, Any, dict[str, Any]]:
    """The message, detail and outcome options to report for a handler's exception."""
    kind = f"{type(error).__module__}.{type(error).__qualname__}"
    if kind.startswith("builtins."):
        kind = kind[len("builtins.") :]
    if isinstance(error, JobOutcome):
        message = error.message or (str(error.__cause__) if error.__cause__ else "") or kind
        options = error.fail_options()
        explicit = error.detail
    else:
        message = str(error) or kind
        if str(error):
            message = f"{type(error).__name__}: {message}"
        options = {}
        explicit = None
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 1] + "…"
    if explicit is not None:
        return message, explicit, options
    lines = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    tail = lines.rstrip("\n").splitlines()[-TRACEBACK_LINES:]
    return message, {"type": kind, "traceback": "\n".join(tail)}, options
