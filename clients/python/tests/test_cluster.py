"""The cluster's servers, their workers and its activity, through both clients, and the names
the workers give themselves. The suite shares one server, so every check looks for its own
queue's workers and counts what its own test added."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from typing import Any

import pytest
from support import wait_for

import tenax


def workers_of(client: tenax.Client, queue: str) -> dict[str, tenax.WorkerInfo]:
    """The workers that took from ``queue``, by name."""
    return {w.name: w for w in client.cluster().workers() if queue in w.queues}


def test_the_cluster_is_this_server(client: tenax.Client) -> None:
    cluster = client.cluster()
    assert len(cluster.servers) == 1
    this = cluster.this
    assert this is not None and this.this
    assert this.version, "the server's own version"
    assert this.address is not None and client.url.endswith(this.address)
    assert len(this.id) == 16
    assert this.started_at is not None and this.started_at <= this.seen_at


def test_workers_are_named_by_the_take_the_client_or_their_address(
    client: tenax.Client, queue: str
) -> None:
    for _ in range(3):
        client.enqueue(queue, "t")
    held = client.take(queue, worker=f"{queue}-by-take")
    client.with_worker(f"{queue}-by-client").take(queue)
    client.take(queue, lease="1m")
    workers = workers_of(client, queue)
    assert workers[f"{queue}-by-take"].in_flight == 1
    assert workers[f"{queue}-by-client"].in_flight == 1
    unnamed = f"127.0.0.1 tenax-python/{tenax.__version__}"
    assert unnamed in workers, workers
    client.complete(held[0])
    assert workers_of(client, queue)[f"{queue}-by-take"].in_flight == 0
    with pytest.raises(ValueError, match="1 to 128"):
        client.with_worker("")
    with pytest.raises(ValueError, match="visible ASCII"):
        tenax.Client(client.url, worker="tab\there")
    with pytest.raises(tenax.InvalidRequest) as refused:
        client.take(queue, worker="x" * 129)
    assert refused.value.field == "worker"


def test_a_worker_is_listed_by_its_name_while_it_streams(
    client: tenax.Client, queue: str
) -> None:
    assert tenax.default_worker_name() == f"{socket.gethostname()}-{os.getpid()}"
    client.enqueue(queue, "hold")
    started, release = threading.Event(), threading.Event()
    named = tenax.Worker(queue, client=client, name=f"{queue}-named", shutdown_timeout=5.0)
    unnamed = tenax.Worker(queue, client=client, shutdown_timeout=5.0)
    assert unnamed.name == tenax.default_worker_name()
    assert client.worker is None, "the client given is left as it is"

    for worker in (named, unnamed):

        @worker.handler("hold")
        def hold(job: tenax.TakenJob[Any]) -> None:
            started.set()
            release.wait(10)

    with named, unnamed:
        assert started.wait(10)
        workers = wait_for(
            lambda: (
                w
                if len(w := workers_of(client, queue)) == 2
                and all(x.streaming for x in w.values())
                and sum(x.in_flight for x in w.values()) == 1
                else None
            ),
            what="both workers streaming, one holding the job",
        )
        assert set(workers) == {f"{queue}-named", tenax.default_worker_name()}
        release.set()
    with pytest.raises(ValueError, match="worker name"):
        tenax.Worker(queue, client=client, name="")


def test_activity_counts_per_minute(client: tenax.Client, queue: str) -> None:
    before = client.activity(minutes=60).total
    for _ in range(2):
        client.enqueue(queue, "t")
    for job in client.take(queue, max=2):
        client.complete(job)
    activity = client.activity(minutes=60)
    assert len(activity.minutes) == 60
    assert activity.minutes[0].at < activity.minutes[-1].at
    assert activity.total.enqueued - before.enqueued >= 2
    assert activity.total.completed - before.completed >= 2
    assert len(client.activity().minutes) == 60
    with pytest.raises(tenax.InvalidRequest) as refused:
        client.activity(minutes=0)
    assert refused.value.field == "minutes"


def test_the_async_client_and_worker_name_themselves(server_url: str, queue: str) -> None:
    async def main() -> None:
        async with tenax.AsyncClient(server_url, worker=f"{queue}-async") as client:
            assert client.worker == f"{queue}-async"
            await client.enqueue(queue, "t")
            await client.take(queue)
            cluster = await client.cluster()
            names = {w.name for w in cluster.workers() if queue in w.queues}
            assert f"{queue}-async" in names
            assert (await client.activity(minutes=5)).total.enqueued >= 1
            worker = tenax.AsyncWorker(queue, client=client)
            assert worker.name == f"{queue}-async", "the client's name"

    asyncio.run(asyncio.wait_for(main(), 60))
