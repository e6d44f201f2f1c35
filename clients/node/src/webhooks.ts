// Verifying Tenax's webhook deliveries (docs/webhooks.md#verifying-signatures).
//
// The Standard Webhooks scheme: `webhook-signature` holds one or more space-separated
// `v1,<base64 HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.<body>")>`, where the key is
// the base64-decoded part of the `whsec_` secret. During a secret rotation the server signs with
// both secrets; a request is authentic when any `v1` signature matches any secret given.

import { createHmac, timingSafeEqual } from "node:crypto";
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";

import { type Json, parseJson } from "./json.js";

/** Thrown when a request is not an authentic, fresh delivery. */
export class WebhookVerificationError extends Error {
  override name = "WebhookVerificationError";
}

/** Headers as `node:http` (and Express) gives them, lower-cased, or a fetch `Headers`. */
export type HeaderSource = IncomingHttpHeaders | Record<string, string | string[] | undefined> | Headers;

export interface WebhookOptions {
  /** How far the `webhook-timestamp` may be from the clock, either way, in seconds (default 300). */
  toleranceSeconds?: number;
  /** The clock: milliseconds since 1970 (default `Date.now`). */
  now?: () => number;
}

/** The body of a delivery in the `tenax` format (docs/webhooks.md#what-the-endpoint-receives). */
export interface DeliveryEnvelope<B = Json> {
  delivery_id: number | bigint;
  subscription_id: number | bigint;
  attempt: number;
  queue: string;
  message: { id: number | bigint; type: string; body: B; created_at: string };
  sent_at: string;
}

/** What a verified request carries. */
export interface VerifiedDelivery<T = unknown> {
  /** `webhook-id`: `dlv_<delivery id>`, the same on every attempt: dedupe on it. */
  id: string;
  /** `webhook-timestamp`, seconds since 1970. */
  timestamp: number;
  /** The body, parsed (integers beyond 2^53 − 1 as `bigint`). */
  payload: T;
}

function header(headers: HeaderSource, name: string): string | undefined {
  if (typeof (headers as Headers).get === "function") {
    return (headers as Headers).get(name) ?? undefined;
  }
  const record = headers as Record<string, string | string[] | undefined>;
  let value = record[name];
  if (value === undefined) {
    const key = Object.keys(record).find((k) => k.toLowerCase() === name);
    value = key === undefined ? undefined : record[key];
  }
  return Array.isArray(value) ? value.join(" ") : value;
}

function keyOf(secret: string): Buffer {
  if (typeof secret !== "string" || !secret) {
    throw new TypeError("a webhook secret is needed (the subscription's whsec_...)");
  }
  const key = Buffer.from(secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret, "base64");
  if (key.length === 0) {
    throw new TypeError("the webhook secret is not base64 after whsec_");
  }
  return key;
}

/**
 * A verifier of one subscription's deliveries, with its secret (or, while a rotation is
 * under way, its secrets).
 *
 * ```ts
 * const webhook = new Webhook(process.env.TENAX_WEBHOOK_SECRET!);
 * const { id, payload } = webhook.verify(rawBody, req.headers); // throws WebhookVerificationError
 * ```
 */
export class Webhook {
  readonly #keys: Buffer[];
  readonly #toleranceMs: number;
  readonly #now: () => number;

  constructor(secret: string | readonly string[], options: WebhookOptions = {}) {
    const secrets = typeof secret === "string" ? [secret] : [...secret];
    if (secrets.length === 0) {
      throw new TypeError("a webhook secret is needed (the subscription's whsec_...)");
    }
    this.#keys = secrets.map(keyOf);
    const tolerance = options.toleranceSeconds ?? 300;
    if (!(tolerance >= 0)) {
      throw new RangeError(`toleranceSeconds must be 0 or more, got ${tolerance}`);
    }
    this.#toleranceMs = tolerance * 1000;
    this.#now = options.now ?? Date.now;
  }

  /**
   * Verifies a request from its raw body (the exact bytes received: a `Buffer`, `Uint8Array`
   * or the string they decode to) and headers; returns the delivery with its body parsed.
   * Throws `WebhookVerificationError` when a header is missing, the timestamp is outside the
   * tolerance, or no signature matches.
   */
  verify<T = DeliveryEnvelope>(body: Uint8Array | string, headers: HeaderSource): VerifiedDelivery<T> {
    if (typeof body !== "string" && !(body instanceof Uint8Array)) {
      throw new WebhookVerificationError(
        "the raw body is needed (a Buffer or string of the bytes received), not a parsed object: with Express, use express.raw({ type: \"*/*\" })",
      );
    }
    const id = header(headers, "webhook-id");
    const stamp = header(headers, "webhook-timestamp");
    const signatures = header(headers, "webhook-signature");
    if (!id || !stamp || !signatures) {
      throw new WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature header");
    }
    if (!/^\d{1,15}$/.test(stamp.trim())) {
      throw new WebhookVerificationError("webhook-timestamp is not an integer number of seconds");
    }
    const timestamp = Number(stamp.trim());
    const skew = this.#now() - timestamp * 1000;
    if (skew > this.#toleranceMs) {
      throw new WebhookVerificationError("webhook-timestamp is too old");
    }
    if (-skew > this.#toleranceMs) {
      throw new WebhookVerificationError("webhook-timestamp is in the future");
    }
    const bytes = typeof body === "string" ? Buffer.from(body, "utf8") : body;
    const offered: Buffer[] = [];
    for (const part of signatures.split(" ")) {
      if (part.startsWith("v1,")) {
        offered.push(Buffer.from(part.slice(3), "base64"));
      }
    }
    let matched = false;
    for (const key of this.#keys) {
      const expected = createHmac("sha256", key).update(`${id}.${stamp}.`).update(bytes).digest();
      for (const candidate of offered) {
        // Every pair is compared (no early exit on a match): the time taken does not say which.
        if (candidate.length === expected.length && timingSafeEqual(candidate, expected)) {
          matched = true;
        }
      }
    }
    if (!matched) {
      throw new WebhookVerificationError("no matching signature");
    }
    let payload: unknown;
    try {
      payload = parseJson(Buffer.from(bytes).toString("utf8"));
    } catch {
      // A signed body that is not JSON (a subscription's own content type): keep the text.
      payload = Buffer.from(bytes).toString("utf8");
    }
    return { id, timestamp, payload: payload as T };
  }

  /**
   * The signature headers of a body, as Tenax would send them (for tests of a receiver): the
   * first secret signs.
   */
  sign(id: string, timestampSeconds: number, body: Uint8Array | string): Record<string, string> {
    const key = this.#keys[0] as Buffer;
    const mac = createHmac("sha256", key).update(`${id}.${timestampSeconds}.`).update(body).digest("base64");
    return { "webhook-id": id, "webhook-timestamp": String(timestampSeconds), "webhook-signature": `v1,${mac}` };
  }
}

function verifierOf(secret: string | readonly string[] | Webhook, options: WebhookOptions): Webhook {
  return secret instanceof Webhook ? secret : new Webhook(secret, options);
}

/** Reads a request's body as raw bytes (at most `limit` bytes, default 1 MiB). */
export async function readRawBody(req: AsyncIterable<unknown>, limit = 1 << 20): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const bytes = typeof chunk === "string" ? Buffer.from(chunk) : Buffer.from(chunk as Uint8Array);
    size += bytes.length;
    if (size > limit) {
      throw new WebhookVerificationError(`the body is over ${limit} bytes`);
    }
    chunks.push(bytes);
  }
  return Buffer.concat(chunks);
}

/**
 * For `node:http`: verifies a request from its headers and its raw body (read it with
 * `readRawBody(req)`); returns the delivery, or throws `WebhookVerificationError`.
 *
 * ```ts
 * http.createServer(async (req, res) => {
 *   const body = await readRawBody(req);
 *   try {
 *     const { id, payload } = verifyWebhookRequest(req, body, secret);
 *     res.writeHead(204).end();
 *   } catch {
 *     res.writeHead(401).end("bad signature");
 *   }
 * });
 * ```
 */
export function verifyWebhookRequest<T = DeliveryEnvelope>(
  req: Pick<IncomingMessage, "headers">,
  rawBody: Uint8Array | string,
  secret: string | readonly string[] | Webhook,
  options: WebhookOptions = {},
): VerifiedDelivery<T> {
  return verifierOf(secret, options).verify<T>(rawBody, req.headers);
}

/** The parts of an Express request the middleware uses (structural: no dependency on express). */
export interface RawBodyRequest {
  headers: IncomingHttpHeaders;
  body?: unknown;
  /** Set by the middleware once the request is verified. */
  webhook?: VerifiedDelivery<unknown>;
}

/** The parts of an Express (or `node:http`) response the middleware uses. */
export interface PlainResponse {
  statusCode: number;
  setHeader(name: string, value: string): unknown;
  end(body?: string): unknown;
}

/**
 * The delivery `webhookMiddleware` verified for this request (the typed way to read
 * `req.webhook`, which Express's own `Request` type does not declare). Throws when the
 * middleware did not run before.
 */
export function verifiedDelivery<T = DeliveryEnvelope>(req: object): VerifiedDelivery<T> {
  const verified = (req as RawBodyRequest).webhook;
  if (verified === undefined) {
    throw new Error("no verified delivery on this request: mount webhookMiddleware before this handler");
  }
  return verified as VerifiedDelivery<T>;
}

/**
 * An Express middleware that verifies deliveries. Mount it after `express.raw({ type: "*\/*" })`,
 * which keeps the body as the exact bytes that were signed. A verified request goes on with
 * `req.webhook` set (`{ id, timestamp, payload }`); any other is answered `401` and goes no
 * further. A body that is not raw (a JSON parser ran first) is passed to `next` as an error.
 *
 * ```ts
 * app.post("/orders", express.raw({ type: "*\/*" }), webhookMiddleware(secret), (req, res) => {
 *   const { id, payload } = verifiedDelivery(req); // or req.webhook
 *   handle(payload.message); // dedupe on id
 *   res.sendStatus(204);
 * });
 * ```
 */
export function webhookMiddleware(
  secret: string | readonly string[] | Webhook,
  options: WebhookOptions = {},
): (req: RawBodyRequest, res: PlainResponse, next: (error?: unknown) => void) => void {
  const webhook = verifierOf(secret, options);
  return (req, res, next) => {
    const body = req.body;
    if (typeof body !== "string" && !(body instanceof Uint8Array)) {
      next(
        new TypeError(
          "webhookMiddleware needs the raw body: mount express.raw({ type: \"*/*\" }) before it, and no JSON parser",
        ),
      );
      return;
    }
    let verified: VerifiedDelivery<unknown>;
    try {
      verified = webhook.verify<unknown>(body, req.headers);
    } catch (error) {
      if (!(error instanceof WebhookVerificationError)) {
        next(error);
        return;
      }
      res.statusCode = 401;
      res.setHeader("content-type", "text/plain; charset=utf-8");
      res.end(`webhook refused: ${error.message}`);
      return;
    }
    req.webhook = verified;
    next();
  };
}
