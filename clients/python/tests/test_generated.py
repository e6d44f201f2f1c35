"""AsyncClient's API methods are written from Client's (async_from_sync.py): check that the
committed copy is the one it writes, so neither client can drift from the other."""

from __future__ import annotations

import async_from_sync


def test_async_client_is_written_from_the_sync_one() -> None:
    assert async_from_sync.generated() == async_from_sync.ASYNC.read_text(), (
        "_async_client.py is out of date: run python clients/python/tests/async_from_sync.py"
    )
