#!/usr/bin/env python3
"""The fenced shell blocks of a Markdown file that are marked runnable (tests/docs/run.sh).

    blocks.py FILE OUTDIR

Writes each marked block of FILE, ready for bash, to OUTDIR/<n>.sh and prints one line per
block: `<n> <line> <mode>`, where line is the line of its opening fence and mode is `ok` or
`fails`. The markers, in the fence's info string after the language (GitHub renders the block
by its first word and ignores the rest):

    ```sh doctest              run it: every command must succeed
    ```sh doctest=fails        every curl and tenax command in it must be refused
    ```console doctest         the same for a console block: `$ ` lines are the commands,
                               the lines without a prompt are output (not checked)

In the commands, `cargo run --release -p tenax --`, `./target/release/tenax` and
`./target/debug/tenax` become `tenax` (the runner's binary).
"""

import re
import sys
from pathlib import Path

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*(\S*)\s*(.*)$")
SHELLS = {"sh", "bash", "shell", "console"}
MODES = {"doctest": "ok", "doctest=fails": "fails"}
REWRITES = [
    (re.compile(r"cargo run (--release )?-p tenax --(?= |$)"), "tenax"),
    (re.compile(r"\./target/(release|debug)/tenax\b"), "tenax"),
]


def blocks(text: str):
    """(line of the opening fence, language, the other words of the info string, body lines)."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang, rest = m.groups()
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[i]):
            line = lines[i]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            i += 1
        i += 1
        yield start, lang, rest.split(), body


def console_commands(body: list[str]) -> list[str]:
    """The commands of a console block: `$ ` lines and the lines continuing them (`\\`)."""
    out, continuing = [], False
    for line in body:
        if continuing:
            out.append(line)
        elif line.startswith("$ "):
            out.append(line[2:])
        else:
            continue
        continuing = line.endswith("\\")
    return out


def main() -> int:
    path, outdir = Path(sys.argv[1]), Path(sys.argv[2])
    n = 0
    for line, lang, words, body in blocks(path.read_text(encoding="utf-8")):
        marks = [w for w in words if w.startswith("doctest")]
        if not marks:
            continue
        if len(marks) > 1 or marks[0] not in MODES or lang not in SHELLS:
            print(f"{path}:{line}: unknown marker ```{lang} {' '.join(words)} "
                  f"(known: a shell language, then {' or '.join(MODES)})", file=sys.stderr)
            return 2
        commands = console_commands(body) if lang == "console" else body
        script = "\n".join(commands) + "\n"
        for pattern, replacement in REWRITES:
            script = pattern.sub(replacement, script)
        n += 1
        (outdir / f"{n}.sh").write_text(script, encoding="utf-8")
        print(n, line, MODES[marks[0]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
