// The dashboard in a real browser: Debian's Chromium driven by playwright-core against a real
// `tenax serve` (target/debug/tenax) on a loopback port, with a real webhook receiver. Every page
// must load with no console error; replaying a dead job, pausing a queue, filtering jobs and
// designing a policy must work by clicking; and all of it again with authentication on, signed
// in with a token. Live pages must update themselves without a reload, stop fetching while
// hidden or switched off, and remember the switch; the schedules and queue pages must act by
// clicking; the dark theme must follow the system's. With TENAX_UI_SCREENSHOTS=<dir>, each page
// is saved there as a PNG (the screenshots in docs/img/ are made this way).
//
// Nothing here waits for a guessed time: each step waits for what it expects to see (a row, a
// URL, the live switch's own count of the rounds it let pass).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, mkdirSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium } from "playwright-core";

const BIN = resolve(process.env.TENAX_BIN ?? "../../target/debug/tenax");
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const SHOTS = process.env.TENAX_UI_SCREENSHOTS;
const ADMIN = "ui-test-admin-token-0123456789abcdefghij";

/** A free loopback port. */
function freePort() {
  return new Promise((done, fail) => {
    const probe = createServer();
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => done(port));
    });
    probe.on("error", fail);
  });
}

/** `tenax serve` on its own port and data directory; resolves once /healthz answers. */
async function startTenax(flags = []) {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "tenax-ui-"));
  const child = spawn(
    BIN,
    ["serve", "--data-dir", dir, "--listen", `127.0.0.1:${port}`, "--allow-private-endpoints", ...flags],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  let log = "";
  child.stderr.on("data", (chunk) => { log += chunk; });
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      if ((await fetch(`${base}/healthz`)).ok) break;
    } catch (_) { /* not up yet */ }
    if (Date.now() > deadline || child.exitCode !== null) {
      throw new Error(`tenax did not start: ${log}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    base,
    log: () => log,
    stop: async () => {
      child.kill("SIGTERM");
      await new Promise((r) => child.once("exit", r));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The API, with the admin token when given. */
function api(base, token) {
  return async (method, path, body, want) => {
    const headers = { "content-type": "application/json" };
    if (token) headers.authorization = `Bearer ${token}`;
    const response = await fetch(`${base}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    if (want !== undefined) assert.equal(response.status, want, `${method} ${path}: ${text}`);
    return text ? JSON.parse(text) : null;
  };
}

/** Jobs, a dead one, a failing and a healthy webhook: something on every page. */
async function seed(call, receiverUrl) {
  const noRetry = { type: "fixed", delay: "1s", retry_limit: 0 };
  const dead = await call("POST", "/api/jobs", {
    queue: "emails", type: "welcome", payload: { to: "ada@example.com" }, policy: noRetry,
  }, 201);
  for (let n = 0; n < 5; n++) {
    await call("POST", "/api/jobs", { queue: "emails", type: "digest", payload: { n } }, 201);
  }
  await call("POST", "/api/jobs", { queue: "reports", type: "daily", payload: { day: 1 }, delay: "1h" }, 201);
  await call("POST", "/api/jobs", {
    queue: "billing", type: "invoice", payload: { invoice: 7 },
    policy: { type: "exponential", initial: "1m", factor: 2, max: "1h", retry_limit: 8, jitter: "full" },
  }, 201);
  // The welcome job dies: its policy allows no retry.
  const taken = await call("POST", "/api/take", { queues: ["emails"], max: 1 }, 200);
  assert.equal(taken.jobs[0].id, dead.id);
  await call("POST", `/api/jobs/${dead.id}/fail`, {
    lease_token: taken.jobs[0].lease_token, error: "SMTP 550: mailbox unavailable",
  }, 200);
  // The billing job fails once and waits for its retry: its timeline has a past and a future.
  const billing = await call("POST", "/api/take", { queues: ["billing"], max: 1 }, 200);
  await call("POST", `/api/jobs/${billing.jobs[0].id}/fail`, {
    lease_token: billing.jobs[0].lease_token, error: "card declined",
  }, 200);
  await call("POST", "/api/queues/orders/subscriptions", { endpoint: receiverUrl }, 201);
  await call("POST", "/api/jobs", { queue: "orders", type: "order.paid", payload: { order: 1 } }, 201);
  // An endpoint that asks for a pause: its subscriptions show it.
  await call("POST", "/api/queues/alerts/subscriptions", { endpoint: busyUrl }, 201);
  await call("POST", "/api/jobs", { queue: "alerts", type: "alert", payload: { level: "high" } }, 201);
  await call("PUT", "/api/queues/emails", { concurrency: 4, rate: { limit: 100, period: "1m" } }, 200);
  await call("PUT", "/api/schedules/nightly-report", {
    cron: "30 2 * * *", timezone: "Europe/Berlin",
    job: { queue: "reports", type: "nightly", payload: { full: true } },
  }, 201);
  return { dead: dead.id, billing: billing.jobs[0].id };
}

/** A page that records console errors and uncaught exceptions. */
async function watchedPage(context) {
  const page = await context.newPage();
  const errors = [];
  page.on("console", (message) => {
    if (message.type() === "error") errors.push(message.text());
  });
  page.on("pageerror", (error) => errors.push(String(error)));
  page.on("dialog", (dialog) => dialog.accept());
  return { page, errors };
}

async function visit(page, url) {
  const response = await page.goto(url);
  assert.equal(response.status(), 200, `GET ${url}`);
  return response;
}

async function shot(page, name) {
  if (!SHOTS) return;
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, `dashboard-${name}.png`), fullPage: true });
}

let browser;
let receiver;
let receiverUrl;
let busy;
let busyUrl;

before(async () => {
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
  receiver = createServer((request, response) => {
    request.resume();
    request.on("end", () => { response.writeHead(200); response.end("thanks"); });
  });
  await new Promise((r) => receiver.listen(0, "127.0.0.1", r));
  receiverUrl = `http://127.0.0.1:${receiver.address().port}/hook`;
  // An endpoint that asks for an hour's pause, on an origin of its own (a pause holds for
  // every subscription of its origin).
  busy = createServer((request, response) => {
    request.resume();
    request.on("end", () => { response.writeHead(429, { "retry-after": "3600" }); response.end("later"); });
  });
  await new Promise((r) => busy.listen(0, "127.0.0.1", r));
  busyUrl = `http://127.0.0.1:${busy.address().port}/busy`;
});

after(async () => {
  await browser?.close();
  await new Promise((r) => receiver?.close(r) ?? r());
  await new Promise((r) => busy?.close(r) ?? r());
});

test("every page loads with no console error, and the actions work by clicking", async () => {
  const tenax = await startTenax();
  try {
    const call = api(tenax.base);
    const { dead, billing } = await seed(call, receiverUrl);
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: tenax.base });
    const { page, errors } = await watchedPage(context);

    // Every page.
    const pages = [
      ["overview", "/ui"],
      ["queues", "/ui/queues"],
      ["jobs", "/ui/jobs"],
      ["job", `/ui/jobs/${billing}`],
      ["dead", "/ui/dead"],
      ["dead-job", `/ui/jobs/${dead}`],
      ["schedules", "/ui/schedules"],
      ["queue", "/ui/queues/emails"],
      ["subscriptions", "/ui/subscriptions"],
      ["subscription", "/ui/subscriptions/1"],
      ["workers", "/ui/workers"],
      ["policy", "/ui/policy"],
    ];
    for (const [name, path] of pages) {
      await visit(page, tenax.base + path);
      assert.ok(await page.locator("main h1").isVisible(), `${path} has a heading`);
      if (name === "job") {
        assert.ok(await page.locator("div.chart svg").isVisible(), "the timeline is drawn");
        assert.match(await page.locator("div.chart").textContent(), /the delays to come/);
      }
      if (name === "workers") {
        // This server, with its version.
        assert.match(await page.locator("table.servers").textContent(), /\(this one\)/);
      }
      if (name === "dead-job") {
        // A dead job's errors come before its timeline and payload.
        const first = await page.evaluate(() => {
          const errors = document.getElementById("errors");
          const timeline = [...document.querySelectorAll("h2")].find((h) => h.textContent === "Attempt timeline");
          return Boolean(errors.compareDocumentPosition(timeline) & Node.DOCUMENT_POSITION_FOLLOWING);
        });
        assert.ok(first, "errors first");
        assert.match(await page.locator("#errors").textContent(), /SMTP 550/);
      }
      if (name === "subscriptions") {
        // The busy endpoint's pause shows up once its first attempt is answered: the page
        // updates itself.
        await page.locator('tr[data-subscription="2"] .endpoint-state.paused').waitFor();
        assert.match(
          await page.locator('tr[data-subscription="2"]').textContent(),
          /paused by Retry-After \(429\), resumes in (59m|1h)/,
        );
        assert.match(await page.locator('tr[data-subscription="1"]').textContent(), /accepting/);
      }
      await shot(page, name);
    }

    // Filtering jobs.
    await visit(page, `${tenax.base}/ui/jobs`);
    await page.fill('form.filters input[name="queue"]', "emails");
    await page.fill('form.filters input[name="type"]', "digest");
    await page.click('form.filters button[type="submit"]');
    await page.waitForURL(/queue=emails/);
    const queues = await page.locator("table.jobs tbody tr td:nth-child(3)").allTextContents();
    const kinds = await page.locator("table.jobs tbody tr td:nth-child(4)").allTextContents();
    assert.equal(queues.length, 5);
    assert.ok(queues.every((q) => q.trim() === "emails") && kinds.every((k) => k.trim() === "digest"));
    assert.match(await page.locator("p.count").textContent(), /5 matching/);
    // Finding text in a payload.
    await page.fill('form.filters input[name="type"]', "");
    await page.fill('form.filters input[name="q"]', "ADA@example");
    await page.click('form.filters button[type="submit"]');
    await page.waitForURL(/q=ADA/);
    assert.deepEqual(
      await page.locator("table.jobs tbody tr").evaluateAll((rows) => rows.map((r) => r.dataset.id)),
      [String(dead)],
    );

    // Replaying a dead job, with another policy.
    await visit(page, `${tenax.base}/ui/dead`);
    await page.check(`tr[data-id="${dead}"] input[type=checkbox]`);
    await page.click("fieldset.actions details summary");
    await page.fill('fieldset.actions textarea[name="policy"]', '{"type": "fixed", "delay": "30s", "retry_limit": 3}');
    await page.click('fieldset.actions button[value="replay"]');
    await page.waitForURL(/note=/);
    assert.match(await page.locator("p.note").textContent(), /1 replayed/);
    const replayed = await call("GET", `/api/jobs/${dead}`, undefined, 200);
    assert.equal(replayed.status, "ready");
    assert.equal(replayed.policy.type, "fixed");

    // Pausing a queue, and resuming it.
    await visit(page, `${tenax.base}/ui/queues`);
    await page.click('tr[data-queue="emails"] button:has-text("Pause")');
    await page.waitForURL(/note=/);
    assert.match(await page.locator('tr[data-queue="emails"]').textContent(), /paused/);
    assert.equal((await call("GET", "/api/queues/emails", undefined, 200)).paused, true);
    await page.click('tr[data-queue="emails"] button:has-text("Resume")');
    await page.waitForURL(/running/);
    assert.equal((await call("GET", "/api/queues/emails", undefined, 200)).paused, false);

    // Designing a policy: choose a shape, change a parameter, compare a second one, copy.
    await visit(page, `${tenax.base}/ui/policy`);
    const slot0 = page.locator('fieldset.slot[data-slot="0"]');
    const drawn = async () => Number((await page.locator("#designer").getAttribute("data-drawn")) ?? 0);
    let before = await drawn();
    await slot0.locator("select.shape").selectOption("exponential");
    await page.waitForFunction((n) => Number(document.querySelector("#designer").dataset.drawn ?? 0) > n, before);
    const summary = page.locator('section.spelled[data-slot="0"] p.summary');
    assert.match(await summary.textContent(), /12 retries/);
    const windowBefore = await summary.locator("strong.window").textContent();
    before = await drawn();
    const factor = slot0.locator('.params input[data-path=\'["factor"]\']');
    await factor.fill("3");
    await page.waitForFunction((n) => Number(document.querySelector("#designer").dataset.drawn ?? 0) > n, before);
    const windowAfter = await summary.locator("strong.window").textContent();
    assert.notEqual(windowAfter, windowBefore, "the window follows the parameters");
    assert.match(await slot0.locator("textarea.policy").inputValue(), /"factor": 3/);
    // A second policy, in SNS's spelling, on the same chart.
    const slot1 = page.locator('fieldset.slot[data-slot="1"]');
    before = await drawn();
    await slot1.locator("select.shape").selectOption("sns");
    await page.waitForFunction((n) => Number(document.querySelector("#designer").dataset.drawn ?? 0) > n, before);
    assert.equal(await page.locator("section.spelled").count(), 2);
    assert.match(await page.locator("div.chart svg").textContent(), /phased/);
    // Its three spellings, and copying one.
    const spelled = page.locator('section.spelled[data-slot="1"]');
    assert.match(await spelled.textContent(), /_retry_policy|Cannot be written this way/);
    await spelled.locator("button.copy").first().click();
    await page.waitForFunction(() => [...document.querySelectorAll("button.copy")].some((b) => b.textContent === "Copied"));
    const copied = await page.evaluate(() => navigator.clipboard.readText());
    assert.match(copied, /"type": "phased"/);
    await shot(page, "policy-compare");
    // A mistake names the field and the rule, and the page keeps working.
    before = await drawn();
    await slot0.locator("textarea.policy").fill('{"type": "fixed", "delay": "soon"}');
    await page.waitForFunction((n) => Number(document.querySelector("#designer").dataset.drawn ?? 0) > n, before);
    assert.match(await page.locator("#result p.error").textContent(), /Policy 1: delay/);
    assert.equal(await slot0.locator("select.shape").inputValue(), "fixed", "the menu follows the JSON");

    // A test event to the subscription, from its page.
    await visit(page, `${tenax.base}/ui/subscriptions`);
    await page.click('tr[data-subscription="1"] button:has-text("Send a test event")');
    await page.waitForURL(/subscriptions\/1\?note=/);
    assert.match(await page.locator("p.note").textContent(), /test event/);

    assert.deepEqual(errors, [], "no console error on any page");
    await context.close();
  } finally {
    await tenax.stop();
  }
});

test("with authentication on, a token signs in and the pages work the same", async () => {
  const tenax = await startTenax(["--auth", "on", "--admin-token", ADMIN]);
  try {
    const call = api(tenax.base, ADMIN);
    await seed(call, receiverUrl);
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const { page, errors } = await watchedPage(context);

    await page.goto(`${tenax.base}/ui/queues`);
    await page.waitForURL(/\/ui\/login/);
    await shot(page, "login");
    await page.fill("#token", "not-the-token");
    await page.click('button[type="submit"]');
    await page.waitForURL(/failed=1/);
    assert.match(await page.locator("p.error").textContent(), /not valid/);
    await page.fill("#token", ADMIN);
    await page.click('button[type="submit"]');
    await page.waitForURL(/\/ui\/queues$/);
    const cookies = await context.cookies();
    const session = cookies.find((c) => c.name === "tenax_session");
    assert.ok(session && session.httpOnly && session.sameSite === "Strict", JSON.stringify(cookies));
    assert.equal(await page.evaluate(() => document.cookie), "", "scripts cannot read the session");

    await page.click('tr[data-queue="emails"] button:has-text("Pause")');
    await page.waitForURL(/note=/);
    assert.equal((await call("GET", "/api/queues/emails", undefined, 200)).paused, true);
    for (const path of ["/ui", "/ui/jobs", "/ui/dead", "/ui/subscriptions", "/ui/policy"]) {
      await visit(page, tenax.base + path);
    }
    await page.click("form.logout button");
    await page.waitForURL(/\/ui\/login/);
    await page.goto(`${tenax.base}/ui`);
    await page.waitForURL(/\/ui\/login/);
    assert.deepEqual(errors, [], "no console error on any page");
    await context.close();
  } finally {
    await tenax.stop();
  }
});

/** The live switch in the page's header. */
const liveSwitch = (page) => page.locator("header.top #live");

/** Waits until the live switch has let `n` more rounds pass than it had (hidden, off, busy). */
async function roundsPass(page, n) {
  const now = Number(await liveSwitch(page).getAttribute("data-skipped"));
  await page.waitForFunction(
    (target) => Number(document.getElementById("live").dataset.skipped) >= target,
    now + n,
  );
}

/** Makes the page believe its tab is hidden (or visible again), as a browser does. */
async function setVisibility(page, state) {
  await page.evaluate((state) => {
    Object.defineProperty(document, "visibilityState", { configurable: true, get: () => state });
    document.dispatchEvent(new Event("visibilitychange"));
  }, state);
}

test("live pages update themselves, rest while hidden or switched off, and remember the switch", async () => {
  const tenax = await startTenax();
  try {
    const call = api(tenax.base);
    const first = await call("POST", "/api/jobs", { queue: "emails", type: "digest", payload: { n: 1 } }, 201);
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const { page, errors } = await watchedPage(context);
    const jobsUrl = `${tenax.base}/ui/jobs`;
    let fetches = 0;
    page.on("request", (request) => {
      if (request.resourceType() === "fetch" && request.url() === jobsUrl) fetches += 1;
    });
    await visit(page, jobsUrl);
    await page.locator(`tr[data-id="${first.id}"]`).waitFor();
    assert.equal(await liveSwitch(page).getAttribute("aria-checked"), "true");
    assert.equal((await liveSwitch(page).textContent()).trim(), "Live");
    // A mark that a reload would wipe out.
    await page.evaluate(() => { window.notReloaded = true; });

    // A job enqueued through the API appears without a reload, on top (newest first).
    const second = await call("POST", "/api/jobs", { queue: "emails", type: "digest", payload: { n: 2 } }, 201);
    await page.locator(`tr[data-id="${second.id}"]`).waitFor();
    assert.equal(await page.evaluate(() => window.notReloaded), true, "swapped in place, not reloaded");
    assert.equal(await page.locator("table.jobs tbody tr").first().getAttribute("data-id"), String(second.id));
    assert.match(await page.locator("p.count").textContent(), /2 matching/);
    assert.ok(fetches > 0, "the page fetched itself");

    // Hidden: no fetch while rounds pass, and a job enqueued meanwhile does not show.
    await setVisibility(page, "hidden");
    await page.waitForFunction(() => document.getElementById("live").dataset.state === "hidden");
    const fetchesWhileHidden = fetches;
    const third = await call("POST", "/api/jobs", { queue: "emails", type: "digest", payload: { n: 3 } }, 201);
    await roundsPass(page, 2);
    assert.equal(fetches, fetchesWhileHidden, "no fetch while the tab is hidden");
    assert.equal(await page.locator(`tr[data-id="${third.id}"]`).count(), 0);
    // Visible again: it catches up at once.
    await setVisibility(page, "visible");
    await page.locator(`tr[data-id="${third.id}"]`).waitFor();

    // Not while the user is typing: a field with text of theirs holds the page still.
    await page.fill('form.filters input[name="type"]', "dig");
    await page.waitForFunction(() => document.getElementById("live").dataset.state === "busy");
    const fourth = await call("POST", "/api/jobs", { queue: "emails", type: "digest", payload: { n: 4 } }, 201);
    await roundsPass(page, 2);
    assert.equal(await page.locator(`tr[data-id="${fourth.id}"]`).count(), 0);
    assert.equal(await page.inputValue('form.filters input[name="type"]'), "dig", "what was typed stays");
    await page.fill('form.filters input[name="type"]', "");
    await page.locator("main h1").click();
    await page.locator(`tr[data-id="${fourth.id}"]`).waitFor();

    // The switch: off, no fetch; remembered across a reload; on again.
    await liveSwitch(page).click();
    assert.equal(await liveSwitch(page).getAttribute("aria-checked"), "false");
    assert.equal((await liveSwitch(page).textContent()).trim(), "Paused");
    await page.waitForFunction(() => document.getElementById("live").dataset.state === "off");
    await page.reload();
    await page.waitForFunction(() => document.getElementById("live").dataset.state === "off");
    assert.equal((await liveSwitch(page).textContent()).trim(), "Paused", "the choice survives a reload");
    const fetchesWhileOff = fetches;
    const fifth = await call("POST", "/api/jobs", { queue: "emails", type: "digest", payload: { n: 5 } }, 201);
    await roundsPass(page, 2);
    assert.equal(fetches, fetchesWhileOff, "no fetch while switched off");
    assert.equal(await page.locator(`tr[data-id="${fifth.id}"]`).count(), 0);
    await liveSwitch(page).click();
    assert.equal((await liveSwitch(page).textContent()).trim(), "Live");
    await page.locator(`tr[data-id="${fifth.id}"]`).waitFor();

    // Pages that do not change by themselves have no switch: the designer, a finished job.
    await visit(page, `${tenax.base}/ui/policy`);
    assert.equal(await liveSwitch(page).isVisible(), false);
    // A job's page follows it while it runs, and stops once it has finished.
    const taken = await call("POST", "/api/take", { queues: ["emails"], max: 1 }, 200);
    const running = taken.jobs[0];
    await visit(page, `${tenax.base}/ui/jobs/${running.id}`);
    assert.match(await page.locator("section.facts").textContent(), /in_flight|in flight/);
    assert.equal(await liveSwitch(page).isVisible(), true);
    await call("POST", `/api/jobs/${running.id}/complete`, { lease_token: running.lease_token }, 200);
    await page.locator("section.facts .status.completed").waitFor();
    await page.waitForFunction(() => document.getElementById("live").hidden);
    // A job deleted while its page is open: the page says so, and stops asking.
    const doomed = await call("POST", "/api/jobs", { queue: "emails", type: "digest", delay: "1h" }, 201);
    await visit(page, `${tenax.base}/ui/jobs/${doomed.id}`);
    await call("DELETE", `/api/jobs/${doomed.id}`, undefined, 204);
    const logged = errors.length;
    await page.waitForFunction(() => document.getElementById("live").dataset.state === "gone");
    // The browser logs the 404 the page asked for: expected here, and the only error.
    assert.ok(errors.splice(logged).every((e) => /404/.test(e)), JSON.stringify(errors));

    assert.deepEqual(errors, [], "no console error");
    await context.close();
  } finally {
    await tenax.stop();
  }
});

test("schedules and a queue's page act by clicking; the dark theme follows the system's", async () => {
  const tenax = await startTenax();
  try {
    const call = api(tenax.base);
    await seed(call, receiverUrl);
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const { page, errors } = await watchedPage(context);

    // Schedules: pause, resume, run now.
    await visit(page, `${tenax.base}/ui`);
    await page.click('header.top nav a:has-text("Schedules")');
    await page.waitForURL(/\/ui\/schedules$/);
    const row = page.locator('tr[data-schedule="nightly-report"]');
    assert.match(await row.textContent(), /none yet/);
    assert.match(await row.textContent(), /T02:30:00\+01:00/, "ticks in the schedule's zone");
    await row.locator('button:has-text("Pause")').click();
    await page.waitForURL(/note=/);
    assert.match(await row.textContent(), /paused/);
    assert.equal((await call("GET", "/api/schedules/nightly-report", undefined, 200)).paused, true);
    await row.locator('button:has-text("Resume")').click();
    await page.waitForURL(/running\+again|running%20again/);
    assert.equal((await call("GET", "/api/schedules/nightly-report", undefined, 200)).paused, false);
    await row.locator('button:has-text("Run now")').click();
    await page.waitForURL(/enqueued/);
    const schedule = await call("GET", "/api/schedules/nightly-report", undefined, 200);
    assert.ok(schedule.last_job, JSON.stringify(schedule));
    await row.locator(`a[href="/ui/jobs/${schedule.last_job}"]`).waitFor();
    await shot(page, "schedules");

    // A queue's page, from the queue list: its limits, edited in the form.
    await visit(page, `${tenax.base}/ui/queues`);
    await page.click('tr[data-queue="emails"] a:has-text("emails")');
    await page.waitForURL(/\/ui\/queues\/emails$/);
    assert.match(await page.locator('tr[data-limit="concurrency"]').textContent(), /4 at once/);
    assert.match(await page.locator('tr[data-limit="rate"]').textContent(), /100 per 1m/);
    await page.fill('form.limits input[name="concurrency"]', "2");
    await page.fill('form.limits input[name="rate_limit"]', "");
    await page.click('form.limits button[type="submit"]');
    await page.waitForURL(/emails\?note=/);
    assert.match(await page.locator("p.note").textContent(), /at most 2 in flight, no rate limit/);
    assert.match(await page.locator('tr[data-limit="concurrency"]').textContent(), /2 at once/);
    const queue = await call("GET", "/api/queues/emails", undefined, 200);
    assert.equal(queue.concurrency, 2);
    assert.equal(queue.rate, undefined);
    await page.click('section.facts button:has-text("Pause")');
    await page.waitForURL(/emails\?note=/);
    assert.equal((await call("GET", "/api/queues/emails", undefined, 200)).paused, true);
    await shot(page, "queue");

    // The dark theme: the system's choice, no setting.
    await visit(page, `${tenax.base}/ui`);
    const background = () => page.evaluate(() => {
      const [r, g, b] = getComputedStyle(document.documentElement).backgroundColor.match(/\d+/g).map(Number);
      return r + g + b;
    });
    await page.emulateMedia({ colorScheme: "light" });
    assert.ok(await background() > 600, "light by day");
    await page.emulateMedia({ colorScheme: "dark" });
    assert.ok(await background() < 150, "dark when the system is");
    const card = await page.evaluate(() => getComputedStyle(document.querySelector(".card")).color);
    const [r, g, b] = card.match(/\d+/g).map(Number);
    assert.ok(r + g + b > 500, `light text on dark cards: ${card}`);
    await shot(page, "overview-dark");

    assert.deepEqual(errors, [], "no console error");
    await context.close();
  } finally {
    await tenax.stop();
  }
});

test("a workflow is drawn with its jobs in their states, and its jobs link to it", async () => {
  const tenax = await startTenax();
  try {
    const call = api(tenax.base);
    const batch = await call("POST", "/api/jobs/batch", {
      jobs: [
        { queue: "etl", type: "extract", step: "extract" },
        { queue: "etl", type: "transform", step: "a", after: [{ step: "extract" }] },
        { queue: "etl", type: "transform", step: "b", after: [{ step: "extract" }] },
        { queue: "etl", type: "load", after: [{ step: "a" }, { step: "b" }] },
      ],
    }, 201);
    const [extract, a, b, load] = batch.jobs.map((j) => j.id);
    const taken = await call("POST", "/api/take", { queues: ["etl"], max: 1 }, 200);
    await call("POST", `/api/jobs/${extract}/complete`, { lease_token: taken.jobs[0].lease_token, result: { rows: 3 } }, 200);
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const { page, errors } = await watchedPage(context);

    // From the job's page to its workflow.
    await visit(page, `${tenax.base}/ui/jobs/${load}`);
    assert.match(await page.locator("section.facts").textContent(), new RegExp(`#${a}, #${b}`));
    await page.click('a:has-text("its workflow")');
    await page.waitForURL(new RegExp(`/ui/workflows/${load}$`));
    const nodes = page.locator(".dag g.node");
    assert.equal(await nodes.count(), 4);
    assert.equal(await page.locator(".dag path.edge").count(), 4);
    assert.deepEqual(
      await page.locator(`.dag g.node[data-job="${extract}"]`).getAttribute("class"),
      "node completed",
    );
    for (const id of [a, b]) {
      assert.equal(await page.locator(`.dag g.node[data-job="${id}"]`).getAttribute("class"), "node ready");
    }
    assert.equal(await page.locator(`.dag g.node[data-job="${load}"]`).getAttribute("class"), "node waiting");
    // Parents are drawn above their children.
    const top = async (id) => (await page.locator(`.dag g.node[data-job="${id}"] rect`).boundingBox()).y;
    assert.ok(await top(extract) < await top(a), "extract above the transforms");
    assert.ok(await top(a) < await top(load), "the transforms above load");
    await shot(page, "workflow");
    // A box links to its job.
    await page.click(`.dag g.node[data-job="${a}"]`);
    await page.waitForURL(new RegExp(`/ui/jobs/${a}$`));
    assert.deepEqual(errors, [], "no console error");
    await context.close();
  } finally {
    await tenax.stop();
  }
});
