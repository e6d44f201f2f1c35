// Verifying webhook deliveries: the helper on crafted requests, then on real deliveries of a
// subscription to a `node:http` receiver started here.

import assert from "node:assert/strict";
import { once } from "node:events";
import { type IncomingMessage, type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe as suite, test } from "node:test";

import {
  type Client,
  type DeliveryEnvelope,
  type RawBodyRequest,
  type VerifiedDelivery,
  Webhook,
  WebhookVerificationError,
  readRawBody,
  verifiedDelivery,
  verifyWebhookRequest,
  webhookMiddleware,
} from "../src/index.js";
import { type Server, newQueue, startServer } from "./support.js";

// The example of the Standard Webhooks specification (and Svix's documentation).
const SPEC = {
  secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
  id: "msg_p5jXN8AQM9LWM0D4loKWxJek",
  timestamp: 1614265330,
  body: '{"test": 2432232314}',
  signature: "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
};

function specHeaders(signature = SPEC.signature, timestamp = SPEC.timestamp): Record<string, string> {
  return { "webhook-id": SPEC.id, "webhook-timestamp": String(timestamp), "webhook-signature": signature };
}

const atSpecTime = (offsetSeconds = 0) => () => (SPEC.timestamp + offsetSeconds) * 1000;

suite("Webhook.verify", () => {
  test("accepts the specification's example, and parses the body", () => {
    const webhook = new Webhook(SPEC.secret, { now: atSpecTime() });
    const verified = webhook.verify<{ test: number }>(Buffer.from(SPEC.body), specHeaders());
    assert.deepEqual(verified, { id: SPEC.id, timestamp: SPEC.timestamp, payload: { test: 2432232314 } });
    // A string body of the same bytes, and fetch-style Headers, do as well.
    assert.equal(webhook.verify(SPEC.body, new Headers(specHeaders())).id, SPEC.id);
  });

  test("refuses a tampered body, id or timestamp, and another secret", () => {
    const webhook = new Webhook(SPEC.secret, { now: atSpecTime() });
    const refused = (body: string, headers: Record<string, string>, why: RegExp): void => {
      assert.throws(() => webhook.verify(body, headers), (error: unknown) => {
        assert.ok(error instanceof WebhookVerificationError);
        assert.match(error.message, why);
        return true;
      });
    };
    refused('{"test": 2432232315}', specHeaders(), /no matching signature/);
    refused(SPEC.body, { ...specHeaders(), "webhook-id": "msg_other" }, /no matching signature/);
    refused(SPEC.body, specHeaders(SPEC.signature, SPEC.timestamp + 1), /no matching signature/);
    const other = new Webhook("whsec_" + Buffer.alloc(24, 7).toString("base64"), { now: atSpecTime() });
    assert.throws(() => other.verify(SPEC.body, specHeaders()), WebhookVerificationError);
  });

  test("the timestamp must be within the tolerance of the clock, either way", () => {
    const body = Buffer.from(SPEC.body);
    assert.ok(new Webhook(SPEC.secret, { now: atSpecTime(300) }).verify(body, specHeaders()));
    assert.ok(new Webhook(SPEC.secret, { now: atSpecTime(-300) }).verify(body, specHeaders()));
    assert.throws(() => new Webhook(SPEC.secret, { now: atSpecTime(301) }).verify(body, specHeaders()), /too old/);
    assert.throws(() => new Webhook(SPEC.secret, { now: atSpecTime(-301) }).verify(body, specHeaders()), /in the future/);
    assert.ok(new Webhook(SPEC.secret, { now: atSpecTime(3600), toleranceSeconds: 3600 }).verify(body, specHeaders()));
    // The default clock is the real one: the example is years old.
    assert.throws(() => new Webhook(SPEC.secret).verify(body, specHeaders()), /too old/);
  });

  test("any of several signatures, and any of several secrets, may match", () => {
    const body = Buffer.from(SPEC.body);
    const webhook = new Webhook(SPEC.secret, { now: atSpecTime() });
    const forged = "v1," + Buffer.alloc(32, 1).toString("base64");
    assert.ok(webhook.verify(body, specHeaders(`${forged} v2,xyz ${SPEC.signature}`)));
    assert.throws(() => webhook.verify(body, specHeaders(`${forged} v1,short`)), /no matching signature/);
    assert.throws(() => webhook.verify(body, specHeaders(SPEC.signature.replace("v1,", "v2,"))), /no matching signature/);
    const rotating = new Webhook(["whsec_" + Buffer.alloc(24, 9).toString("base64"), SPEC.secret], { now: atSpecTime() });
    assert.ok(rotating.verify(body, specHeaders()));
  });

  test("missing headers, a bad timestamp, or a parsed body are refused", () => {
    const webhook = new Webhook(SPEC.secret, { now: atSpecTime() });
    const { ["webhook-signature"]: _dropped, ...unsigned } = specHeaders();
    assert.throws(() => webhook.verify(SPEC.body, unsigned), /missing/);
    assert.throws(() => webhook.verify(SPEC.body, specHeaders(SPEC.signature, Number.NaN)), /not an integer/);
    assert.throws(() => webhook.verify(JSON.parse(SPEC.body) as unknown as string, specHeaders()), /raw body/);
    assert.throws(() => new Webhook("whsec_"), TypeError);
  });

  test("sign() makes the headers Tenax sends", () => {
    const webhook = new Webhook(SPEC.secret, { now: atSpecTime() });
    assert.deepEqual(webhook.sign(SPEC.id, SPEC.timestamp, SPEC.body), specHeaders());
  });
});

suite("webhookMiddleware (Express-shaped)", () => {
  function response(): { statusCode: number; headers: Record<string, string>; body: string | undefined; setHeader(n: string, v: string): void; end(b?: string): void } {
    return {
      statusCode: 200,
      headers: {},
      body: undefined,
      setHeader(name, value) {
        this.headers[name] = value;
      },
      end(body) {
        this.body = body;
      },
    };
  }

  test("a verified request goes on with req.webhook; another is answered 401", () => {
    const middleware = webhookMiddleware(SPEC.secret, { now: atSpecTime() });
    const req: RawBodyRequest = { headers: specHeaders(), body: Buffer.from(SPEC.body) };
    const res = response();
    let nextArgs: unknown[] | null = null;
    middleware(req, res, (...args: unknown[]) => (nextArgs = args));
    assert.deepEqual(nextArgs, []);
    assert.equal(req.webhook?.id, SPEC.id);
    assert.deepEqual(verifiedDelivery(req).payload, { test: 2432232314 });

    const tampered: RawBodyRequest = { headers: specHeaders(), body: Buffer.from('{"test": 1}') };
    const refused = response();
    let called = false;
    middleware(tampered, refused, () => (called = true));
    assert.equal(called, false);
    assert.equal(refused.statusCode, 401);
    assert.match(refused.body ?? "", /no matching signature/);
    assert.equal(tampered.webhook, undefined);
  });

  test("it fits where Express takes a handler (Express's types extend node:http's)", () => {
    // Express's Request extends IncomingMessage (with `body: any`), its Response extends
    // ServerResponse, and its NextFunction takes an optional error: the compiler checks this.
    type ExpressLikeHandler = (
      req: IncomingMessage & { body: any; params: Record<string, string> },
      res: ServerResponse & { locals: Record<string, unknown> },
      next: (error?: any) => void,
    ) => void;
    const handler: ExpressLikeHandler = webhookMiddleware(SPEC.secret);
    assert.equal(typeof handler, "function");
    assert.throws(() => verifiedDelivery({}), /mount webhookMiddleware/);
  });

  test("a parsed body (express.json() ran first) goes to next as an error", () => {
    const middleware = webhookMiddleware(SPEC.secret, { now: atSpecTime() });
    let error: unknown;
    middleware({ headers: specHeaders(), body: { test: 2432232314 } }, response(), (e?: unknown) => (error = e));
    assert.ok(error instanceof TypeError);
    assert.match((error as Error).message, /express\.raw/);
  });
});

suite("real deliveries", () => {
  let server: Server;
  let client: Client;

  before(async () => {
    server = await startServer();
    client = server.client();
  });

  after(async () => {
    await server.stop();
  });

  interface Received {
    headers: IncomingMessage["headers"];
    body: Buffer;
    verified: VerifiedDelivery<DeliveryEnvelope> | null;
    error: unknown;
  }

  /** A node:http receiver verifying with the helper; resolves `next()` with each request it gets. */
  async function receiver(secret: () => string | string[]) {
    const waiting: Array<(r: Received) => void> = [];
    const arrived: Received[] = [];
    const http = createServer(async (req: IncomingMessage, res: ServerResponse) => {
      const body = await readRawBody(req);
      let verified: VerifiedDelivery<DeliveryEnvelope> | null = null;
      let error: unknown = null;
      try {
        verified = verifyWebhookRequest(req, body, secret());
        res.writeHead(204).end();
      } catch (e) {
        error = e;
        res.writeHead(401).end("bad signature");
      }
      const received = { headers: req.headers, body, verified, error };
      const waiter = waiting.shift();
      if (waiter) {
        waiter(received);
      } else {
        arrived.push(received);
      }
    });
    http.listen(0, "127.0.0.1");
    await once(http, "listening");
    const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}/hook`;
    return {
      url,
      next: () =>
        new Promise<Received>((resolve) => {
          const early = arrived.shift();
          if (early) {
            resolve(early);
          } else {
            waiting.push(resolve);
          }
        }),
      close: async () => {
        http.closeAllConnections();
        http.close();
        await once(http, "close");
      },
    };
  }

  test("a subscription's delivery verifies; the same request tampered or too old does not", async () => {
    const queue = newQueue();
    let secret = "";
    const endpoint = await receiver(() => secret);
    try {
      const subscription = await client.createSubscription(queue, { endpoint: endpoint.url, policy: { type: "list", delays: ["1s"] } });
      secret = subscription.secret;
      assert.match(secret, /^whsec_/);
      const { id } = await client.enqueue(queue, "order.paid", { order: 7, big: 18446744073709551615n });
      const delivery = await endpoint.next();
      assert.equal(delivery.error, null, String(delivery.error));
      const envelope = delivery.verified?.payload;
      assert.equal(envelope?.message.id, id);
      assert.equal(envelope?.message.type, "order.paid");
      assert.deepEqual(envelope?.message.body, { order: 7, big: 18446744073709551615n });
      assert.equal(envelope?.queue, queue);
      assert.equal(envelope?.subscription_id, subscription.id);
      assert.equal(delivery.verified?.id, `dlv_${envelope?.delivery_id}`);

      // The captured request, changed: refused by the same helper.
      const tampered = Buffer.from(delivery.body.toString("utf8").replace('"order":7', '"order":8'));
      assert.notDeepEqual(tampered, delivery.body);
      assert.throws(() => verifyWebhookRequest({ headers: delivery.headers }, tampered, secret), /no matching signature/);
      const sentAt = Number(delivery.headers["webhook-timestamp"]) * 1000;
      assert.ok(verifyWebhookRequest({ headers: delivery.headers }, delivery.body, secret, { now: () => sentAt + 300_000 }));
      assert.throws(
        () => verifyWebhookRequest({ headers: delivery.headers }, delivery.body, secret, { now: () => sentAt + 301_000 }),
        /too old/,
      );
      // The server recorded the receiver's 204.
      const page = await client.listDeliveries(subscription.id);
      assert.equal(page.deliveries.length, 1);
    } finally {
      await endpoint.close();
    }
  });

  test("during a secret rotation both secrets sign, and a receiver with either verifies", async () => {
    const queue = newQueue();
    let secrets: string[] = [];
    const endpoint = await receiver(() => secrets);
    try {
      const subscription = await client.createSubscription(queue, { endpoint: endpoint.url });
      const old = subscription.secret;
      const rotated = await client.rotateSecret(subscription.id, { overlap: "1h" });
      assert.notEqual(rotated.secret, old);
      secrets = [old];
      await client.enqueue(queue, "t", { n: 1 });
      const delivery = await endpoint.next();
      assert.equal(delivery.error, null, String(delivery.error));
      const signatures = String(delivery.headers["webhook-signature"]).split(" ");
      assert.equal(signatures.length, 2);
      assert.ok(verifyWebhookRequest({ headers: delivery.headers }, delivery.body, rotated.secret));
      assert.ok(verifyWebhookRequest({ headers: delivery.headers }, delivery.body, [rotated.secret, old]));
      const stranger = "whsec_" + Buffer.alloc(24, 3).toString("base64");
      assert.throws(() => verifyWebhookRequest({ headers: delivery.headers }, delivery.body, stranger), WebhookVerificationError);
    } finally {
      await endpoint.close();
    }
  });

  test("the Express middleware verifies a real delivery (express.raw's Buffer body)", async () => {
    const queue = newQueue();
    let secret = "";
    const results: Array<{ status: number; webhook: VerifiedDelivery<unknown> | undefined }> = [];
    const arrived = new Promise<void>((resolve) => {
      const http = createServer(async (req, res) => {
        // What express.raw({ type: "*/*" }) does: the body as a Buffer on req.body.
        const expressReq = req as IncomingMessage & RawBodyRequest;
        expressReq.body = await readRawBody(req);
        webhookMiddleware(secret)(expressReq, res, (error?: unknown) => {
          if (error) {
            res.writeHead(500).end();
            return;
          }
          res.writeHead(204).end();
        });
        results.push({ status: res.statusCode, webhook: expressReq.webhook });
        http.closeAllConnections();
        http.close();
        resolve();
      });
      http.listen(0, "127.0.0.1", async () => {
        const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}/hook`;
        secret = (await client.createSubscription(queue, { endpoint: url })).secret;
        await client.enqueue(queue, "t", { hello: "world" });
      });
    });
    await arrived;
    assert.equal(results[0]?.status, 204);
    assert.deepEqual((results[0]?.webhook?.payload as DeliveryEnvelope).message.body, { hello: "world" });
  });
});
