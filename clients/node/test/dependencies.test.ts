// Job dependencies against a real `tenax serve` (docs/workflows.md, "Dependencies"): a graph
// enqueued in one batch, waiting jobs handed their parents' results (by a take and in a worker's
// handlers), a dead parent's children, refusals naming the field, and the workflow view.
// Nothing sleeps: each step waits on an event of the server (a take's long poll, a job read
// with `wait`).

import assert from "node:assert/strict";
import { after, before, describe as suite, test } from "node:test";

import {
  type Client,
  InvalidRequest,
  type JobId,
  type NewJob,
  NotFound,
  type TakenJob,
  Worker,
  parentResult,
} from "../src/index.js";
import { type Server, newQueue, startServer } from "./support.js";

let server: Server;
let client: Client;

before(async () => {
  server = await startServer();
  client = server.client();
});

after(async () => {
  await server.stop();
});

/** extract → two transforms → load, listed out of order, named by step and by index. */
function etl(queue: string): NewJob[] {
  return [
    { queue, type: "load", step: "load", after: [{ step: "a" }, { step: "b" }] },
    { queue, type: "transform", payload: "a", step: "a", after: [{ index: 3 }] },
    { queue, type: "transform", payload: "b", step: "b", after: [{ step: "extract" }] },
    { queue, type: "extract", step: "extract" },
  ];
}

async function takeAll(queue: string, max = 10): Promise<TakenJob[]> {
  return client.take(queue, { max, wait: "5s" });
}

suite("dependencies", () => {
  test("a DAG in one batch runs in order, each job handed its parents' results", async () => {
    const queue = newQueue();
    const enqueued = await client.enqueueMany(etl(queue));
    assert.deepEqual(
      enqueued.map((e) => e.status),
      ["waiting", "waiting", "waiting", "ready"],
    );
    const [load, a, b, extract] = enqueued.map((e) => e.id as number) as [number, number, number, number];
    assert.ok(extract < a && a < b && b < load, "the server stores parents first");
    const shown = await client.getJob(load);
    assert.equal(shown.status, "waiting");
    assert.deepEqual(shown.after, [a, b]);
    assert.equal(shown.on_parent_dead, "cancel");
    assert.ok(!("after" in (await client.getJob(extract))));
    const counts = (await client.stats()).queues.find((q) => q.queue === queue);
    assert.equal(counts?.waiting, 3);
    assert.equal((await client.getQueue(queue)).counts.waiting, 3);
    const waiting = await client.listJobs({ queue, status: "waiting" });
    assert.deepEqual(
      waiting.jobs.map((j) => j.id),
      [a, b, load],
    );

    // Only extract can be taken; it waited for nothing.
    const [first, ...none] = await takeAll(queue);
    assert.equal(none.length, 0);
    assert.equal(first?.id, extract);
    assert.equal(first?.parents, undefined);
    await client.complete(first as TakenJob, { result: { rows: 3 } });

    const transforms = await takeAll(queue);
    assert.deepEqual(
      transforms.map((t) => t.id),
      [a, b],
    );
    for (const t of transforms) {
      assert.deepEqual(t.parents, [{ id: extract, type: "extract", status: "completed", result: { rows: 3 } }]);
      assert.deepEqual(parentResult(t, extract), { rows: 3 });
      assert.deepEqual(parentResult(t, BigInt(extract)), { rows: 3 }, "a bigint id names the same parent");
      assert.throws(() => parentResult(t, load), RangeError);
    }

    const running = await client.getWorkflow(load);
    assert.equal(running.id, load);
    assert.equal(running.status, "running");
    assert.equal(running.truncated, false);
    assert.deepEqual(running.counts, { completed: 1, in_flight: 2, waiting: 1 });
    assert.deepEqual(
      running.jobs.map((j) => [j.id, j.status]),
      [
        [extract, "completed"],
        [a, "in_flight"],
        [b, "in_flight"],
        [load, "waiting"],
      ],
    );
    assert.deepEqual(running.edges, [
      [extract, a],
      [extract, b],
      [a, load],
      [b, load],
    ]);
    assert.deepEqual(running.jobs[3]?.after, [a, b]);
    assert.deepEqual(running.jobs[0]?.result, { rows: 3 });

    await client.completeMany([
      { job: transforms[0] as TakenJob, result: "A" },
      { job: transforms[1] as TakenJob, result: "B" },
    ]);
    const [last] = await takeAll(queue);
    assert.equal(last?.id, load);
    assert.deepEqual(last?.parents, [
      { id: a, type: "transform", status: "completed", result: "A" },
      { id: b, type: "transform", status: "completed", result: "B" },
    ]);
    await client.complete(last as TakenJob, { result: "loaded" });
    const done = await client.getWorkflow(extract);
    assert.equal(done.status, "completed");
    assert.deepEqual(done.counts, { completed: 4 });

    // A later job may wait for a stored one: completed already, it is ready at once.
    const report = await client.enqueue(queue, "report", null, { after: [load] });
    assert.equal(report.status, "ready");
    const [taken] = await takeAll(queue);
    assert.equal(parentResult(taken as TakenJob, load), "loaded");
  });

  test("a dead parent cancels its children, unless they asked to run anyway", async () => {
    const queue = newQueue();
    const [fetch, parse, store, cleanup] = (
      await client.enqueueMany([
        { queue, type: "fetch", step: "fetch" },
        { queue, type: "parse", step: "parse", after: [{ step: "fetch" }] },
        { queue, type: "store", after: [{ step: "parse" }] },
        { queue, type: "cleanup", after: [{ index: 0 }], on_parent_dead: "run" },
      ])
    ).map((e) => e.id) as [JobId, JobId, JobId, JobId];
    assert.equal((await client.getJob(cleanup)).on_parent_dead, "run");
    const [taken] = await takeAll(queue);
    assert.equal(taken?.id, fetch);
    assert.equal((await client.fail(taken as TakenJob, "404", { retryable: false })).status, "dead");

    for (const id of [parse, store]) {
      const job = await client.getJob(id);
      // A newer server names this status "cancelled"; either way it ends, saying why.
      assert.ok(["dead", "cancelled"].includes(job.status), JSON.stringify(job));
      assert.match(job.dead_reason ?? "", /did not complete/);
    }
    const [last] = await takeAll(queue);
    assert.equal(last?.id, cleanup);
    assert.deepEqual(last?.parents, [{ id: fetch, type: "fetch", status: "dead" }]);
    assert.equal(parentResult(last as TakenJob, fetch), undefined);
    await client.complete(last as TakenJob);

    const workflow = await client.getWorkflow(store);
    assert.equal(workflow.status, "failed");
    assert.deepEqual(
      workflow.jobs.map((j) => j.id),
      [fetch, parse, store, cleanup],
    );
    assert.match(workflow.jobs[1]?.dead_reason ?? "", /did not complete/);
  });

  test("a cycle, an unknown or repeated parent, and a bad index are refused naming the field", async () => {
    const queue = newQueue();
    const refusal = async (promise: Promise<unknown>): Promise<InvalidRequest> => {
      const error: unknown = await promise.then(
        () => assert.fail("not refused"),
        (e: unknown) => e,
      );
      assert.ok(error instanceof InvalidRequest, String(error));
      return error;
    };
    const cycle = await refusal(
      client.enqueueMany([
        { queue, step: "x", after: [{ step: "y" }] },
        { queue, step: "y", after: [{ step: "x" }] },
      ]),
    );
    assert.equal(cycle.field, "jobs[0].after");
    assert.match(cycle.message, /jobs\[0\] → jobs\[1\] → jobs\[0\]/);

    const { id: stored } = await client.enqueue(queue);
    const missing = BigInt(stored) + 1_000_000n;
    const unknown = await refusal(client.enqueue(queue, "", null, { after: [stored, missing] }));
    assert.equal(unknown.field, "after[1]");
    assert.match(unknown.message, new RegExp(`job ${missing} does not exist`));
    const repeated = await refusal(client.enqueueMany([{ queue }, { queue, after: [stored, stored] }]));
    assert.equal(repeated.field, "jobs[1].after[1]");
    const index = await refusal(client.enqueueMany([{ queue, after: [{ index: 5 }] }]));
    assert.equal(index.field, "jobs[0].after[0]");
    // A refused batch stores nothing.
    assert.deepEqual(
      (await client.listJobs({ queue })).jobs.map((j) => j.id),
      [stored],
    );
    await assert.rejects(client.getWorkflow(missing), NotFound);
  });

  test("worker handlers read their parents' results", async () => {
    const queue = newQueue();
    const ids = (
      await client.enqueueMany([
        { queue, type: "load", after: [{ step: "double" }, { step: "triple" }] },
        // No retries: a failing handler ends the workflow at once instead of at the wait's end.
        { queue, type: "transform", payload: 2, step: "double", after: [{ step: "extract" }], retry_limit: 0 },
        { queue, type: "transform", payload: 3, step: "triple", after: [{ step: "extract" }], retry_limit: 0 },
        { queue, type: "extract", payload: { table: "orders" }, step: "extract" },
      ])
    ).map((e) => e.id);
    const [load, double, triple, extract] = ids as [JobId, JobId, JobId, JobId];
    const worker = new Worker(queue, { client, concurrency: 4, logger: false });
    worker.handle("extract", (job: TakenJob<{ table: string }>) => {
      assert.equal(job.parents, undefined);
      return { table: job.payload.table, rows: [1, 2, 3] };
    });
    // A payload parser makes a new job object: the parents go with it.
    worker.handle(
      "transform",
      (job: TakenJob<number>) => {
        const { rows } = parentResult<{ rows: number[] }>(job, extract) ?? { rows: [] };
        return rows.map((row) => row * job.payload);
      },
      { payload: (raw) => Number(raw) },
    );
    worker.handle("load", (job) => ({
      loaded: (job.parents ?? []).flatMap((p) => p.result as number[]).sort((x, y) => x - y),
      from: (job.parents ?? []).map((p) => p.id),
    }));
    await worker.start();
    try {
      const done = await client.getJob(load, { wait: "30s" });
      assert.equal(done.status, "completed", JSON.stringify(done));
      assert.deepEqual(done.result, { loaded: [2, 3, 4, 6, 6, 9], from: [double, triple] });
    } finally {
      await worker.stop();
    }
    assert.equal(worker.stats.completed, 4);
  });
});
