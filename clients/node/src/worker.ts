// The worker runtime (docs/workers.md): handlers per job type, run from one streaming take.

import { EventEmitter } from "node:events";

import { Client, checkWorkerName, defaultWorkerName, durationMs, type JobStream } from "./client.js";
import { ApiError, InvalidRequest, LeaseLost, NotFound, NotInFlight, TenaxError } from "./errors.js";
import { describe, JobCancelled, PayloadMismatch, UnknownJobType } from "./outcomes.js";
import type { CompleteResult, Duration, FailOptions, FailResult, LeaseExtended, TakenJob } from "./types.js";
import { type Logger, OutcomeLog, quoted, silentLogger, stderrLogger } from "./worker-log.js";

/** A completion waiting to be sent. */
interface Ack {
  held: Held;
  result: unknown;
  ranMs: number;
  queuedAt: number;
}

/** The index of the job whose result made the server refuse a batch of `size`, if that is why. */
function refusedResult(error: unknown, size: number): number | null {
  if (!(error instanceof InvalidRequest)) {
    return null;
  }
  const match = /^jobs\[(\d+)\]\.result$/.exec(error.field ?? "");
  const index = match === null ? NaN : Number(match[1]);
  return Number.isInteger(index) && index < size ? index : null;
}

/** What a handler gets beside its job. */
export interface JobContext {
  /**
   * Aborted when the job is no longer this worker's to finish: its lease was lost, or the
   * worker's shutdown deadline passed while it ran. Pass it to `fetch` and the like.
   */
  signal: AbortSignal;
  /** The worker running the job. */
  worker: Worker;
}

/**
 * A handler: returning (or resolving) completes the job, with the value as its result when it
 * is one (not `undefined` or `null`; the server refuses one over its payload limit, and the job
 * is then completed without it); throwing fails it (see `JobOutcome`).
 */
export type Handler<P = unknown> = (job: TakenJob<P>, context: JobContext) => unknown;

export interface HandlerOptions<P> {
  /**
   * Turns the JSON payload into the handler's type before the call (a validator, a class's
   * constructor). A payload it throws on makes the job dead (`PayloadMismatch`): no retry would
   * change that.
   */
  payload?: (raw: unknown) => P;
}

export interface WorkerOptions {
  /** The client to use (default: a new `Client()`, from `$TENAX_URL` and `$TENAX_TOKEN`). */
  client?: Client;
  /** How many handlers run at once (1–1000, default 10). */
  concurrency?: number;
  /**
   * How many jobs beyond `concurrency` the stream may lease ahead, waiting here for a free
   * handler (default 0). Prefetched jobs are heartbeated while they wait; at shutdown those not
   * started go back to the queue without using an attempt.
   */
  prefetch?: number;
  /** Each job's lease (default `"30s"`); at least 500 ms. */
  lease?: Duration;
  /** How often a held job's lease is extended, in ms (default half the lease). */
  heartbeatEvery?: number;
  /** How long a completion may wait to be batched with others, in ms (default 50). */
  ackInterval?: number;
  /** At most this many completions per `POST /api/jobs/complete` (1–10 000, default 100). */
  ackBatch?: number;
  /** How long running handlers get to finish at shutdown, in ms (default 25 000). */
  shutdownTimeout?: number;
  /** Jobs of a type without a handler: `"dead"` (default) or `"retry"` (left to their policy). */
  unknownTypes?: "dead" | "retry";
  /** Shown every error a handler throws (before it is reported). */
  onError?: (job: TakenJob, error: unknown) => void;
  /** Where log lines go (default: stderr); `false` for none. `console` fits. */
  logger?: Logger | false;
  /** The name given to the server (default: the client's worker name, else `<hostname>-<pid>`). */
  name?: string;
}

/** Counters of a worker since it started (they only grow). */
export interface WorkerStats {
  /** Jobs the stream handed to this worker. */
  received: number;
  /** Handlers that returned. */
  succeeded: number;
  /** Failures reported to the server (thrown errors, unknown types, bad payloads). */
  failed: number;
  /** Completions the server confirmed. */
  completed: number;
  /** Batch completion requests sent (`POST /api/jobs/complete`). */
  ackRequests: number;
  /** Lease extensions the server confirmed. */
  heartbeats: number;
  /** Jobs whose lease this worker lost: their result was not kept. */
  lost: number;
  /** Jobs still running at the shutdown deadline: given back to the queue unreported. */
  abandoned: number;
  /** Jobs received but not started before shutdown or a reconnection: given back to the queue. */
  returned: number;
  /** Times the job stream could not open or broke. */
  streamErrors: number;
}

type HeldState = "queued" | "running" | "acking" | "reporting" | "parked" | "lost" | "abandoned";

interface Held {
  job: TakenJob;
  state: HeldState;
  generation: number;
  nextBeat: number;
  beating: boolean;
  startedAt: number;
  controller: AbortController;
  /** A heartbeat said the job was cancelled: its signal is aborted with `JobCancelled`. */
  cancelled: boolean;
}

interface Registered {
  fn: Handler<unknown>;
  payload: ((raw: unknown) => unknown) | undefined;
}

/** A stream silent this long while it has room for jobs (the server sends a line a second) is dead. */
const STALE_STREAM_MS = 15_000;

const GONE = [LeaseLost, NotInFlight, NotFound];
function gone(error: unknown): boolean {
  return GONE.some((Class) => error instanceof Class);
}

function key(job: TakenJob): string {
  return String(job.lease_token);
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

class Backoff {
  #current = 0;
  constructor(
    private readonly first: number,
    private readonly cap: number,
  ) {}
  next(): number {
    this.#current = this.#current === 0 ? this.first : Math.min(this.cap, this.#current * 2);
    return this.#current;
  }
  reset(): void {
    this.#current = 0;
  }
}

/**
 * Runs handlers for the jobs of some queues.
 *
 * ```ts
 * const worker = new Worker("emails", { concurrency: 20 });
 * worker.handle("email.send", async (job: TakenJob<{ to: string }>) => {
 *   await smtp.send(job.payload.to, { idempotencyKey: String(job.id) });
 * });
 * await worker.run(); // until SIGTERM / SIGINT, or worker.stop()
 * ```
 *
 * - **Taking.** One streaming take (`POST /api/take/stream`) with `max` = `concurrency` +
 *   `prefetch`: the server pushes jobs as they become ready and never leases more to this
 *   worker than that.
 * - **Heartbeats.** Every held job's lease is extended each `heartbeatEvery` (half the lease),
 *   so a handler may run longer than its lease. A job whose heartbeat says the lease is gone is
 *   `lost`: its `signal` is aborted, and its result is not reported.
 * - **Acknowledgements.** Completions are batched: one `POST /api/jobs/complete` per `ackBatch`
 *   jobs, or after `ackInterval`, or at once when no handler is running, and always before
 *   shutdown. Failures are reported at once.
 * - **Outcomes.** A handler that returns completes its job; one that throws fails it: any error,
 *   or `Retry`, lets the policy decide; `NotRetryable` makes it dead; `RetryIn`/`RetryAt`
 *   choose when it runs again; `Snooze` puts it off without using an attempt. A job of a type
 *   without a handler is dead at once (`unknownTypes: "retry"` leaves it to its policy).
 * - **Logs** (stderr by default): the start, each job's outcome, the stop; past 10 outcomes a
 *   second, a summary every 5 s.
 * - **Shutdown** (SIGTERM, SIGINT under `run()`, or `stop()`): no new job starts; running
 *   handlers get `shutdownTimeout` to finish; completions are flushed; the stream is closed,
 *   which gives every job it still holds back to the queue without using an attempt. A second
 *   signal skips the wait.
 * - **Events**: `"received"` (job), `"start"` (job), `"heartbeat"` (job, LeaseExtended),
 *   `"completed"` (job), `"failed"` (job, FailResult), `"lost"` (job, error), `"stopping"`,
 *   `"stopped"` (stats).
 */
export class Worker extends EventEmitter {
  /** The name this worker gives the server. */
  readonly name: string;
  readonly client: Client;
  readonly queues: string[];
  readonly concurrency: number;
  readonly prefetch: number;
  readonly leaseMs: number;
  readonly heartbeatMs: number;
  readonly ackIntervalMs: number;
  readonly ackBatch: number;
  readonly shutdownTimeoutMs: number;
  readonly unknownTypes: "dead" | "retry";

  readonly #handlers = new Map<string, Registered>();
  readonly #log: Logger;
  readonly #outcomes: OutcomeLog;
  readonly #onError: ((job: TakenJob, error: unknown) => void) | undefined;
  readonly #stats: WorkerStats = {
    received: 0,
    succeeded: 0,
    failed: 0,
    completed: 0,
    ackRequests: 0,
    heartbeats: 0,
    lost: 0,
    abandoned: 0,
    returned: 0,
    streamErrors: 0,
  };

  /** Every job this worker holds a lease on, by lease token. */
  readonly #held = new Map<string, Held>();
  /** Jobs received and not started, oldest first (prefetched ones wait here). */
  #pending: Held[] = [];
  #running = 0;
  #stream: JobStream | null = null;
  #generation = 0;
  readonly #reconnect = new Backoff(200, 5_000);
  #beatsFailingSince: number | null = null;

  /** Completions waiting to be sent, oldest first. */
  #acks: Ack[] = [];
  #ackTimer: NodeJS.Timeout | null = null;
  #acking: Promise<void> | null = null;
  readonly #ackBackoff = new Backoff(200, 2_000);
  /** Set at shutdown once no handler will add a completion: send everything now. */
  #finalAcks = false;

  #started = false;
  #stopping = false;
  #hurry = false;
  #closeStream = false;
  #changed = deferred();
  #stopAsked = deferred();
  #done: Promise<void> | null = null;
  #beatTimer: NodeJS.Timeout | null = null;

  constructor(queues: string | readonly string[], options: WorkerOptions = {}) {
    super();
    this.queues = typeof queues === "string" ? [queues] : [...queues];
    if (this.queues.length === 0) {
      throw new RangeError("a worker needs at least one queue");
    }
    this.concurrency = options.concurrency ?? 10;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1 || this.concurrency > 1000) {
      throw new RangeError(`concurrency must be from 1 to 1000, got ${this.concurrency}`);
    }
    this.prefetch = options.prefetch ?? 0;
    if (!Number.isInteger(this.prefetch) || this.prefetch < 0 || this.concurrency + this.prefetch > 1000) {
      throw new RangeError(`prefetch must be 0 or more, with concurrency + prefetch at most 1000, got ${this.prefetch}`);
    }
    this.leaseMs = durationMs(options.lease ?? "30s");
    if (!(this.leaseMs >= 500)) {
      throw new RangeError(`lease must be at least 500 ms, got ${this.leaseMs} ms`);
    }
    this.heartbeatMs = options.heartbeatEvery ?? this.leaseMs / 2;
    if (!(this.heartbeatMs > 0 && this.heartbeatMs < this.leaseMs)) {
      throw new RangeError(`heartbeatEvery must be above 0 and below the lease (${this.leaseMs} ms), got ${this.heartbeatMs}`);
    }
    this.ackIntervalMs = options.ackInterval ?? 50;
    this.ackBatch = options.ackBatch ?? 100;
    if (!Number.isInteger(this.ackBatch) || this.ackBatch < 1 || this.ackBatch > 10_000) {
      throw new RangeError(`ackBatch must be from 1 to 10000, got ${this.ackBatch}`);
    }
    this.shutdownTimeoutMs = options.shutdownTimeout ?? 25_000;
    this.unknownTypes = options.unknownTypes ?? "dead";
    if (this.unknownTypes !== "dead" && this.unknownTypes !== "retry") {
      throw new RangeError(`unknownTypes must be "dead" or "retry", got ${JSON.stringify(this.unknownTypes)}`);
    }
    this.name = options.name !== undefined ? checkWorkerName(options.name) : (options.client?.worker ?? defaultWorkerName());
    this.client = (options.client ?? new Client()).withWorker(this.name);
    this.#log = options.logger === false ? silentLogger : (options.logger ?? stderrLogger());
    this.#outcomes = new OutcomeLog(this.#log, () => this.types());
    this.#onError = options.onError;
  }

  // ---- registration --------------------------------------------------------------------------

  /** Registers `fn` for jobs of `type`. */
  handle<P = unknown>(type: string, fn: Handler<P>, options: HandlerOptions<P> = {}): this {
    if (this.#handlers.has(type)) {
      throw new Error(`a handler for job type ${JSON.stringify(type)} is already registered`);
    }
    this.#handlers.set(type, { fn: fn as Handler<unknown>, payload: options.payload });
    return this;
  }

  /** The job types this worker handles, sorted. */
  types(): string[] {
    return [...this.#handlers.keys()].sort();
  }

  /** A snapshot of the counters. */
  get stats(): WorkerStats {
    return { ...this.#stats };
  }

  /** True once a stop was asked for: a long handler may check it to give up early. */
  get stopping(): boolean {
    return this.#stopping;
  }

  /** How many handlers are running now. */
  get running(): number {
    return this.#running;
  }

  // ---- running -------------------------------------------------------------------------------

  /**
   * Works until a stop is asked for, then shuts down gracefully; resolves once stopped. With
   * `signals` (default true), SIGTERM and SIGINT ask for the stop, and a second one skips the
   * wait for running handlers.
   */
  async run(options: { signals?: boolean } = {}): Promise<void> {
    const signals = options.signals ?? true;
    const onSignal = (signal: NodeJS.Signals): void => {
      if (this.#stopping) {
        this.#log.warn("second signal: not waiting for running handlers");
        this.#hurry = true;
        this.#notify();
      } else {
        this.#log.info(`signal ${signal}: stopping`);
      }
      void this.stop();
    };
    if (signals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    try {
      await this.start();
      await this.#done;
    } finally {
      if (signals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
    }
  }

  /** Starts working in the background (no signal handlers); `stop()` ends it. */
  start(): Promise<void> {
    if (this.#started) {
      throw new Error("this worker has already run; make a new one");
    }
    if (this.#handlers.size === 0) {
      throw new Error("register at least one handler before running the worker");
    }
    this.#started = true;
    this.#done = this.#main();
    // Resolves once the worker is started: the stream opens in the background.
    return Promise.resolve();
  }

  /**
   * Asks the worker to stop; resolves once it has shut down (at once when it never started).
   * Safe to call more than once, and from a handler (do not await it there: the shutdown waits
   * for that handler).
   */
  stop(options: { now?: boolean } = {}): Promise<void> {
    if (options.now) {
      this.#hurry = true;
    }
    if (!this.#stopping) {
      this.#stopping = true;
      this.#tell("stopping");
      this.#stopAsked.resolve();
    }
    this.#notify();
    return this.#done ?? Promise.resolve();
  }

  async #main(): Promise<void> {
    this.#log.info(
      `worker started: ${this.client.url}, queues ${quoted(this.queues)}, concurrency ${this.concurrency}` +
        `${this.prefetch ? ` (prefetch ${this.prefetch})` : ""}, types ${quoted(this.types())} (jobs of other types ${
          this.unknownTypes === "retry" ? "are retried" : "go dead"
        })`,
    );
    const tick = Math.max(50, Math.min(500, this.heartbeatMs / 4));
    this.#beatTimer = setInterval(() => this.#beatTick(), tick);
    const reading = this.#readLoop();
    await this.#stopAsked.promise;

    // 1. No new job starts: those waiting go back with the stream.
    for (const held of this.#pending) {
      if (held.state === "queued") {
        held.state = "parked";
      }
    }
    this.#pending = [];
    this.#log.info(
      `stopping: no new jobs; waiting up to ${(this.shutdownTimeoutMs / 1000).toFixed(1)} s for ${this.#running} running handler(s)`,
    );
    // 2. Running handlers get the shutdown timeout to finish.
    const deadline = performance.now() + this.shutdownTimeoutMs;
    await this.#waitUntil(() => this.#running === 0 || this.#hurry, deadline);
    let abandoned = 0;
    for (const held of this.#held.values()) {
      if (held.state === "running") {
        held.state = "abandoned";
        held.controller.abort(new Error("the worker is shutting down"));
        abandoned++;
      }
    }
    if (abandoned) {
      this.#stats.abandoned += abandoned;
      this.#log.warn(
        `${abandoned} handler(s) still running after ${(this.shutdownTimeoutMs / 1000).toFixed(1)} s: abandoned, their jobs go back to the queue`,
      );
    }
    // Failure reports under way finish (their handlers ended).
    await this.#waitUntil(() => ![...this.#held.values()].some((h) => h.state === "reporting"), deadline + 5_000);
    // 3. Completions are flushed.
    this.#finalAcks = true;
    await this.#flushAll();
    // 4. The stream closes: the server gives back what it still holds.
    this.#closeStream = true;
    this.#stream?.close();
    await reading;
    if (this.#beatTimer !== null) {
      clearInterval(this.#beatTimer);
    }
    this.#outcomes.flush();
    const s = this.#stats;
    this.#log.info(
      `worker stopped: ${s.completed} completed, ${s.failed} failed, ${s.returned} returned, ${s.abandoned} abandoned, ${s.lost} lost`,
    );
    this.#tell("stopped", this.stats);
  }

  /**
   * Emits an event; a listener that throws is logged, and the worker goes on (the listeners are
   * the application's code, run in the middle of the worker's own work).
   */
  #tell(event: string, ...args: unknown[]): void {
    try {
      this.emit(event, ...args);
    } catch (error) {
      this.#log.error(`a listener of "${event}" threw: ${(error as Error)?.stack ?? String(error)}`);
    }
  }

  #notify(): void {
    const changed = this.#changed;
    this.#changed = deferred();
    changed.resolve();
  }

  /** Waits until `done()` holds or the deadline (a `performance.now()` time) passes. */
  async #waitUntil(done: () => boolean, deadline: number): Promise<void> {
    while (!done()) {
      const left = deadline - performance.now();
      if (left <= 0) {
        return;
      }
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([this.#changed.promise, new Promise<void>((resolve) => (timer = setTimeout(resolve, left)))]);
      clearTimeout(timer);
    }
  }

  /** Waits `ms`, or less if the stream is to close. */
  async #pause(ms: number): Promise<void> {
    await this.#waitUntil(() => this.#closeStream || (this.#stopping && this.#stream === null), performance.now() + ms);
  }

  // ---- the stream ----------------------------------------------------------------------------

  async #readLoop(): Promise<void> {
    while (!this.#closeStream) {
      if (this.#stopping) {
        // A stream that broke during shutdown is not opened again: what it held went back.
        return;
      }
      const stream = this.client.stream(this.queues, {
        max: this.concurrency + this.prefetch,
        lease: this.leaseMs,
      });
      try {
        await stream.open();
      } catch (error) {
        this.#stats.streamErrors++;
        const delay = this.#reconnect.next();
        this.#log.warn(`cannot open the job stream (${(error as Error).message}); again in ${(delay / 1000).toFixed(1)} s`);
        await this.#pause(delay);
        continue;
      }
      if (this.#closeStream) {
        stream.close();
        return;
      }
      this.#stream = stream;
      const generation = ++this.#generation;
      try {
        for await (const job of stream.events()) {
          if (job !== null) {
            this.#receive(job, generation);
          }
          if (this.#closeStream) {
            break;
          }
        }
        if (!this.#stopping && !stream.closed) {
          this.#log.warn("the server ended the job stream; opening it again");
        }
      } catch (error) {
        if (!this.#closeStream) {
          this.#stats.streamErrors++;
          const reason = error instanceof TenaxError ? error.message : ((error as Error)?.stack ?? String(error));
          this.#log.warn(`the job stream broke: ${reason}`);
        }
      } finally {
        // The jobs received but not started are forgotten before the stream closes: the close
        // hands them back to the server.
        this.#stream = null;
        this.#forgetStream(generation);
        stream.close();
        this.#notify();
      }
      if (!this.#closeStream && !this.#stopping) {
        await this.#pause(this.#reconnect.next());
      }
    }
  }

  #receive(job: TakenJob, generation: number): void {
    this.#reconnect.reset();
    this.#stats.received++;
    const held: Held = {
      job,
      state: this.#stopping ? "parked" : "queued",
      generation,
      nextBeat: performance.now() + this.heartbeatMs,
      beating: false,
      startedAt: 0,
      controller: new AbortController(),
      cancelled: false,
    };
    this.#held.set(key(job), held);
    this.#tell("received", job);
    if (!this.#stopping) {
      this.#pending.push(held);
      this.#pump();
    }
  }

  #forgetStream(generation: number): void {
    let returned = 0;
    for (const [k, held] of this.#held) {
      if (held.generation === generation && (held.state === "queued" || held.state === "parked")) {
        held.state = "lost";
        this.#held.delete(k);
        returned++;
      }
    }
    this.#pending = this.#pending.filter((held) => held.state === "queued");
    if (returned) {
      this.#stats.returned += returned;
    }
  }

  // ---- handlers ------------------------------------------------------------------------------

  #pump(): void {
    while (this.#running < this.concurrency && this.#pending.length > 0 && !this.#stopping) {
      const held = this.#pending.shift() as Held;
      if (held.state === "queued") {
        void this.#runJob(held);
      }
    }
  }

  async #runJob(held: Held): Promise<void> {
    held.state = "running";
    held.startedAt = performance.now();
    this.#running++;
    const job = held.job;
    this.#tell("start", job);
    try {
      let outcome: { ok: true; result: unknown } | { ok: false; error: unknown };
      let handler: Registered | undefined;
      try {
        handler = this.#handlers.get(job.type);
        if (handler === undefined) {
          throw new UnknownJobType(
            `no handler for job type ${JSON.stringify(job.type)} in this worker (it handles: ${quoted(this.types())})`,
            this.unknownTypes === "retry",
            { detail: { type: job.type, handled: this.types() } },
          );
        }
        let taken: TakenJob = job;
        if (handler.payload !== undefined) {
          try {
            taken = { ...job, payload: handler.payload(job.payload) };
          } catch (error) {
            throw new PayloadMismatch(
              `the payload of job type ${JSON.stringify(job.type)} does not fit: ${(error as Error)?.message ?? String(error)}`,
              { cause: error },
            );
          }
        }
        const value = await handler.fn(taken, { signal: held.controller.signal, worker: this });
        outcome = { ok: true, result: value ?? undefined };
      } catch (error) {
        outcome = { ok: false, error };
      }
      if (held.cancelled && outcome.ok) {
        // Cancelled while it ran: however the handler ended, the worker reports a failure,
        // which the server finishes as cancelled.
        outcome = { ok: false, error: held.controller.signal.reason };
      }
      if (outcome.ok) {
        this.#stats.succeeded++;
        if (held.state === "running") {
          held.state = "acking";
          this.#acks.push({
            held,
            result: outcome.result,
            ranMs: performance.now() - held.startedAt,
            queuedAt: performance.now(),
          });
        }
      } else {
        if (handler !== undefined && this.#onError !== undefined) {
          try {
            this.#onError(job, outcome.error);
          } catch (hookError) {
            this.#log.error(`the onError hook threw: ${(hookError as Error)?.stack ?? String(hookError)}`);
          }
        }
        if (held.state === "running") {
          held.state = "reporting";
          const noRun = outcome.error instanceof UnknownJobType || outcome.error instanceof PayloadMismatch;
          await this.#reportFailure(held, outcome.error, noRun ? null : performance.now() - held.startedAt);
        }
      }
    } finally {
      this.#running--;
      // A heartbeat or the shutdown may have changed it while the handler ran.
      const state = held.state as HeldState;
      if (state === "lost" || state === "abandoned") {
        this.#held.delete(key(job));
      }
      this.#scheduleAcks();
      this.#pump();
      this.#notify();
    }
  }

  async #reportFailure(held: Held, error: unknown, ranMs: number | null): Promise<void> {
    const job = held.job;
    let { message, detail, options } = describe(error);
    const snoozed = options.snooze !== undefined;
    const unknown = error instanceof UnknownJobType;
    const backoff = new Backoff(200, 2_000);
    try {
      for (let attempt = 1; attempt <= 5; attempt++) {
        let result: FailResult;
        try {
          result = await this.client.fail(job, message, { ...(options as FailOptions), detail });
        } catch (failure) {
          if (gone(failure)) {
            this.#stats.lost++;
            this.#log.warn(`job ${job.id}: cannot report its failure: ${(failure as Error).message}`);
            return;
          }
          if (failure instanceof InvalidRequest) {
            // The report itself was refused (a detail the server cannot store, a retry time too
            // far ahead): report the failure plainly, with the reason.
            this.#log.error(`job ${job.id}: failure report refused (${failure.message}); sent plainly`);
            message = `${message} (report refused: ${failure.message})`;
            detail = undefined;
            options = {};
            continue;
          }
          const delay = backoff.next();
          this.#log.warn(`job ${job.id}: cannot report its failure (${(failure as Error).message}); again in ${(delay / 1000).toFixed(1)} s`);
          await new Promise((resolve) => setTimeout(resolve, delay));
          continue;
        }
        this.#stats.failed++;
        this.#outcomes.failed(job, ranMs, message, result, snoozed, unknown);
        this.#tell("failed", job, result);
        return;
      }
      this.#log.error(`job ${job.id}: gave up reporting its failure; its lease will expire`);
    } finally {
      this.#held.delete(key(job));
    }
  }

  // ---- completions ---------------------------------------------------------------------------

  /** Sends a batch when one is due: full, old enough, final, or nothing running to add to it. */
  #scheduleAcks(): void {
    if (this.#acking !== null || this.#acks.length === 0) {
      return;
    }
    const oldest = this.#acks[0] as { queuedAt: number };
    const age = performance.now() - oldest.queuedAt;
    const due = this.#finalAcks || this.#running === 0 || this.#acks.length >= this.ackBatch || age >= this.ackIntervalMs;
    if (due) {
      if (this.#ackTimer !== null) {
        clearTimeout(this.#ackTimer);
        this.#ackTimer = null;
      }
      this.#acking = this.#sendAcks().finally(() => {
        this.#acking = null;
        this.#notify();
        this.#scheduleAcks();
      });
    } else if (this.#ackTimer === null) {
      this.#ackTimer = setTimeout(() => {
        this.#ackTimer = null;
        this.#scheduleAcks();
      }, Math.max(1, this.ackIntervalMs - age));
    }
  }

  async #sendAcks(): Promise<void> {
    const batch = this.#acks.splice(0, this.ackBatch);
    let results: CompleteResult[];
    try {
      this.#stats.ackRequests++;
      results = await this.client.completeMany(batch.map((a) => ({ job: a.held.job, result: a.result })));
    } catch (error) {
      const refused = refusedResult(error, batch.length);
      if (refused !== null) {
        // One result broke the server's rules (its size): that job completes without it.
        const ack = batch[refused] as Ack;
        this.#log.warn(`job ${ack.held.job.id}'s result was refused (${(error as Error).message}): it completes without one`);
        ack.result = undefined;
        this.#acks.unshift(...batch);
        return;
      }
      if (error instanceof ApiError && error.status < 500 && error.status !== 408) {
        this.#log.error(`completions of ${batch.length} jobs refused: ${error.message}`);
        this.#release(batch.map((a) => a.held));
        return;
      }
      this.#log.warn(`cannot report ${batch.length} completions: ${(error as Error).message}`);
      this.#acks.unshift(...batch);
      if (this.#finalAcks) {
        this.#log.error(`${this.#acks.length} completions could not be reported: those jobs will run again`);
        this.#release(this.#acks.map((a) => a.held));
        this.#acks = [];
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, this.#ackBackoff.next()));
      return;
    }
    this.#ackBackoff.reset();
    const sent = new Map(batch.map((a) => [String(a.held.job.id), a]));
    for (const result of results) {
      const waiting = sent.get(String(result.id));
      if (result.completed) {
        this.#stats.completed++;
        if (waiting !== undefined) {
          this.#outcomes.completed(waiting.held.job, waiting.ranMs);
          this.#tell("completed", waiting.held.job);
        }
      } else {
        this.#stats.lost++;
        this.#log.warn(`job ${result.id} ran, but its completion was refused: ${result.error?.message ?? "unknown reason"}`);
      }
    }
    this.#release(batch.map((a) => a.held));
  }

  #release(helds: Held[]): void {
    for (const held of helds) {
      if (this.#held.get(key(held.job)) === held) {
        this.#held.delete(key(held.job));
      }
    }
  }

  async #flushAll(): Promise<void> {
    for (;;) {
      this.#scheduleAcks();
      const acking = this.#acking;
      if (acking === null) {
        return;
      }
      await acking;
    }
  }

  // ---- heartbeats ----------------------------------------------------------------------------

  #beatTick(): void {
    this.#outcomes.tick();
    const now = performance.now();
    for (const held of this.#held.values()) {
      if (held.beating || held.nextBeat > now || held.state === "lost" || held.state === "abandoned") {
        continue;
      }
      held.beating = true;
      void this.#beat(held).finally(() => {
        held.beating = false;
      });
    }
    this.#watchStream(now);
  }

  async #beat(held: Held): Promise<void> {
    const job = held.job;
    let answer: LeaseExtended;
    try {
      answer = await this.client.heartbeat(job, { lease: this.leaseMs });
    } catch (error) {
      if (this.#held.get(key(job)) !== held) {
        return; // reported meanwhile
      }
      if (gone(error) && (held.state === "running" || held.state === "queued")) {
        held.state = "lost";
        held.controller.abort(error);
        if (this.#pending.includes(held)) {
          this.#held.delete(key(job)); // never started: nothing else will let it go
        }
        this.#pending = this.#pending.filter((h) => h !== held);
        this.#stats.lost++;
        this.#log.warn(`job ${job.id} lost its lease: ${(error as Error).message}; its result will not be reported`);
        this.#tell("lost", job, error);
        return;
      }
      if (gone(error)) {
        return; // its completion or failure report says what became of it
      }
      this.#log.warn(`job ${job.id}: heartbeat failed (${(error as Error).message}); trying again`);
      this.#beatsFailingSince ??= performance.now();
      held.nextBeat = performance.now() + Math.min(1000, this.heartbeatMs / 4);
      return;
    }
    this.#stats.heartbeats++;
    this.#beatsFailingSince = null;
    held.nextBeat = performance.now() + this.heartbeatMs;
    if (answer.cancelled === true && !held.cancelled) {
      held.cancelled = true;
      this.#log.info(`job ${job.id} was cancelled; its handler is told to stop`);
      held.controller.abort(new JobCancelled(job.id));
    }
    this.#tell("heartbeat", job, answer);
  }

  /** Closes a stream that went quiet, so that the reader opens a new one. */
  #watchStream(now: number): void {
    const stream = this.#stream;
    if (stream === null || this.#stopping) {
      return;
    }
    let holding = 0;
    for (const held of this.#held.values()) {
      if (held.generation === this.#generation && held.state !== "lost" && held.state !== "abandoned") {
        holding++;
      }
    }
    const silence = now - stream.lastLineAt;
    const full = holding >= this.concurrency + this.prefetch;
    const failing = this.#beatsFailingSince;
    if ((!full && silence > STALE_STREAM_MS) || (failing !== null && now - failing > this.leaseMs)) {
      this.#log.warn(
        `the job stream is silent (${(silence / 1000).toFixed(0)} s, ${holding} job(s) held) and heartbeats ${
          failing !== null ? "fail" : "are fine"
        }: reconnecting`,
      );
      this.#beatsFailingSince = null;
      stream.close();
    }
  }
}

