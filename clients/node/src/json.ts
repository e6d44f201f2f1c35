// JSON that keeps every integer exact.
//
// Job ids are u64 in the server's JSON. `JSON.parse` reads every number as a double, so an
// integer above 2^53 − 1 (Number.MAX_SAFE_INTEGER) would silently change, and Node 20's
// `JSON.parse` reviver sees only the already rounded value, not the source text. `parseJson`
// is a small parser of its own: an integer literal beyond the safe range comes out as a
// `bigint` with its exact value; every other number as a `number`, as `JSON.parse` gives it.
// `stringifyJson` writes a `bigint` back as its digits, so such an id round-trips exactly.

/** Any JSON value as this package reads it: integers beyond the safe range are `bigint`. */
export type Json = null | boolean | number | bigint | string | Json[] | { [key: string]: Json };

/** Thrown when a text is not one complete JSON value. */
export class JsonSyntaxError extends SyntaxError {
  override name = "JsonSyntaxError";
}

const MAX_DEPTH = 512;

/**
 * Parses one JSON text like `JSON.parse`, except that an integer literal (no fraction, no
 * exponent) beyond ±(2^53 − 1) becomes a `bigint` holding its exact value.
 */
export function parseJson(text: string): Json {
  const parser = new Parser(text);
  parser.space();
  const value = parser.value(0);
  parser.space();
  if (parser.at < text.length) {
    parser.fail("unexpected text after the JSON value");
  }
  return value;
}

class Parser {
  at = 0;

  constructor(private readonly text: string) {}

  fail(what: string): never {
    const near = this.text.slice(this.at, this.at + 20);
    throw new JsonSyntaxError(`${what} at position ${this.at}${near ? ` (near ${JSON.stringify(near)})` : ""}`);
  }

  space(): void {
    const t = this.text;
    while (this.at < t.length) {
      const c = t.charCodeAt(this.at);
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) {
        this.at++;
      } else {
        return;
      }
    }
  }

  value(depth: number): Json {
    if (depth > MAX_DEPTH) {
      this.fail("JSON nested too deeply");
    }
    const c = this.text[this.at];
    switch (c) {
      case "{":
        return this.object(depth);
      case "[":
        return this.array(depth);
      case '"':
        return this.string();
      case "t":
        return this.literal("true", true);
      case "f":
        return this.literal("false", false);
      case "n":
        return this.literal("null", null);
      default:
        if (c === "-" || (c !== undefined && c >= "0" && c <= "9")) {
          return this.number();
        }
        return this.fail(c === undefined ? "unexpected end of JSON" : "unexpected character");
    }
  }

  literal<T extends Json>(word: string, value: T): T {
    if (!this.text.startsWith(word, this.at)) {
      this.fail("unexpected character");
    }
    this.at += word.length;
    return value;
  }

  object(depth: number): { [key: string]: Json } {
    const out: { [key: string]: Json } = {};
    this.at++; // {
    this.space();
    if (this.text[this.at] === "}") {
      this.at++;
      return out;
    }
    for (;;) {
      this.space();
      if (this.text[this.at] !== '"') {
        this.fail("expected a string key");
      }
      const key = this.string();
      this.space();
      if (this.text[this.at] !== ":") {
        this.fail("expected ':'");
      }
      this.at++;
      this.space();
      const value = this.value(depth + 1);
      // defineProperty: a key "__proto__" is an ordinary key, as with JSON.parse.
      Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
      this.space();
      const next = this.text[this.at];
      if (next === ",") {
        this.at++;
      } else if (next === "}") {
        this.at++;
        return out;
      } else {
        this.fail("expected ',' or '}'");
      }
    }
  }

  array(depth: number): Json[] {
    const out: Json[] = [];
    this.at++; // [
    this.space();
    if (this.text[this.at] === "]") {
      this.at++;
      return out;
    }
    for (;;) {
      this.space();
      out.push(this.value(depth + 1));
      this.space();
      const next = this.text[this.at];
      if (next === ",") {
        this.at++;
      } else if (next === "]") {
        this.at++;
        return out;
      } else {
        this.fail("expected ',' or ']'");
      }
    }
  }

  string(): string {
    const t = this.text;
    const start = ++this.at; // opening quote
    // Fast path: no escapes.
    let i = start;
    while (i < t.length) {
      const c = t.charCodeAt(i);
      if (c === 0x22) {
        this.at = i + 1;
        return t.slice(start, i);
      }
      if (c === 0x5c || c < 0x20) {
        break;
      }
      i++;
    }
    // Slow path: let JSON.parse decode the escapes of this one string literal.
    let j = i;
    while (j < t.length) {
      const c = t.charCodeAt(j);
      if (c === 0x22) {
        break;
      }
      if (c < 0x20) {
        this.at = j;
        this.fail("control character in a string");
      }
      j += c === 0x5c ? 2 : 1;
    }
    if (j >= t.length) {
      this.at = t.length;
      this.fail("unterminated string");
    }
    try {
      const decoded: unknown = JSON.parse(t.slice(start - 1, j + 1));
      this.at = j + 1;
      return decoded as string;
    } catch {
      return this.fail("bad escape in a string");
    }
  }

  number(): number | bigint {
    const t = this.text;
    const start = this.at;
    const match = /^-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(t.slice(start, start + 400));
    if (match === null) {
      return this.fail("bad number");
    }
    let literal = match[0];
    if (literal.length === 400) {
      // Very long numbers: match the rest without a cap.
      const full = /^-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(t.slice(start));
      literal = full?.[0] ?? literal;
    }
    this.at = start + literal.length;
    const integer = match[1] === undefined && match[2] === undefined;
    const value = Number(literal);
    if (integer && !Number.isSafeInteger(value)) {
      return BigInt(literal);
    }
    return value;
  }
}

/**
 * Writes a value as JSON like `JSON.stringify` (no indentation), except that a `bigint` is
 * written as its exact digits instead of throwing. `undefined` members of objects are left
 * out; values with a `toJSON` method (such as `Date`) are written as what it returns.
 */
export function stringifyJson(value: unknown): string {
  const out = write(value, new Set());
  if (out === undefined) {
    throw new TypeError("cannot write undefined as JSON");
  }
  return out;
}

function write(value: unknown, seen: Set<object>): string | undefined {
  if (value !== null && typeof value === "object" && typeof (value as { toJSON?: unknown }).toJSON === "function") {
    value = (value as { toJSON(): unknown }).toJSON();
  }
  switch (typeof value) {
    case "bigint":
      return value.toString();
    case "number":
      if (!Number.isFinite(value)) {
        throw new TypeError(`cannot write ${value} as JSON`);
      }
      return JSON.stringify(value);
    case "string":
    case "boolean":
      return JSON.stringify(value);
    case "undefined":
    case "function":
    case "symbol":
      return undefined;
  }
  if (value === null) {
    return "null";
  }
  const obj = value as object;
  if (seen.has(obj)) {
    throw new TypeError("cannot write a circular structure as JSON");
  }
  seen.add(obj);
  try {
    if (Array.isArray(obj)) {
      return `[${obj.map((item) => write(item, seen) ?? "null").join(",")}]`;
    }
    const parts: string[] = [];
    for (const [key, item] of Object.entries(obj)) {
      const text = write(item, seen);
      if (text !== undefined) {
        parts.push(`${JSON.stringify(key)}:${text}`);
      }
    }
    return `{${parts.join(",")}}`;
  } finally {
    seen.delete(obj);
  }
}
