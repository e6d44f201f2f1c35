"""Writes AsyncClient's API methods from Client's: the two differ only by ``async``/``await``,
so keeping one hand-written copy means a change to a signature, a default or a docstring
cannot reach one client and miss the other.

    python clients/python/tests/async_from_sync.py          # rewrites _async_client.py
    python clients/python/tests/async_from_sync.py --check  # fails if it is out of date

The region copied runs from the marker line to the end of each file: the request building and
answer reading both clients share is in ``_api.py`` and ``_transport.py``; what stays hand
written on each side (the constructors, ``_call``, ``ping`` and the job streams) is above the
marker, because threads and asyncio really do differ there. It lives beside the tests, which
check it (test_generated.py), so that the sdist carries both.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tenax"
SYNC = SRC / "_client.py"
ASYNC = SRC / "_async_client.py"

MARKER = "    # ---- API methods (AsyncClient's are written from these: tests/async_from_sync.py)"
ASYNC_MARKER = (
    "    # ---- API methods (written from Client's by tests/async_from_sync.py: do not edit)"
)

# Line rewrites, applied in order. ``stream`` stays a plain method on both sides: it only builds
# the request, and the stream object it returns is opened by ``with`` / ``async with``. Each names the one construct of the sync methods it turns
# into its asyncio spelling; anything else is copied as is.
_REWRITES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^(\s+)def (?!stream\()"), r"\1async def "),
    (re.compile(r"\bself\._call\("), "await self._call("),
    # The iter_* methods fetch pages through the client's own list_* methods.
    (re.compile(r"\bpage = self\."), "page = await self."),
    (re.compile(r"\bIterator\["), "AsyncIterator["),
    (re.compile(r"\bJobStream\b"), "AsyncJobStream"),
    (re.compile(r"a ``with`` block"), "an ``async with`` block"),
]

# ``yield from`` is not allowed in an async generator.
_YIELD_FROM = re.compile(r"^(\s+)yield from page\.(\w+)$")


def _region(text: str, marker: str, path: Path) -> tuple[str, str]:
    """The text before the marker line, and the marker line with everything after it."""
    at = text.find(marker + "\n")
    if at < 0:
        raise SystemExit(f"{path}: no marker line {marker.strip()!r}")
    return text[:at], text[at:]


def asyncify(methods: str) -> str:
    out = []
    for line in methods.splitlines():
        found = _YIELD_FROM.match(line)
        if found:
            indent, field = found.groups()
            out.append(f"{indent}for item in page.{field}:")
            out.append(f"{indent}    yield item")
            continue
        for pattern, replacement in _REWRITES:
            line = pattern.sub(replacement, line)
        out.append(line)
    return "\n".join(out) + "\n"


def generated() -> str:
    """_async_client.py as it should be: its own head, then Client's methods rewritten."""
    _, methods = _region(SYNC.read_text(), MARKER, SYNC)
    head, _ = _region(ASYNC.read_text(), ASYNC_MARKER, ASYNC)
    body = methods[len(MARKER) + 1 :]
    return head + ASYNC_MARKER + "\n" + asyncify(body)


def main(argv: list[str]) -> int:
    text = generated()
    if "--check" in argv:
        if text != ASYNC.read_text():
            print(f"{ASYNC} is out of date: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    ASYNC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
