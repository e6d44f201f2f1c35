// The shapes of the native API's requests and answers (docs/api.md).
//
// Objects that go to or come from the server keep the server's own field names (`run_at`,
// `lease_token`, `retry_limit`), so docs/api.md reads as the reference for them too. Times in
// answers are the server's RFC 3339 UTC strings, to the millisecond. Fields a newer server
// adds come through untyped.

/**
 * A job id, lease token, delivery or subscription id: a `number` while it is at most
 * `Number.MAX_SAFE_INTEGER`, a `bigint` above (exact, where `JSON.parse` would round it).
 * Send either back: both are written as their exact digits.
 */
export type JobId = number | bigint;

/** Integer milliseconds, or a string with units: `"250ms"`, `"12.5s"`, `"5m"`, `"1h30m"`, `"2d"`. */
export type Duration = number | string;

/** A `Date`, integer milliseconds since 1970, or an RFC 3339 string. */
export type Time = Date | number | string;

/** A retry or delivery policy in any of its three spellings (docs/policies.md). */
export type Policy = Record<string, unknown>;

/**
 * Where a job is in its lifecycle (docs/api.md). `waiting`: it waits for the jobs it was
 * enqueued `after` (docs/workflows.md). `cancelled`: stopped by `cancel` (or because a job
 * it waited for did not complete).
 */
export type JobStatus =
  | "waiting"
  | "scheduled"
  | "ready"
  | "in_flight"
  | "completed"
  | "dead"
  | "cancelled";

/**
 * What a waiting job does when a job it waits for will not complete: `"cancel"` (the default:
 * it ends too, and so do the jobs waiting for it) or `"run"` (it still runs once its other
 * parents are done, and finds the dead parent among its `parents`).
 */
export type OnParentDead = "cancel" | "run";

/**
 * A job that a job of a batch waits for: a stored job by its id, or another job of the same
 * batch by its position (`{ index: 0 }`) or its `step` name (`{ step: "extract" }`), whether it
 * comes before or after in the list.
 */
export type BatchParent = JobId | { index: number } | { step: string };

export type OnDuplicate = "refuse" | "existing";

/** The options of one enqueue (`POST /api/jobs`), beside `queue`, `type` and `payload`. */
export interface EnqueueOptions {
  /** Higher runs first; FIFO within a priority (default 0). */
  priority?: number;
  /** When the job becomes ready (default now). */
  run_at?: Time;
  /** An alternative to `run_at`. */
  delay?: Duration;
  /** This job's retry policy, in any spelling (default: its queue's, else the server's). */
  policy?: Policy;
  /** Overrides the policy's retry limit (at most 100 000). */
  retry_limit?: number;
  /** At most one unfinished job per queue and key. */
  unique_key?: string;
  /** What a duplicate key gets: `"refuse"` (a `Duplicate` error, the default) or `"existing"`. */
  on_duplicate?: OnDuplicate;
  /** A W3C trace context, kept with the job and handed to its workers and deliveries. */
  traceparent?: string;
  /**
   * Stored jobs (by id) this one waits for: it is `waiting` until each has completed, then
   * runs with their results in its `parents`. A graph of new jobs goes in one `enqueueMany`.
   */
  after?: readonly JobId[];
  /** With `after`: what it does when one of those will not complete (default `"cancel"`). */
  on_parent_dead?: OnParentDead;
}

/** One job of a batch enqueue. */
export interface NewJob extends Omit<EnqueueOptions, "on_duplicate" | "after"> {
  queue: string;
  type?: string;
  payload?: unknown;
  /** The jobs it waits for: stored ones by id, others of the batch by `{ index }` or `{ step }`. */
  after?: readonly BatchParent[];
  /** Its name in the batch (1–128 characters), by which others wait for it (`{ step: name }`). */
  step?: string;
}

/** The answer to an enqueue. `created` is false when `on_duplicate: "existing"` found a job. */
export interface Enqueued {
  id: JobId;
  created: boolean;
  status: JobStatus;
  run_at: string;
}

/** A failed attempt recorded on a job. */
export interface JobErrorEntry {
  attempt: number;
  at: string;
  message: string;
  detail: unknown;
}

/** A job as `GET /api/jobs/{id}` shows it. */
export interface Job<P = unknown, R = unknown> {
  id: JobId;
  queue: string;
  type: string;
  payload: P;
  priority: number;
  status: JobStatus;
  attempt: number;
  failures: number;
  run_at: string;
  created_at: string;
  finished_at?: string | null;
  dead_reason?: string | null;
  policy?: Policy | null;
  unique_key?: string | null;
  errors: JobErrorEntry[];
  traceparent?: string | null;
  /** What a completed job produced (absent when it gave none), byte for byte as sent. */
  result?: R;
  /** The jobs it waits (or waited) for; absent when none. */
  after?: JobId[];
  /** With `after`: what it does when one of those will not complete. */
  on_parent_dead?: OnParentDead;
  /** The batch it is a member of (docs/workflows.md#batches). */
  batch?: JobId | null;
  [more: string]: unknown;
}

export interface JobPage {
  jobs: Job[];
  /** Pass as `after` for the next page; null at the end. */
  next_after: JobId | null;
}

/** A job a taken job waited for (`after`): how it finished, and its result. */
export interface ParentResult<R = unknown> {
  id: JobId;
  type: string;
  /**
   * As it is when the job is taken: `"completed"`, or `"dead"` for one that did not, handed to
   * a job with `on_parent_dead: "run"`.
   */
  status: JobStatus;
  /** Its worker's result (absent when it gave none). */
  result?: R;
}

/** A job leased to this worker by a take or a stream. */
export interface TakenJob<P = unknown> {
  id: JobId;
  queue: string;
  type: string;
  payload: P;
  priority: number;
  attempt: number;
  lease_token: JobId;
  lease_expires_at: string;
  created_at: string;
  traceparent?: string | null;
  /**
   * The jobs it waited for (`after`), in that order, with how each finished and its result;
   * absent when it waited for none (a parent deleted since is left out). `parentResult(job, id)`
   * reads one.
   */
  parents?: ParentResult[];
  [more: string]: unknown;
}

/** What heartbeat, complete and fail need: a job's id and the token of its current lease. */
export interface JobRef {
  id: JobId;
  lease_token: JobId;
}

export interface LeaseExtended {
  id: JobId;
  /** The expiry actually set (never past the server's `--max-attempt-time`). */
  lease_expires_at: string;
  /**
   * The job was cancelled while in flight: stop, and report a failure (the server then
   * finishes the job as cancelled). Absent from servers before cancellation.
   */
  cancelled?: boolean;
}

/** What `Client.cancel` did, and the job as it now is. */
export interface CancelResult {
  /** `cancelled`: it was scheduled or ready. `marked`: it is in flight; its worker learns it on its next heartbeat. */
  outcome: "cancelled" | "marked";
  job: Job;
}

/** What `Client.cancelJobs` did. */
export interface CancelledJobs {
  cancelled: number;
  marked: number;
  cancelled_ids: JobId[];
  marked_ids: JobId[];
}

export interface Completed {
  id: JobId;
  status: "completed";
}

export interface CompleteResult {
  id: JobId;
  completed: boolean;
  error?: { code: string; message: string };
}

/** The outcome of a failure, as the policy decided it. */
export interface FailResult {
  id: JobId;
  status: JobStatus;
  failures: number;
  dead_reason?: string;
  attempt?: number;
  run_at?: string;
  delay_ms?: number;
}

/** How a failure is reported: at most one of `retryable: false`, `retry_at`, `retry_in`, `snooze`. */
export interface FailOptions {
  /** Any JSON, recorded beside the message. */
  detail?: unknown;
  /** `false`: dead at once, whatever the policy. */
  retryable?: boolean;
  /** Retry then (uses an attempt; the limit and window still apply). */
  retry_at?: Time;
  /** Retry after this long (uses an attempt). */
  retry_in?: Duration;
  /** Run again after this long without using an attempt; nothing is recorded. */
  snooze?: Duration;
}

/** Jobs (or a subscription's deliveries) by status. */
export interface Counts {
  scheduled: number;
  ready: number;
  in_flight: number;
  completed: number;
  dead: number;
  cancelled: number;
}

/** Jobs by status: a delivery's statuses, and `waiting`. */
export interface JobCounts extends Counts {
  /** Jobs waiting for the jobs they were enqueued `after`. */
  waiting: number;
}

export interface Stats {
  queues: Array<JobCounts & { queue: string }>;
  totals: JobCounts;
}

export interface Queue {
  name: string;
  paused: boolean;
  policy: Policy | null;
  counts: JobCounts;
  concurrency?: number;
  rate?: { limit: number; period_ms: number; used: number };
  encrypt_payloads?: boolean;
  disable_overrides?: boolean;
  message_ttl_ms?: number;
  [more: string]: unknown;
}

/** `PUT /api/queues/{name}`: omitted fields keep their value; `null` removes a setting. */
export interface QueueSettings {
  policy?: Policy | null;
  paused?: boolean;
  disable_overrides?: boolean;
  message_ttl?: Duration | null;
  concurrency?: number | null;
  rate?: { limit: number; period: Duration } | null;
  encrypt_payloads?: boolean;
}

export interface ListJobsOptions {
  queue?: string;
  status?: JobStatus;
  type?: string;
  limit?: number;
  after?: JobId;
}

/** Which unfinished jobs to cancel: `ids`, and/or `queue` and `type`; or `all: true`. */
export interface CancelSelection {
  ids?: JobId[];
  queue?: string;
  type?: string;
  all?: boolean;
}

/** Which dead jobs: `ids`, and/or `queue` and `type`; or `all: true`. */
export interface DeadSelection {
  ids?: JobId[];
  queue?: string;
  type?: string;
  all?: boolean;
}

export interface ReplayOptions {
  /** A new policy for the replayed jobs, any spelling. */
  policy?: Policy;
  /** Start the retries again from 1. */
  reset_attempts?: boolean;
}

export interface ReplayResult {
  replayed: number;
  ids: JobId[];
  skipped: Array<{ id: JobId; reason: string }>;
}

export interface DeletedJobs {
  deleted: number;
  ids: JobId[];
}

export interface PolicyPreview {
  retries: Array<{
    retry: number;
    delay_ms: number;
    cumulative_ms: number;
    min_delay_ms: number;
    max_delay_ms: number;
  }>;
  window_ms: number;
  retry_count: number;
  truncated: boolean;
}

/** The job a schedule's ticks enqueue. */
export interface ScheduleJob {
  queue: string;
  type?: string;
  payload?: unknown;
  priority?: number;
  policy?: Policy;
  retry_limit?: number;
}

/**
 * A batch's callback job (docs/workflows.md#batches): an enqueue's fields but those that say
 * when or dedupe. Its payload, as the worker gets it, is `{batch: {id, total, completed, dead,
 * deleted, cancelled, succeeded, ...}, payload: <this payload>}`.
 */
export type BatchCallback = ScheduleJob;

/** `POST /api/batches`: callbacks (at least one) and the first jobs. */
export interface NewBatch {
  description?: string;
  /** Enqueued once every job has finished, whatever the outcome. */
  on_complete?: BatchCallback;
  /** Enqueued once every job has finished, only if every one completed. */
  on_success?: BatchCallback;
  jobs?: readonly NewJob[];
  /** Keep it open for more jobs (`addToBatch`) until it is closed; default false. */
  open?: boolean;
}

/** A batch as `GET /api/batches/{id}` shows it. */
export interface Batch {
  id: JobId;
  description?: string | null;
  state: "open" | "closed" | "finished";
  counts: {
    total: number;
    pending: number;
    completed: number;
    dead: number;
    deleted: number;
    cancelled: number;
  };
  on_complete?: BatchCallback | null;
  on_success?: BatchCallback | null;
  /** The callbacks' jobs, once enqueued. */
  on_complete_job?: JobId | null;
  on_success_job?: JobId | null;
  /** The queues of its jobs and callbacks. */
  queues: string[];
  created_at: string;
  finished_at?: string | null;
  [more: string]: unknown;
}

/** A batch and the jobs a request added to it, in request order. */
export interface BatchJobs {
  batch: Batch;
  jobs: Enqueued[];
}

/** `PUT /api/schedules/{name}` (docs/schedules.md). */
export interface ScheduleDefinition {
  cron: string;
  timezone?: string;
  job: ScheduleJob;
  missed?: "skip" | "run_once";
  overlap?: "allow" | "skip";
  paused?: boolean;
}

export interface Schedule {
  name: string;
  cron: string;
  timezone: string;
  description: string;
  next_tick: string | null;
  missed: "skip" | "run_once";
  overlap: "allow" | "skip";
  paused: boolean;
  job: ScheduleJob;
  last_tick?: string | null;
  last_job?: JobId | null;
  counts: { enqueued: number; missed: number; overlapped: number };
  created_at: string;
  updated_at: string;
  [more: string]: unknown;
}

export interface Tick {
  at: string;
  local: string;
  shifted?: boolean;
}

export interface SchedulePreviewRequest {
  cron: string;
  timezone?: string;
  count?: number;
  after?: Time;
}

/** The body of a subscription's create (`endpoint` required) or `PATCH` (docs/webhooks.md). */
export interface SubscriptionFields {
  endpoint?: string;
  policy?: Policy | null;
  throttle_per_second?: number | null;
  content_type?: string | null;
  secret?: string | null;
  headers?: Record<string, string> | null;
  enabled?: boolean | null;
  retryable_statuses?: number[] | null;
  max_concurrency?: number | null;
  auto_disable_after?: Duration | null;
  retry_budget?: { percent: number; window: Duration; min_retries?: number } | null;
  format?: "tenax" | "zaqar" | null;
}

export interface Subscription {
  id: JobId;
  queue: string;
  endpoint: string;
  enabled: boolean;
  /** `whsec_…`: shown only by the create (and a rotation); `"[redacted]"` afterwards. */
  secret: string;
  policy: Policy | null;
  effective_policy?: Policy;
  policy_source?: string;
  format: "tenax" | "zaqar";
  headers: Record<string, string>;
  health?: Record<string, unknown>;
  deliveries?: Counts;
  [more: string]: unknown;
}

export interface DeletedSubscription {
  deleted: JobId;
  deliveries_deleted: number;
}

export interface DeliveryAttempt {
  [field: string]: unknown;
}

export interface Delivery {
  id: JobId;
  status: JobStatus;
  attempts?: DeliveryAttempt[];
  [more: string]: unknown;
}

export interface DeliveryPage {
  deliveries: Delivery[];
  next_after: JobId | null;
}

export interface AttemptPage {
  attempts: DeliveryAttempt[];
  next_after: JobId | null;
}

export interface WorkerInfo {
  name: string;
  queues: string[];
  in_flight: number;
  streaming: boolean;
  streams: number;
  seen_at: string;
}

export interface ServerInfo {
  id: string;
  this: boolean;
  version: string | null;
  started_at: string;
  seen_at: string;
  leads: boolean;
  address: string;
  workers: WorkerInfo[];
  [more: string]: unknown;
}

export interface Cluster {
  servers: ServerInfo[];
}

export interface ActivityCounts {
  enqueued: number;
  completed: number;
  failed: number;
  dead: number;
  delivered: number;
  delivery_failed: number;
}

export interface Activity {
  minutes: Array<ActivityCounts & { at: string }>;
  total: ActivityCounts;
}

/**
 * A workflow's state: `running` while any of its jobs has not finished; then `completed` if
 * every job completed, else `failed` (one is dead).
 */
export type WorkflowStatus = "running" | "completed" | "failed";

/** One job of a `Workflow`. */
export interface WorkflowJob<R = unknown> {
  id: JobId;
  queue: string;
  type: string;
  status: JobStatus;
  /** The jobs it waits (or waited) for; absent when none. */
  after?: JobId[];
  on_parent_dead?: OnParentDead;
  attempt: number;
  run_at: string;
  created_at: string;
  finished_at?: string;
  /** Why it is dead; for a job cancelled by a parent that did not complete, that parent. */
  dead_reason?: string;
  result?: R;
  [more: string]: unknown;
}

/** A job and every job joined to it by `after`, either way (`GET /api/workflows/{id}`). */
export interface Workflow {
  /** The job asked about. */
  id: JobId;
  status: WorkflowStatus;
  /** Its jobs by status (only the statuses it has). */
  counts: Partial<Record<JobStatus, number>> & Record<string, number>;
  /** In id order: parents before their children. */
  jobs: WorkflowJob[];
  /** `[parent, child]` pairs. */
  edges: Array<[JobId, JobId]>;
  /** More jobs than shown (the server shows at most 1 000). */
  truncated: boolean;
}
