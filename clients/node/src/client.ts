// The client of the native API (docs/api.md), and its streaming take.

import { type ClientRequest, type IncomingMessage, request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import { hostname } from "node:os";

import { TenaxConnectionError, TenaxError, TenaxTimeout, errorFromResponse } from "./errors.js";
import { type Json, parseJson, stringifyJson } from "./json.js";
import type {
  Batch,
  BatchJobs,
  NewBatch,
  Activity,
  AttemptPage,
  Cluster,
  CompleteResult,
  Completed,
  CancelResult,
  CancelSelection,
  CancelledJobs,
  DeadSelection,
  DeletedJobs,
  DeletedSubscription,
  Delivery,
  DeliveryAttempt,
  DeliveryPage,
  Duration,
  EnqueueOptions,
  Enqueued,
  FailOptions,
  FailResult,
  Job,
  JobId,
  JobPage,
  JobRef,
  JobStatus,
  LeaseExtended,
  ListJobsOptions,
  NewJob,
  OnDuplicate,
  Policy,
  PolicyPreview,
  Queue,
  QueueSettings,
  ReplayOptions,
  ReplayResult,
  Schedule,
  ScheduleDefinition,
  SchedulePreviewRequest,
  Stats,
  Subscription,
  SubscriptionFields,
  TakenJob,
  Tick,
  Time,
  Workflow,
} from "./types.js";
import { VERSION } from "./version.js";

export const DEFAULT_URL = "http://127.0.0.1:7890";
/** The header that names a worker to the server (`GET /api/cluster` lists it by that name). */
export const WORKER_HEADER = "X-Tenax-Worker";
const DEFAULT_TIMEOUT_MS = 10_000;

export interface ClientOptions {
  /** The server; default `$TENAX_URL`, else `http://127.0.0.1:7890`. */
  url?: string;
  /** Sent as `Authorization: Bearer <token>`; default `$TENAX_TOKEN`. */
  token?: string;
  /** Milliseconds per request (a long poll adds its `wait`); default 10 000. */
  timeout?: number;
  /** Extra headers for every request. */
  headers?: Record<string, string>;
  /**
   * A worker name, sent as `X-Tenax-Worker` with every request: 1 to 128 visible ASCII
   * characters or spaces. A worker runtime names its client itself.
   */
  worker?: string;
  /** The `fetch` to use (default: the global one). */
  fetch?: typeof fetch;
}

/** `name` if a header can carry it as the server takes it: 1–128 visible ASCII characters or spaces. */
export function checkWorkerName(name: string): string {
  if (typeof name !== "string" || !/^[\x20-\x7e]{1,128}$/.test(name)) {
    throw new RangeError(`a worker name must be 1 to 128 visible ASCII characters or spaces, got ${JSON.stringify(name)}`);
  }
  return name;
}

/** The name a worker gives the server unless told another: `<hostname>-<pid>`. */
export function defaultWorkerName(): string {
  const host = (hostname() || "localhost").replace(/[^\x21-\x7e]/g, "_").slice(0, 100) || "localhost";
  return `${host}-${process.pid}`;
}

type Query = Record<string, string | number | bigint | boolean | undefined | null>;

interface Call {
  method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  path: string;
  query?: Query;
  body?: unknown;
  /** How long the server may hold the request before answering (a long poll), in ms. */
  waitMs?: number;
}

function seg(value: string | JobId): string {
  return encodeURIComponent(String(value));
}

function queuesOf(queues: string | readonly string[]): string[] {
  return typeof queues === "string" ? [queues] : [...queues];
}

/** Milliseconds of a duration given as a number or a string with units (for client-side timing). */
export function durationMs(value: Duration): number {
  if (typeof value === "number") {
    return value;
  }
  const units: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
  const text = value.trim();
  if (/^\d+$/.test(text)) {
    return Number(text);
  }
  let total = 0;
  let rest = text;
  const part = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)/;
  if (!rest) {
    throw new RangeError(`not a duration: ${JSON.stringify(value)}`);
  }
  while (rest) {
    const match = part.exec(rest);
    if (match === null) {
      throw new RangeError(`not a duration: ${JSON.stringify(value)}`);
    }
    total += Number(match[1]) * (units[match[2] as string] as number);
    rest = rest.slice(match[0].length);
  }
  return total;
}

function timeValue(value: Time | undefined): string | number | undefined {
  if (value instanceof Date) {
    return value.toISOString();
  }
  return value;
}

/** A job to complete with its result (`Client.completeMany`). */
export interface Completion {
  job: JobRef;
  result?: unknown;
}

/** A result as sent: `null` and `undefined` are none. */
function resultOf(result: unknown): unknown {
  return result === null ? undefined : result;
}

function compact(body: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(body)) {
    if (value !== undefined) {
      out[key] = value;
    }
  }
  return out;
}

function fetchError(error: unknown, method: string, url: string): TenaxConnectionError {
  const name = (error as { name?: unknown } | null)?.name;
  if (name === "TimeoutError") {
    return new TenaxTimeout(`${method} ${url}: no answer in time`, { cause: error });
  }
  const cause = (error as { cause?: { message?: unknown; code?: unknown } } | null)?.cause;
  const reason = cause?.code ?? cause?.message ?? (error as Error)?.message ?? String(error);
  return new TenaxConnectionError(`${method} ${url}: ${String(reason)}`, { cause: error });
}

/**
 * A client of the Tenax API. Every method throws an `ApiError` subclass for an error answer
 * (`InvalidRequest` with the `field` that broke a rule, `NotFound`, `LeaseLost`, ...) and a
 * `TenaxConnectionError` when no answer arrives.
 *
 * ```ts
 * const client = new Client(); // $TENAX_URL or http://127.0.0.1:7890, $TENAX_TOKEN
 * const { id } = await client.enqueue("emails", "email.send", { to: "ada@example.com" }, { delay: "5s" });
 * ```
 */
export class Client {
  /** The server's base URL. */
  readonly url: string;
  /** The worker name sent as `X-Tenax-Worker`, if any. */
  readonly worker: string | null;
  readonly #headers: Record<string, string>;
  readonly #timeoutMs: number;
  readonly #fetch: typeof fetch;

  constructor(options: ClientOptions = {}) {
    const url = (options.url ?? process.env["TENAX_URL"] ?? DEFAULT_URL).replace(/\/+$/, "");
    if (!/^https?:\/\//.test(url)) {
      throw new RangeError(`the server URL must start with http:// or https://, got ${JSON.stringify(url)}`);
    }
    this.url = url;
    const token = options.token ?? (process.env["TENAX_TOKEN"] || undefined);
    this.#headers = { "user-agent": `tenax-node/${VERSION}`, accept: "application/json" };
    if (token) {
      this.#headers["authorization"] = `Bearer ${token}`;
    }
    for (const [key, value] of Object.entries(options.headers ?? {})) {
      this.#headers[key.toLowerCase()] = value;
    }
    this.worker = options.worker === undefined ? null : checkWorkerName(options.worker);
    if (this.worker !== null) {
      this.#headers[WORKER_HEADER.toLowerCase()] = this.worker;
    }
    this.#timeoutMs = options.timeout ?? DEFAULT_TIMEOUT_MS;
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  /** This client's settings, sending `name` as `X-Tenax-Worker`. */
  withWorker(name: string): Client {
    const headers = { ...this.#headers };
    delete headers["authorization"];
    delete headers[WORKER_HEADER.toLowerCase()];
    const token = this.#headers["authorization"]?.replace(/^Bearer /, "");
    return new Client({
      url: this.url,
      ...(token === undefined ? {} : { token }),
      timeout: this.#timeoutMs,
      headers,
      worker: name,
      fetch: this.#fetch,
    });
  }

  #urlOf(path: string, query?: Query): string {
    let url = this.url + path;
    if (query) {
      const params = new URLSearchParams();
      for (const [key, value] of Object.entries(query)) {
        if (value !== undefined && value !== null) {
          params.append(key, String(value));
        }
      }
      const text = params.toString();
      if (text) {
        url += `?${text}`;
      }
    }
    return url;
  }

  async #call<T>(call: Call): Promise<T> {
    const url = this.#urlOf(call.path, call.query);
    const headers = { ...this.#headers };
    let body: string | undefined;
    if (call.body !== undefined) {
      body = stringifyJson(call.body);
      headers["content-type"] = "application/json";
    }
    let response: Response;
    let text: string;
    try {
      response = await this.#fetch(url, {
        method: call.method,
        headers,
        body,
        signal: AbortSignal.timeout(this.#timeoutMs + (call.waitMs ?? 0)),
      });
      text = await response.text();
    } catch (error) {
      throw fetchError(error, call.method, url);
    }
    if (response.status < 200 || response.status >= 300) {
      throw errorFromResponse(response.status, text, response.headers.get("x-request-id"));
    }
    if (!text) {
      return undefined as T;
    }
    try {
      return parseJson(text) as T;
    } catch (error) {
      throw new TenaxError(`${call.method} ${call.path}: the server's answer is not JSON: ${(error as Error).message}`, {
        cause: error,
      });
    }
  }

  /** True when `GET /healthz` answers; false when the server cannot be reached. */
  async ping(): Promise<boolean> {
    try {
      const response = await this.#fetch(`${this.url}/healthz`, { signal: AbortSignal.timeout(this.#timeoutMs) });
      await response.arrayBuffer();
      return response.status === 200;
    } catch {
      return false;
    }
  }

  // ---- jobs ----------------------------------------------------------------------------------

  /**
   * Enqueues one job; the answer comes once it is on disk. `run_at` or `delay` put it off;
   * `policy` and `retry_limit` replace its queue's policy; `unique_key` allows one unfinished
   * job per queue and key (`on_duplicate: "existing"` returns that job instead of throwing
   * `Duplicate`); `traceparent` goes with the job to its workers and webhook deliveries;
   * `after` names stored jobs it waits for (`on_parent_dead` says what it does if one of them
   * will not complete).
   */
  enqueue(queue: string, type = "", payload: unknown = null, options: EnqueueOptions = {}): Promise<Enqueued> {
    return this.#call({
      method: "POST",
      path: "/api/jobs",
      body: compact({ queue, type, payload, ...options, run_at: timeValue(options.run_at) }),
    });
  }

  /**
   * Enqueues jobs atomically (all or none), answered in request order. A refused job's error
   * names it: `field === "jobs[2].policy.max_delay"`.
   *
   * A batch may be a graph: a job's `after` names others of the batch by position
   * (`{ index: 0 }`) or by their `step` (`{ step: "extract" }`), in any order (the server stores
   * parents first); a cycle is refused naming the job whose `after` closes it (`jobs[0].after`).
   */
  async enqueueMany(jobs: readonly NewJob[], options: { on_duplicate?: OnDuplicate } = {}): Promise<Enqueued[]> {
    const answer = await this.#call<{ jobs: Enqueued[] }>({
      method: "POST",
      path: "/api/jobs/batch",
      body: compact({
        jobs: jobs.map((job) => compact({ ...job, run_at: timeValue(job.run_at) })),
        on_duplicate: options.on_duplicate,
      }),
    });
    return answer.jobs;
  }

  /** One job with its status, errors and policy. */
  getJob<P = unknown, R = unknown>(id: JobId, options: { wait?: Duration } = {}): Promise<Job<P, R>> {
    const query = options.wait === undefined ? undefined : { wait: options.wait };
    return this.#call({ method: "GET", path: `/api/jobs/${seg(id)}`, query });
  }

  /**
   * Waits until a job has finished (completed or dead), at most `wait` (≤ 60 s, default 30 s)
   * per request, asking again until `timeout` ms have passed (default: one request). Answers the
   * job as it is then: check `status` (and `result`).
   */
  async waitForJob<P = unknown, R = unknown>(
    id: JobId,
    options: { wait?: Duration; timeout?: number } = {},
  ): Promise<Job<P, R>> {
    const wait = options.wait ?? "30s";
    const until = performance.now() + (options.timeout ?? 0);
    for (;;) {
      const job = await this.getJob<P, R>(id, { wait });
      if (job.status === "completed" || job.status === "dead" || performance.now() >= until) {
        return job;
      }
    }
  }

  /**
   * The workflow job `id` belongs to: every job joined to it by `after`, either way, with its
   * state, and the edges between them.
   */
  getWorkflow(id: JobId): Promise<Workflow> {
    return this.#call({ method: "GET", path: `/api/workflows/${seg(id)}` });
  }

  /** One page of jobs in id order (`limit` 1–1000, default 100). */
  listJobs(options: ListJobsOptions = {}): Promise<JobPage> {
    return this.#call({ method: "GET", path: "/api/jobs", query: { ...options } });
  }

  /** Every job that matches, fetched a page at a time. */
  async *iterJobs(options: Omit<ListJobsOptions, "after" | "limit"> & { pageSize?: number } = {}): AsyncGenerator<Job> {
    const { pageSize = 100, ...filter } = options;
    let after: JobId | undefined;
    for (;;) {
      const page = await this.listJobs({ ...filter, limit: pageSize, ...(after === undefined ? {} : { after }) });
      yield* page.jobs;
      if (page.next_after === null || page.next_after === undefined) {
        return;
      }
      after = page.next_after;
    }
  }

  // ---- batches -------------------------------------------------------------------------------

  /**
   * Makes a batch and its first jobs in one commit (docs/workflows.md#batches): closed as it is
   * made unless `open`. A bad job refuses it all (`InvalidRequest` naming `jobs[i]. ...` or
   * `on_complete. ...`).
   */
  createBatch(batch: NewBatch): Promise<BatchJobs> {
    return this.#call({
      method: "POST",
      path: "/api/batches",
      body: compact({
        description: batch.description,
        on_complete: batch.on_complete,
        on_success: batch.on_success,
        jobs: (batch.jobs ?? []).map((job) => compact({ ...job, run_at: timeValue(job.run_at) })),
        open: batch.open,
      }),
    });
  }

  /** Adds jobs to an open batch, closing it in the same commit with `close`; a closed batch refuses them (`Conflict`, code `batch_closed`). */
  addToBatch(id: JobId, jobs: readonly NewJob[], options: { close?: boolean } = {}): Promise<BatchJobs> {
    return this.#call({
      method: "POST",
      path: `/api/batches/${seg(id)}/jobs`,
      body: compact({
        jobs: jobs.map((job) => compact({ ...job, run_at: timeValue(job.run_at) })),
        close: options.close,
      }),
    });
  }

  /** Closes a batch: it finishes (its callbacks enqueued) once its pending jobs have, at once if none is pending. */
  closeBatch(id: JobId): Promise<Batch> {
    return this.#call({ method: "POST", path: `/api/batches/${seg(id)}/close` });
  }

  getBatch(id: JobId): Promise<Batch> {
    return this.#call({ method: "GET", path: `/api/batches/${seg(id)}` });
  }

  /** A page of batches in id order, after `after`. */
  async listBatches(options: { after?: JobId; limit?: number } = {}): Promise<Batch[]> {
    const answer = await this.#call<{ batches: Batch[] }>({
      method: "GET",
      path: "/api/batches",
      query: { after: options.after, limit: options.limit },
    });
    return answer.batches;
  }

  /** Forgets a batch; its jobs stay. An unfinished batch deleted never fires. */
  async deleteBatch(id: JobId): Promise<void> {
    await this.#call({ method: "DELETE", path: `/api/batches/${seg(id)}` });
  }

  /** Removes a job in any status. */
  async deleteJob(id: JobId): Promise<void> {
    await this.#call({ method: "DELETE", path: `/api/jobs/${seg(id)}` });
  }

  /**
   * Cancels a job: at once if it is scheduled or ready (`outcome: "cancelled"`); if it is in
   * flight, its lease is marked (`outcome: "marked"`) and its worker learns it on its next
   * heartbeat. A finished job is refused with a `Conflict` naming its status.
   */
  cancel(id: JobId): Promise<CancelResult> {
    return this.#call({ method: "POST", path: `/api/jobs/${seg(id)}/cancel`, body: {} });
  }

  /** Cancels the unfinished jobs of a selection: `ids`, `queue`/`type`, or `all: true`. */
  cancelJobs(selection: CancelSelection): Promise<CancelledJobs> {
    return this.#call({ method: "POST", path: "/api/jobs/cancel", body: compact({ ...selection }) });
  }

  /** Job counts per queue and in total. */
  stats(): Promise<Stats> {
    return this.#call({ method: "GET", path: "/api/stats" });
  }

  // ---- work ----------------------------------------------------------------------------------

  /**
   * Leases up to `max` ready jobs (default 1), best first across `queues`. With `wait` (at
   * most 60 s) it long-polls for the first job; an empty list means none came.
   */
  async take(
    queues: string | readonly string[],
    options: { max?: number; lease?: Duration; wait?: Duration; worker?: string } = {},
  ): Promise<TakenJob[]> {
    const answer = await this.#call<{ jobs: TakenJob[] }>({
      method: "POST",
      path: "/api/take",
      body: compact({ queues: queuesOf(queues), ...options }),
      waitMs: options.wait === undefined ? 0 : durationMs(options.wait),
    });
    return answer.jobs;
  }

  /**
   * A streaming take (`POST /api/take/stream`): jobs pushed as they become ready, at most `max`
   * (default 100) leased at once. Iterate it with `for await`; `close()` gives back the jobs
   * it still holds. See `JobStream`.
   */
  stream(
    queues: string | readonly string[],
    options: { max?: number; lease?: Duration; worker?: string } = {},
  ): JobStream {
    const url = `${this.url}/api/take/stream`;
    const headers = { ...this.#headers, "content-type": "application/json", accept: "application/x-ndjson" };
    const body = stringifyJson(compact({ queues: queuesOf(queues), ...options }));
    return new JobStream(url, headers, body, this.#timeoutMs);
  }

  /** Extends a job's lease to `lease` from now (default: the server's default lease). */
  heartbeat(job: JobRef, options: { lease?: Duration } = {}): Promise<LeaseExtended> {
    return this.#call({
      method: "POST",
      path: `/api/jobs/${seg(job.id)}/heartbeat`,
      body: compact({ lease_token: job.lease_token, lease: options.lease }),
    });
  }

  /**
   * Completes a job, with its `result` if given (any JSON value; `undefined` or `null`: none),
   * kept with the completed job and shown by `getJob`. Throws `LeaseLost` or `NotInFlight` when
   * it is no longer this worker's.
   */
  complete(job: JobRef, options: { result?: unknown } = {}): Promise<Completed> {
    return this.#call({
      method: "POST",
      path: `/api/jobs/${seg(job.id)}/complete`,
      body: compact({ lease_token: job.lease_token, result: resultOf(options.result) }),
    });
  }

  /**
   * Completes many jobs in one durable commit (`POST /api/jobs/complete`); an answer each, in
   * order. A job with a result is given as `{ job, result }`.
   */
  async completeMany(jobs: readonly (JobRef | Completion)[]): Promise<CompleteResult[]> {
    const answer = await this.#call<{ results: CompleteResult[] }>({
      method: "POST",
      path: "/api/jobs/complete",
      body: {
        jobs: jobs.map((item) => {
          const [job, result] = "job" in item ? [item.job, item.result] : [item, undefined];
          return compact({ id: job.id, lease_token: job.lease_token, result: resultOf(result) });
        }),
      },
    });
    return answer.results;
  }

  /**
   * Reports a failure; the answer is the policy's decision. At most one outcome:
   * `retryable: false` (dead at once), `retry_at` / `retry_in` (retry then; uses an attempt),
   * `snooze` (run again later without using an attempt; nothing is recorded).
   */
  fail(job: JobRef, error: string, options: FailOptions = {}): Promise<FailResult> {
    const { detail, retryable, retry_at, retry_in, snooze } = options;
    return this.#call({
      method: "POST",
      path: `/api/jobs/${seg(job.id)}/fail`,
      body: compact({
        lease_token: job.lease_token,
        error: detail === undefined ? error : { message: error, detail },
        retryable: retryable === false ? false : undefined,
        retry_at: timeValue(retry_at),
        retry_in,
        snooze,
      }),
    });
  }

  // ---- dead jobs -----------------------------------------------------------------------------

  /** One page of dead jobs in id order. */
  listDead(options: Omit<ListJobsOptions, "status"> = {}): Promise<JobPage> {
    return this.#call({ method: "GET", path: "/api/dead", query: { ...options } });
  }

  /** Every dead job that matches, fetched a page at a time. */
  async *iterDead(options: { queue?: string; type?: string; pageSize?: number } = {}): AsyncGenerator<Job> {
    const { pageSize = 100, ...filter } = options;
    let after: JobId | undefined;
    for (;;) {
      const page = await this.listDead({ ...filter, limit: pageSize, ...(after === undefined ? {} : { after }) });
      yield* page.jobs;
      if (page.next_after === null || page.next_after === undefined) {
        return;
      }
      after = page.next_after;
    }
  }

  /**
   * Makes dead jobs ready again: by `ids`, by `queue`/`type`, or `all: true`. `reset_attempts`
   * starts their retries from 1; `policy` gives them a new one. The answer says which were
   * replayed and why the others were skipped.
   */
  replayDead(selection: DeadSelection, options: ReplayOptions = {}): Promise<ReplayResult> {
    return this.#call({ method: "POST", path: "/api/dead/replay", body: compact({ ...selection, ...options }) });
  }

  /** Deletes dead jobs, selected as for `replayDead`. */
  deleteDead(selection: DeadSelection): Promise<DeletedJobs> {
    return this.#call({ method: "POST", path: "/api/dead/delete", body: compact({ ...selection }) });
  }

  // ---- queues --------------------------------------------------------------------------------

  /** Every queue with settings or jobs. */
  async listQueues(): Promise<Queue[]> {
    const answer = await this.#call<{ queues: Queue[] }>({ method: "GET", path: "/api/queues" });
    return answer.queues;
  }

  getQueue(name: string): Promise<Queue> {
    return this.#call({ method: "GET", path: `/api/queues/${seg(name)}` });
  }

  /**
   * Changes the settings named; `null` removes one. A queue that has never existed is refused
   * (`NotFound`, naming the closest ones) unless `create: true`.
   */
  updateQueue(name: string, settings: QueueSettings, options: { create?: boolean } = {}): Promise<Queue> {
    return this.#call({
      method: "PUT",
      path: `/api/queues/${seg(name)}`,
      query: options.create ? { create: true } : undefined,
      body: compact({ ...settings }),
    });
  }

  /** A paused queue accepts jobs but hands none out. */
  pauseQueue(name: string): Promise<Queue> {
    return this.#call({ method: "POST", path: `/api/queues/${seg(name)}/pause` });
  }

  resumeQueue(name: string): Promise<Queue> {
    return this.#call({ method: "POST", path: `/api/queues/${seg(name)}/resume` });
  }

  // ---- policies ------------------------------------------------------------------------------

  /** A policy's first `rows` retries (default 100), its window and retry count. */
  previewPolicy(policy: Policy, options: { rows?: number } = {}): Promise<PolicyPreview> {
    return this.#call({ method: "POST", path: "/api/policy/preview", query: { rows: options.rows }, body: policy });
  }

  // ---- schedules -----------------------------------------------------------------------------

  /** Makes or replaces a schedule (docs/schedules.md). */
  putSchedule(name: string, definition: ScheduleDefinition): Promise<Schedule> {
    return this.#call({ method: "PUT", path: `/api/schedules/${seg(name)}`, body: compact({ ...definition }) });
  }

  async listSchedules(): Promise<Schedule[]> {
    const answer = await this.#call<{ schedules: Schedule[] }>({ method: "GET", path: "/api/schedules" });
    return answer.schedules;
  }

  getSchedule(name: string): Promise<Schedule> {
    return this.#call({ method: "GET", path: `/api/schedules/${seg(name)}` });
  }

  /** Deletes a schedule; the jobs it made stay. */
  async deleteSchedule(name: string): Promise<void> {
    await this.#call({ method: "DELETE", path: `/api/schedules/${seg(name)}` });
  }

  pauseSchedule(name: string): Promise<Schedule> {
    return this.#call({ method: "POST", path: `/api/schedules/${seg(name)}/pause` });
  }

  resumeSchedule(name: string): Promise<Schedule> {
    return this.#call({ method: "POST", path: `/api/schedules/${seg(name)}/resume` });
  }

  /** Enqueues the schedule's job now, outside the timetable. */
  runSchedule(name: string): Promise<Schedule> {
    return this.#call({ method: "POST", path: `/api/schedules/${seg(name)}/run` });
  }

  /** A schedule's next `count` ticks (1–1000, default 10). */
  async scheduleTicks(name: string, options: { count?: number } = {}): Promise<Tick[]> {
    const answer = await this.#call<{ ticks: Tick[] }>({
      method: "GET",
      path: `/api/schedules/${seg(name)}/ticks`,
      query: { count: options.count },
    });
    return answer.ticks;
  }

  /** The next ticks of any expression; nothing is stored. */
  async previewSchedule(request: SchedulePreviewRequest): Promise<Tick[]> {
    const answer = await this.#call<{ ticks: Tick[] }>({
      method: "POST",
      path: "/api/schedules/preview",
      body: compact({ ...request, after: timeValue(request.after) }),
    });
    return answer.ticks;
  }

  // ---- subscriptions and deliveries ----------------------------------------------------------

  /**
   * Subscribes a webhook endpoint to a queue (docs/webhooks.md). Keep the answer's `secret`:
   * the endpoint verifies signatures with it (`Webhook`), and it is shown only this once.
   */
  createSubscription(queue: string, fields: SubscriptionFields & { endpoint: string }): Promise<Subscription> {
    return this.#call({ method: "POST", path: `/api/queues/${seg(queue)}/subscriptions`, body: compact({ ...fields }) });
  }

  /** Every subscription, or a queue's, in id order. */
  async listSubscriptions(queue?: string): Promise<Subscription[]> {
    const path = queue === undefined ? "/api/subscriptions" : `/api/queues/${seg(queue)}/subscriptions`;
    const answer = await this.#call<{ subscriptions: Subscription[] }>({ method: "GET", path });
    return answer.subscriptions;
  }

  getSubscription(id: JobId): Promise<Subscription> {
    return this.#call({ method: "GET", path: `/api/subscriptions/${seg(id)}` });
  }

  /** Changes the fields named (`PATCH`); `null` resets a field to its default. */
  updateSubscription(id: JobId, fields: SubscriptionFields): Promise<Subscription> {
    return this.#call({ method: "PATCH", path: `/api/subscriptions/${seg(id)}`, body: compact({ ...fields }) });
  }

  enableSubscription(id: JobId): Promise<Subscription> {
    return this.#call({ method: "POST", path: `/api/subscriptions/${seg(id)}/enable` });
  }

  /** A disabled subscription's deliveries wait until it is enabled again. */
  disableSubscription(id: JobId): Promise<Subscription> {
    return this.#call({ method: "POST", path: `/api/subscriptions/${seg(id)}/disable` });
  }

  /** Removes a subscription and its deliveries. */
  deleteSubscription(id: JobId): Promise<DeletedSubscription> {
    return this.#call({ method: "DELETE", path: `/api/subscriptions/${seg(id)}` });
  }

  /** A new secret (generated, or `secret`); both sign every delivery until `overlap` ends (default 24 h). */
  rotateSecret(id: JobId, options: { secret?: string; overlap?: Duration } = {}): Promise<Subscription> {
    return this.#call({ method: "POST", path: `/api/subscriptions/${seg(id)}/rotate-secret`, body: compact({ ...options }) });
  }

  /** One page of a subscription's deliveries in id order. */
  listDeliveries(
    subscriptionId: JobId,
    options: { status?: JobStatus; after?: JobId; limit?: number } = {},
  ): Promise<DeliveryPage> {
    return this.#call({ method: "GET", path: `/api/subscriptions/${seg(subscriptionId)}/deliveries`, query: { ...options } });
  }

  /** The attempts of a page of `limit` deliveries after delivery `after`. */
  listSubscriptionAttempts(subscriptionId: JobId, options: { after?: JobId; limit?: number } = {}): Promise<AttemptPage> {
    return this.#call({ method: "GET", path: `/api/subscriptions/${seg(subscriptionId)}/attempts`, query: { ...options } });
  }

  /** One delivery with every attempt. */
  getDelivery(id: JobId): Promise<Delivery> {
    return this.#call({ method: "GET", path: `/api/deliveries/${seg(id)}` });
  }

  async listDeliveryAttempts(id: JobId): Promise<DeliveryAttempt[]> {
    const answer = await this.#call<{ attempts: DeliveryAttempt[] }>({ method: "GET", path: `/api/deliveries/${seg(id)}/attempts` });
    return answer.attempts;
  }

  /** Replays a dead delivery (`NotDead` if it is not dead); the ids replayed. */
  async replayDelivery(id: JobId, options: ReplayOptions = {}): Promise<JobId[]> {
    const answer = await this.#call<{ replayed: JobId[] }>({
      method: "POST",
      path: `/api/deliveries/${seg(id)}/replay`,
      body: compact({ ...options }),
    });
    return answer.replayed;
  }

  /** Replays a subscription's dead deliveries (those that died at or after `since`). */
  async replaySubscription(id: JobId, options: ReplayOptions & { since?: Time } = {}): Promise<JobId[]> {
    const answer = await this.#call<{ replayed: JobId[] }>({
      method: "POST",
      path: `/api/subscriptions/${seg(id)}/replay`,
      body: compact({ ...options, since: timeValue(options.since) }),
    });
    return answer.replayed;
  }

  // ---- the cluster ---------------------------------------------------------------------------

  /** Every live server of the cluster with the workers each has seen. */
  cluster(): Promise<Cluster> {
    return this.#call({ method: "GET", path: "/api/cluster" });
  }

  /** The cluster's activity per minute over the last `minutes` minutes (1–1440, default 60). */
  activity(minutes?: number): Promise<Activity> {
    return this.#call({ method: "GET", path: "/api/activity", query: { minutes } });
  }
}

/**
 * A streaming take (`POST /api/take/stream`): the jobs the server pushes as they become ready.
 * The server holds at most `max` jobs leased to the stream: complete or fail some to receive
 * more. `close()` ends the connection, and the server puts the jobs it still holds back to
 * `ready` at once, with no attempt used.
 *
 * ```ts
 * const stream = client.stream("emails", { max: 10 });
 * for await (const job of stream) {
 *   await send(job.payload);
 *   await client.complete(job);
 * }
 * ```
 */
export class JobStream implements AsyncIterable<TakenJob> {
  /** `performance.now()` of the last line (job or keep-alive) received. */
  lastLineAt = performance.now();
  readonly #url: URL;
  readonly #headers: Record<string, string>;
  readonly #body: string;
  readonly #timeoutMs: number;
  #request: ClientRequest | null = null;
  #response: IncomingMessage | null = null;
  #opening: Promise<this> | null = null;
  #events: AsyncGenerator<TakenJob | null> | null = null;
  #closed = false;

  constructor(url: string, headers: Record<string, string>, body: string, timeoutMs: number) {
    this.#url = new URL(url);
    this.#headers = headers;
    this.#body = body;
    this.#timeoutMs = timeoutMs;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Sends the request; throws the server's error if it refuses the stream. */
  open(): Promise<this> {
    this.#opening ??= this.#open();
    return this.#opening;
  }

  async #open(): Promise<this> {
    if (this.#closed) {
      return this;
    }
    // node:http rather than fetch: fetch's body timeout (5 minutes) would break a full
    // stream, which is silent for as long as its jobs run. Only the answer's headers have a
    // timeout here.
    const send = this.#url.protocol === "https:" ? httpsRequest : httpRequest;
    const response = await new Promise<IncomingMessage>((resolve, reject) => {
      const request = send(this.#url, {
        method: "POST",
        headers: { ...this.#headers, "content-length": Buffer.byteLength(this.#body) },
      });
      this.#request = request;
      const timer = setTimeout(() => {
        const error = new Error("no answer in time");
        error.name = "TimeoutError";
        request.destroy(error);
      }, this.#timeoutMs);
      request.once("response", (answer) => {
        clearTimeout(timer);
        resolve(answer);
      });
      request.once("error", (error) => {
        clearTimeout(timer);
        reject(error);
      });
      request.end(this.#body);
    }).catch((error: unknown) => {
      this.#closed = true;
      throw fetchError(error, "POST", this.#url.href);
    });
    if (response.statusCode !== 200) {
      const chunks: Buffer[] = [];
      try {
        for await (const chunk of response) {
          chunks.push(chunk as Buffer);
        }
      } catch {
        // What arrived is the message.
      }
      this.close();
      throw errorFromResponse(
        response.statusCode ?? 0,
        Buffer.concat(chunks).toString("utf8"),
        (response.headers["x-request-id"] as string | undefined) ?? null,
      );
    }
    this.#response = response;
    this.lastLineAt = performance.now();
    if (this.#closed) {
      this.#request?.destroy();
    }
    return this;
  }

  /**
   * Jobs as they arrive, and `null` for each keep-alive line (about one a second while the
   * stream has room): a loop that must notice a stop request gets a turn that often. Every
   * call continues the same iteration; it ends once the stream is closed.
   */
  events(): AsyncGenerator<TakenJob | null> {
    this.#events ??= this.#read();
    return this.#events;
  }

  async *#read(): AsyncGenerator<TakenJob | null> {
    await this.open();
    const response = this.#response;
    if (response === null || this.#closed) {
      return;
    }
    response.setEncoding("utf8");
    let buffer = "";
    try {
      for await (const chunk of response) {
        buffer += chunk as string;
        let newline: number;
        while ((newline = buffer.indexOf("\n")) >= 0) {
          const line = buffer.slice(0, newline);
          buffer = buffer.slice(newline + 1);
          this.lastLineAt = performance.now();
          if (this.#closed) {
            return;
          }
          yield parseStreamLine(line);
        }
      }
    } catch (error) {
      if (this.#closed) {
        return;
      }
      throw fetchError(error, "POST", this.#url.href);
    } finally {
      this.close();
    }
  }

  async *[Symbol.asyncIterator](): AsyncIterator<TakenJob> {
    for await (const job of this.events()) {
      if (job !== null) {
        yield job;
      }
    }
  }

  /** Closes the connection: the server puts the jobs the stream holds back to ready. */
  close(): void {
    this.#closed = true;
    this.#request?.destroy();
    this.#response?.destroy();
  }
}

/**
 * The result of parent `id` of a taken job (`undefined`: it gave none). Throws a `RangeError`
 * if the job did not wait for that one. Ids compare by value, `number` or `bigint`.
 */
export function parentResult<R = unknown>(job: Pick<TakenJob, "id" | "parents">, id: JobId): R | undefined {
  const parent = job.parents?.find((p) => String(p.id) === String(id));
  if (parent === undefined) {
    throw new RangeError(`job ${String(job.id)} did not wait for job ${String(id)}`);
  }
  return parent.result as R | undefined;
}

/** A job of the NDJSON stream, or null for the empty keep-alive line. */
export function parseStreamLine(line: string): TakenJob | null {
  if (!line.trim()) {
    return null;
  }
  let value: Json;
  try {
    value = parseJson(line);
  } catch (error) {
    throw new TenaxError(`unreadable line in the job stream: ${JSON.stringify(line.slice(0, 300))}`, { cause: error });
  }
  if (value === null || typeof value !== "object" || Array.isArray(value) || !("lease_token" in value)) {
    throw new TenaxError(`unexpected line in the job stream: ${JSON.stringify(line.slice(0, 300))}`);
  }
  return value as unknown as TakenJob;
}

