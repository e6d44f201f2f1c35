// graphile-worker's side of tests/postgres/pg-cost.py: the scenarios of `tenax bench` against
// the same PostgreSQL cluster. graphile-worker 0.17.3 is found by NODE_PATH (pg-cost.py sets it
// to GRAPHILE_DIR/node_modules; `npm install graphile-worker@0.17.3` there first).
//
// usage: node graphile-bench.js DATABASE_URL SCENARIO JOBS
//   migrate    installs graphile-worker's schema (outside the measure)
//   drain      enqueues JOBS (addJobs of 1000, 4 lanes), prints {"filled": true}, then one runner
//              (concurrency 1000, a local queue of 1000, completions batched) runs a no-op task
//              on each until all are done: as take-complete's 4 workers taking 1000 at a time
//   mixed      the same runner while 2 lanes add batches of 100: as mixed
//   bulk-1000  addJobs of 1000 on 4 lanes
//   enqueue-8  one addJob per call on 8 lanes
// Prints one JSON line: {"scenario", "jobs", "seconds", "jobs_per_sec"}.
const { run, makeWorkerUtils } = require("graphile-worker");

const [url, scenario, jobsArg] = process.argv.slice(2);
const total = Number(jobsArg);
const payload = { user: 42, note: "x".repeat(80) }; // about the 100 bytes of tenax bench's jobs
const preset = {
  worker: {
    connectionString: url,
    concurrency: 1000,
    maxPoolSize: 8,
    pollInterval: 100,
    localQueue: { size: 1000 },
    completeJobBatchDelay: 0,
    failJobBatchDelay: 0,
  },
};

async function enqueue(utils, count, perCall, lanes) {
  let next = 0;
  async function lane() {
    while (next < count) {
      const n = Math.min(perCall, count - next);
      next += n;
      if (perCall === 1) {
        await utils.addJob("noop", payload);
      } else {
        await utils.addJobs(Array.from({ length: n }, () => ({ identifier: "noop", payload })));
      }
    }
  }
  await Promise.all(Array.from({ length: lanes }, lane));
}

// Runs the no-op task until `count` jobs succeeded; seconds since `started`.
async function consume(count, started) {
  let done = 0;
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const runner = await run({ preset, noHandleSignals: true, taskList: { noop: async () => {} } });
  runner.events.on("job:success", () => {
    done += 1;
    if (done === count) finish();
  });
  await finished;
  const seconds = (Date.now() - started) / 1000;
  await runner.stop();
  return seconds;
}

(async () => {
  const utils = await makeWorkerUtils({ connectionString: url });
  await utils.migrate();
  let seconds = 0;
  if (scenario === "drain") {
    await enqueue(utils, total, 1000, 4);
    process.stdout.write(JSON.stringify({ filled: true }) + "\n");
    seconds = await consume(total, Date.now());
  } else if (scenario === "mixed") {
    const started = Date.now();
    const consumed = consume(total, started);
    await enqueue(utils, total, 100, 2);
    seconds = await consumed;
  } else if (scenario === "bulk-1000" || scenario === "enqueue-8") {
    const started = Date.now();
    await enqueue(utils, total, scenario === "bulk-1000" ? 1000 : 1, scenario === "bulk-1000" ? 4 : 8);
    seconds = (Date.now() - started) / 1000;
  } else if (scenario !== "migrate") {
    throw new Error(`unknown scenario ${scenario}`);
  }
  await utils.release();
  if (scenario !== "migrate") {
    console.log(JSON.stringify({ scenario, jobs: total, seconds, jobs_per_sec: total / seconds }));
  }
  process.exit(0);
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
