"""An imported cram test's merged stream as cram shows it. Runs on boxes; stdlib only.

A pin imported from a `.t` file (imports/cram.py) feeds its commands to one shell, each preceded
by `echo SALT LINE $?`, so its stream holds marker lines (`CRAM-CHARPIN-SALT 67 1`: the command
before line 67 of the `.t` exited 1). A byte diff of two such streams shows the markers; a
reviewer reads cram's own form instead: each `$ command` as the `.t` writes it, its output
indented, a non-zero status as `[1]`, and every hunk says at which line of the `.t` it is.
"""

from __future__ import annotations

import difflib
import re
from typing import Optional

from charpin_runner.pins.model import Case

# The marker imports/cram.py puts before each command (cram salts with the time; a fixed salt
# keeps the golden stable).
SALT = b"CRAM-CHARPIN-SALT"
_ECHO = re.compile(rb"^echo " + re.escape(SALT) + rb" (\d+) \$\?$")
_MARK = re.compile(re.escape(SALT) + rb" (\d+) (-?\d+)$")
# The prologue's TESTDIR line for a test below the pins' first PYTHONPATH folder.
_TESTDIR = re.compile(rb'^TESTDIR="\$\{PYTHONPATH%%:\*\}"/(\S+)$', re.M)
INDENT = "  "


def commands(stdin: bytes) -> Optional[dict[int, list[str]]]:
    """`.t` line (0-based) -> the command's lines as the `.t` writes them (`$ ...`, `> ...`),
    read back from the shell script the pin feeds; None when stdin is no such script."""
    found: dict[int, list[str]] = {}
    current: Optional[list[str]] = None
    for raw in stdin.split(b"\n"):
        marker = _ECHO.match(raw)
        if marker:
            current = found.setdefault(int(marker.group(1)), [])
            continue
        if current is not None and raw:
            current.append(("$ " if not current else "> ") + _text(raw))
    return found or None


def transcript(stream: bytes, cmds: dict[int, list[str]]) -> tuple[list[str], list[int]]:
    """(lines, where): the stream as a `.t` body, and for each line the `.t` line (1-based)
    of the command it belongs to (0 before the first command)."""
    lines: list[str] = []
    where: list[int] = []
    at = 0
    for raw in stream.splitlines(keepends=True):
        out, mark = raw, None
        if SALT in raw:
            out, tail = raw.split(SALT, 1)
            mark = _MARK.match(SALT + tail.rstrip(b"\n"))
        if out:
            text = _text(out[:-1]) if out.endswith(b"\n") else _text(out) + " (no-eol)"
            lines.append(INDENT + text)
            where.append(at)
        if mark is not None:
            status, line = int(mark.group(2)), int(mark.group(1))
            if status != 0:
                lines.append(f"{INDENT}[{status}]")
                where.append(at)
            at = line + 1
            for command in cmds.get(line, []):
                lines.append(INDENT + command)
                where.append(at)
    return lines, where


def cram_diff(
    golden: bytes, actual: bytes, stdin: bytes, origin: str, cap: int
) -> Optional[list[str]]:
    """A unified diff of two merged streams in cram's form, each hunk naming its `.t` line;
    None when stdin is not an imported cram test's script."""
    cmds = commands(stdin)
    if cmds is None:
        return None
    want, where = transcript(golden, cmds)
    got, _ = transcript(actual, cmds)
    name = origin or "test.t"
    out = [f"--- golden/{name}", f"+++ actual/{name}"]
    matcher = difflib.SequenceMatcher(None, want, got, autojunk=False)
    for group in matcher.get_grouped_opcodes(3):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        first = next(op[1] for op in group if op[0] != "equal")
        line = where[min(first, len(where) - 1)] if where else 0
        # The first changed line's command says where in the `.t` to look.
        out.append(f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@ {name}:{line or 1}")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                out += [" " + x for x in want[a1:a2]]
                continue
            out += ["-" + x for x in want[a1:a2]]
            out += ["+" + x for x in got[b1:b2]]
    if len(out) == 2:
        return []
    if len(out) > cap:
        out = [*out[:cap], f"... {len(out) - cap} more diff lines"]
    return out


def cram_file(case: Case) -> str:
    """The `.t` an imported cram pin came from, as its script says (`TESTDIR` relative to the
    pins' first PYTHONPATH folder, and `TESTFILE`): a pin read back from pins.jsonl has its line
    there as origin, not the file."""
    name = case.env.get("TESTFILE")
    if not name:
        return case.origin
    folder = _TESTDIR.search(case.stdin)
    if folder is None:
        return name
    return f"{_text(folder.group(1)).strip(chr(39))}/{name}"


def _text(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")
