"""Seed 000's pins.jsonl (record_pins.py), read as that recorder writes it. Stdlib only.

One JSON object a line, every field always written: id, argv (the arguments after the script,
e.g. ["-"]), env, stdin_sha256, stdin, exit_code, stdout, stderr, cwd_rel. The script itself is
not in the file (the recorder hard-codes it), so it comes from --target or
`[tool.charpin.pins] target`. stdin_sha256 must be the sha256 of stdin's UTF-8 bytes: anything
else means the line was edited by hand after recording, and the import is refused.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from charpin_runner.errors import ConfigError, IntegrityError
from charpin_runner.pins.execute import Run
from charpin_runner.pins.imports.common import Draft, Plan, Settled, observed
from charpin_runner.pins.model import Case, check_id
from charpin_runner.pins.store import check_rel
from charpin_runner.schema import convert

FORMAT = "seed-000 pins.jsonl"

KEPT = [
    "id, the arguments (after the target), env, stdin, cwd_rel, exit code, stdout and stderr, "
    "byte for byte",
]
LOST = [
    "stdin_sha256: checked against stdin, then dropped (charpin stores stdin itself)",
    "the environment the recorder inherited (all of yours, minus the keys it popped): a pin gets "
    "only its own env plus charpin's fixed base",
    "cwd_rel was relative to the repository; a pin's cwd is its fresh work folder, so a "
    "program that reads repository files by relative path no longer finds them",
    "text=True: the recorder decoded the streams and turned \\r\\n into \\n; charpin compares "
    "the raw bytes (a program printing \\r\\n replays red)",
]


@dataclass
class _Line:
    id: str
    argv: list[str]
    env: dict[str, str]
    stdin_sha256: str
    stdin: str
    exit_code: int
    stdout: str
    stderr: str
    cwd_rel: str


def _parse(raw: str, where: str) -> _Line:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise IntegrityError(f"{where}: not JSON ({exc}); restore the line") from None
    try:
        line: _Line = convert(data, _Line, "$")
    except ConfigError as exc:
        raise IntegrityError(f"{where}: {exc}; this is not a seed-000 pin line") from None
    got = hashlib.sha256(line.stdin.encode("utf-8")).hexdigest()
    if got != line.stdin_sha256:
        raise IntegrityError(
            f"{where}: stdin does not match its stdin_sha256 (recorded "
            f"{line.stdin_sha256[:12]}, stdin hashes to {got[:12]}): the line was edited by "
            "hand after recording; restore it from version control or re-record it with the "
            "recorder"
        )
    return line


def plan(path: Path, label: str, target: str, replace: bool, prefix: str = "") -> Plan:
    """Read the file and propose one pin per line, argv = [target, *arguments]."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise IntegrityError(f"cannot read {label}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise IntegrityError(f"{label} is not UTF-8; restore it from version control") from None
    drafts = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{label} line {number}"
        line = _parse(raw, where)
        case = Case(
            id=check_id(prefix + line.id, where),
            argv=(target, *line.argv),
            env=dict(line.env),
            stdin=line.stdin.encode("utf-8"),
            cwd_rel=check_rel(line.cwd_rel, where),
            origin=where,
        )
        drafts.append(Draft(case, where, _settler(line)))
    if not drafts:
        raise IntegrityError(f"{label} holds no pin lines; nothing to import")
    return Plan(FORMAT, drafts, kept=KEPT, lost=LOST, replace=replace)


def _settler(line: _Line) -> Callable[[Run], Settled]:
    def settle(run: Run) -> Settled:
        notes = []
        if run.observation.files:
            notes.append(
                f"{line.id}: the program writes {', '.join(sorted(run.observation.files))} under "
                "the output folder; the recorder never looked, the pin now checks them"
            )
        golden = observed(
            run,
            exit_code=line.exit_code,
            stdout=line.stdout.encode("utf-8"),
            stderr=line.stderr.encode("utf-8"),
        )
        return Settled(golden=golden, notes=notes)

    return settle
