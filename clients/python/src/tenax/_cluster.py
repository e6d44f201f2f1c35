"""The cluster's answers: its servers with the workers each has seen (``GET /api/cluster``),
and its activity per minute (``GET /api/activity``). Like every model, they read the server's
JSON and ignore fields a later server adds."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

from ._convert import parse_optional_time, parse_time

__all__ = [
    "Activity",
    "ActivityCounts",
    "ActivityMinute",
    "Cluster",
    "ServerInfo",
    "WorkerInfo",
]

JSONObject = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker, as the server it takes from has seen it."""

    name: str
    """The name it gave (a worker's ``name``, a client's ``worker``), else its address and
    User-Agent."""
    queues: list[str]
    """The queues it took from lately."""
    in_flight: int
    """The jobs it holds now: leases that server handed it and that are still running."""
    streaming: bool
    streams: int
    seen_at: datetime
    """Its last take, stream or heartbeat (now, while a stream is open)."""

    @classmethod
    def from_json(cls, data: JSONObject) -> WorkerInfo:
        return cls(
            name=str(data["name"]),
            queues=[str(q) for q in data.get("queues") or []],
            in_flight=int(data.get("in_flight", 0)),
            streaming=bool(data.get("streaming", False)),
            streams=int(data.get("streams", 0)),
            seen_at=parse_time(data["seen_at"]),
        )


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """A live server: what it says of itself, and the workers it has seen."""

    id: str
    """Its id in the store (16 hex digits, new at each start)."""
    this: bool
    """Whether it is the server that answered."""
    version: str | None
    """The version of Tenax it runs (``None``: a server that does not say)."""
    started_at: datetime | None
    seen_at: datetime
    """When it last wrote its row (every second on PostgreSQL)."""
    leads: bool
    """Whether it leads the maintenance."""
    address: str | None
    workers: list[WorkerInfo]
    """The workers it has seen in the last 5 minutes, most recently seen first."""

    @classmethod
    def from_json(cls, data: JSONObject) -> ServerInfo:
        version = data.get("version")
        address = data.get("address")
        return cls(
            id=str(data["id"]),
            this=bool(data.get("this", False)),
            version=version if isinstance(version, str) else None,
            started_at=parse_optional_time(data.get("started_at")),
            seen_at=parse_time(data["seen_at"]),
            leads=bool(data.get("leads", False)),
            address=address if isinstance(address, str) else None,
            workers=[WorkerInfo.from_json(w) for w in data.get("workers") or []],
        )


@dataclass(frozen=True, slots=True)
class Cluster:
    """Every live server of the cluster, by id."""

    servers: list[ServerInfo]

    @property
    def this(self) -> ServerInfo | None:
        """The server that answered."""
        return next((s for s in self.servers if s.this), None)

    def workers(self) -> Iterator[WorkerInfo]:
        """Every worker of every server."""
        for server in self.servers:
            yield from server.workers

    @classmethod
    def from_json(cls, data: JSONObject) -> Cluster:
        return cls(servers=[ServerInfo.from_json(s) for s in data.get("servers") or []])


@dataclass(frozen=True, slots=True)
class ActivityCounts:
    """What happened in a minute, or over a window."""

    enqueued: int = 0
    completed: int = 0
    failed: int = 0
    """Failed runs (a worker's failure or an expired lease), retried or not."""
    dead: int = 0
    """Jobs and deliveries that died."""
    delivered: int = 0
    """Webhook attempts that delivered."""
    delivery_failed: int = 0
    """Webhook attempts that failed."""

    @classmethod
    def from_json(cls, data: JSONObject | None) -> ActivityCounts:
        data = data or {}
        return cls(
            enqueued=int(data.get("enqueued", 0)),
            completed=int(data.get("completed", 0)),
            failed=int(data.get("failed", 0)),
            dead=int(data.get("dead", 0)),
            delivered=int(data.get("delivered", 0)),
            delivery_failed=int(data.get("delivery_failed", 0)),
        )


@dataclass(frozen=True, slots=True)
class ActivityMinute:
    """One minute: its start, and its counts."""

    at: datetime
    counts: ActivityCounts

    @classmethod
    def from_json(cls, data: JSONObject) -> ActivityMinute:
        return cls(at=parse_time(data["at"]), counts=ActivityCounts.from_json(data))


@dataclass(frozen=True, slots=True)
class Activity:
    """The cluster's activity: every minute of the window, oldest first, and the sums."""

    minutes: list[ActivityMinute]
    total: ActivityCounts

    @classmethod
    def from_json(cls, data: JSONObject) -> Activity:
        return cls(
            minutes=[ActivityMinute.from_json(m) for m in data.get("minutes") or []],
            total=ActivityCounts.from_json(data.get("total")),
        )
