// What a worker logs, and where: a line per job outcome while outcomes are few, a summary every
// few seconds under load; on stderr unless told otherwise (a worker that prints nothing looks
// like a worker that does nothing).

import type { FailResult, TakenJob } from "./types.js";

/** Where a worker's lines go: `console` fits, as does any logger with these three methods. */
export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

export type Level = "info" | "warn" | "error";

/** The default logger: `<time> <LEVEL> tenax.worker: <message>` lines on stderr. */
export function stderrLogger(name = "tenax.worker"): Logger {
  const write = (level: string) => (message: string) => {
    process.stderr.write(`${new Date().toISOString()} ${level} ${name}: ${message}\n`);
  };
  return { info: write("INFO"), warn: write("WARNING"), error: write("ERROR") };
}

/** A logger that drops every line (`log: false`). */
export const silentLogger: Logger = { info() {}, warn() {}, error() {} };

/** Outcomes in one second above which the worker logs summaries instead of a line per job. */
export const BURST = 10;
/** How often a summary line is written while the worker summarizes, in ms. */
export const SUMMARY_EVERY_MS = 5_000;

/** A duration in a log line: `0.04 ms`, `3.5 ms`, `35 ms`, `2.5 s`. */
export function shown(ms: number): string {
  if (ms < 1) {
    return `${ms.toFixed(2)} ms`;
  }
  if (ms < 10) {
    return `${ms.toFixed(1)} ms`;
  }
  if (ms < 1000) {
    return `${ms.toFixed(0)} ms`;
  }
  return `${(ms / 1000).toFixed(1)} s`;
}

function nextRun(result: FailResult, snoozed: boolean): string {
  let when: string;
  if (result.delay_ms !== undefined && result.delay_ms !== null) {
    when = `in ${shown(result.delay_ms)}`;
  } else if (result.status === "ready") {
    when = "now";
  } else {
    return result.status;
  }
  if (snoozed || result.attempt === undefined || result.attempt === null) {
    return `runs again ${when}`;
  }
  return `attempt ${result.attempt} ${when}`;
}

class Tally {
  completed = 0;
  ranMs = 0;
  longestMs = 0;
  retried = 0;
  snoozed = 0;
  dead = 0;
  cancelled = 0;
  unknown = new Map<string, number>();
  lastFailure: string | null = null;

  constructor(readonly started: number) {}

  get count(): number {
    return this.completed + this.retried + this.snoozed + this.dead + this.cancelled;
  }

  get level(): Level {
    return this.unknown.size ? "error" : this.dead ? "warn" : "info";
  }

  line(ms: number, handled: string[]): string {
    const parts: string[] = [];
    if (this.completed) {
      parts.push(`${this.completed} completed (mean ${shown(this.ranMs / this.completed)}, longest ${shown(this.longestMs)})`);
    }
    if (this.retried) {
      parts.push(`${this.retried} failed and run again`);
    }
    if (this.snoozed) {
      parts.push(`${this.snoozed} snoozed`);
    }
    if (this.dead) {
      parts.push(`${this.dead} dead`);
    }
    if (this.cancelled) {
      parts.push(`${this.cancelled} cancelled`);
    }
    let text = `last ${(ms / 1000).toFixed(1)} s: ${parts.join(", ")}`;
    if (this.lastFailure !== null) {
      text += `; last failure: ${this.lastFailure}`;
    }
    if (this.unknown.size) {
      const types = [...this.unknown.entries()]
        .sort(([a], [b]) => (a < b ? -1 : 1))
        .map(([type, n]) => `${JSON.stringify(type)} (${n} job${n === 1 ? "" : "s"})`)
        .join(", ");
      text += `; no handler for job type ${types} in this worker (it handles: ${quoted(handled)})`;
    }
    return text;
  }
}

export function quoted(types: string[]): string {
  return types.map((t) => JSON.stringify(t)).join(", ") || "none";
}

/**
 * The log lines of job outcomes. A line per outcome while there are at most `BURST` in a second
 * (counted in fixed one-second windows); past that, a summary every `SUMMARY_EVERY_MS`, until a
 * summary window averages `BURST` a second or fewer. A line is at info, warn when a job is dead,
 * error when its type has no handler in this worker.
 */
export class OutcomeLog {
  #secondStarted = -Infinity;
  #inSecond = 0;
  #tally: Tally | null = null;

  constructor(
    private readonly log: Logger,
    private readonly handled: () => string[],
    private readonly clock: () => number = () => performance.now(),
  ) {}

  completed(job: TakenJob, ranMs: number): void {
    this.#record(
      (tally) => {
        tally.completed++;
        tally.ranMs += ranMs;
        tally.longestMs = Math.max(tally.longestMs, ranMs);
      },
      "info",
      () => `job ${job.id} (${job.type}) completed in ${shown(ranMs)}`,
    );
  }

  /** A failure the server recorded; `ranMs` is null when no handler ran. */
  failed(job: TakenJob, ranMs: number | null, message: string, result: FailResult, snoozed: boolean, unknown: boolean): void {
    const took = ranMs === null ? "" : ` in ${shown(ranMs)}`;
    const dead = result.status === "dead";
    const cancelled = result.status === "cancelled";
    const level: Level = unknown ? "error" : dead ? "warn" : "info";
    let line: string;
    if (cancelled) {
      line = `job ${job.id} (${job.type}) cancelled${took}; its handler stopped`;
    } else if (snoozed) {
      line = `job ${job.id} (${job.type}) snoozed: ${nextRun(result, true)}`;
    } else if (dead) {
      line = `job ${job.id} (${job.type}) failed${took} and is dead: ${message} (${result.dead_reason ?? "dead"})`;
    } else {
      line = `job ${job.id} (${job.type}) failed${took}: ${message}; ${nextRun(result, false)}`;
    }
    this.#record(
      (tally) => {
        if (cancelled) {
          tally.cancelled++;
          return;
        }
        if (snoozed) {
          tally.snoozed++;
          return;
        }
        if (dead) {
          tally.dead++;
        } else {
          tally.retried++;
        }
        tally.lastFailure = `job ${job.id} (${job.type}): ${message}`;
        if (unknown) {
          tally.unknown.set(job.type, (tally.unknown.get(job.type) ?? 0) + 1);
        }
      },
      level,
      () => line,
    );
  }

  /** Writes the summary when one is due (called often, so that one comes after the load stops too). */
  tick(): void {
    this.#summarizeIfDue(this.clock());
  }

  /** Writes the summary of what is not summarized yet (when the worker stops). */
  flush(): void {
    if (this.#tally !== null) {
      this.#summarize(this.clock());
    }
  }

  #record(count: (tally: Tally) => void, level: Level, line: () => string): void {
    const moment = this.clock();
    if (this.#tally === null) {
      if (moment - this.#secondStarted >= 1000) {
        this.#secondStarted = moment;
        this.#inSecond = 0;
      }
      this.#inSecond++;
      if (this.#inSecond <= BURST) {
        this.log[level](line());
        return;
      }
      this.log.info(
        `more than ${BURST} job outcomes a second: a summary every ${SUMMARY_EVERY_MS / 1000} s instead of a line per job`,
      );
      this.#tally = new Tally(moment);
    }
    count(this.#tally);
    this.#summarizeIfDue(moment);
  }

  #summarizeIfDue(moment: number): void {
    if (this.#tally !== null && moment - this.#tally.started >= SUMMARY_EVERY_MS) {
      this.#summarize(moment);
    }
  }

  #summarize(moment: number): void {
    const tally = this.#tally as Tally;
    const ms = moment - tally.started;
    if (tally.count) {
      this.log[tally.level](tally.line(ms, this.handled()));
    }
    const calm = tally.count <= (BURST * ms) / 1000;
    this.#tally = calm ? null : new Tally(moment);
    this.#secondStarted = -Infinity;
  }
}
