// The error hierarchy: one class per error code of the server, plus connection errors.
//
// Every error the server answers has one shape, `{"error": {"status", "code", "field",
// "message"}}`; `errorFromResponse` turns it into the most specific `ApiError` subclass, which
// carries all four (and the request id, under which the server's log has the details).
//
//   TenaxError
//   ├── ApiError                   the server answered with an error
//   │   ├── InvalidRequest         400 invalid: `field` names the JSON path, `message` the rule
//   │   ├── Unauthorized           401 / 403
//   │   ├── NotFound               404 not_found
//   │   ├── RequestTimeout         408 timeout
//   │   ├── Conflict               409
//   │   │   ├── Duplicate          409 duplicate: a unique key is held (`field` names it)
//   │   │   ├── NotInFlight        409 not_in_flight: the job is not running
//   │   │   ├── LeaseLost          409 lease_lost: the lease ended; the job may run elsewhere
//   │   │   └── NotDead            409 not_dead: replay of a delivery that is not dead
//   │   ├── PayloadTooLarge        413 too_large
//   │   └── ServerError            5xx
//   │       └── Unavailable        503 unavailable
//   └── TenaxConnectionError       no answer: refused, reset, DNS, TLS
//       └── TenaxTimeout           the server did not answer in time

import { parseJson } from "./json.js";

/** Base class of every error this package throws about the server. */
export class TenaxError extends Error {
  override name = "TenaxError";
}

/** The server answered with an error status. */
export class ApiError extends TenaxError {
  override name = "ApiError";
  /** The HTTP status (400, 404, 409, ...). */
  readonly status: number;
  /** The server's error code (`"invalid"`, `"not_found"`, `"lease_lost"`, ...). */
  readonly code: string;
  /** The rule that was broken, in words. */
  readonly serverMessage: string;
  /** The JSON path of the field that broke a rule (`"jobs[2].policy.max_delay"`), `"body"`, or null. */
  readonly field: string | null;
  /** The `X-Request-Id` of the request (in the server's log lines). */
  readonly requestId: string | null;
  /** The error object as the server sent it. */
  readonly body: Record<string, unknown>;

  constructor(
    status: number,
    code: string,
    message: string,
    options: { field?: string | null; requestId?: string | null; body?: Record<string, unknown> } = {},
  ) {
    const field = options.field ?? null;
    super(`${status} ${code}:${field ? ` ${field}:` : ""} ${message}`);
    this.status = status;
    this.code = code;
    this.serverMessage = message;
    this.field = field;
    this.requestId = options.requestId ?? null;
    this.body = options.body ?? {};
  }
}

/** 400: a field breaks a rule; `field` says which and `serverMessage` the rule. */
export class InvalidRequest extends ApiError {
  override name = "InvalidRequest";
}
/** 401 or 403: the token is missing, wrong, or not allowed to do this. */
export class Unauthorized extends ApiError {
  override name = "Unauthorized";
}
/** 404: no such job, queue, schedule, subscription or delivery. */
export class NotFound extends ApiError {
  override name = "NotFound";
}
/** 408: the request body did not reach the server in time. */
export class RequestTimeout extends ApiError {
  override name = "RequestTimeout";
}
/** 409: the request conflicts with the current state. */
export class Conflict extends ApiError {
  override name = "Conflict";
}
/** 409 duplicate: an unfinished job of the queue holds the unique key. */
export class Duplicate extends Conflict {
  override name = "Duplicate";
}
/** 409 not_in_flight: heartbeat, complete or fail of a job that is not running. */
export class NotInFlight extends Conflict {
  override name = "NotInFlight";
}
/** 409 lease_lost: the lease token is stale; the job may be running elsewhere. */
export class LeaseLost extends Conflict {
  override name = "LeaseLost";
}
/** 409 not_dead: only a dead delivery can be replayed. */
export class NotDead extends Conflict {
  override name = "NotDead";
}
/** 413: the request body is over the server's `--max-request-bytes`. */
export class PayloadTooLarge extends ApiError {
  override name = "PayloadTooLarge";
}
/** 5xx: a server-side failure; `requestId` finds it in the server's log. */
export class ServerError extends ApiError {
  override name = "ServerError";
}
/** 503 unavailable: the store refuses writes just now (send the request again later). */
export class Unavailable extends ServerError {
  override name = "Unavailable";
}

/** No answer from the server: connection refused or reset, DNS or TLS failure. */
export class TenaxConnectionError extends TenaxError {
  override name = "TenaxConnectionError";
}
/** The server did not answer within the client's timeout. */
export class TenaxTimeout extends TenaxConnectionError {
  override name = "TenaxTimeout";
}

type ApiErrorClass = new (...args: ConstructorParameters<typeof ApiError>) => ApiError;

const BY_CODE: Record<string, ApiErrorClass> = {
  invalid: InvalidRequest,
  unsupported_media_type: InvalidRequest,
  not_found: NotFound,
  timeout: RequestTimeout,
  duplicate: Duplicate,
  not_in_flight: NotInFlight,
  lease_lost: LeaseLost,
  not_dead: NotDead,
  too_large: PayloadTooLarge,
  unavailable: Unavailable,
  storage_unavailable: Unavailable,
  unauthorized: Unauthorized,
  forbidden: Unauthorized,
};

const BY_STATUS: Record<number, ApiErrorClass> = {
  400: InvalidRequest,
  401: Unauthorized,
  403: Unauthorized,
  404: NotFound,
  408: RequestTimeout,
  409: Conflict,
  413: PayloadTooLarge,
};

/** The most specific class for a status and code; unknown codes fall back on the status. */
export function errorClass(status: number, code: string): ApiErrorClass {
  const known = Object.hasOwn(BY_CODE, code) ? BY_CODE[code] : undefined;
  if (known !== undefined) {
    return known;
  }
  if (status >= 500) {
    return ServerError;
  }
  return BY_STATUS[status] ?? ApiError;
}

/** The error an answer with a non-2xx status stands for, whatever its body. */
export function errorFromResponse(status: number, text: string, requestId: string | null = null): ApiError {
  let error: Record<string, unknown> = {};
  try {
    const decoded = parseJson(text);
    if (decoded !== null && typeof decoded === "object" && !Array.isArray(decoded)) {
      const inner = (decoded as Record<string, unknown>)["error"];
      if (inner !== null && typeof inner === "object" && !Array.isArray(inner)) {
        error = inner as Record<string, unknown>;
      }
    }
  } catch {
    // Not JSON (a proxy's page): the text is the message.
  }
  const code = typeof error["code"] === "string" ? error["code"] : `http_${status}`;
  let message = error["message"];
  if (typeof message !== "string") {
    const trimmed = text.trim();
    message = trimmed ? trimmed.slice(0, 500) : `HTTP ${status}`;
  }
  const field = typeof error["field"] === "string" ? error["field"] : null;
  const rid = typeof error["request_id"] === "string" ? error["request_id"] : requestId;
  const Class = errorClass(status, code);
  return new Class(status, code, message as string, { field, requestId: rid, body: error });
}
