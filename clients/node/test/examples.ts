// The README's examples, compiled (not run) by `npm test`: they must keep type-checking against
// the package as it is. Express's own types are not installed; its example is checked in
// webhooks.test.ts against the shapes Express's types extend.

import http from "node:http";

import {
  Client,
  Duplicate,
  NotRetryable,
  RetryIn,
  Snooze,
  type TakenJob,
  WebhookVerificationError,
  Worker,
  parentResult,
  readRawBody,
  verifyWebhookRequest,
} from "../src/index.js";

declare function handle(message: unknown): void;

export async function enqueueExample(): Promise<void> {
  const client = new Client(); // $TENAX_URL (default http://127.0.0.1:7890), $TENAX_TOKEN

  const { id } = await client.enqueue("emails", "email.send", { to: "ada@example.com" }, {
    delay: "5s",
    policy: { type: "phased", min_delay: "5s", max_delay: "260s", num_retries: 10, function: "geometric" },
    unique_key: "welcome-ada",
  });
  void id;

  try {
    await client.enqueue("emails", "email.send", {}, { unique_key: "welcome-ada" });
  } catch (error) {
    if (error instanceof Duplicate) console.log(error.code, error.field, error.serverMessage);
  }

  await client.enqueueMany([{ queue: "emails", type: "a" }, { queue: "emails", type: "b", priority: 5 }]);
}

export async function workerExample(): Promise<void> {
  const worker = new Worker("emails", { concurrency: 8 });

  worker.handle("email.send", async (job: TakenJob<{ to: string }>, { signal }) => {
    if (job.payload.to.endsWith(".invalid")) throw new NotRetryable("no such domain");
    const answer = await fetch("https://smtp.example/send", {
      method: "POST",
      body: JSON.stringify({ to: job.payload.to, idempotencyKey: String(job.id) }),
      signal, // aborted if the lease is lost, or at the shutdown deadline
    });
    if (answer.status === 429) throw new Snooze("1m");
    if (!answer.ok) throw new RetryIn("5m", `SMTP answered ${answer.status}`);
  });

  await worker.run(); // until SIGTERM or SIGINT (or worker.stop())
}

export async function dependenciesExample(): Promise<void> {
  const client = new Client();
  const [extract, , , load] = await client.enqueueMany([
    { queue: "etl", type: "extract", step: "extract", payload: { day: "2026-11-27" } },
    { queue: "etl", type: "transform", payload: "clean", after: [{ step: "extract" }] },
    { queue: "etl", type: "transform", payload: "enrich", after: [{ index: 0 }] },
    { queue: "etl", type: "load", after: [{ index: 1 }, { index: 2 }], on_parent_dead: "cancel" }, // or "run"
  ]);
  await client.enqueue("etl", "report", null, { after: [load!.id] }); // waits for a stored job

  const worker = new Worker("etl");
  worker.handle("transform", (job: TakenJob<string>) => {
    const rows = parentResult<number[]>(job, extract!.id) ?? []; // throws if not a parent
    return rows.map((row) => `${job.payload}:${row}`);
  });
  worker.handle("load", (job) => (job.parents ?? []).flatMap((p) => p.result as string[]).length);

  const flow = await client.getWorkflow(load!.id); // status "running" | "completed" | "failed"
  console.log(flow.counts, flow.jobs.map((j) => [j.id, j.status]), flow.edges); // edges: [parent, child]
}

export function nodeHttpExample(): http.Server {
  return http
    .createServer(async (req, res) => {
      const body = await readRawBody(req);
      try {
        const { id, payload } = verifyWebhookRequest(req, body, process.env["TENAX_WEBHOOK_SECRET"]!);
        void id;
        handle(payload.message);
        res.writeHead(204).end();
      } catch (error) {
        if (!(error instanceof WebhookVerificationError)) throw error;
        res.writeHead(401).end("bad signature");
      }
    })
    .listen(8080);
}
