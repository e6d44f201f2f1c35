"""The client against a real server: every operation, its options, and typed errors."""

from __future__ import annotations

import asyncio
import inspect
import json
import shutil
import ssl
import subprocess
import threading
import time
import http.server
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import SHORT_POLICY, Receiver, job_in, wait_for

import tenax


# ---- enqueue --------------------------------------------------------------------------------


def test_enqueue_with_every_option(client: tenax.Client, queue: str) -> None:
    at = datetime.now(timezone.utc) + timedelta(hours=1)
    job = client.enqueue(
        queue,
        "email.send",
        {"to": "ada@example.com", "tags": ["a", "b"]},
        priority=5,
        run_at=at,
        policy={"healthyRetryPolicy": {"minDelayTarget": 1, "maxDelayTarget": 4, "numRetries": 3}},
        retry_limit=2,
        unique_key="welcome-ada",
    )
    assert job.created and job.status == "scheduled"
    assert abs(job.run_at - at) < timedelta(milliseconds=1)
    stored = client.get_job(job.id)
    assert (stored.queue, stored.type, stored.priority, stored.unique_key) == (queue, "email.send", 5, "welcome-ada")
    assert stored.payload == {"to": "ada@example.com", "tags": ["a", "b"]}
    # The SNS spelling is stored canonically, with the limit given beside it.
    assert stored.policy is not None
    assert stored.policy["type"] == "phased" and stored.policy["retry_limit"] == 2
    assert stored.traceparent is None


TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_trace_context_goes_to_the_job_and_its_taker(client: tenax.Client, queue: str) -> None:
    one = client.enqueue(queue, "traced", 1, traceparent=TRACE)
    many = client.enqueue_many([tenax.NewJob(queue=queue, type="traced", payload=2, traceparent=TRACE)])
    assert client.get_job(one.id).traceparent == TRACE
    assert client.get_job(many[0].id).traceparent == TRACE
    taken = client.take(queue, max=2)
    assert [t.traceparent for t in taken] == [TRACE, TRACE]
    with pytest.raises(tenax.InvalidRequest) as refused:
        client.enqueue(queue, "traced", traceparent="00-not-a-trace")
    assert refused.value.field == "traceparent"


@pytest.mark.parametrize("delay", [timedelta(seconds=90), 90, 90.0, "1m30s"])
def test_delay_in_any_form(client: tenax.Client, queue: str, delay: tenax.Duration) -> None:
    before = datetime.now(timezone.utc)
    job = client.enqueue(queue, "later", delay=delay)
    assert job.status == "scheduled"
    wait = job.run_at - before
    assert timedelta(seconds=89) < wait < timedelta(seconds=92)


def test_run_at_in_milliseconds(client: tenax.Client, queue: str) -> None:
    ms = int((datetime.now(timezone.utc) + timedelta(minutes=5)).timestamp() * 1000)
    job = client.enqueue(queue, run_at=ms)
    assert int(job.run_at.timestamp() * 1000) == ms


def test_unique_keys_and_on_duplicate(client: tenax.Client, queue: str) -> None:
    first = client.enqueue(queue, "sync", unique_key="user-1")
    again = client.enqueue(queue, "sync", unique_key="user-1", on_duplicate="existing")
    assert not again.created and again.id == first.id
    with pytest.raises(tenax.Duplicate) as refused:
        client.enqueue(queue, "sync", unique_key="user-1")
    assert refused.value.status == 409 and refused.value.code == "duplicate"
    assert refused.value.field == "unique_key"


def test_enqueue_many_is_atomic_and_names_the_bad_job(client: tenax.Client, queue: str) -> None:
    jobs = client.enqueue_many(
        [
            tenax.NewJob(queue=queue, type="a", payload=1),
            {"queue": queue, "type": "b", "delay": "1h"},
            tenax.NewJob(queue=queue, type="c", priority=3),
        ]
    )
    assert [j.status for j in jobs] == ["ready", "scheduled", "ready"]
    assert len({j.id for j in jobs}) == 3
    with pytest.raises(tenax.InvalidRequest) as refused:
        client.enqueue_many(
            [
                tenax.NewJob(queue=queue, type="ok"),
                tenax.NewJob(queue=queue, policy={"type": "phased", "min_delay": "9s", "max_delay": "5s"}),
            ]
        )
    assert refused.value.field == "jobs[1].policy.max_delay"
    assert "min_delay" in refused.value.message
    assert client.stats().queues[queue].unfinished == 3, "a refused batch stored nothing"
    with pytest.raises(TypeError, match="unknown field"):
        client.enqueue_many([{"queue": queue, "prioirty": 1}])


# ---- inspect --------------------------------------------------------------------------------


def test_list_jobs_pages_and_filters(client: tenax.Client, queue: str) -> None:
    ids = [j.id for j in client.enqueue_many([{"queue": queue, "type": "t" if n % 2 else "u"} for n in range(7)])]
    page = client.list_jobs(queue=queue, limit=3)
    assert [j.id for j in page.jobs] == ids[:3] and page.next_after == ids[2]
    page = client.list_jobs(queue=queue, limit=3, after=page.next_after)
    assert [j.id for j in page.jobs] == ids[3:6]
    assert [j.id for j in client.iter_jobs(queue=queue, page_size=2)] == ids
    assert [j.id for j in client.iter_jobs(queue=queue, type="t")] == ids[1::2]
    assert [j.id for j in client.iter_jobs(queue=queue, status="in_flight")] == []
    client.delete_job(ids[0])
    with pytest.raises(tenax.NotFound):
        client.get_job(ids[0])


def test_stats_and_counts(client: tenax.Client, queue: str) -> None:
    client.enqueue_many([{"queue": queue}, {"queue": queue}, {"queue": queue, "delay": "1h"}])
    client.take(queue)
    counts = client.stats().queues[queue]
    assert (counts.scheduled, counts.ready, counts.in_flight) == (1, 1, 1)
    assert client.get_queue(queue).counts == counts


# ---- work -----------------------------------------------------------------------------------


def test_take_long_polls_and_orders_by_priority(client: tenax.Client, queue: str) -> None:
    assert client.take(queue, wait=0.1) == []
    timer = threading.Timer(0.3, lambda: client.enqueue(queue, "late"))
    timer.start()
    [job] = client.take([queue], wait="5s", lease=timedelta(seconds=10))
    timer.join()
    assert job.type == "late" and job.attempt == 1
    assert timedelta(seconds=9) < job.lease_expires_at - datetime.now(timezone.utc) <= timedelta(seconds=10)
    low = client.enqueue(queue, "low", priority=0).id
    high = client.enqueue(queue, "high", priority=9).id
    assert [j.id for j in client.take(queue, max=5)] == [high, low]


def test_heartbeat_complete_and_fail(client: tenax.Client, queue: str) -> None:
    client.enqueue_many([{"queue": queue, "type": "x", "policy": SHORT_POLICY} for _ in range(2)])
    first, second = client.take(queue, max=2, lease=2)
    beat = client.heartbeat(first, lease="1m")
    assert beat.id == first.id
    assert beat.lease_expires_at - datetime.now(timezone.utc) > timedelta(seconds=50)
    assert client.complete(first).completed
    with pytest.raises(tenax.NotInFlight):
        client.complete(first)
    failed = client.fail(second, "timeout talking to SMTP", detail={"host": "mx1"})
    assert failed.status in ("scheduled", "ready") and failed.failures == 1 and failed.attempt == 2
    assert failed.delay == timedelta(milliseconds=200)
    job = wait_for(job_in(client, second.id, "scheduled", "ready"), what="the failure recorded")
    assert [(e.message, e.detail) for e in job.errors] == [("timeout talking to SMTP", {"host": "mx1"})]


def test_fail_outcomes(client: tenax.Client, queue: str) -> None:
    ids = [j.id for j in client.enqueue_many([{"queue": queue} for _ in range(4)])]
    a, b, c, d = client.take(queue, max=4)
    assert client.fail(a, "gone", retryable=False).dead
    at = datetime.now(timezone.utc) + timedelta(minutes=10)
    retry_at = client.fail(b, "later", retry_at=at)
    assert retry_at.run_at is not None and abs(retry_at.run_at - at) < timedelta(milliseconds=1)
    retry_in = client.fail(c, "soon", retry_in="45s")
    assert retry_in.delay_ms == 45_000 and retry_in.failures == 1
    snoozed = client.fail(d, "busy", snooze=timedelta(seconds=30))
    assert snoozed.failures == 0 and snoozed.attempt == 1 and snoozed.delay_ms == 30_000
    assert client.get_job(ids[3]).errors == []
    with pytest.raises(tenax.InvalidRequest) as refused:
        client.fail(ids[1], "x", lease_token=1, retryable=False, snooze=1)
    assert refused.value.field == "retryable"


def test_a_stale_lease_token_is_refused(client: tenax.Client, queue: str) -> None:
    client.enqueue(queue)
    [job] = client.take(queue)
    with pytest.raises(tenax.LeaseLost) as lost:
        client.complete(job.id, job.lease_token + 1)
    assert isinstance(lost.value, tenax.Conflict) and lost.value.code == "lease_lost"
    with pytest.raises(TypeError, match="lease_token"):
        client.complete(job.id)
    [result] = client.complete_many([(job.id, job.lease_token + 1)])
    assert not result.completed and result.error is not None
    assert isinstance(result.error.exception(), tenax.LeaseLost)


def test_complete_many(client: tenax.Client, queue: str) -> None:
    client.enqueue_many([{"queue": queue} for _ in range(3)])
    jobs = client.take(queue, max=3)
    results = client.complete_many([jobs[0], (jobs[1].id, jobs[1].lease_token), jobs[2]])
    assert [(r.id, r.completed) for r in results] == [(j.id, True) for j in jobs]
    again = client.complete_many(jobs[:1])
    assert again[0].error is not None and again[0].error.code == "not_in_flight"


def test_complete_with_a_result_and_wait_for_it(client: tenax.Client, queue: str) -> None:
    ids = [j.id for j in client.enqueue_many([{"queue": queue} for _ in range(4)])]
    jobs = {j.id: j for j in client.take(queue, max=4)}
    assert client.complete(jobs[ids[0]], result={"sum": 3, "by": "w1"}).completed
    assert client.get_job(ids[0]).result == {"sum": 3, "by": "w1"}
    results = client.complete_many(
        [(jobs[ids[1]], [1, 2]), (ids[2], jobs[ids[2]].lease_token, "done"), jobs[ids[3]]]
    )
    assert all(r.completed for r in results)
    assert client.get_job(ids[1]).result == [1, 2]
    assert client.get_job(ids[2]).result == "done"
    assert client.get_job(ids[3]).result is None
    # A finished job answers a wait at once; an unfinished one once the wait runs out.
    assert client.get_job(ids[0], wait="30s").result == {"sum": 3, "by": "w1"}
    waiting = client.enqueue(queue).id
    started = time.monotonic()
    shown = client.get_job(waiting, wait=timedelta(milliseconds=300))
    assert shown.status == "ready" and shown.result is None
    assert time.monotonic() - started >= 0.3
    with pytest.raises(tenax.InvalidRequest) as refused:
        client.get_job(waiting, wait="2m")
    assert refused.value.field == "wait"


# ---- dead jobs ------------------------------------------------------------------------------


def test_dead_list_replay_delete(client: tenax.Client, queue: str) -> None:
    ids = [j.id for j in client.enqueue_many([{"queue": queue, "type": "d", "retry_limit": 0} for _ in range(3)])]
    for job in client.take(queue, max=3):
        client.fail(job, "broken")
    assert [j.id for j in client.iter_dead(queue=queue, page_size=2)] == ids
    page = client.list_dead(queue=queue, limit=1)
    assert page.jobs[0].dead_reason is not None and page.next_after == ids[0]
    replay = client.replay_dead([ids[0], 999_999_999], reset_attempts=True)
    assert replay.replayed == 1 and replay.ids == [ids[0]]
    assert [s.id for s in replay.skipped] == [999_999_999] and "no such job" in replay.skipped[0].reason
    replayed = client.get_job(ids[0])
    assert replayed.status == "ready" and replayed.failures == 0 and len(replayed.errors) == 1
    deleted = client.delete_dead(queue=queue)
    assert deleted.deleted == 2 and sorted(deleted.ids) == ids[1:]
    with pytest.raises(tenax.InvalidRequest) as refused:
        client.replay_dead()
    assert refused.value.field == "ids"


# ---- queues and policies --------------------------------------------------------------------


def test_queue_settings_pause_and_resume(client: tenax.Client, queue: str) -> None:
    # A queue that has never existed is refused, naming the closest, unless create=True.
    with pytest.raises(tenax.NotFound) as refused:
        client.update_queue(queue, paused=True)
    assert "does not exist" in str(refused.value)
    with pytest.raises(tenax.NotFound):
        client.pause_queue(queue)
    updated = client.update_queue(
        queue, policy={"type": "fixed", "delay": "3s"}, message_ttl=timedelta(hours=1), create=True
    )
    assert updated.policy is not None and updated.policy["type"] == "fixed"
    assert updated.message_ttl == timedelta(hours=1)
    assert client.update_queue(queue, paused=True).paused
    client.enqueue(queue)
    assert client.take(queue) == [], "a paused queue hands nothing out"
    assert not client.resume_queue(queue).paused
    assert len(client.take(queue)) == 1
    assert client.pause_queue(queue).paused
    cleared = client.update_queue(queue, policy=None, message_ttl=None)
    assert cleared.policy is None and cleared.message_ttl is None and cleared.paused
    assert queue in [q.name for q in client.list_queues()]


def test_policy_preview(client: tenax.Client) -> None:
    preview = client.preview_policy({"type": "exponential", "initial": "1s", "factor": 2, "retry_limit": 5}, rows=3)
    assert [r.delay_ms for r in preview.retries] == [1000, 2000, 4000]
    assert preview.retry_count == 5 and preview.truncated
    assert preview.window == timedelta(seconds=31)
    with pytest.raises(tenax.InvalidRequest) as refused:
        client.preview_policy({"type": "exponential", "initial": "1s", "factr": 2})
    assert refused.value.field is not None and "factr" in (refused.value.field + refused.value.message)


# ---- webhooks -------------------------------------------------------------------------------


def test_subscriptions_and_deliveries(client: tenax.Client, queue: str) -> None:
    with Receiver([500, 204]) as receiver:
        sub = client.create_subscription(
            queue,
            receiver.url,
            policy={"type": "list", "delays": ["100ms"]},
            headers={"X-Team": "billing"},
        )
        assert sub.queue == queue and sub.enabled and sub.secret.startswith("whsec_")
        assert sub.policy_source == "subscription" and sub.headers == {"X-Team": "billing"}
        message = client.enqueue(queue, "order.paid", {"order": 7})

        def delivered() -> tenax.Delivery | None:
            page = client.list_deliveries(sub.id, status="completed")
            return page.deliveries[0] if page.deliveries else None

        delivery = wait_for(delivered, what="the delivery completed")
        assert delivery.message_id == message.id and delivery.failures == 1
        full = client.get_delivery(delivery.id)
        assert full.attempts is not None
        assert [(a.result, a.status) for a in full.attempts] == [("retryable", 500), ("delivered", 204)]
        assert client.list_delivery_attempts(delivery.id) == full.attempts
        assert [d.id for d in client.iter_deliveries(sub.id)] == [delivery.id]
        assert len(client.list_subscription_attempts(sub.id).attempts) == 2
        assert receiver.bodies[-1]["message"]["body"] == {"order": 7}
        with pytest.raises(tenax.NotDead):
            client.replay_delivery(delivery.id)
        assert client.replay_subscription(sub.id) == []

        assert not client.disable_subscription(sub.id).enabled
        assert client.enable_subscription(sub.id).enabled
        patched = client.update_subscription(sub.id, throttle_per_second=5, policy=None)
        assert patched.throttle_per_second == 5 and patched.policy is None
        assert [s.id for s in client.list_subscriptions(queue)] == [sub.id]
        assert sub.id in [s.id for s in client.list_subscriptions()]
        deleted = client.delete_subscription(sub.id)
        assert deleted.deleted == sub.id and deleted.deliveries_deleted == 1
        with pytest.raises(tenax.NotFound):
            client.get_subscription(sub.id)


# ---- errors and settings --------------------------------------------------------------------


def test_errors_are_typed_and_name_the_field(client: tenax.Client) -> None:
    with pytest.raises(tenax.InvalidRequest) as bad_queue:
        client.enqueue("no spaces allowed", "x")
    error = bad_queue.value
    assert (error.status, error.code, error.field) == (400, "invalid", "queue")
    assert "letters, digits" in error.message
    assert isinstance(error, tenax.APIError) and isinstance(error, tenax.TenaxError)
    assert str(error).startswith("400 invalid: queue: ")
    with pytest.raises(tenax.InvalidRequest) as bad_lease:
        client.take("q", lease=0)
    assert bad_lease.value.field == "lease"
    with pytest.raises(tenax.NotFound) as missing:
        client.get_job(123_456_789)
    assert missing.value.status == 404 and missing.value.field is None


def test_connection_errors() -> None:
    with tenax.Client("http://127.0.0.1:9", timeout=2) as nobody:
        with pytest.raises(tenax.TenaxConnectionError):
            nobody.stats()
        assert not nobody.ping()


def test_the_server_accepts_a_token(server_url: str) -> None:
    with tenax.Client(server_url, token="s3cret", headers={"X-Request-Id": "py-client-test"}) as client:
        assert client.stats().totals is not None


def test_url_token_and_headers_from_arguments_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"queues": [], "totals": {}})

    monkeypatch.setenv("TENAX_URL", "http://tenax.internal:7890/")
    monkeypatch.setenv("TENAX_TOKEN", "from-env")
    with tenax.Client(transport=httpx.MockTransport(answer)) as client:
        client.stats()
    with tenax.Client("http://other:1", token="explicit", transport=httpx.MockTransport(answer)) as client:
        client.stats()
    assert str(seen[0].url) == "http://tenax.internal:7890/api/stats"
    assert seen[0].headers["authorization"] == "Bearer from-env"
    assert seen[1].headers["authorization"] == "Bearer explicit"
    assert seen[1].headers["user-agent"].startswith("tenax-python/")


def test_the_lease_token_is_always_sent() -> None:
    bodies: list[tuple[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        bodies.append((request.url.path, body))
        if request.url.path.endswith("/heartbeat"):
            return httpx.Response(200, json={"id": 7, "lease_expires_at": "2026-01-01T00:00:00.000Z"})
        if request.url.path.endswith("/fail"):
            return httpx.Response(200, json={"id": 7, "status": "dead", "failures": 1})
        return httpx.Response(200, json={"id": 7, "status": "completed"})

    job = tenax.TakenJob(
        id=7, queue="q", type="t", payload=None, priority=0, attempt=1, lease_token=42,
        lease_expires_at=datetime.now(timezone.utc), created_at=datetime.now(timezone.utc),
    )
    with tenax.Client("http://x", transport=httpx.MockTransport(answer)) as client:
        client.heartbeat(job)
        client.complete(job)
        client.fail(job, "no", retryable=False)
        client.complete(7, 43)
    assert [b["lease_token"] for _, b in bodies] == [42, 42, 42, 43]


def test_an_unreadable_error_body_still_raises_typed_errors() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="<html>bad gateway</html>")

    with tenax.Client("http://x", transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(tenax.ServerError) as error:
            client.stats()
    assert error.value.status == 502 and "bad gateway" in error.value.message


def _self_signed(tmp: Path) -> tuple[Path, Path] | None:
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key


def test_https_with_a_ca_file(tmp_path: Path) -> None:
    """The server speaks plain HTTP (TLS goes in front of it); the client trusts a CA file."""
    pair = _self_signed(tmp_path)
    if pair is None:
        pytest.skip("openssl is not installed")
    cert, key = pair

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = json.dumps({"queues": [], "totals": {"ready": 3}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{server.server_address[1]}"
    try:
        with tenax.Client(url, ca_file=cert) as trusted:
            assert trusted.stats().totals.ready == 3
        with tenax.Client(url, timeout=3) as untrusted:
            with pytest.raises(tenax.TenaxConnectionError):
                untrusted.stats()
    finally:
        server.shutdown()
        server.server_close()


# ---- the asyncio client ---------------------------------------------------------------------


def test_async_client(server_url: str, queue: str) -> None:
    async def main() -> None:
        async with tenax.AsyncClient(server_url) as client:
            assert await client.ping()
            first = await client.enqueue(queue, "a", {"n": 1}, policy=SHORT_POLICY)
            await client.enqueue_many([tenax.NewJob(queue=queue, type="b")])
            [job] = await client.take(queue, wait=1)
            assert job.id == first.id
            await client.heartbeat(job, lease=5)
            failed = await client.fail(job, "boom")
            assert failed.failures == 1
            with pytest.raises(tenax.NotInFlight):
                await client.complete(job)
            [b] = await client.take(queue)
            [result] = await client.complete_many([b])
            assert result.completed
            assert [j.type async for j in client.iter_jobs(queue=queue)] == ["a", "b"]
            assert (await client.stats()).queues[queue].completed == 1
            with pytest.raises(tenax.InvalidRequest) as refused:
                await client.enqueue("bad queue")
            assert refused.value.field == "queue"

    asyncio.run(asyncio.wait_for(main(), 30))


def test_sync_and_async_clients_have_the_same_surface() -> None:
    def public(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(member)
            for name, member in inspect.getmembers(cls, callable)
            if not name.startswith("_") and name not in ("close", "aclose")
        }

    sync, asynchronous = public(tenax.Client), public(tenax.AsyncClient)
    assert sorted(sync) == sorted(asynchronous)
    for name, signature in sync.items():
        other = asynchronous[name]
        assert list(signature.parameters) == list(other.parameters), name
        for param in signature.parameters.values():
            twin = other.parameters[param.name]
            assert (param.kind, param.default) == (twin.kind, twin.default), f"{name}({param.name})"
        is_async = inspect.iscoroutinefunction(getattr(tenax.AsyncClient, name)) or inspect.isasyncgenfunction(
            getattr(tenax.AsyncClient, name)
        )
        # Plain on both sides: they only build (a request to open, a client that names itself).
        assert is_async == (name not in ("stream", "with_worker")), name


# ---- batches ----------------------------------------------------------------------------------


def test_a_batch_is_made_added_to_closed_and_fires_its_callbacks(
    client: tenax.Client, queue: str
) -> None:
    reports = f"{queue}-reports"
    made = client.create_batch(
        jobs=[{"queue": queue, "type": "row", "payload": {"n": 1}}],
        on_complete={"queue": reports, "type": "import.report", "payload": {"to": "ops"}},
        on_success={"queue": reports, "type": "import.publish"},
        description="import",
        open=True,
    )
    assert made.batch.state == "open"
    assert made.batch.counts.total == 1
    assert made.batch.description == "import"
    assert [j.created for j in made.jobs] == [True]
    batch_id = made.batch.id
    assert client.get_job(made.jobs[0].id).batch == batch_id

    added = client.add_to_batch(batch_id, [tenax.NewJob(queue=queue, type="row", payload={"n": 2})])
    assert added.batch.counts.total == 2
    assert client.close_batch(batch_id).state == "closed"
    with pytest.raises(tenax.Conflict) as refused:
        client.add_to_batch(batch_id, [{"queue": queue}])
    assert refused.value.code == "batch_closed"

    for job in client.take(queue, max=2):
        client.complete(job)
    batch = client.get_batch(batch_id)
    assert batch.state == "finished"
    assert (batch.counts.completed, batch.counts.pending) == (2, 0)
    assert batch.on_complete_job is not None and batch.on_success_job is not None
    report = client.get_job(batch.on_complete_job)
    assert report.payload["batch"]["completed"] == 2
    assert report.payload["batch"]["succeeded"] is True
    assert report.payload["payload"] == {"to": "ops"}
    assert batch_id in [b.id for b in client.list_batches(limit=1000)]
    client.delete_batch(batch_id)
    with pytest.raises(tenax.NotFound):
        client.get_batch(batch_id)
    with pytest.raises(tenax.InvalidRequest) as invalid:
        client.create_batch(jobs=[{"queue": queue}])
    assert invalid.value.field == "on_complete"


def test_async_batches(server_url: str, queue: str) -> None:
    async def main() -> None:
        async with tenax.AsyncClient(server_url) as client:
            made = await client.create_batch(on_complete={"queue": queue, "type": "done"}, open=True)
            assert made.jobs == []
            added = await client.add_to_batch(made.batch.id, [{"queue": f"{queue}-w"}], close=True)
            assert added.batch.state == "closed"
            [job] = await client.take(f"{queue}-w")
            await client.complete(job)
            batch = await client.get_batch(made.batch.id)
            assert batch.state == "finished"
            assert batch.counts.completed == 1
            [callback] = await client.take(queue)
            assert callback.payload["batch"]["id"] == made.batch.id
            assert (await client.close_batch(made.batch.id)).state == "finished"
            assert made.batch.id in [b.id for b in await client.list_batches()]
            await client.delete_batch(made.batch.id)

    asyncio.run(asyncio.wait_for(main(), 30))
