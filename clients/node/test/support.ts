// Helpers of the suite: a real `tenax serve` per test file, on a free loopback port with a
// temporary data directory, and small waits for events.
//
// Environment:
// - TENAX_BIN: the server binary (default ../../target/debug/tenax from clients/node).
// - TENAX_SERVE_ARGS: extra flags for `tenax serve` (CI adds `--database-url ...`).
// - TENAX_SHOW_SERVER_LOG=1: print the server's log when the file's tests end.

import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { randomUUID } from "node:crypto";

import { Client, type ClientOptions } from "../src/index.js";

/** clients/node, whether this runs from build-test/test or elsewhere. */
export const PACKAGE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** A short policy for tests: two retries, 200 ms apart, then dead. */
export const SHORT_POLICY = { type: "list", delays: ["200ms", "200ms"] };

/** Splits TENAX_SERVE_ARGS as a shell would split plain words and quoted strings. */
export function splitArgs(text: string): string[] {
  const out: string[] = [];
  const pattern = /"([^"]*)"|'([^']*)'|(\S+)/g;
  for (const match of text.matchAll(pattern)) {
    out.push(match[1] ?? match[2] ?? match[3] ?? "");
  }
  return out;
}

async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const address = server.address();
  server.close();
  await once(server, "close");
  if (address === null || typeof address === "string") {
    throw new Error("no port");
  }
  return address.port;
}

export interface Server {
  url: string;
  client(options?: ClientOptions): Client;
  stop(): Promise<void>;
}

/** Starts `tenax serve` and waits until `/healthz` answers (readiness, not a guessed sleep). */
export async function startServer(): Promise<Server> {
  let binary = process.env["TENAX_BIN"] || "../../target/debug/tenax";
  if (!isAbsolute(binary)) {
    binary = resolve(PACKAGE_DIR, binary);
  }
  if (!existsSync(binary)) {
    throw new Error(`no tenax binary at ${binary}: build it (cargo build -p tenax) or set TENAX_BIN`);
  }
  const workdir = mkdtempSync(join(tmpdir(), "tenax-node-"));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const logPath = join(workdir, "tenax.log");
  const { openSync, closeSync } = await import("node:fs");
  const logFd = openSync(logPath, "w");
  const args = [
    "serve",
    "--listen",
    `127.0.0.1:${port}`,
    "--data-dir",
    join(workdir, "data"),
    // The webhook test's receiver listens on 127.0.0.1.
    "--allow-private-endpoints",
    ...splitArgs(process.env["TENAX_SERVE_ARGS"] ?? ""),
  ];
  const child: ChildProcess = spawn(binary, args, { stdio: ["ignore", logFd, logFd] });
  closeSync(logFd);
  let exited: number | null = null;
  child.on("exit", (code) => {
    exited = code ?? -1;
  });
  // A test process that ends without its after() hook (a runner's timeout kills it) takes its
  // server along, instead of leaving it running.
  const killServer = (): void => {
    if (exited === null) {
      child.kill("SIGKILL");
      rmSync(workdir, { recursive: true, force: true });
    }
  };
  process.once("exit", killServer);
  for (const name of ["SIGTERM", "SIGINT"] as const) {
    process.once(name, () => {
      killServer();
      process.exit(1);
    });
  }
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (exited !== null) {
      throw new Error(`tenax serve exited with status ${exited}:\n${readFileSync(logPath, "utf8")}`);
    }
    try {
      const response = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(500) });
      await response.arrayBuffer();
      if (response.status === 200) {
        break;
      }
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`tenax serve did not answer at ${url} within 30 s:\n${readFileSync(logPath, "utf8")}`);
    }
    await new Promise((r) => setTimeout(r, 25));
  }
  return {
    url,
    client: (options = {}) => new Client({ url, ...options }),
    async stop() {
      if (exited === null) {
        const done = once(child, "exit");
        child.kill("SIGTERM");
        await done;
      }
      if (process.env["TENAX_SHOW_SERVER_LOG"] === "1") {
        process.stderr.write(readFileSync(logPath, "utf8"));
      }
      rmSync(workdir, { recursive: true, force: true });
    },
  };
}

/** A queue of the test's own. */
export function newQueue(): string {
  return `q-${randomUUID().slice(0, 12)}`;
}

/**
 * Polls `check` until it returns something truthy (a state of the server reached); fails after
 * `timeoutMs`. For states the server reaches on its own; events of the code under test are
 * awaited directly.
 */
export async function waitFor<T>(check: () => Promise<T | null | undefined | false>, what: string, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    last = await check();
    if (last) {
      return last as T;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${String(last)})`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The next `name` event of `emitter` matching `filter`, with a deadline. */
export function nextEvent<A extends unknown[]>(
  emitter: NodeJS.EventEmitter,
  name: string,
  filter: (...args: A) => boolean = () => true,
  timeoutMs = 10_000,
): Promise<A> {
  return new Promise((resolvePromise, reject) => {
    const timer = setTimeout(() => {
      emitter.off(name, listener);
      reject(new Error(`no ${name} event within ${timeoutMs} ms`));
    }, timeoutMs);
    const listener = (...args: unknown[]): void => {
      if (filter(...(args as A))) {
        clearTimeout(timer);
        emitter.off(name, listener);
        resolvePromise(args as A);
      }
    };
    emitter.on(name, listener);
  });
}

/** A promise with its resolve function, for events a test's handler signals. */
export function signal<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolveIt!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolveIt = r));
  return { promise, resolve: resolveIt };
}

/** A logger that keeps its lines. */
export function memoryLogger(): { lines: string[]; info(m: string): void; warn(m: string): void; error(m: string): void } {
  const lines: string[] = [];
  return {
    lines,
    info: (m) => lines.push(`INFO ${m}`),
    warn: (m) => lines.push(`WARN ${m}`),
    error: (m) => lines.push(`ERROR ${m}`),
  };
}

export interface Recorded {
  method: string;
  path: string;
  body: string;
  headers: Record<string, string>;
}

/** A `fetch` that records each request's method, path, headers and body. */
export function recordingFetch(): { fetch: typeof fetch; requests: Recorded[] } {
  const requests: Recorded[] = [];
  const wrapped: typeof fetch = async (input, init) => {
    const url = new URL(typeof input === "string" || input instanceof URL ? input : input.url);
    requests.push({
      method: init?.method ?? "GET",
      path: url.pathname,
      body: typeof init?.body === "string" ? init.body : "",
      headers: Object.fromEntries(new Headers(init?.headers).entries()),
    });
    return fetch(input, init);
  };
  return { fetch: wrapped, requests };
}
