// The client against a real `tenax serve`: every endpoint family of docs/api.md.

import assert from "node:assert/strict";
import { after, before, describe as suite, test } from "node:test";

import {
  type Client,
  Conflict,
  Duplicate,
  InvalidRequest,
  LeaseLost,
  NotFound,
  type TakenJob,
  TenaxConnectionError,
  Client as TenaxClient,
} from "../src/index.js";
import { SHORT_POLICY, type Server, newQueue, recordingFetch, startServer, waitFor } from "./support.js";

let server: Server;
let client: Client;

before(async () => {
  server = await startServer();
  client = server.client();
});

after(async () => {
  await server.stop();
});

async function takeOne(queue: string, lease = "30s"): Promise<TakenJob> {
  const jobs = await client.take(queue, { lease, wait: "5s" });
  assert.equal(jobs.length, 1, "one job taken");
  return jobs[0] as TakenJob;
}

suite("enqueue", () => {
  test("one job with every option, shown as sent", async () => {
    const queue = newQueue();
    const runAt = new Date(Date.now() + 3_600_000);
    const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const enqueued = await client.enqueue(queue, "welcome", { user: 42, big: 18446744073709551615n }, {
      priority: 7,
      run_at: runAt,
      policy: { type: "phased", min_delay: "5s", max_delay: "260s", num_retries: 10, function: "geometric" },
      retry_limit: 3,
      unique_key: "user-42",
      traceparent,
    });
    assert.equal(enqueued.created, true);
    assert.equal(enqueued.status, "scheduled");
    assert.equal(Date.parse(enqueued.run_at), runAt.getTime());
    const job = await client.getJob(enqueued.id);
    assert.equal(job.id, enqueued.id);
    assert.equal(job.queue, queue);
    assert.equal(job.type, "welcome");
    assert.deepEqual(job.payload, { user: 42, big: 18446744073709551615n });
    assert.equal(job.priority, 7);
    assert.equal(job.unique_key, "user-42");
    assert.equal(job.traceparent, traceparent);
    assert.equal((job.policy as Record<string, unknown>)["type"], "phased");

    // A duplicate key: refused by default (naming the field), or the existing job.
    await assert.rejects(client.enqueue(queue, "welcome", null, { unique_key: "user-42" }), (error: unknown) => {
      assert.ok(error instanceof Duplicate);
      assert.equal(error.status, 409);
      assert.equal(error.code, "duplicate");
      assert.equal(error.field, "unique_key");
      return true;
    });
    const existing = await client.enqueue(queue, "welcome", null, { unique_key: "user-42", on_duplicate: "existing" });
    assert.equal(existing.created, false);
    assert.equal(existing.id, enqueued.id);

    const delayed = await client.enqueue(queue, "later", null, { delay: "1h" });
    assert.equal(delayed.status, "scheduled");
    assert.ok(Date.parse(delayed.run_at) > Date.now() + 3_000_000);
  });

  test("a field that breaks a rule is an InvalidRequest naming it", async () => {
    await assert.rejects(client.enqueue(newQueue(), "t", null, { priority: 1.5 }), (error: unknown) => {
      assert.ok(error instanceof InvalidRequest);
      assert.equal(error.field, "priority");
      return true;
    });
  });

  test("a batch is atomic, answered in order, and a refusal names the job", async () => {
    const queue = newQueue();
    const jobs = await client.enqueueMany([
      { queue, type: "a", payload: 1 },
      { queue, type: "b", payload: 2, priority: 5 },
      { queue, type: "c", payload: 3, delay: "1h" },
    ]);
    assert.deepEqual(
      jobs.map((j) => j.status),
      ["ready", "ready", "scheduled"],
    );
    assert.ok(jobs.every((j) => j.created));
    await assert.rejects(
      client.enqueueMany([
        { queue, type: "ok" },
        { queue, type: "bad", policy: { type: "phased", min_delay: "9s", max_delay: "5s" } },
      ]),
      (error: unknown) => error instanceof InvalidRequest && (error.field ?? "").startsWith("jobs[1].policy"),
    );
    const stats = await client.stats();
    const counts = stats.queues.find((q) => q.queue === queue);
    assert.equal(counts?.ready, 2, "nothing of the refused batch was stored");
    assert.equal(counts?.scheduled, 1);
  });
});

suite("work", () => {
  test("take, heartbeat and complete, with the lease token sent back exactly", async () => {
    const queue = newQueue();
    const { id } = await client.enqueue(queue, "t", { n: 1 });
    const job = await takeOne(queue);
    assert.equal(job.id, id);
    assert.equal(job.attempt, 1);
    assert.ok(Number.isSafeInteger(job.lease_token) || typeof job.lease_token === "bigint");
    const beat = await client.heartbeat(job, { lease: "1m" });
    assert.equal(beat.id, id);
    assert.ok(Date.parse(beat.lease_expires_at) > Date.parse(job.lease_expires_at));
    // A wrong token is refused: only the exact token acts on the job.
    const wrong = typeof job.lease_token === "bigint" ? job.lease_token + 1n : job.lease_token === 1 ? 2 : job.lease_token - 1;
    await assert.rejects(client.complete({ id: job.id, lease_token: wrong }), LeaseLost);
    const done = await client.complete(job);
    assert.deepEqual(done, { id, status: "completed" });
    assert.equal((await client.getJob(id)).status, "completed");
  });

  test("ids beyond 2^53 − 1 go to the server and come back exact", async () => {
    const huge = 18446744073709551615n;
    await assert.rejects(client.getJob(huge), (error: unknown) => {
      assert.ok(error instanceof NotFound);
      assert.match(error.serverMessage, /18446744073709551615/);
      return true;
    });
    const results = await client.completeMany([{ id: huge, lease_token: 9007199254740991 }]);
    assert.equal(results.length, 1);
    assert.equal(results[0]?.id, huge);
    assert.equal(results[0]?.completed, false);
    assert.equal(results[0]?.error?.code, "not_found");
  });

  test("complete many: one request, a result per job", async () => {
    const queue = newQueue();
    await client.enqueueMany([{ queue }, { queue }, { queue }]);
    const jobs = await client.take(queue, { max: 3, wait: "5s" });
    assert.equal(jobs.length, 3);
    const [a, b, c] = jobs as [TakenJob, TakenJob, TakenJob];
    const results = await client.completeMany([a, { id: b.id, lease_token: a.lease_token }, c]);
    assert.deepEqual(
      results.map((r) => [r.id, r.completed, r.error?.code]),
      [
        [a.id, true, undefined],
        [b.id, false, "lease_lost"],
        [c.id, true, undefined],
      ],
    );
  });

  test("complete with a result, many with results; a wait answers once the job has finished", async () => {
    const queue = newQueue();
    const [first, second, third] = (await client.enqueueMany([{ queue }, { queue }, { queue }])).map((j) => j.id);
    const jobs = await client.take(queue, { max: 3, wait: "5s" });
    const byId = new Map(jobs.map((j) => [String(j.id), j]));
    const one = byId.get(String(first)) as TakenJob;
    // A waiter started before the completion is answered by it.
    const waited = client.getJob<unknown, { sent: number }>(first as number, { wait: "20s" });
    await client.complete(one, { result: { sent: 3, ids: [18446744073709551615n] } });
    const job = await waited;
    assert.equal(job.status, "completed");
    assert.deepEqual(job.result, { sent: 3, ids: [18446744073709551615n] });
    const results = await client.completeMany([
      { job: byId.get(String(second)) as TakenJob, result: "ok" },
      byId.get(String(third)) as TakenJob,
    ]);
    assert.deepEqual(
      results.map((r) => r.completed),
      [true, true],
    );
    assert.equal((await client.getJob(second as number)).result, "ok");
    assert.ok(!("result" in (await client.getJob(third as number))), "no result when none was given");
    // A wait that runs out answers the job as it is.
    const [waiting] = (await client.enqueueMany([{ queue, run_at: new Date(Date.now() + 3_600_000) }])).map((j) => j.id);
    const unfinished = await client.getJob(waiting as number, { wait: "1s" });
    assert.equal(unfinished.status, "scheduled");
    const big = "x".repeat(2 * 1024 * 1024);
    const [refusedJob] = await client.take(queue, { wait: "1s" });
    assert.equal(refusedJob, undefined, "nothing else ready");
    const [another] = (await client.enqueueMany([{ queue }])).map((j) => j.id);
    const held = (await takeOne(queue)) as TakenJob;
    assert.equal(held.id, another);
    const refusal = await client.complete(held, { result: big }).then(
      () => null,
      (error: unknown) => error,
    );
    assert.ok(refusal instanceof InvalidRequest, String(refusal));
    assert.equal(refusal.field, "result");
  });

  test("fail with each outcome", async () => {
    const queue = newQueue();
    await client.updateQueue(queue, { policy: { type: "list", delays: ["1h", "1h", "1h"] } }, { create: true });

    // retry: the policy's delay, an attempt used, the error recorded with its detail.
    const r = await client.enqueue(queue, "retry");
    let job = await takeOne(queue);
    const retried = await client.fail(job, "boom", { detail: { code: 7 } });
    assert.equal(retried.id, r.id);
    assert.equal(retried.status, "scheduled");
    assert.equal(retried.failures, 1);
    assert.equal(retried.attempt, 2);
    assert.equal(retried.delay_ms, 3_600_000);
    const shown = await client.getJob(r.id);
    assert.equal(shown.errors[0]?.message, "boom");
    assert.deepEqual(shown.errors[0]?.detail, { code: 7 });

    // retry_in and retry_at: when it runs again, chosen by the worker.
    await client.enqueue(queue, "retry_in");
    job = await takeOne(queue);
    const inResult = await client.fail(job, "later", { retry_in: "10m" });
    assert.equal(inResult.status, "scheduled");
    assert.equal(inResult.delay_ms, 600_000);
    await client.enqueue(queue, "retry_at");
    job = await takeOne(queue);
    const at = new Date(Date.now() + 7_200_000);
    const atResult = await client.fail(job, "at", { retry_at: at });
    assert.equal(atResult.status, "scheduled");
    assert.equal(Math.round(Date.parse(atResult.run_at as string) / 1000), Math.round(at.getTime() / 1000));

    // snooze: no attempt used, nothing recorded.
    const s = await client.enqueue(queue, "snooze");
    job = await takeOne(queue);
    const snoozed = await client.fail(job, "busy", { snooze: "30m" });
    assert.equal(snoozed.status, "scheduled");
    assert.equal(snoozed.failures, 0);
    const snoozedJob = await client.getJob(s.id);
    assert.equal(snoozedJob.attempt, 1);
    assert.equal(snoozedJob.errors.length, 0);

    // retryable: false: dead at once.
    const d = await client.enqueue(queue, "dead");
    job = await takeOne(queue);
    const dead = await client.fail(job, "no such user", { retryable: false });
    assert.equal(dead.status, "dead");
    assert.ok(dead.dead_reason);
    assert.equal((await client.getJob(d.id)).status, "dead");
  });

  test("a long poll waits for a job, and its timeout allows for the wait", async () => {
    const queue = newQueue();
    const poller = `poller-${queue}`;
    const taking = client.withWorker(poller).take(queue, { wait: "10s" });
    // The take is waiting at the server (which lists its worker); the enqueue wakes it.
    await waitFor(
      async () => (await client.cluster()).servers.some((s) => s.workers.some((w) => w.name === poller)),
      "the take to reach the server",
    );
    const { id } = await client.enqueue(queue, "t");
    const jobs = await taking;
    assert.equal(jobs[0]?.id, id);
    const short = server.client({ timeout: 200 });
    assert.deepEqual(await short.take(newQueue(), { wait: "500ms" }), []);
  });

  test("the streaming take pushes jobs, and closing it gives back those it holds", async () => {
    const queue = newQueue();
    const ids = (await client.enqueueMany([{ queue, payload: 1 }, { queue, payload: 2 }, { queue, payload: 3 }])).map((j) => j.id);
    const stream = client.stream(queue, { max: 2, lease: "30s" });
    const received: TakenJob[] = [];
    for await (const job of stream) {
      received.push(job);
      if (received.length === 2) {
        break; // the loop's end closes the stream
      }
    }
    assert.deepEqual(
      received.map((j) => j.id),
      ids.slice(0, 2),
    );
    assert.ok(stream.closed);
    // Given back without using an attempt.
    await waitFor(async () => (await client.getJob(ids[0] as number)).status === "ready", "the job to be ready again");
    const again = await client.getJob(ids[0] as number);
    assert.equal(again.failures, 0);

    // Acknowledging makes room for the next job.
    const second = client.stream(queue, { max: 1 });
    const events = second.events();
    let first: TakenJob | null = null;
    while (first === null) {
      first = (await events.next()).value as TakenJob | null;
    }
    await client.complete(first);
    let next: TakenJob | null = null;
    while (next === null) {
      next = (await events.next()).value as TakenJob | null;
    }
    assert.notEqual(next.id, first.id);
    second.close();
    assert.equal((await events.next()).done, true);
  });

  test("a stream the server refuses throws its error", async () => {
    await assert.rejects(client.stream([], { max: 1 }).open(), InvalidRequest);
  });

  test("the worker name goes with every request", async () => {
    const queue = newQueue();
    const named = client.withWorker("billing-7");
    await named.take(queue, { wait: "10ms" });
    const cluster = await client.cluster();
    const worker = cluster.servers.flatMap((s) => s.workers).find((w) => w.name === "billing-7");
    assert.ok(worker, "the server lists the worker by its name");
    assert.deepEqual(worker.queues, [queue]);
    assert.throws(() => client.withWorker("\u0007"), RangeError);
  });
});

suite("jobs, dead jobs and queues", () => {
  test("list and iterate jobs, delete one", async () => {
    const queue = newQueue();
    const ids = (await client.enqueueMany(Array.from({ length: 5 }, () => ({ queue })))).map((j) => j.id);
    const page = await client.listJobs({ queue, limit: 2 });
    assert.deepEqual(
      page.jobs.map((j) => j.id),
      ids.slice(0, 2),
    );
    assert.equal(page.next_after, ids[1]);
    const all: unknown[] = [];
    for await (const job of client.iterJobs({ queue, status: "ready", pageSize: 2 })) {
      all.push(job.id);
    }
    assert.deepEqual(all, ids);
    await client.deleteJob(ids[0] as number);
    await assert.rejects(client.getJob(ids[0] as number), NotFound);
  });

  test("dead jobs: list, replay (with the reasons of those skipped), delete", async () => {
    const queue = newQueue();
    const [a, b] = await client.enqueueMany([{ queue, type: "x" }, { queue, type: "x" }]);
    for (let i = 0; i < 2; i++) {
      const job = await takeOne(queue);
      await client.fail(job, "bad", { retryable: false });
    }
    const dead = await client.listDead({ queue });
    assert.deepEqual(
      dead.jobs.map((j) => j.id),
      [a?.id, b?.id],
    );
    const deadIds: unknown[] = [];
    for await (const job of client.iterDead({ queue, pageSize: 1 })) {
      deadIds.push(job.id);
    }
    assert.deepEqual(deadIds, [a?.id, b?.id]);
    const replay = await client.replayDead({ ids: [a?.id as number, 999_999_999] }, { reset_attempts: true, policy: SHORT_POLICY });
    assert.equal(replay.replayed, 1);
    assert.deepEqual(replay.ids, [a?.id]);
    assert.equal(replay.skipped[0]?.id, 999_999_999);
    assert.match(replay.skipped[0]?.reason ?? "", /no such job/);
    const replayed = await client.getJob(a?.id as number);
    assert.equal(replayed.status, "ready");
    assert.equal(replayed.errors.length, 1, "the error history stays");
    const deleted = await client.deleteDead({ queue });
    assert.equal(deleted.deleted, 1);
    assert.deepEqual(deleted.ids, [b?.id]);
    await assert.rejects(client.replayDead({}), InvalidRequest);
  });

  test("queues: settings, limits, pause and resume; a misspelt queue is never made", async () => {
    const queue = newQueue();
    await assert.rejects(client.updateQueue(queue, { paused: true }), NotFound);
    const set = await client.updateQueue(
      queue,
      { policy: SHORT_POLICY, concurrency: 5, rate: { limit: 100, period: "1m" }, message_ttl: "1h" },
      { create: true },
    );
    assert.equal(set.name, queue);
    assert.equal(set.concurrency, 5);
    assert.equal(set.rate?.limit, 100);
    assert.equal(set.rate?.period_ms, 60_000);
    assert.equal(set.message_ttl_ms, 3_600_000);
    assert.equal((set.policy as Record<string, unknown>)["type"], "list");
    assert.equal((await client.pauseQueue(queue)).paused, true);
    await client.enqueue(queue, "t");
    assert.deepEqual(await client.take(queue), [], "a paused queue hands nothing out");
    assert.equal((await client.resumeQueue(queue)).paused, false);
    assert.equal((await client.take(queue)).length, 1);
    const removed = await client.updateQueue(queue, { policy: null, concurrency: null, rate: null, message_ttl: null });
    assert.equal(removed.policy, null);
    assert.equal(removed.concurrency, undefined);
    assert.ok((await client.listQueues()).some((q) => q.name === queue));
    assert.equal((await client.getQueue(queue)).counts.in_flight, 1);
  });

  test("policy preview", async () => {
    const preview = await client.previewPolicy({ type: "list", delays: ["1s", "2s", "3s"] }, { rows: 2 });
    assert.deepEqual(
      preview.retries.map((r) => r.delay_ms),
      [1000, 2000],
    );
    assert.equal(preview.retry_count, 3);
    assert.equal(preview.window_ms, 6000);
    assert.equal(preview.truncated, true);
    await assert.rejects(client.previewPolicy({ type: "nonsense" }), InvalidRequest);
  });
});

suite("schedules", () => {
  test("make, read, run now, pause, resume and delete a schedule", async () => {
    const queue = newQueue();
    const name = `s-${queue}`;
    const made = await client.putSchedule(name, {
      cron: "30 2 * * *",
      timezone: "Europe/Berlin",
      job: { queue, type: "nightly", payload: { full: true } },
      overlap: "skip",
    });
    assert.equal(made.name, name);
    assert.equal(made.overlap, "skip");
    assert.ok(made.next_tick);
    assert.equal((await client.getSchedule(name)).cron, "30 2 * * *");
    assert.ok((await client.listSchedules()).some((s) => s.name === name));
    const ticks = await client.scheduleTicks(name, { count: 3 });
    assert.equal(ticks.length, 3);
    assert.ok(ticks.every((t) => t.local.includes("02:30")));
    const run = await client.runSchedule(name);
    assert.ok(run.last_job !== null && run.last_job !== undefined);
    const job = await client.getJob(run.last_job);
    assert.equal(job.type, "nightly");
    assert.deepEqual(job.payload, { full: true });
    assert.equal((await client.pauseSchedule(name)).paused, true);
    assert.equal((await client.resumeSchedule(name)).paused, false);
    const preview = await client.previewSchedule({ cron: "0 * * * *", count: 2, after: "2027-01-01T00:00:00Z" });
    assert.deepEqual(
      preview.map((t) => t.at),
      ["2027-01-01T01:00:00.000Z", "2027-01-01T02:00:00.000Z"],
    );
    await client.deleteSchedule(name);
    await assert.rejects(client.getSchedule(name), NotFound);
  });
});

suite("transport", () => {
  test("no server: a connection error; ping says false", async () => {
    const nowhere = new TenaxClient({ url: "http://127.0.0.1:9", timeout: 2_000 });
    assert.equal(await nowhere.ping(), false);
    await assert.rejects(nowhere.stats(), TenaxConnectionError);
    assert.equal(await client.ping(), true);
  });

  test("requests are JSON with the package's User-Agent", async () => {
    const recorder = recordingFetch();
    const recorded = server.client({ fetch: recorder.fetch });
    await recorded.enqueue(newQueue(), "t", { n: 18446744073709551615n });
    assert.equal(recorder.requests[0]?.path, "/api/jobs");
    assert.equal(recorder.requests[0]?.headers["content-type"], "application/json");
    assert.match(recorder.requests[0]?.headers["user-agent"] ?? "", /^tenax-node\/\d/);
    assert.match(recorder.requests[0]?.body ?? "", /"n":18446744073709551615\}/);
  });
});

suite("batches", () => {
  test("a batch is made, added to, closed, read, and fires its callbacks with the counts", async () => {
    const queue = newQueue();
    const reports = `${queue}-reports`;
    const made = await client.createBatch({
      description: "import",
      on_complete: { queue: reports, type: "import.report", payload: { to: "ops" } },
      on_success: { queue: reports, type: "import.publish" },
      jobs: [{ queue, type: "row", payload: { n: 1 } }],
      open: true,
    });
    assert.equal(made.batch.state, "open");
    assert.equal(made.batch.counts.total, 1);
    assert.equal(made.jobs.length, 1);
    const id = made.batch.id;
    assert.equal((await client.getJob(made.jobs[0]!.id)).batch, id);

    const added = await client.addToBatch(id, [{ queue, type: "row", payload: { n: 2 } }]);
    assert.equal(added.batch.counts.total, 2);
    assert.equal((await client.closeBatch(id)).state, "closed");
    await assert.rejects(client.addToBatch(id, [{ queue }]), (error: unknown) => {
      assert.ok(error instanceof Conflict);
      assert.equal(error.code, "batch_closed");
      return true;
    });

    for (const job of await client.take(queue, { max: 2 })) {
      await client.complete(job);
    }
    const batch = await client.getBatch(id);
    assert.equal(batch.state, "finished");
    assert.deepEqual([batch.counts.completed, batch.counts.pending], [2, 0]);
    assert.ok(batch.on_success_job !== undefined && batch.on_success_job !== null);
    const report = await client.getJob<{ batch: { completed: number; succeeded: boolean }; payload: unknown }>(
      batch.on_complete_job as number,
    );
    assert.equal(report.payload.batch.completed, 2);
    assert.equal(report.payload.batch.succeeded, true);
    assert.deepEqual(report.payload.payload, { to: "ops" });
    assert.ok((await client.listBatches({ limit: 1000 })).some((b) => b.id === id));
    await client.deleteBatch(id);
    await assert.rejects(client.getBatch(id), NotFound);
    await assert.rejects(client.createBatch({ jobs: [{ queue }] }), (error: unknown) => {
      assert.ok(error instanceof InvalidRequest);
      assert.equal(error.field, "on_complete");
      return true;
    });
  });
});
