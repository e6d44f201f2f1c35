"""What the sync and the async client share: settings, request building, answer reading."""

from __future__ import annotations

import json
import os
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, Union

import httpx

from ._api import NO_BODY, Call
from ._errors import TenaxConnectionError, TenaxError, TenaxTimeout, error_from_response
from ._version import __version__

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:7890"
WORKER_HEADER = "X-Tenax-Worker"
"""The header that names a worker to the server (``GET /api/cluster`` lists it by that name)."""
DEFAULT_TIMEOUT = httpx.Timeout(10.0, connect=5.0)

TimeoutSetting = Union[float, httpx.Timeout, None]
"""Seconds for every phase of a request, an ``httpx.Timeout``, or ``None`` for no timeout."""


@dataclass(frozen=True, slots=True)
class Settings:
    base_url: str
    headers: dict[str, str]
    timeout: httpx.Timeout
    verify: ssl.SSLContext | bool
    worker: str | None = None
    """The worker name sent as ``X-Tenax-Worker`` with every request."""


def check_worker_name(name: str) -> str:
    """``name`` if a header can carry it as the server takes it: 1 to 128 visible ASCII
    characters or spaces."""
    visible = isinstance(name, str) and all(" " <= c <= "~" for c in name)
    if not visible or not 1 <= len(name) <= 128:
        raise ValueError(
            f"a worker name must be 1 to 128 visible ASCII characters or spaces, got {name!r}"
        )
    return name


def default_worker_name() -> str:
    """The name a worker gives the server unless told another: ``<hostname>-<pid>``."""
    host = "".join(c if "!" <= c <= "~" else "_" for c in (socket.gethostname() or "localhost"))
    return f"{host[:100] or 'localhost'}-{os.getpid()}"


def worker_headers(settings: Settings) -> dict[str, str] | None:
    """The headers that name the worker, when the client has a worker name."""
    return None if settings.worker is None else {WORKER_HEADER: settings.worker}


def resolve_settings(
    url: str | None,
    token: str | None,
    timeout: TimeoutSetting | httpx.Timeout,
    ca_file: str | os.PathLike[str] | None,
    verify: bool | ssl.SSLContext,
    headers: Mapping[str, str] | None,
    worker: str | None = None,
) -> Settings:
    """Arguments first, then ``TENAX_URL``, ``TENAX_TOKEN`` and ``TENAX_CA_FILE``."""
    base_url = (url or os.environ.get("TENAX_URL") or DEFAULT_URL).rstrip("/")
    if not base_url.startswith(("http://", "https://")):
        raise ValueError(f"the server URL must start with http:// or https://, got {base_url!r}")
    token = token if token is not None else os.environ.get("TENAX_TOKEN") or None
    ca_file = ca_file if ca_file is not None else os.environ.get("TENAX_CA_FILE") or None
    all_headers = {"User-Agent": f"tenax-python/{__version__}", "Accept": "application/json"}
    if token:
        all_headers["Authorization"] = f"Bearer {token}"
    all_headers.update(headers or {})
    if isinstance(timeout, httpx.Timeout):
        timeouts = timeout
    elif timeout is None:
        timeouts = httpx.Timeout(None)
    else:
        timeouts = httpx.Timeout(float(timeout), connect=min(float(timeout), 5.0))
    checked: ssl.SSLContext | bool = verify
    if ca_file is not None:
        if verify is False:
            raise ValueError("give ca_file or verify=False, not both")
        checked = ssl.create_default_context(cafile=os.fspath(ca_file))
    if worker is not None:
        check_worker_name(worker)
    return Settings(base_url, all_headers, timeouts, checked, worker)


def request_timeout(base: httpx.Timeout, wait: float) -> httpx.Timeout:
    """The timeout of a request the server may hold ``wait`` seconds before answering."""
    if wait <= 0 or base.read is None:
        return base
    return httpx.Timeout(
        connect=base.connect, read=base.read + wait, write=base.write, pool=base.pool
    )


def build_request(client: httpx.Client | httpx.AsyncClient, call: Call[Any], settings: Settings) -> httpx.Request:
    return client.build_request(
        call.method,
        call.path,
        json=None if call.body is NO_BODY else call.body,
        params=dict(call.params) if call.params else None,
        headers=worker_headers(settings),
        timeout=request_timeout(settings.timeout, call.wait),
    )


def read_answer(call: Call[T], response: httpx.Response) -> T:
    """The parsed answer of a 2xx; otherwise the error it stands for."""
    if not 200 <= response.status_code < 300:
        raise error_from_response(
            response.status_code, response.content, response.headers.get("x-request-id")
        )
    data: Any = None
    if response.content:
        try:
            data = json.loads(response.content)
        except ValueError as error:
            raise TenaxError(
                f"{call.method} {call.path}: the server's answer is not JSON: {error}"
            ) from error
    try:
        return call.parse(data)
    except (KeyError, TypeError, ValueError) as error:
        raise TenaxError(
            f"{call.method} {call.path}: unexpected answer {response.text[:300]!r}: {error!r}"
        ) from error


def connection_error(error: httpx.TransportError, method: str, url: str) -> TenaxConnectionError:
    """A transport failure as this package's error (raised ``from`` the original)."""
    kind = TenaxTimeout if isinstance(error, httpx.TimeoutException) else TenaxConnectionError
    reason = str(error) or type(error).__name__
    return kind(f"{method} {url}: {reason}")
