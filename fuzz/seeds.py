#!/usr/bin/env python3
"""Seeds for the fuzz corpora: every JSON document in the docs, the README and the tests,
sorted by target. Writes fuzz/seeds/<target>/ (not committed: the minimised corpus is).

    python3 fuzz/seeds.py && ls fuzz/seeds
"""
import hashlib
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "fuzz" / "seeds"
SOURCES = (
    [ROOT / "README.md"]
    + sorted((ROOT / "docs").glob("*.md"))
    + sorted((ROOT / "crates").glob("*/tests/**/*.rs"))
    + sorted((ROOT / "crates").glob("*/src/**/*.rs"))
)
DURATION = re.compile(r'"(\d[\d.]*\s*[a-zA-Z]+(?:\s*\d[\d.]*\s*[a-zA-Z]+)*)"')


def documents(text):
    """Every balanced {...} or [...] in text that is JSON (Rust's 1_000 read as 1000)."""
    for start, ch in enumerate(text):
        if ch not in "{[":
            continue
        depth, in_string, escaped = 0, False, False
        for end in range(start, min(len(text), start + 20000)):
            c = text[end]
            if in_string:
                if escaped:
                    escaped = False
                elif c == "\\":
                    escaped = True
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
            elif c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    candidate = re.sub(r"(?<=\d)_(?=\d)", "", text[start : end + 1])
                    try:
                        yield json.loads(candidate)
                    except ValueError:
                        pass
                    break


def walk(value):
    yield value
    if isinstance(value, dict):
        for v in value.values():
            yield from walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from walk(v)


POLICY_KEYS = {"type", "healthyRetryPolicy", "throttlePolicy", "requestPolicy", "http",
               "_retry_policy", "minimum_delay", "maximum_delay", "retries_with_no_delay",
               "retry_backoff_function"}
NATIVE_KEYS = {"queue", "jobs", "queues", "error", "endpoint", "policy", "paused", "lease",
               "message_ttl", "disable_overrides", "retry_in", "snooze", "headers", "secret"}


def main():
    seeds = {t: set() for t in ["policy", "duration", "native_body", "zaqar_patch", "zaqar_post"]}
    for path in SOURCES:
        text = path.read_text(errors="replace")
        for m in DURATION.finditer(text):
            seeds["duration"].add(m.group(1))
        for doc in documents(text):
            compact = json.dumps(doc, ensure_ascii=False)
            if isinstance(doc, list) and doc and all(isinstance(c, dict) and "op" in c for c in doc):
                seeds["zaqar_patch"].add(compact)
            if isinstance(doc, dict) and "messages" in doc:
                seeds["zaqar_post"].add(compact)
            if isinstance(doc, dict) and NATIVE_KEYS & doc.keys():
                seeds["native_body"].add(compact)
            for part in walk(doc):
                if isinstance(part, dict) and POLICY_KEYS & part.keys():
                    seeds["policy"].add(json.dumps(part, ensure_ascii=False))
                if isinstance(part, dict) and "_retry_policy" in part:
                    seeds["policy"].add(json.dumps(part["_retry_policy"], ensure_ascii=False))
    for target, items in seeds.items():
        folder = OUT / target
        folder.mkdir(parents=True, exist_ok=True)
        for item in items:
            data = item.encode()
            (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)
        print(f"{target}: {len(items)} seeds")


if __name__ == "__main__":
    main()
