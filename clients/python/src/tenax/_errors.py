"""The error hierarchy: one class per error code of the server, plus connection errors.

Every error the server answers has one shape,
``{"error": {"status", "code", "field", "message"}}``; :func:`error_from_response` turns it into
the most specific :class:`TenaxError` subclass, which carries all four (and the request id of a
server error, under which the server's log has the details).

::

    TenaxError
    ├── APIError                  the server answered with an error
    │   ├── InvalidRequest        400 invalid: `field` names the JSON path, `message` the rule
    │   ├── Unauthorized          401 / 403
    │   ├── NotFound              404 not_found
    │   ├── RequestTimeout        408 timeout
    │   ├── Conflict              409
    │   │   ├── Duplicate         409 duplicate: a unique key is held (`field` names it)
    │   │   ├── NotInFlight       409 not_in_flight: the job is not running
    │   │   ├── LeaseLost         409 lease_lost: the lease expired; the job may run elsewhere
    │   │   └── NotDead           409 not_dead: replay of a delivery that is not dead
    │   ├── PayloadTooLarge       413 too_large
    │   └── ServerError           5xx
    │       └── StorageUnavailable  503 storage_unavailable
    └── TenaxConnectionError      no answer: refused, reset, DNS, TLS, or timed out
        └── TenaxTimeout          the server did not answer in time
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "APIError",
    "Conflict",
    "Duplicate",
    "InvalidRequest",
    "LeaseLost",
    "NotDead",
    "NotFound",
    "NotInFlight",
    "PayloadTooLarge",
    "RequestTimeout",
    "ServerError",
    "StorageUnavailable",
    "TenaxConnectionError",
    "TenaxError",
    "TenaxTimeout",
    "Unauthorized",
]


class TenaxError(Exception):
    """Base class of every error this package raises about the server."""


class APIError(TenaxError):
    """The server answered with an error.

    Attributes:
        status: the HTTP status (400, 404, 409, ...).
        code: the server's error code (``"invalid"``, ``"not_found"``, ``"lease_lost"``, ...).
        field: the JSON path of the field that broke a rule (``"jobs[2].policy.max_delay"``),
            ``"body"`` for the body as a whole, or ``None``.
        message: the rule, in words.
        request_id: the ``X-Request-Id`` of the request (in the server's log lines).
        body: the whole error object as the server sent it.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        request_id: str | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.request_id = request_id
        self.body: dict[str, Any] = body if body is not None else {}
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f" {self.field}:" if self.field else ""
        return f"{self.status} {self.code}:{where} {self.message}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, "
            f"field={self.field!r}, message={self.message!r})"
        )


class InvalidRequest(APIError):
    """400: a field breaks a rule; ``field`` says which and ``message`` the rule."""


class Unauthorized(APIError):
    """401 or 403: the token is missing, wrong, or not allowed to do this."""


class NotFound(APIError):
    """404: no such job, queue resource, subscription or delivery."""


class RequestTimeout(APIError):
    """408: the request body did not reach the server in time."""


class Conflict(APIError):
    """409: the request conflicts with the job's current state."""


class Duplicate(Conflict):
    """409 duplicate: an unfinished job of the queue holds the unique key."""


class NotInFlight(Conflict):
    """409 not_in_flight: heartbeat, complete or fail of a job that is not running."""


class LeaseLost(Conflict):
    """409 lease_lost: the lease token is stale; the job may be running elsewhere."""


class NotDead(Conflict):
    """409 not_dead: only a dead delivery can be replayed."""


class PayloadTooLarge(APIError):
    """413: the request body is over the server's ``--max-request-bytes``."""


class ServerError(APIError):
    """5xx: a server-side failure; ``request_id`` finds it in the server's log."""


class StorageUnavailable(ServerError):
    """503 storage_unavailable: the store failed a write and refuses writes until restarted."""


class TenaxConnectionError(TenaxError):
    """No answer from the server: connection refused or reset, DNS or TLS failure, timeout."""


class TenaxTimeout(TenaxConnectionError):
    """The server did not answer within the client's timeout."""


_BY_CODE: dict[str, type[APIError]] = {
    "invalid": InvalidRequest,
    "not_found": NotFound,
    "timeout": RequestTimeout,
    "duplicate": Duplicate,
    "not_in_flight": NotInFlight,
    "lease_lost": LeaseLost,
    "not_dead": NotDead,
    "too_large": PayloadTooLarge,
    "storage_unavailable": StorageUnavailable,
    "unauthorized": Unauthorized,
    "forbidden": Unauthorized,
}

_BY_STATUS: dict[int, type[APIError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Unauthorized,
    404: NotFound,
    408: RequestTimeout,
    409: Conflict,
    413: PayloadTooLarge,
}


def error_class(status: int, code: str) -> type[APIError]:
    """The most specific class for a status and code; unknown codes fall back on the status."""
    known = _BY_CODE.get(code)
    if known is not None:
        return known
    if status >= 500:
        return ServerError
    return _BY_STATUS.get(status, APIError)


def error_from_response(status: int, content: bytes, request_id: str | None = None) -> APIError:
    """The error an answer with a non-2xx status stands for, whatever its body."""
    error: dict[str, Any] = {}
    try:
        decoded = json.loads(content)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and isinstance(decoded.get("error"), dict):
        error = decoded["error"]
    code = error.get("code")
    if not isinstance(code, str):
        code = "http_" + str(status)
    message = error.get("message")
    if not isinstance(message, str):
        text = content.decode("utf-8", "replace").strip()
        message = text[:500] if text else f"HTTP {status}"
    field = error.get("field")
    rid = error.get("request_id")
    return error_class(status, code)(
        status,
        code,
        message,
        field=field if isinstance(field, str) else None,
        request_id=rid if isinstance(rid, str) else request_id,
        body=error,
    )
