// The worker runtime against a real `tenax serve`.

import assert from "node:assert/strict";
import { after, before, describe as suite, test } from "node:test";

import {
  type Client,
  type FailResult,
  type JobId,
  JobCancelled,
  NotRetryable,
  RetryAt,
  RetryIn,
  Snooze,
  type TakenJob,
  Worker,
  type WorkerOptions,
} from "../src/index.js";
import { type Server, memoryLogger, newQueue, nextEvent, recordingFetch, signal, startServer, waitFor } from "./support.js";

let server: Server;
let client: Client;

before(async () => {
  server = await startServer();
  client = server.client();
});

after(async () => {
  await server.stop();
});

function workerOf(queue: string, options: WorkerOptions = {}): Worker {
  return new Worker(queue, { client, logger: false, ...options });
}

/** Resolves once `count` events `name` have come (their first arguments, in order). */
function collect<T>(emitter: Worker, name: string, count: number): Promise<T[]> {
  const seen: T[] = [];
  return new Promise((resolve) => {
    const listener = (value: T): void => {
      seen.push(value);
      if (seen.length === count) {
        emitter.off(name, listener);
        resolve(seen);
      }
    };
    emitter.on(name, listener);
  });
}

suite("worker", () => {
  test("handlers per type; completions of jobs that end together go in one POST /api/jobs/complete", async () => {
    const queue = newQueue();
    const recorder = recordingFetch();
    const worker = new Worker(queue, {
      client: server.client({ fetch: recorder.fetch }),
      concurrency: 3,
      logger: false,
    });
    const ran: Array<[string, unknown]> = [];
    const allStarted = signal();
    let started = 0;
    const handler = async (job: TakenJob<{ n: number }>): Promise<void> => {
      ran.push([job.type, job.payload.n]);
      if (++started === 3) {
        allStarted.resolve();
      }
      await allStarted.promise; // the three end together
    };
    worker.handle("a", handler).handle("b", handler);
    const completed = collect<TakenJob>(worker, "completed", 3);
    const ids = (
      await client.enqueueMany([
        { queue, type: "a", payload: { n: 1 } },
        { queue, type: "b", payload: { n: 2 } },
        { queue, type: "a", payload: { n: 3 } },
      ])
    ).map((j) => j.id);
    await worker.start();
    const done = await completed;
    await worker.stop();
    assert.deepEqual(done.map((j) => j.id).sort(), [...ids].sort());
    assert.deepEqual(
      ran.sort((x, y) => Number(x[1]) - Number(y[1])),
      [
        ["a", 1],
        ["b", 2],
        ["a", 3],
      ],
    );
    for (const id of ids) {
      assert.equal((await client.getJob(id)).status, "completed");
    }
    const batches = recorder.requests.filter((r) => r.method === "POST" && r.path === "/api/jobs/complete");
    assert.equal(batches.length, 1, "one batch for the three");
    const sent = (JSON.parse(batches[0]?.body ?? "{}") as { jobs: Array<{ id: number }> }).jobs.map((j) => j.id);
    assert.deepEqual([...sent].sort(), [...ids].sort());
    assert.ok(
      !recorder.requests.some((r) => /^\/api\/jobs\/\d+\/complete$/.test(r.path)),
      "no completion one by one",
    );
    assert.equal(worker.stats.completed, 3);
    assert.equal(worker.stats.ackRequests, 1);
  });

  test("what a handler returns is its job's result; one the server refuses is left out", async () => {
    const queue = newQueue();
    const worker = workerOf(queue, { concurrency: 2 });
    worker.handle("sum", (job: TakenJob<number[]>) => job.payload.reduce((a, b) => a + b, 0));
    worker.handle("nothing", () => undefined);
    worker.handle("huge", () => "x".repeat(2 * 1024 * 1024));
    const completed = collect<TakenJob>(worker, "completed", 3);
    const [sum, nothing, huge] = (
      await client.enqueueMany([
        { queue, type: "sum", payload: [1, 2, 3] },
        { queue, type: "nothing" },
        { queue, type: "huge" },
      ])
    ).map((j) => j.id);
    await worker.start();
    await completed;
    await worker.stop();
    assert.equal((await client.getJob(sum as number)).result, 6);
    for (const id of [nothing, huge]) {
      const job = await client.getJob(id as number);
      assert.equal(job.status, "completed");
      assert.ok(!("result" in job), `job ${String(id)} has no result`);
    }
  });

  test("never more handlers at once than its concurrency, with jobs prefetched", async () => {
    const queue = newQueue();
    const worker = workerOf(queue, { concurrency: 2, prefetch: 4 });
    let current = 0;
    let most = 0;
    const allReceived = collect(worker, "received", 6);
    worker.handle("t", async () => {
      current++;
      most = Math.max(most, current);
      // Held until every job is here: a worker that ignored its cap would start them all.
      await allReceived;
      current--;
    });
    const completed = collect(worker, "completed", 6);
    await client.enqueueMany(Array.from({ length: 6 }, () => ({ queue, type: "t" })));
    await worker.start();
    await completed;
    await worker.stop();
    assert.equal(most, 2);
    assert.equal(worker.stats.received, 6);
  });

  test("heartbeats keep a job past its lease", async () => {
    const queue = newQueue();
    const worker = workerOf(queue, { lease: 1000 }); // a heartbeat every 500 ms
    const beats: string[] = [];
    worker.handle("long", async (job) => {
      // Runs until three heartbeats extended its lease: past the 1 s lease taken with it.
      await new Promise<void>((resolve) => {
        const listener = (beaten: TakenJob, answer: { lease_expires_at: string }): void => {
          if (beaten.id === job.id) {
            beats.push(answer.lease_expires_at);
            if (beats.length === 3) {
              worker.off("heartbeat", listener);
              resolve();
            }
          }
        };
        worker.on("heartbeat", listener);
      });
    });
    const { id } = await client.enqueue(queue, "long");
    const completed = nextEvent<[TakenJob]>(worker, "completed", (job) => job.id === id);
    const taken = nextEvent<[TakenJob]>(worker, "start");
    await worker.start();
    const [job] = await taken;
    await completed;
    await worker.stop();
    assert.ok(Date.parse(beats[2] as string) - Date.parse(job.lease_expires_at) >= 1000, "the lease was extended past its first end");
    const shown = await client.getJob(id);
    assert.equal(shown.status, "completed");
    assert.equal(shown.failures, 0, "the lease never expired");
    assert.equal(worker.stats.lost, 0);
  });

  test("what a handler throws chooses the outcome", async () => {
    const queue = newQueue();
    await client.updateQueue(queue, { policy: { type: "list", delays: ["1h", "1h"] } }, { create: true });
    const logger = memoryLogger();
    const hooked: unknown[] = [];
    const retryAt = new Date(Date.now() + 7_200_000);
    const worker = new Worker(queue, { client, logger, onError: (_job, error) => hooked.push(error) });
    worker.handle("plain", () => {
      throw new TypeError("bad input");
    });
    worker.handle("never", async () => {
      throw new NotRetryable("no such user");
    });
    worker.handle("later", () => {
      throw new RetryIn("10m", "", { cause: new Error("smtp down") });
    });
    worker.handle("at", () => {
      throw new RetryAt(retryAt);
    });
    worker.handle("busy", () => {
      throw new Snooze("30m");
    });
    const types = ["plain", "never", "later", "at", "busy", "mystery"];
    const enqueued = await client.enqueueMany(types.map((type) => ({ queue, type })));
    const byType = new Map<string, JobId>(types.map((type, i) => [type, enqueued[i]?.id as JobId]));
    const failed = new Map<string, FailResult>();
    const allFailed = new Promise<void>((resolve) => {
      worker.on("failed", (job: TakenJob, result: FailResult) => {
        failed.set(job.type, result);
        if (failed.size === types.length) {
          resolve();
        }
      });
    });
    await worker.start();
    await allFailed;
    await worker.stop();

    const plain = await client.getJob(byType.get("plain") as JobId);
    assert.equal(plain.status, "scheduled");
    assert.equal(plain.failures, 1);
    assert.equal(plain.errors[0]?.message, "TypeError: bad input");
    assert.equal((plain.errors[0]?.detail as { type: string }).type, "TypeError");
    assert.equal(failed.get("plain")?.delay_ms, 3_600_000);

    const never = await client.getJob(byType.get("never") as JobId);
    assert.equal(never.status, "dead");
    assert.equal(never.errors[0]?.message, "no such user");

    assert.equal(failed.get("later")?.status, "scheduled");
    assert.equal(failed.get("later")?.delay_ms, 600_000);
    assert.equal((await client.getJob(byType.get("later") as JobId)).errors[0]?.message, "Error: smtp down");

    const at = failed.get("at");
    assert.equal(Math.round(Date.parse(at?.run_at as string) / 1000), Math.round(retryAt.getTime() / 1000));

    const busy = await client.getJob(byType.get("busy") as JobId);
    assert.equal(busy.status, "scheduled");
    assert.equal(busy.failures, 0, "a snooze uses no attempt");
    assert.equal(busy.errors.length, 0);

    const mystery = await client.getJob(byType.get("mystery") as JobId);
    assert.equal(mystery.status, "dead", "a type without a handler is dead at once");
    assert.match(mystery.errors[0]?.message ?? "", /no handler for job type "mystery" in this worker \(it handles: "at", "busy", "later", "never", "plain"\)/);

    assert.equal(hooked.length, 5, "onError saw every handler's error, not the unknown type");
    assert.ok(logger.lines.some((l) => /^ERROR job \d+ \(mystery\) failed and is dead: no handler/.test(l)));
    assert.ok(logger.lines.some((l) => /^WARN job \d+ \(never\) failed in .* and is dead: no such user/.test(l)));
    assert.ok(logger.lines.some((l) => /^INFO job \d+ \(busy\) snoozed: runs again in 30\.0 min|^INFO job \d+ \(busy\) snoozed: runs again in /.test(l)));
    assert.ok(logger.lines.some((l) => /^INFO job \d+ \(plain\) failed in .*: TypeError: bad input; attempt 2 in 3600\.0 s/.test(l)));
    assert.equal(worker.stats.failed, 6);
  });

  test("unknownTypes: retry leaves a job of another type to its policy", async () => {
    const queue = newQueue();
    await client.updateQueue(queue, { policy: { type: "list", delays: ["1h"] } }, { create: true });
    const worker = workerOf(queue, { unknownTypes: "retry" });
    worker.handle("known", () => undefined);
    const { id } = await client.enqueue(queue, "other");
    const failed = nextEvent<[TakenJob, FailResult]>(worker, "failed");
    await worker.start();
    const [, result] = await failed;
    await worker.stop();
    assert.equal(result.id, id);
    assert.equal(result.status, "scheduled");
  });

  test("a payload parser that refuses makes the job dead", async () => {
    const queue = newQueue();
    const worker = workerOf(queue);
    worker.handle(
      "typed",
      (job: TakenJob<{ to: string }>) => {
        assert.equal(typeof job.payload.to, "string");
      },
      {
        payload: (raw) => {
          const to = (raw as { to?: unknown } | null)?.to;
          if (typeof to !== "string") {
            throw new TypeError("to must be a string");
          }
          return { to };
        },
      },
    );
    const good = await client.enqueue(queue, "typed", { to: "ada@example.com" });
    const bad = await client.enqueue(queue, "typed", { to: 7 });
    const completed = nextEvent<[TakenJob]>(worker, "completed", (job) => job.id === good.id);
    const failed = nextEvent<[TakenJob, FailResult]>(worker, "failed", (job) => job.id === bad.id);
    await worker.start();
    await completed;
    const [, result] = await failed;
    await worker.stop();
    assert.equal(result.status, "dead");
    assert.match((await client.getJob(bad.id)).errors[0]?.message ?? "", /does not fit: to must be a string/);
  });

  test("stop() lets the running handler finish, and gives back the prefetched jobs it never started", async () => {
    const queue = newQueue();
    const logger = memoryLogger();
    const worker = new Worker(queue, { client, concurrency: 1, prefetch: 2, logger });
    const release = signal();
    worker.handle("t", async () => {
      await release.promise;
    });
    const ids = (await client.enqueueMany([{ queue, type: "t" }, { queue, type: "t" }, { queue, type: "t" }])).map((j) => j.id);
    const received = collect<TakenJob>(worker, "received", 3);
    const started = nextEvent<[TakenJob]>(worker, "start");
    await worker.start();
    const [first] = await started;
    await received;
    const stopping = nextEvent(worker, "stopping");
    const stopped = worker.stop();
    await stopping;
    assert.equal(worker.running, 1, "the handler is still running after the stop was asked for");
    release.resolve();
    await stopped;

    assert.equal(first.id, ids[0]);
    assert.equal((await client.getJob(first.id)).status, "completed", "the running job completed, its completion flushed");
    for (const id of ids.slice(1)) {
      // The server gives them back once it sees the stream's connection closed.
      const job = await waitFor(async () => {
        const shown = await client.getJob(id);
        return shown.status === "in_flight" ? null : shown;
      }, `job ${id} to leave flight`);
      assert.equal(job.status, "ready", `job ${id} is ready again`);
      assert.equal(job.failures, 0, "without using an attempt");
    }
    const stats = worker.stats;
    assert.equal(stats.completed, 1);
    assert.equal(stats.returned, 2);
    assert.ok(logger.lines.includes("INFO worker stopped: 1 completed, 0 failed, 2 returned, 0 abandoned, 0 lost"), logger.lines.join("\n"));
  });

  test("a handler still running at the shutdown deadline is abandoned: its signal aborts, its job goes back", async () => {
    const queue = newQueue();
    const worker = workerOf(queue, { shutdownTimeout: 200 });
    const aborted = signal<unknown>();
    worker.handle("stuck", async (_job, { signal: abort }) => {
      await new Promise<void>((resolve) => abort.addEventListener("abort", () => resolve()));
      aborted.resolve(abort.reason);
    });
    const { id } = await client.enqueue(queue, "stuck");
    const started = nextEvent(worker, "start");
    await worker.start();
    await started;
    await worker.stop();
    assert.match(String(await aborted.promise), /shutting down/);
    const job = await waitFor(async () => {
      const shown = await client.getJob(id);
      return shown.status === "in_flight" ? null : shown;
    }, "the job to leave flight");
    assert.equal(job.status, "ready");
    assert.equal(job.failures, 0);
    assert.equal(worker.stats.abandoned, 1);
  });

  test("a job whose heartbeat finds it gone is lost: its signal aborts and nothing is reported", async () => {
    const queue = newQueue();
    const recorder = recordingFetch();
    const worker = new Worker(queue, { client: server.client({ fetch: recorder.fetch }), lease: 1000, logger: false });
    const aborted = signal<unknown>();
    worker.handle("t", async (_job, { signal: abort }) => {
      await new Promise<void>((resolve) => abort.addEventListener("abort", () => resolve()));
      aborted.resolve(abort.reason);
      throw new Error("gave up"); // not reported: the job is no longer this worker's
    });
    const { id } = await client.enqueue(queue, "t");
    const started = nextEvent(worker, "start");
    const lost = nextEvent<[TakenJob, unknown]>(worker, "lost");
    await worker.start();
    await started;
    await client.deleteJob(id); // taken away while it runs
    const [job] = await lost;
    assert.equal(job.id, id);
    assert.match(String(await aborted.promise), /not_found/);
    await worker.stop();
    assert.equal(worker.stats.lost, 1);
    assert.equal(worker.stats.failed, 0);
    assert.ok(!recorder.requests.some((r) => r.path.endsWith("/fail") || r.path === "/api/jobs/complete"));
  });

  test("a cancelled job's signal aborts with JobCancelled, and the job ends cancelled", async () => {
    const queue = newQueue();
    const logger = memoryLogger();
    const worker = new Worker(queue, { client, lease: 1000, logger, concurrency: 2 });
    const reasons: unknown[] = [];
    worker.handle<{ throws: boolean }>("t", async (job, { signal: abort }) => {
      // Waits for nothing but its cancellation.
      await new Promise<void>((resolve) => abort.addEventListener("abort", () => resolve()));
      reasons.push(abort.reason);
      if (job.payload.throws) {
        throw new Error("stopped: cancelled");
      }
      return { partial: true }; // returned anyway: still reported as a failure
    });
    const ids: JobId[] = [];
    for (const throws of [true, false]) {
      ids.push((await client.enqueue(queue, "t", { throws })).id);
    }
    const started = collect<TakenJob>(worker, "start", 2);
    await worker.start();
    await started;
    for (const id of ids) {
      const answer = await client.cancel(id);
      assert.equal(answer.outcome, "marked");
      assert.equal(answer.job.status, "in_flight");
    }
    for (const id of ids) {
      const job = await waitFor(async () => {
        const job = await client.getJob(id);
        return job.status === "cancelled" && job;
      }, `job ${id} cancelled`);
      assert.equal(job.errors.length, 1);
    }
    await worker.stop();
    assert.equal(reasons.length, 2);
    for (const reason of reasons) {
      assert.ok(reason instanceof JobCancelled, String(reason));
    }
    assert.equal(worker.stats.failed, 2);
    assert.equal(worker.stats.completed, 0);
    assert.ok(logger.lines.some((line) => /\(t\) cancelled in .*; its handler stopped/.test(line)), logger.lines.join("\n"));
    // A finished job is refused; a ready one is cancelled by selection.
    await assert.rejects(client.cancel(ids[0] as JobId), /is cancelled/);
    const { id: ready } = await client.enqueue(queue, "t", { throws: true });
    const done = await client.cancelJobs({ queue });
    assert.deepEqual(done.cancelled_ids, [ready]);
    assert.equal(done.marked, 0);
  });

  test("a worker refuses bad settings and runs once", async () => {
    assert.throws(() => workerOf(newQueue(), { concurrency: 0 }), RangeError);
    assert.throws(() => workerOf(newQueue(), { lease: 100 }), RangeError);
    assert.throws(() => workerOf(newQueue(), { lease: 1000, heartbeatEvery: 1000 }), RangeError);
    assert.throws(() => new Worker([], { client }), RangeError);
    const worker = workerOf(newQueue());
    assert.throws(() => worker.start(), /register at least one handler/);
    worker.handle("t", () => undefined);
    assert.throws(() => worker.handle("t", () => undefined), /already registered/);
    await worker.start();
    await worker.stop();
    assert.throws(() => worker.start(), /already run/);
  });
});
