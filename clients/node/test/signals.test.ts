// SIGTERM stops a worker process gracefully: the running job completes, the prefetched one goes
// back to the queue, and the default log says so on stderr.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";

import type { Client } from "../src/index.js";
import { type Server, newQueue, startServer, waitFor } from "./support.js";

let server: Server;
let client: Client;

before(async () => {
  server = await startServer();
  client = server.client();
});

after(async () => {
  await server.stop();
});

test("SIGTERM drains the running handler and gives back the prefetched job; the log shows on stderr", async () => {
  const queue = newQueue();
  const [first, second] = await client.enqueueMany([{ queue, type: "t" }, { queue, type: "t" }]);
  const script = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "sigterm-worker.js");
  const child = spawn(process.execPath, [script], {
    env: { ...process.env, TENAX_URL: server.url, QUEUE: queue },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = once(child, "exit");
  const lines: string[] = [];
  const ready = new Promise<void>((resolve, reject) => {
    child.on("exit", () => reject(new Error(`the worker exited early:\n${stderr}`)));
    createInterface({ input: child.stdout }).on("line", (line) => {
      lines.push(line);
      const both = lines.includes(`received ${first?.id}`) && lines.includes(`received ${second?.id}`);
      if (both && lines.includes(`started ${first?.id}`)) {
        resolve();
      }
    });
  });
  await ready;
  child.kill("SIGTERM");
  const [code, signalName] = await exited;
  assert.equal(signalName, null, stderr);
  assert.equal(code, 0, stderr);
  assert.ok(lines.includes("returned from run"), "run() returned");
  assert.ok(!lines.includes(`started ${second?.id}`), "the prefetched job never started");

  assert.equal((await client.getJob(first?.id as number)).status, "completed");
  // The server gives it back once it sees the stream's connection closed.
  const returned = await waitFor(async () => {
    const shown = await client.getJob(second?.id as number);
    return shown.status === "in_flight" ? null : shown;
  }, "the prefetched job to leave flight");
  assert.equal(returned.status, "ready");
  assert.equal(returned.failures, 0);

  assert.match(stderr, /INFO tenax\.worker: worker started: http:\/\/127\.0\.0\.1:\d+, queues "q-[^"]+", concurrency 1 \(prefetch 1\), types "t"/);
  assert.match(stderr, /INFO tenax\.worker: signal SIGTERM: stopping/);
  assert.match(stderr, /INFO tenax\.worker: job \d+ \(t\) completed in /);
  assert.match(stderr, /INFO tenax\.worker: worker stopped: 1 completed, 0 failed, 1 returned, 0 abandoned, 0 lost/);
});
