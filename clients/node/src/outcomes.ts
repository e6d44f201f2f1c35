// Errors a handler throws to choose what happens to its job (docs/workers.md#outcomes).
//
// Any other thrown value is a plain failure, the same as `Retry`: the job's policy decides when
// it runs again, and when it is dead. The message (`"TypeError: bad input"`) is recorded on the
// job, and `{"type", "stack"}` as the error's detail.

import type { Duration, FailOptions, JobId, Time } from "./types.js";

export interface OutcomeOptions {
  /** Any JSON recorded with the error (default: the error's type and stack, or its cause's). */
  detail?: unknown;
  /** The error this outcome stands for: its message is used when the outcome has none. */
  cause?: unknown;
}

/** Base class of the outcomes a handler can throw. */
export class JobOutcome extends Error {
  override name = "JobOutcome";
  readonly detail: unknown;

  constructor(message = "", options: OutcomeOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.detail = options.detail;
  }

  /** The outcome fields of `fail` for this error. */
  failOptions(): FailOptions {
    return {};
  }

  /** The message when none was given and no cause says more. */
  defaultMessage(): string {
    return this.name;
  }
}

/** Fail this attempt; the job's policy decides when it runs again (what any other error does). */
export class Retry extends JobOutcome {
  override name = "Retry";
}

/** Fail, and make the job dead at once whatever its policy (it can be replayed after a fix). */
export class NotRetryable extends JobOutcome {
  override name = "NotRetryable";
  override failOptions(): FailOptions {
    return { retryable: false };
  }
}

/** Fail, and retry after `delay` instead of the policy's delay. It uses an attempt. */
export class RetryIn extends JobOutcome {
  override name = "RetryIn";
  constructor(
    readonly delay: Duration,
    message = "",
    options: OutcomeOptions = {},
  ) {
    super(message, options);
  }
  override failOptions(): FailOptions {
    return { retry_in: this.delay };
  }
  override defaultMessage(): string {
    return `retry in ${typeof this.delay === "number" ? `${this.delay} ms` : this.delay}`;
  }
}

/** Fail, and retry at `at`. It uses an attempt. */
export class RetryAt extends JobOutcome {
  override name = "RetryAt";
  constructor(
    readonly at: Time,
    message = "",
    options: OutcomeOptions = {},
  ) {
    super(message, options);
  }
  override failOptions(): FailOptions {
    return { retry_at: this.at };
  }
  override defaultMessage(): string {
    return `retry at ${this.at instanceof Date ? this.at.toISOString() : String(this.at)}`;
  }
}

/**
 * Put the job off for `delay` without using an attempt (nothing is recorded on the job): for
 * "not now" rather than "failed", such as a rate limit or a busy resource.
 */
export class Snooze extends JobOutcome {
  override name = "Snooze";
  constructor(
    readonly delay: Duration,
    message = "",
    options: OutcomeOptions = {},
  ) {
    super(message, options);
  }
  override failOptions(): FailOptions {
    return { snooze: this.delay };
  }
  override defaultMessage(): string {
    return `snoozed for ${typeof this.delay === "number" ? `${this.delay} ms` : this.delay}`;
  }
}

/** The payload does not fit the handler's type: no retry will change that. */
export class PayloadMismatch extends NotRetryable {
  override name = "PayloadMismatch";
}

/**
 * A job whose type has no handler in this worker: dead at once by default, so that it shows
 * (in the log, among the dead jobs) instead of being retried unseen; with
 * `unknownTypes: "retry"` its policy retries it.
 */
export class UnknownJobType extends JobOutcome {
  override name = "UnknownJobType";
  constructor(
    message: string,
    readonly retryable: boolean,
    options: OutcomeOptions = {},
  ) {
    super(message, options);
  }
  override failOptions(): FailOptions {
    return this.retryable ? {} : { retryable: false };
  }
}

export const MAX_MESSAGE = 8_000;
const STACK_LINES = 30;

function plain(error: unknown): string {
  if (error instanceof Error) {
    return error.message ? `${error.name}: ${error.message}` : error.name;
  }
  if (typeof error === "string") {
    return error;
  }
  try {
    return `thrown: ${JSON.stringify(error) ?? String(error)}`;
  } catch {
    return `thrown: ${String(error)}`;
  }
}

function stackOf(error: unknown): unknown {
  if (error instanceof Error) {
    const lines = (error.stack ?? "").split("\n").slice(0, STACK_LINES).join("\n");
    return { type: error.name, stack: lines };
  }
  return { type: typeof error };
}

/**
 * The message, detail and fail options to report for what a handler threw. An outcome's
 * message is the one it was given; else its cause's; else what it does (`"retry in 60s"`).
 * Anything else gives `"Name: message"`. The detail is the outcome's own, or the type and the
 * first lines of the stack (of the cause, for an outcome with one).
 */
export function describe(error: unknown): { message: string; detail: unknown; options: FailOptions } {
  let message: string;
  let options: FailOptions = {};
  let detail: unknown;
  if (error instanceof JobOutcome) {
    const cause = error.cause;
    message = error.message || (cause !== undefined ? plain(cause) : error.defaultMessage());
    options = error.failOptions();
    detail = error.detail ?? stackOf(cause !== undefined ? cause : error);
  } else {
    message = plain(error);
    detail = stackOf(error);
  }
  if (message.length > MAX_MESSAGE) {
    message = `${message.slice(0, MAX_MESSAGE - 1)}…`;
  }
  return { message, detail, options };
}

/**
 * The reason a job's `AbortSignal` is aborted with when a heartbeat says the job was cancelled
 * (`POST /api/jobs/{id}/cancel`). The handler should stop: whatever it then returns or throws,
 * the worker reports a failure, which the server finishes as cancelled.
 */
export class JobCancelled extends Error {
  override name = "JobCancelled";
  constructor(readonly jobId: JobId) {
    super(`job ${jobId} was cancelled while it ran`);
  }
}
