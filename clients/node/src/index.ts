// Tenax for TypeScript and JavaScript: a typed client of the native API, a worker runtime, and
// the verification of webhook deliveries. ESM, Node 20+, no dependencies.

export {
  Client,
  JobStream,
  checkWorkerName,
  defaultWorkerName,
  durationMs,
  parentResult,
  parseStreamLine,
  DEFAULT_URL,
  WORKER_HEADER,
} from "./client.js";
export type { ClientOptions, Completion } from "./client.js";
export {
  ApiError,
  Conflict,
  Duplicate,
  InvalidRequest,
  LeaseLost,
  NotDead,
  NotFound,
  NotInFlight,
  PayloadTooLarge,
  RequestTimeout,
  ServerError,
  TenaxConnectionError,
  TenaxError,
  TenaxTimeout,
  Unauthorized,
  Unavailable,
  errorFromResponse,
} from "./errors.js";
export { JsonSyntaxError, parseJson, stringifyJson } from "./json.js";
export type { Json } from "./json.js";
export { JobCancelled, JobOutcome, NotRetryable, PayloadMismatch, Retry, RetryAt, RetryIn, Snooze, UnknownJobType, describe } from "./outcomes.js";
export type { OutcomeOptions } from "./outcomes.js";
export type * from "./types.js";
export { VERSION } from "./version.js";
export { Webhook, WebhookVerificationError, readRawBody, verifiedDelivery, verifyWebhookRequest, webhookMiddleware } from "./webhooks.js";
export type {
  DeliveryEnvelope,
  HeaderSource,
  PlainResponse,
  RawBodyRequest,
  VerifiedDelivery,
  WebhookOptions,
} from "./webhooks.js";
export { Worker } from "./worker.js";
export type { Handler, HandlerOptions, JobContext, WorkerOptions, WorkerStats } from "./worker.js";
export { stderrLogger, silentLogger } from "./worker-log.js";
export type { Logger } from "./worker-log.js";
