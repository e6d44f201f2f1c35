"""Durations and times, both ways.

In this package a duration is a :class:`~datetime.timedelta`, a number of **seconds** (``1.5``),
or a string in the server's spelling (``"250ms"``, ``"5s"``, ``"1h30m"``), which is sent as it
is and read by the server. A time is an aware :class:`~datetime.datetime` (a naive one is taken
as UTC) or an integer of **milliseconds** since 1970, as the server's API has it.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Union

__all__ = ["Duration", "Time", "duration_ms", "duration_value", "time_value", "parse_time"]

Duration = Union[timedelta, int, float, str]
"""A timedelta, a number of seconds, or a string with units such as ``"5s"``."""

Time = Union[datetime, int]
"""An aware datetime (naive is taken as UTC), or milliseconds since 1970."""


def duration_ms(value: timedelta | int | float) -> int:
    """Whole milliseconds of a timedelta or a number of seconds, rounded half up."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"a duration must be a timedelta, seconds or a string, not {value!r}")
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a duration must be finite and not negative, got {value!r}")
    return int(math.floor(seconds * 1000 + 0.5))


def duration_value(value: Duration) -> int | str:
    """The JSON the server reads for a duration: integer milliseconds, or the string as given."""
    if isinstance(value, str):
        return value
    return duration_ms(value)


def time_value(value: Time) -> int | str:
    """The JSON the server reads for a time: RFC 3339 text, or the integer milliseconds."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace(
            "+00:00", "Z"
        )
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"a time must be a datetime or milliseconds since 1970, not {value!r}")
    return value


def parse_time(text: str) -> datetime:
    """An RFC 3339 time of the server (``2026-11-21T12:00:00.000Z``) as an aware datetime."""
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    return datetime.fromisoformat(text)


def parse_optional_time(text: object) -> datetime | None:
    return parse_time(text) if isinstance(text, str) else None
