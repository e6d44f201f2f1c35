"""The asyncio worker against a real server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from support import SHORT_POLICY

import tenax


async def until(check: Callable[[], Awaitable[bool]], *, timeout: float = 10.0, what: str = "the condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if await check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def settled(client: tenax.AsyncClient, id: int, status: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        job = await client.get_job(id)
        return job.status == status and len(job.errors) >= job.failures

    return check


@contextlib.asynccontextmanager
async def running(worker: tenax.AsyncWorker) -> AsyncIterator[None]:
    """Runs the worker for the block; stops it and waits for its shutdown on the way out,
    also when the block fails."""
    task = asyncio.create_task(worker.run(install_signal_handlers=False))
    try:
        yield
    finally:
        await worker.stop()
        await task


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 60))  # type: ignore[arg-type]


def test_async_worker_completes_jobs(server_url: str, queue: str) -> None:
    async def main() -> None:
        async with tenax.AsyncClient(server_url) as client:
            ids = [(await client.enqueue(queue, "sum", {"a": n, "b": 1})).id for n in range(5)]
            sums: list[int] = []
            worker = tenax.AsyncWorker(queue, client=client, concurrency=5, shutdown_timeout=5)

            @worker.handler("sum")
            async def add(job: tenax.TakenJob[Any]) -> None:
                await asyncio.sleep(0.05)
                sums.append(job.payload["a"] + job.payload["b"])

            async with running(worker):
                for id in ids:
                    await until(settled(client, id, "completed"), what=f"job {id} completed")
            assert sorted(sums) == [1, 2, 3, 4, 5]
            assert worker.stats.completed == 5
            # Five handlers of 50 ms at once: their completions went in fewer requests.
            assert worker.stats.ack_requests < 5

    run(main())


def test_async_handlers_return_results(server_url: str, queue: str) -> None:
    async def main() -> None:
        async with tenax.AsyncClient(server_url) as client:
            id = (await client.enqueue(queue, "sum", {"a": 2, "b": 3})).id
            worker = tenax.AsyncWorker(queue, client=client, shutdown_timeout=5)

            @worker.handler("sum")
            async def add(job: tenax.TakenJob[Any]) -> dict[str, int]:
                return {"sum": job.payload["a"] + job.payload["b"]}

            async with running(worker):
                # The producer's side: wait for the result rather than poll.
                job = await client.get_job(id, wait="30s")
            assert job.status == "completed" and job.result == {"sum": 5}

    run(main())


def test_async_failures_follow_the_policy_until_dead(server_url: str, queue: str) -> None:
    async def main() -> None:
        async with tenax.AsyncClient(server_url) as client:
            flaky = (await client.enqueue(queue, "flaky", policy=SHORT_POLICY)).id
            snoozy = (await client.enqueue(queue, "snoozy", retry_limit=0)).id
            attempts: list[int] = []
            snoozes: list[int] = []
            worker = tenax.AsyncWorker(queue, client=client, shutdown_timeout=5)

            @worker.handler("flaky")
            async def fail(job: tenax.TakenJob[Any]) -> None:
                attempts.append(job.attempt)
                raise RuntimeError("no luck")

            @worker.handler("snoozy")
            async def snooze(job: tenax.TakenJob[Any]) -> None:
                snoozes.append(job.attempt)
                if len(snoozes) == 1:
                    raise tenax.Snooze(0.2)

            async with running(worker):
                await until(settled(client, flaky, "dead"), what="the flaky job dead")
                await until(settled(client, snoozy, "completed"), what="the snoozed job completed")
            job = await client.get_job(flaky)
            assert attempts == [1, 2, 3] and job.failures == 3
            assert [e.message for e in job.errors] == ["RuntimeError: no luck"] * 3
            assert job.errors[0].detail["type"] == "RuntimeError"
            snoozed = await client.get_job(snoozy)
            assert snoozes == [1, 1] and snoozed.failures == 0 and snoozed.errors == []

    run(main())


def test_async_heartbeats_keep_a_long_job(server_url: str, queue: str) -> None:
    async def main() -> None:
        async with tenax.AsyncClient(server_url) as client:
            id = (await client.enqueue(queue, "long")).id
            executions: list[int] = []
            worker = tenax.AsyncWorker(queue, client=client, concurrency=2, lease=1.0, shutdown_timeout=5)

            @worker.handler("long")
            async def long(job: tenax.TakenJob[Any]) -> None:
                executions.append(job.id)
                await asyncio.sleep(3)

            async with running(worker):
                await until(settled(client, id, "completed"), timeout=10, what="the job completed")
            job = await client.get_job(id)
            assert executions == [id] and job.failures == 0
            assert worker.stats.heartbeats >= 2

    run(main())


def test_async_shutdown_cancels_what_outlives_the_deadline(server_url: str, queue: str) -> None:
    async def main() -> None:
        async with tenax.AsyncClient(server_url) as client:
            quick = (await client.enqueue(queue, "quick", priority=1)).id
            stuck = (await client.enqueue(queue, "stuck")).id
            started = asyncio.Event()
            cancelled = asyncio.Event()
            worker = tenax.AsyncWorker(queue, client=client, concurrency=2, shutdown_timeout=0.5)

            @worker.handler("quick")
            async def fast(job: tenax.TakenJob[Any]) -> None:
                await started.wait()
                await asyncio.sleep(0.2)

            @worker.handler("stuck")
            async def slow(job: tenax.TakenJob[Any]) -> None:
                started.set()
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    cancelled.set()
                    raise

            async with running(worker):
                await asyncio.wait_for(started.wait(), 10)
            assert cancelled.is_set()
            assert (await client.get_job(quick)).status == "completed"  # finished within the deadline
            await until(settled(client, stuck, "ready"), timeout=5, what="the stuck job back in the queue")
            job = await client.get_job(stuck)
            assert job.failures == 0 and job.errors == []
            assert worker.stats.abandoned == 1

    run(main())


def test_async_handlers_must_be_coroutines() -> None:
    worker = tenax.AsyncWorker("q", client=tenax.AsyncClient("http://127.0.0.1:1"))

    def blocking(job: tenax.TakenJob[Any]) -> None:
        pass

    with pytest.raises(TypeError, match="async function"):
        worker.register("x", blocking)  # type: ignore[arg-type]


def test_async_worker_tells_a_cancelled_jobs_handler(server_url: str, queue: str) -> None:
    async def main() -> None:
        async with tenax.AsyncClient(server_url) as client:
            id = (await client.enqueue(queue, "wait")).id
            started = asyncio.Event()
            told: list[bool] = []
            worker = tenax.AsyncWorker(queue, client=client, lease=1.0, shutdown_timeout=5)

            @worker.handler("wait")
            async def wait(job: tenax.TakenJob[Any]) -> None:
                assert not job.cancelled
                started.set()
                # Waits for nothing but its cancellation.
                await job.cancellation.wait_async()
                told.append(job.cancelled)
                raise RuntimeError("stopped: cancelled")

            async with running(worker):
                await asyncio.wait_for(started.wait(), 10)
                answer = await client.cancel(id)
                assert answer.outcome == "marked"
                await until(settled(client, id, "cancelled"), what="the job cancelled")
            assert told == [True]
            assert worker.stats.failed == 1
            done = await client.cancel_jobs([id])
            assert (done.cancelled, done.marked) == (0, 0)

    run(main())
