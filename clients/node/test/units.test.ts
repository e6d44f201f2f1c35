// Unit tests: exact JSON integers, errors from answers, durations, outcomes.

import assert from "node:assert/strict";
import { describe as suite, test } from "node:test";

import {
  ApiError,
  Duplicate,
  InvalidRequest,
  JsonSyntaxError,
  LeaseLost,
  NotRetryable,
  RetryAt,
  RetryIn,
  ServerError,
  Snooze,
  describe,
  durationMs,
  errorFromResponse,
  parseJson,
  parseStreamLine,
  stringifyJson,
} from "../src/index.js";

suite("parseJson", () => {
  test("an integer beyond 2^53 − 1 comes out exact, as a bigint", () => {
    const value = parseJson('{"id": 18446744073709551615, "lease_token": 9007199254740993}') as Record<string, unknown>;
    assert.equal(value["id"], 18446744073709551615n);
    assert.equal(value["lease_token"], 9007199254740993n);
    // JSON.parse would have changed both.
    assert.notEqual(BigInt((JSON.parse("18446744073709551615") as number).toString()), 18446744073709551615n);
  });

  test("safe integers and other numbers stay numbers, as JSON.parse gives them", () => {
    const text = '[0, -0, 1, -1, 9007199254740991, -9007199254740991, 1.5, -2.5e3, 1E400, 12345678901234567890.0, 1e2]';
    const value = parseJson(text) as unknown[];
    assert.deepEqual(value, JSON.parse(text));
    assert.equal(typeof value[4], "number");
    assert.equal(parseJson("9007199254740992"), 9007199254740992n);
    assert.equal(parseJson("-9007199254740993"), -9007199254740993n);
  });

  test("everything else reads as JSON.parse reads it", () => {
    const text = '{"a": [true, false, null, "x\\u00e9\\n\\"y\\"", {"__proto__": 1}], "b": {}, "c": [], "é": "\\ud83d\\ude00"}';
    assert.deepEqual(parseJson(text), JSON.parse(text));
    const proto = (parseJson('{"__proto__": {"polluted": true}}') as Record<string, unknown>);
    assert.equal(Object.getPrototypeOf(proto), Object.prototype);
    assert.deepEqual(Object.keys(proto), ["__proto__"]);
  });

  test("refuses what is not one complete JSON value", () => {
    for (const bad of ["", "{", '{"a":1} x', "[1,]", "01", "1.", "-", '"\u0001"', "tru", "{a:1}", '"\\x"', "NaN"]) {
      assert.throws(() => parseJson(bad), JsonSyntaxError, `accepted ${JSON.stringify(bad)}`);
    }
  });

  test("a stream line with a u64 id keeps it", () => {
    const job = parseStreamLine(
      '{"id":18446744073709551615,"queue":"q","type":"t","payload":{"n":18446744073709551614},"priority":0,"attempt":1,"lease_token":9007199254740991,"lease_expires_at":"2026-11-21T12:00:30.000Z","created_at":"2026-11-21T12:00:00.000Z"}',
    );
    assert.ok(job);
    assert.equal(job.id, 18446744073709551615n);
    assert.equal(job.lease_token, 9007199254740991);
    assert.deepEqual(job.payload, { n: 18446744073709551614n });
    assert.equal(parseStreamLine(""), null);
  });
});

suite("stringifyJson", () => {
  test("writes a bigint as its exact digits, so an id round-trips", () => {
    const text = '{"id":18446744073709551615,"jobs":[{"id":9007199254740993,"lease_token":1}]}';
    assert.equal(stringifyJson(parseJson(text)), text);
  });

  test("writes everything else as JSON.stringify does", () => {
    const value = { a: 1, b: "x\"\n", c: [1, undefined, null], d: undefined, e: new Date(0), f: { g: true } };
    assert.equal(stringifyJson(value), JSON.stringify(value));
    assert.throws(() => stringifyJson({ n: Number.NaN }), TypeError);
    const cycle: Record<string, unknown> = {};
    cycle["self"] = cycle;
    assert.throws(() => stringifyJson(cycle), TypeError);
  });
});

suite("errors", () => {
  test("the server's error shape becomes the class of its code, with field and message", () => {
    const error = errorFromResponse(
      400,
      '{"error": {"status": 400, "code": "invalid", "field": "jobs[2].policy.max_delay", "message": "must be greater"}}',
      "req-1",
    );
    assert.ok(error instanceof InvalidRequest);
    assert.equal(error.code, "invalid");
    assert.equal(error.field, "jobs[2].policy.max_delay");
    assert.equal(error.serverMessage, "must be greater");
    assert.equal(error.requestId, "req-1");
    assert.equal(error.message, "400 invalid: jobs[2].policy.max_delay: must be greater");
    assert.ok(errorFromResponse(409, '{"error":{"code":"lease_lost","message":"m"}}') instanceof LeaseLost);
    assert.ok(errorFromResponse(409, '{"error":{"code":"duplicate","message":"m"}}') instanceof Duplicate);
  });

  test("an answer that is not the server's shape still gives an error by status", () => {
    const error = errorFromResponse(502, "<html>bad gateway</html>");
    assert.ok(error instanceof ServerError);
    assert.equal(error.code, "http_502");
    assert.equal(error.serverMessage, "<html>bad gateway</html>");
    const odd = errorFromResponse(418, "");
    assert.equal(odd.constructor, ApiError);
    assert.equal(odd.serverMessage, "HTTP 418");
  });
});

suite("durations", () => {
  test("milliseconds of numbers and strings with units", () => {
    assert.equal(durationMs(250), 250);
    assert.equal(durationMs("250ms"), 250);
    assert.equal(durationMs("12.5s"), 12_500);
    assert.equal(durationMs("1h30m"), 5_400_000);
    assert.equal(durationMs("2d"), 172_800_000);
    assert.equal(durationMs("1500"), 1500);
    assert.throws(() => durationMs("soon"), RangeError);
    assert.throws(() => durationMs(""), RangeError);
  });
});

suite("outcomes", () => {
  test("each outcome class asks for its fail option", () => {
    assert.deepEqual(describe(new NotRetryable("no")).options, { retryable: false });
    assert.deepEqual(describe(new RetryIn("5m")).options, { retry_in: "5m" });
    assert.deepEqual(describe(new Snooze(30_000)).options, { snooze: 30_000 });
    const at = new Date("2030-01-01T00:00:00Z");
    assert.deepEqual(describe(new RetryAt(at)).options, { retry_at: at });
    assert.deepEqual(describe(new Error("plain")).options, {});
  });

  test("messages: the outcome's, else its cause's, else what it does; details carry the stack", () => {
    const plain = describe(new TypeError("bad input"));
    assert.equal(plain.message, "TypeError: bad input");
    assert.equal((plain.detail as { type: string }).type, "TypeError");
    assert.match((plain.detail as { stack: string }).stack, /bad input/);
    assert.equal(describe(new RetryIn("5m", "", { cause: new Error("smtp down") })).message, "Error: smtp down");
    assert.equal(describe(new RetryIn("5m")).message, "retry in 5m");
    assert.equal(describe(new Snooze(30_000)).message, "snoozed for 30000 ms");
    assert.deepEqual(describe(new NotRetryable("gone", { detail: { code: 7 } })).detail, { code: 7 });
    assert.equal(describe("a string").message, "a string");
    assert.equal(describe(new Error("x".repeat(10_000))).message.length, 8_000);
  });
});
