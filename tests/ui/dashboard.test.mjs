// The dashboard in a real browser: Debian's Chromium driven by playwright-core against a real
// `tenax serve` (target/debug/tenax) on a loopback port, with a real webhook receiver. Every page
// must load with no console error; replaying a dead job, pausing a queue, filtering jobs and
// designing a policy must work by clicking; and all of it again with authentication on, signed
// in with a token. With TENAX_UI_SCREENSHOTS=<dir>, each page is saved there as a PNG (the
// screenshots in docs/img/ are made this way).

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
});

after(async () => {
  await browser?.close();
  await new Promise((r) => receiver?.close(r) ?? r());
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
      ["subscriptions", "/ui/subscriptions"],
      ["subscription", "/ui/subscriptions/1"],
      ["policy", "/ui/policy"],
    ];
    for (const [name, path] of pages) {
      await visit(page, tenax.base + path);
      assert.ok(await page.locator("main h1").isVisible(), `${path} has a heading`);
      if (name === "job") {
        assert.ok(await page.locator("div.chart svg").isVisible(), "the timeline is drawn");
        assert.match(await page.locator("div.chart").textContent(), /the delays to come/);
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
