"""The streaming take: jobs as they arrive, keep-alive lines skipped, the ``max`` bound, and
closing gives the jobs back."""

from __future__ import annotations

import asyncio
import threading
import time

from support import job_in, wait_for

import tenax


def test_the_stream_yields_jobs_as_they_arrive(client: tenax.Client, queue: str) -> None:
    enqueued: dict[int, float] = {}

    def producer() -> None:
        time.sleep(1.5)  # let the stream idle past a keep-alive line first
        for n in range(3):
            enqueued[client.enqueue(queue, "tick", {"n": n}).id] = time.monotonic()
            time.sleep(0.3)

    received: list[tuple[int, float]] = []
    keep_alives = 0
    thread = threading.Thread(target=producer)
    with client.stream(queue, max=10) as stream:
        thread.start()
        for event in stream.events():
            if event is None:
                keep_alives += 1
                continue
            received.append((event.id, time.monotonic()))
            client.complete(event)
            if len(received) == 3:
                break
    thread.join()
    assert [id for id, _ in received] == list(enqueued)
    assert keep_alives >= 1, "no keep-alive line was seen while idle"
    for id, at in received:
        # Pushed when enqueued, not with the next keep-alive line a second later.
        assert at - enqueued[id] < 0.8, f"job {id} arrived {at - enqueued[id]:.3f} s after its enqueue"


def test_iterating_a_stream_skips_keep_alive_lines(client: tenax.Client, queue: str) -> None:
    timer = threading.Timer(1.3, lambda: client.enqueue(queue, "late", "hello"))
    timer.start()
    with client.stream(queue) as stream:
        job = next(iter(stream))
    timer.join()
    assert isinstance(job, tenax.TakenJob) and job.payload == "hello" and job.type == "late"


def test_the_stream_holds_at_most_max_jobs(client: tenax.Client, queue: str) -> None:
    client.enqueue_many([{"queue": queue, "type": "x", "payload": n} for n in range(4)])
    received: list[tenax.TakenJob[object]] = []
    stream = client.stream(queue, max=2).open()

    def read() -> None:
        for job in stream:
            received.append(job)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        wait_for(lambda: len(received) == 2, what="two jobs")
        counts = client.stats().queues[queue]
        assert (counts.in_flight, counts.ready) == (2, 2)
        client.complete(received[0])
        wait_for(lambda: len(received) == 3, what="a third job once one was completed")
        assert client.stats().queues[queue].ready == 1
    finally:
        stream.close()  # from this thread: wakes the reader
        reader.join(5)
    assert not reader.is_alive()


def test_closing_the_stream_returns_its_jobs_without_using_an_attempt(client: tenax.Client, queue: str) -> None:
    id = client.enqueue(queue, "held").id
    with client.stream(queue, lease="1m") as stream:
        job = next(iter(stream))
        assert job.id == id and client.get_job(id).status == "in_flight"
    back = wait_for(job_in(client, id, "ready"), timeout=5, what="the job back in the queue")
    assert back.failures == 0 and back.attempt == 1
    with tenax.Client(client.url) as other:
        with other.stream(queue) as again:
            assert next(iter(again)).id == id


def test_a_refused_stream_raises_the_servers_error(client: tenax.Client) -> None:
    try:
        with client.stream("bad queue"):
            raise AssertionError("the stream opened")
    except tenax.InvalidRequest as error:
        assert error.field == "queues[0]"


def test_async_stream(server_url: str, queue: str) -> None:
    async def main() -> None:
        async with tenax.AsyncClient(server_url) as client:
            loop = asyncio.get_running_loop()
            later = loop.call_later(0.5, lambda: asyncio.ensure_future(client.enqueue(queue, "a", 1)))
            async with client.stream(queue, max=5) as stream:
                async for job in stream:
                    assert job.payload == 1
                    await client.complete(job)
                    break
            later.cancel()
            jobs = (await client.list_jobs(queue=queue)).jobs
            assert [j.status for j in jobs] == ["completed"]

    asyncio.run(asyncio.wait_for(main(), 30))
