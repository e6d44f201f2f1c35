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

    def default_message(self) -> str:
        """The message when none was given and no exception caused this one."""
        return type(self).__name__


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
        super().__init__(message, detail=detail)
        self.delay = delay

    def fail_options(self) -> dict[str, Any]:
        return {"retry_in": self.delay}

    def default_message(self) -> str:
        return f"retry in {_show(self.delay)}"


class RetryAt(JobOutcome):
    """Fail, and retry at ``at`` (a datetime, or ms since 1970). It uses an attempt."""

    def __init__(self, at: Time, message: str = "", *, detail: Any = None) -> None:
        super().__init__(message, detail=detail)
        self.at = at

    def fail_options(self) -> dict[str, Any]:
        return {"retry_at": self.at}

    def default_message(self) -> str:
        return f"retry at {_show(self.at)}"


class Snooze(JobOutcome):
    """Put the job off for ``delay`` without using an attempt (nothing is recorded on the job):
    for "not now" rather than "failed", such as a rate limit or a resource that is busy."""

    def __init__(self, delay: Duration, message: str = "", *, detail: Any = None) -> None:
        super().__init__(message, detail=detail)
        self.delay = delay

    def fail_options(self) -> dict[str, Any]:
        return {"snooze": self.delay}

    def default_message(self) -> str:
        return f"snoozed for {_show(self.delay)}"


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


def _kind(error: BaseException) -> str:
    module, name = type(error).__module__, type(error).__qualname__
    if module == "builtins":
        return name
    if module.startswith("tenax."):
        module = "tenax"
    return f"{module}.{name}"


def _plain(error: BaseException) -> str:
    """``"ValueError: bad input"``, or the type alone for an exception without a message."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else _kind(error)


def describe(error: BaseException) -> tuple[str, Any, dict[str, Any]]:
    """The message, detail and outcome options to report for a handler's exception.

    An outcome's message is the one it was given; else that of the exception it was raised
    from or during (``raise tenax.RetryIn(60) from error``); else what it does ("retry in
    60s"). Any other exception gives ``"Type: message"``. The detail is the outcome's own, or
    ``{"type", "traceback"}`` with the last lines of the traceback (chained ones included).
    """
    options: dict[str, Any] = {}
    explicit: Any = None
    if isinstance(error, JobOutcome):
        cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
        message = error.message or (_plain(cause) if cause is not None else error.default_message())
        options = error.fail_options()
        explicit = error.detail
    else:
        message = _plain(error)
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 1] + "…"
    if explicit is not None:
        return message, explicit, options
    lines = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    tail = lines.rstrip("\n").splitlines()[-TRACEBACK_LINES:]
    return message, {"type": _kind(error), "traceback": "\n".join(tail)}, options
