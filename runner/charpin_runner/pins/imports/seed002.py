"""Seed 002's command-matrix goldens (char_harness.py `record`), read as that harness writes them.

The harness's CASES list (name, args) is read from its source without running it (a literal);
each case's golden is golden/<name>.json (`json.dumps(snap, indent=2)`): name, exit_code, stdout,
stderr, out_sha256 and out_text of the file named by the case's third argument. The program the
harness runs (ROOT/messy_invoice.py in the seed) comes from --target or
`[tool.charpin.pins] target`. The harness copies fixtures/ into each case's fresh work folder;
charpin copies one repository folder as the work folder, so the import makes that folder
(--work-dir, holding a copy of fixtures/) and every imported pin uses it.
"""

from __future__ import annotations

import ast
import filecmp
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Optional

from charpin_runner.errors import ConfigError, IntegrityError, UsageError
from charpin_runner.pins.execute import Run
from charpin_runner.pins.imports.common import Draft, Plan, Settled, observed
from charpin_runner.pins.model import Case, OutFile, check_id
from charpin_runner.schema import convert

FORMAT = "seed-002 command-matrix goldens"

KEPT = [
    "each case's argv (the harness's CASES), exit code, stdout and stderr byte for byte, and "
    "its output file's sha256 and text",
]
LOST = [
    "the environment the harness inherited (all of yours; PYTHONHASHSEED=0 is in charpin's "
    "base too): a pin gets only charpin's fixed base",
    "text=True: the harness decoded the streams and turned \\r\\n into \\n; charpin compares "
    "the raw bytes",
]


@dataclass
class _Golden:
    name: str
    exit_code: int
    stdout: str
    stderr: str
    out_sha256: Optional[str]
    out_text: Optional[str]


@dataclass
class _HarnessCase:
    name: str
    args: list[str]


def read_cases(harness: Path, label: str) -> list[_HarnessCase]:
    """The harness's module-level CASES, which must be a literal list of {name, args}."""
    try:
        tree = ast.parse(harness.read_text(encoding="utf-8"), filename=label)
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the harness {label}: {exc}") from None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "CASES" for t in node.targets
        ):
            try:
                value: Any = ast.literal_eval(node.value)
            except ValueError:
                raise UsageError(
                    f"{label}:{node.lineno}: CASES is not a literal list; charpin reads it "
                    "without running the harness, so write it as plain data"
                ) from None
            try:
                cases: list[_HarnessCase] = convert(value, list[_HarnessCase], "$.CASES")
            except ConfigError as exc:
                raise UsageError(f"{label}:{node.lineno}: {exc}") from None
            return cases
    raise UsageError(f"{label}: no module-level CASES = [...] found; is this seed 002's harness?")


def _read_golden(path: Path, label: str, name: str) -> _Golden:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(
            f"{label} is missing: record the goldens first (python char_harness.py record)"
        ) from None
    except (OSError, ValueError) as exc:
        raise IntegrityError(f"{label}: cannot read JSON ({exc}); restore the file") from None
    try:
        golden: _Golden = convert(data, _Golden, "$")
    except ConfigError as exc:
        raise IntegrityError(f"{label}: {exc}; this is not a seed-002 golden") from None
    if golden.name != name:
        raise IntegrityError(f"{label}: names case {golden.name!r}, expected {name!r}")
    return golden


def plan(
    repo: Path,
    harness: Path,
    target: str,
    work_dir: Path,
    output: str,
    prefix: str = "",
) -> Plan:
    """One pin per harness case, all sharing one work folder that holds a copy of fixtures/."""
    root = harness.parent
    label = harness.relative_to(repo).as_posix()
    cases = read_cases(harness, label)
    if not cases:
        raise UsageError(f"{label}: CASES is empty; nothing to import")
    work_rel = work_dir.relative_to(repo).as_posix()
    drafts = []
    for case in cases:
        glabel = (root / "golden" / f"{case.name}.json").relative_to(repo).as_posix()
        golden = _read_golden(root / "golden" / f"{case.name}.json", glabel, case.name)
        if len(case.args) < 3:
            raise UsageError(
                f"{label}: case {case.name} has fewer than three args; the harness reads its "
                "output file from the third"
            )
        out_rel = _under_output(case.args[2], output, f"{glabel} (args[2])")
        pin = Case(
            id=check_id(prefix + case.name, glabel),
            argv=(target, *case.args),
            fixtures=work_rel,
            origin=glabel,
        )
        drafts.append(Draft(pin, glabel, _settler(golden, out_rel, glabel)))
    created = _prepare_work(root / "fixtures", work_dir, work_rel)
    kept = [*KEPT, f"fixtures/ is copied to {work_rel}/fixtures, each pin's work folder"]
    return Plan(FORMAT, drafts, kept=kept, lost=LOST, cleanup=created)


def _prepare_work(fixtures: Path, work_dir: Path, work_rel: str) -> list[Path]:
    """Copy fixtures/ into work_dir/fixtures; an existing identical copy is reused."""
    if not fixtures.is_dir():
        raise UsageError(f"{fixtures} is missing: seed 002's harness copies it into every case")
    copy = work_dir / "fixtures"
    if copy.exists():
        compared = filecmp.dircmp(fixtures, copy)
        if compared.left_only or compared.right_only or compared.diff_files or compared.funny_files:
            raise UsageError(
                f"{work_rel}/fixtures exists and differs from {fixtures.name}/; remove it or "
                "pass another --work-dir"
            )
        return []
    created = [] if work_dir.exists() else [work_dir]
    shutil.copytree(fixtures, copy, symlinks=True)
    return created or [copy]


def _under_output(path: str, output: str, where: str) -> str:
    parts = PurePosixPath(path).parts
    out_parts = PurePosixPath(output).parts
    if parts[: len(out_parts)] != out_parts or len(parts) == len(out_parts):
        raise UsageError(
            f"{where}: the output file {path} is not under charpin's output folder {output}/, "
            "which is the only place a pin keeps files; write it there or set "
            "[tool.charpin.pins] output"
        )
    return PurePosixPath(*parts[len(out_parts) :]).as_posix()


def _settler(golden: _Golden, out_rel: str, label: str) -> Callable[[Run], Settled]:
    def settle(run: Run) -> Settled:
        notes = []
        files = dict(run.observation.files)
        files.pop(out_rel, None)
        if files:
            notes.append(
                f"{label}: the program also writes {', '.join(sorted(files))} under the "
                "output folder; the harness never looked, the pin now checks them"
            )
        if golden.out_sha256 is not None:
            text = golden.out_text
            if text is not None and hashlib.sha256(text.encode()).hexdigest() != golden.out_sha256:
                notes.append(
                    f"{label}: out_text is not the file's exact bytes (read_text() turns \\r\\n "
                    "into \\n); only its sha256 is kept"
                )
                text = None
            got = run.observation.files.get(out_rel)
            files[out_rel] = OutFile(golden.out_sha256, got.mode if got else 0o644, text)
        return Settled(
            golden=observed(
                run,
                exit_code=golden.exit_code,
                stdout=golden.stdout.encode("utf-8"),
                stderr=golden.stderr.encode("utf-8"),
                files=files,
            ),
            notes=notes,
        )

    return settle
