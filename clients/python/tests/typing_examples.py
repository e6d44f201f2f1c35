"""Typed uses of the public API, for ``mypy --strict`` (run-tests.sh checks this file against
the installed package, through its py.typed marker). Not collected by pytest, never run.

A ``# type: ignore[...]`` below marks a use that must be refused: with --strict an ignore
that is not needed is itself an error, so each one proves that mypy catches the mistake.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import tenax


@dataclass
class Email:
    to: str
    subject: str


class Invoice:
    def __init__(self, number: int) -> None:
        self.number = number

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Invoice:
        return cls(int(data["number"]))


def to_int(value: Any) -> int:
    return int(value)


worker = tenax.Worker("emails", client=tenax.Client("http://127.0.0.1:1"), concurrency=4, unknown_types="retry")
quiet = tenax.Worker("emails", unknown_types="ignore", log=False)  # type: ignore[arg-type]


@worker.handler("email.send", payload=Email)
def send(job: tenax.TakenJob[Email]) -> None:
    subject: str = job.payload.subject
    token: int = job.lease_token
    del subject, token


@worker.handler("email.strict", payload=Email, strict=True)
def send_strict(job: tenax.TakenJob[Email]) -> None:
    to: str = job.payload.to
    del to


@worker.handler("invoice", payload=Invoice.from_dict)
def bill(job: tenax.TakenJob[Invoice]) -> None:
    number: int = job.payload.number
    del number


@worker.handler("count", payload=to_int)
def count(job: tenax.TakenJob[int]) -> None:
    total: int = job.payload + 1
    del total


@worker.handler("raw")
def raw(job: tenax.TakenJob[Any]) -> None:
    if job.attempt > 3:
        raise tenax.RetryIn(timedelta(minutes=5), "backing off")
    raise tenax.Snooze(30)


@worker.handler("mismatch", payload=Email)  # type: ignore[arg-type]
def mismatch(job: tenax.TakenJob[int]) -> None:
    pass


async_worker = tenax.AsyncWorker(["a", "b"], client=tenax.AsyncClient("http://127.0.0.1:1"))


@async_worker.handler("email.send", payload=Email)
async def send_async(job: tenax.TakenJob[Email]) -> None:
    to: str = job.payload.to
    del to


def client_calls(client: tenax.Client) -> None:
    enqueued: tenax.Enqueued = client.enqueue(
        "emails",
        "email.send",
        {"to": "ada@example.com"},
        priority=1,
        delay="5s",
        policy={"type": "list", "delays": ["1s", "5s"]},
        unique_key="ada",
        on_duplicate="existing",
    )
    client.enqueue("emails", run_at=datetime.now(timezone.utc) + timedelta(hours=1))
    client.enqueue("emails", on_duplicate="ignore")  # type: ignore[arg-type]
    many: list[tenax.Enqueued] = client.enqueue_many([tenax.NewJob(queue="emails", type="x")])
    jobs: list[tenax.TakenJob[Any]] = client.take("emails", max=10, wait=timedelta(seconds=20))
    for job in jobs:
        client.heartbeat(job, lease=60)
        result: tenax.FailResult = client.fail(job, "boom", retry_in="30s")
        dead: bool = result.dead
        del dead
    with client.stream(["emails"], max=10) as stream:
        for taken in stream:
            client.complete(taken)
    page: tenax.JobPage = client.list_jobs(queue="emails", status="dead")
    client.list_jobs(status="finished")  # type: ignore[arg-type]
    queue: tenax.Queue = client.update_queue("emails", policy=None, paused=True)
    stats: tenax.Stats = client.stats()
    ready: int = stats.queues["emails"].ready
    try:
        client.get_job(enqueued.id)
    except tenax.InvalidRequest as error:
        field: str | None = error.field
        del field
    except tenax.LeaseLost:
        pass
    del many, page, queue, ready


async def async_client_calls(client: tenax.AsyncClient) -> None:
    enqueued: tenax.Enqueued = await client.enqueue("emails", "t")
    async with client.stream("emails") as stream:
        async for job in stream:
            await client.complete(job)
    async for dead in client.iter_dead(queue="emails"):
        print(dead.dead_reason)
    del enqueued


def dependencies(client: tenax.Client) -> None:
    extract, load = client.enqueue_many(
        [
            tenax.NewJob(queue="etl", type="extract", step="extract"),
            tenax.NewJob(queue="etl", type="load", after=[tenax.Parent.step("extract"), 7], on_parent_dead="run"),
        ]
    )
    client.enqueue("etl", "report", after=[load.id], on_parent_dead="cancel")
    client.enqueue("etl", "report", after=[tenax.Parent.index(0)])  # type: ignore[list-item]
    client.enqueue("etl", "report", on_parent_dead="skip")  # type: ignore[arg-type]
    workflow: tenax.Workflow = client.get_workflow(extract.id)
    status: tenax.WorkflowStatus = workflow.status
    edges: list[tuple[int, int]] = workflow.edges
    waiting: int = client.stats().totals.waiting
    for job in client.take("etl"):
        parents: tuple[tenax.ParentResult, ...] = job.parents
        rows: Any = job.parent_result(extract.id)
        del parents, rows
    del status, edges, waiting
