"""`charpin pins cover`: which lines and branches of the repository no pin runs. Local side only.

coverage.py is an optional extra (`charpin-remote[cover]`), imported lazily and never shipped to
boxes. Each Python-target pin is replayed under `coverage run --branch` in its usual sandbox with
its own data file; the files are combined and reported per repository module: every module a pin
ran, and every module those and the entry points import (statically, transitively, as `charpin
inventory` resolves imports), so one no pin runs shows 0%. Each module also names the pins that
ran it (their own data files). render() turns the result into a summary table, then the lines
and branches no pin ran, capped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from charpin_runner.errors import ConfigError, UsageError
from charpin_runner.inventory.build import module_files
from charpin_runner.pins.execute import Session, run_case
from charpin_runner.pins.model import Pin

# Detail lines (missing lines and branches) shown before the rest is cut; --full shows all.
DETAIL_CAP = 60
# Pin ids named in one summary row before "+N more".
PINS_SHOWN = 4


@dataclass(frozen=True)
class FileCover:
    """Coverage of one repository module by all pins together."""

    path: str
    missing_lines: list[int]
    missing_branches: list[tuple[int, int]]
    lines: int
    branches: int
    # Ids of the pins that ran at least one line of it, sorted; empty when no pin did.
    pins: list[str] = field(default_factory=list)

    @property
    def covered_lines(self) -> int:
        return self.lines - len(self.missing_lines)

    @property
    def covered_branches(self) -> int:
        return self.branches - len(self.missing_branches)

    @property
    def percent(self) -> int:
        """Lines and branches together, as coverage.py counts; rounded down (100 only when
        nothing is missing, and a module without statements counts as 100)."""
        return _percent(self.covered_lines + self.covered_branches, self.lines + self.branches)


def _percent(covered: int, total: int) -> int:
    return 100 if total == 0 else 100 * covered // total


def _coverage() -> Any:
    try:
        import coverage
    except ImportError:
        raise UsageError(
            "charpin pins cover needs coverage.py; pip install 'charpin-remote[cover]'"
        ) from None
    return coverage


def cover(
    session: Session, pins: list[Pin], jobs: int, extra: Optional[list[str]] = None
) -> list[FileCover]:
    """Replay Python-target pins under coverage and report per repository module, by path.

    Reported: every repository module a pin ran, the pins' script targets, extra (repo-relative
    files, e.g. the inventory's entry points), and every repository module any of those imports;
    a module no pin runs is reported with every line missing.
    """
    coverage = _coverage()
    for rel in extra or []:
        if not (session.repo / rel).is_file():
            raise UsageError(f"entry point {rel} is not a file in the repository; fix the path")
    targets = [p for p in pins if session.is_python(p.case)]  # scripts, -m, console scripts
    if not targets:
        raise ConfigError("no pin runs a Python script, so there is nothing to cover; add one")
    data_dir = session.dir / "coverage"
    data_dir.mkdir()
    rcfile = session.dir / "coveragerc"
    rcfile.write_text("[run]\nbranch = True\n", encoding="utf-8")

    def one(index_pin: tuple[int, Pin]) -> Path:
        index, pin = index_pin
        data = data_dir / f".coverage.{index}"
        prefix = ["-m", "coverage", "run", "--branch", f"--rcfile={rcfile}", f"--data-file={data}"]
        run_case(session, pin.case, prefix=prefix)
        return data

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        written = list(pool.map(one, enumerate(targets)))
    data_files = [p for p in written if p.is_file()]
    if not data_files:
        raise UsageError(
            f"coverage wrote no data: is coverage installed for {session.python}? "
            "pip install 'charpin-remote[cover]' there"
        )
    repo = session.repo
    ran_by: dict[str, set[str]] = {}
    for pin, data_file in zip(targets, written):
        if data_file.is_file():
            for rel in _ran_files(coverage, repo, data_file):
                ran_by.setdefault(rel, set()).add(pin.case.id)
    named = {os.path.normpath(rel) for rel in extra or []}
    for pin in targets:
        script = pin.case.argv[0]
        if script.endswith(".py") and not os.path.isabs(script) and (repo / script).is_file():
            named.add(os.path.normpath(script))
    walked, reached = module_files(repo, sorted(set(ran_by) | named))
    # Files a pin ran outside what the inventory walks (a vendored venv, build/) are not ours.
    paths = sorted({rel for rel in ran_by if rel in walked} | set(reached) | named)
    combined = session.dir / "combined.coverage"
    cov = coverage.Coverage(data_file=str(combined), branch=True, config_file=False)
    cov.combine([str(p) for p in data_files], keep=True)
    cov.save()
    report = session.dir / "coverage.json"
    morfs = [str(repo / rel) for rel in paths]
    cov.json_report(morfs=morfs, outfile=str(report), ignore_errors=True)
    data = json.loads(report.read_text(encoding="utf-8"))
    by_rel: dict[str, Any] = {}
    for name, info in data.get("files", {}).items():
        found = _repo_rel(repo, name)
        if found is not None:
            by_rel[found] = info
    results = []
    for rel in paths:
        info = by_rel.get(rel, {})
        summary = info.get("summary", {})
        results.append(
            FileCover(
                path=rel,
                missing_lines=list(info.get("missing_lines", [])),
                missing_branches=[(a, b) for a, b in info.get("missing_branches", [])],
                lines=int(summary.get("num_statements", 0)),
                branches=int(summary.get("num_branches", 0)),
                pins=sorted(ran_by.get(rel, ())),
            )
        )
    return results


def _ran_files(coverage: Any, repo: Path, data_file: Path) -> set[str]:
    """Repository files (relative) of which one pin's data file records at least one line."""
    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    found = set()
    for name in data.measured_files():
        rel = _repo_rel(repo, name)
        if rel is not None and data.lines(name):
            found.add(rel)
    return found


def _repo_rel(repo: Path, name: str) -> Optional[str]:
    """name (absolute, or relative to the current folder as coverage reports it) relative to
    repo, or None outside it."""
    try:
        return Path(name).resolve().relative_to(repo).as_posix()
    except ValueError:
        return None


def render(files: Sequence[FileCover], full: bool = False) -> list[str]:
    """The report: a summary row per module (covered/total lines and branches, percent, the pins
    that ran it), then what no pin ran, file by file (modules some pin ran first), capped at
    DETAIL_CAP lines unless full."""
    touched = {p for f in files for p in f.pins}
    ran = sum(1 for f in files if f.pins)
    out = [
        f"{len(files)} module(s) the pins ran or the entry points import; "
        f"{len(touched)} pin(s) ran {ran} of them",
        "",
    ]
    rows = [("FILE", "LINES", "BRANCHES", "COVER", "PINS")]
    for item in files:
        rows.append(
            (
                item.path,
                f"{item.covered_lines}/{item.lines}",
                f"{item.covered_branches}/{item.branches}",
                f"{item.percent}%",
                _pins_cell(item.pins),
            )
        )
    if len(files) > 1:
        lines = sum(f.lines for f in files)
        branches = sum(f.branches for f in files)
        covered = sum(f.covered_lines for f in files)
        taken = sum(f.covered_branches for f in files)
        rows.append(
            (
                "TOTAL",
                f"{covered}/{lines}",
                f"{taken}/{branches}",
                f"{_percent(covered + taken, lines + branches)}%",
                f"{len(touched)} pin(s)",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths)]
        out.append("  ".join([*cells, row[4]]))
    details = _details(files)
    if not details:
        out.extend(["", "every line and branch listed ran under at least one pin"])
        return out
    out.extend(["", "not exercised by any pin:"])
    if not full and len(details) > DETAIL_CAP:
        cut = len(details) - DETAIL_CAP
        details = [
            *details[:DETAIL_CAP],
            f"... {cut} more detail lines cut; `charpin pins cover --full` shows them all, "
            "`--file PATH` one module's",
        ]
    out.extend(details)
    return out


def _pins_cell(pins: list[str]) -> str:
    if not pins:
        return "-"
    shown = ", ".join(pins[:PINS_SHOWN])
    more = len(pins) - PINS_SHOWN
    return f"{shown} +{more} more" if more > 0 else shown


def _details(files: Sequence[FileCover]) -> list[str]:
    missing = [f for f in files if f.missing_lines or f.missing_branches]
    lines: list[str] = []
    for item in [f for f in missing if f.pins] + [f for f in missing if not f.pins]:
        lines.append(
            f"{item.path}: {len(item.missing_lines)} of {item.lines} lines and "
            f"{len(item.missing_branches)} of {item.branches} branches not exercised by any pin"
        )
        if item.missing_lines:
            lines.append(f"  lines: {_ranges(item.missing_lines)}")
        for start, end in item.missing_branches:
            lines.append(f"  branch: {start} -> {'exit' if end < 0 else end}")
    return lines


def _ranges(numbers: list[int]) -> str:
    """1, 2, 3, 7 -> "1-3, 7"."""
    parts = []
    start = prev = numbers[0]
    for n in numbers[1:]:
        if n == prev + 1:
            prev = n
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = n
    parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(parts)
