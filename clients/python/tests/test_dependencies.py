"""Job dependencies against a real server (docs/workflows.md, "Dependencies"): a graph enqueued
in one batch, waiting jobs handed their parents' results, a dead parent's children, refusals
naming the field, and the workflow view; in the blocking and the asyncio client, and in a
worker's handlers.

Nothing here sleeps: each step waits on an event of the server (a take's long poll, a job
read with ``wait=``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

import tenax


def etl(queue: str) -> list[tenax.NewJob]:
    """extract → two transforms → load, listed out of order, named by step and by index."""
    return [
        tenax.NewJob(
            queue=queue,
            type="load",
            step="load",
            after=[tenax.Parent.step("a"), tenax.Parent.step("b")],
        ),
        tenax.NewJob(queue=queue, type="transform", payload="a", step="a", after=[tenax.Parent.index(3)]),
        tenax.NewJob(queue=queue, type="transform", payload="b", step="b", after=[tenax.Parent.step("extract")]),
        tenax.NewJob(queue=queue, type="extract", step="extract"),
    ]


def test_a_dag_in_one_batch_runs_in_order_with_its_parents_results(client: tenax.Client, queue: str) -> None:
    enqueued = client.enqueue_many(etl(queue))
    load, a, b, extract = (e.id for e in enqueued)
    assert [e.status for e in enqueued] == ["waiting", "waiting", "waiting", "ready"]
    assert extract < a < b < load, "the server stores parents first"
    shown = client.get_job(load)
    assert (shown.status, shown.after, shown.on_parent_dead) == ("waiting", [a, b], "cancel")
    assert client.get_job(extract).after == [] and client.get_job(extract).on_parent_dead is None
    assert client.stats().queues[queue].waiting == 3
    assert client.get_queue(queue).counts.unfinished == 4
    assert [j.id for j in client.list_jobs(queue=queue, status="waiting").jobs] == [a, b, load]

    # Only extract can be taken; it waited for nothing.
    [first] = client.take(queue, max=10, wait="5s")
    assert (first.id, first.parents) == (extract, ())
    client.complete(first, result={"rows": 3})

    transforms = client.take(queue, max=10, wait="5s")
    assert [t.id for t in transforms] == [a, b]
    for t in transforms:
        [parent] = t.parents
        assert parent == tenax.ParentResult(id=extract, type="extract", status="completed", result={"rows": 3})
        assert t.parent_result(extract) == {"rows": 3}
        with pytest.raises(KeyError):
            t.parent_result(load)

    running = client.get_workflow(load)
    assert (running.id, running.status, running.truncated) == (load, "running", False)
    assert running.counts == {"completed": 1, "in_flight": 2, "waiting": 1}
    assert [j.id for j in running.jobs] == [extract, a, b, load]
    assert running.edges == [(extract, a), (extract, b), (a, load), (b, load)]
    assert running.job(load).after == [a, b] and running.job(a).on_parent_dead == "cancel"
    assert running.job(extract).result == {"rows": 3}

    client.complete_many([(transforms[0], "A"), (transforms[1], "B")])
    [last] = client.take(queue, wait="5s")
    assert last.id == load
    assert [(p.id, p.type, p.status, p.result) for p in last.parents] == [
        (a, "transform", "completed", "A"),
        (b, "transform", "completed", "B"),
    ]
    client.complete(last, result="loaded")

    done = client.get_workflow(extract)
    assert done.status == "completed" and done.counts == {"completed": 4}
    assert done.job(load).result == "loaded" and done.job(load).finished_at is not None

    # A later job may wait for a stored one by id: completed already, it is ready at once.
    report = client.enqueue(queue, "report", after=[load])
    assert report.status == "ready"
    [taken] = client.take(queue, wait="5s")
    assert taken.parent_result(load) == "loaded"
    # A job that waits for none is a workflow of one.
    alone = client.get_workflow(client.enqueue(queue, "solo").id)
    assert (len(alone.jobs), alone.edges) == (1, [])


def test_a_dead_parent_cancels_its_children_unless_they_run_anyway(client: tenax.Client, queue: str) -> None:
    fetch, parse, store, cleanup = (
        e.id
        for e in client.enqueue_many(
            [
                {"queue": queue, "type": "fetch", "step": "fetch"},
                {"queue": queue, "type": "parse", "step": "parse", "after": [tenax.Parent.step("fetch")]},
                {"queue": queue, "type": "store", "after": [tenax.Parent.step("parse")]},
                {"queue": queue, "type": "cleanup", "after": [tenax.Parent.index(0)], "on_parent_dead": "run"},
            ]
        )
    )
    assert client.get_job(cleanup).on_parent_dead == "run"
    [taken] = client.take(queue, wait="5s")
    assert taken.id == fetch
    assert client.fail(taken, "404", retryable=False).dead

    # The children that asked to be cancelled ended with it, and so did their own children.
    for id in (parse, store):
        job = client.get_job(id)
        # A newer server names this status "cancelled"; either way it ends, saying why.
        assert job.status in ("dead", "cancelled"), job
        assert job.dead_reason is not None and "did not complete" in job.dead_reason, job
    # The one that asked to run anyway runs, and sees how its parent ended.
    [last] = client.take(queue, wait="5s")
    assert last.id == cleanup
    assert last.parents == (tenax.ParentResult(id=fetch, type="fetch", status="dead", result=None),)
    client.complete(last)

    workflow = client.get_workflow(store)
    assert workflow.status == "failed"
    assert [j.id for j in workflow.jobs] == [fetch, parse, store, cleanup]
    assert workflow.job(cleanup).status == "completed"


def test_bad_dependencies_are_refused_naming_the_field(client: tenax.Client, queue: str) -> None:
    with pytest.raises(tenax.InvalidRequest) as cycle:
        client.enqueue_many(
            [
                tenax.NewJob(queue=queue, step="x", after=[tenax.Parent.step("y")]),
                tenax.NewJob(queue=queue, step="y", after=[tenax.Parent.step("x")]),
            ]
        )
    assert cycle.value.field == "jobs[0].after"
    assert "jobs[0] → jobs[1] → jobs[0]" in cycle.value.message

    stored = client.enqueue(queue).id
    missing = stored + 1_000_000
    with pytest.raises(tenax.InvalidRequest) as unknown:
        client.enqueue(queue, after=[stored, missing])
    assert unknown.value.field == "after[1]"
    assert f"job {missing} does not exist" in unknown.value.message
    with pytest.raises(tenax.InvalidRequest) as repeated:
        client.enqueue_many([tenax.NewJob(queue=queue), tenax.NewJob(queue=queue, after=[stored, stored])])
    assert repeated.value.field == "jobs[1].after[1]"
    with pytest.raises(tenax.InvalidRequest) as out_of_range:
        client.enqueue_many([tenax.NewJob(queue=queue, after=[tenax.Parent.index(5)])])
    assert out_of_range.value.field == "jobs[0].after[0]"
    # A refused batch stores nothing.
    assert [j.id for j in client.list_jobs(queue=queue).jobs] == [stored]
    with pytest.raises(tenax.NotFound):
        client.get_workflow(missing)

    # What the server could not read is refused before it is sent.
    with pytest.raises(TypeError, match=r"jobs\[1\]\.after\[0\]"):
        client.enqueue_many([tenax.NewJob(queue=queue), tenax.NewJob(queue=queue, after=["0"])])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"^after:"):
        client.enqueue(queue, after=stored)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        tenax.Parent.index(-1)


@dataclass
class Rows:
    table: str


def test_worker_handlers_read_their_parents_results(client: tenax.Client, queue: str) -> None:
    enqueued = client.enqueue_many(
        [
            tenax.NewJob(queue=queue, type="extract", payload={"table": "orders"}, step="extract"),
            # No retries: a failing handler ends the workflow at once instead of at the wait's end.
            tenax.NewJob(
                queue=queue, type="transform", payload="2", step="double", after=[tenax.Parent.step("extract")], retry_limit=0
            ),
            tenax.NewJob(
                queue=queue, type="transform", payload="3", step="triple", after=[tenax.Parent.step("extract")], retry_limit=0
            ),
            tenax.NewJob(queue=queue, type="load", after=[tenax.Parent.step("double"), tenax.Parent.step("triple")]),
        ]
    )
    extract, load = enqueued[0].id, enqueued[3].id
    worker = tenax.Worker(queue, client=client, concurrency=4, shutdown_timeout=5)

    @worker.handler("extract", payload=Rows)
    def extract_rows(job: tenax.TakenJob[Rows]) -> dict[str, Any]:
        assert job.parents == ()
        return {"table": job.payload.table, "rows": [1, 2, 3]}

    # The payload converted (the job is rebuilt with it) keeps the parents.
    @worker.handler("transform", payload=int)
    def transform(job: tenax.TakenJob[int]) -> list[int]:
        rows: list[int] = job.parent_result(extract)["rows"]
        return [row * job.payload for row in rows]

    @worker.handler("load")
    def load_rows(job: tenax.TakenJob[None]) -> dict[str, Any]:
        return {"loaded": sorted(row for p in job.parents for row in p.result), "from": [p.id for p in job.parents]}

    with worker:
        done = client.get_job(load, wait="30s")
    assert done.status == "completed", done
    assert done.result == {"loaded": [2, 3, 4, 6, 6, 9], "from": [enqueued[1].id, enqueued[2].id]}
    assert worker.stats.completed == 4


def test_the_asyncio_client_and_worker(server_url: str, queue: str) -> None:
    async def main() -> None:
        async with tenax.AsyncClient(server_url) as client:
            first, second = await client.enqueue_many(
                [
                    tenax.NewJob(queue=queue, type="count", payload=20),
                    tenax.NewJob(queue=queue, type="sum", after=[tenax.Parent.index(0)], on_parent_dead="run"),
                ]
            )
            assert second.status == "waiting"
            worker = tenax.AsyncWorker(queue, client=client, shutdown_timeout=5)

            @worker.handler("count")
            async def count(job: tenax.TakenJob[int]) -> int:
                return job.payload + 1

            @worker.handler("sum")
            async def add(job: tenax.TakenJob[None]) -> int:
                return int(job.parent_result(first.id)) * 2

            task = asyncio.create_task(worker.run(install_signal_handlers=False))
            try:
                done = await client.get_job(second.id, wait="30s")
            finally:
                await worker.stop()
                await task
            assert (done.status, done.result, done.after, done.on_parent_dead) == ("completed", 42, [first.id], "run")
            workflow = await client.get_workflow(first.id)
            assert (workflow.status, workflow.edges) == ("completed", [(first.id, second.id)])

    asyncio.run(asyncio.wait_for(main(), 60))
