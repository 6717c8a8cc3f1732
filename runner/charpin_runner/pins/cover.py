"""`charpin pins cover`: which lines and branches of the entry points no pin runs. Local side only.

coverage.py is an optional extra (`charpin-remote[cover]`), imported lazily and never shipped to
boxes. Each Python-target pin is replayed under `coverage run --branch` in its usual sandbox with
its own data file; the files are combined and reported per entry point.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from charpin_runner.errors import ConfigError, UsageError
from charpin_runner.pins.execute import Session, run_case
from charpin_runner.pins.model import Pin


@dataclass(frozen=True)
class FileCover:
    """Coverage of one entry-point file by all pins together."""

    path: str
    missing_lines: list[int]
    missing_branches: list[tuple[int, int]]
    lines: int
    branches: int


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
    """Replay Python-target pins under coverage and report per entry point.

    Entry points are the pins' Python targets plus extra (repo-relative files, e.g. from the
    inventory); an extra file no pin runs is reported with every line missing.
    """
    coverage = _coverage()
    targets = [p for p in pins if p.case.argv[0].endswith(".py")]
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
        data_files = [p for p in pool.map(one, enumerate(targets)) if p.is_file()]
    if not data_files:
        raise UsageError(
            f"coverage wrote no data: is coverage installed for {session.python}? "
            "pip install 'charpin-remote[cover]' there"
        )
    named = [p.case.argv[0] for p in targets] + list(extra or [])
    for rel in extra or []:
        if not (session.repo / rel).is_file():
            raise UsageError(f"entry point {rel} is not a file in the repository; fix the path")
    entry_points = sorted({str((session.repo / rel).resolve()) for rel in named})
    combined = session.dir / "combined.coverage"
    cov = coverage.Coverage(data_file=str(combined), branch=True, config_file=False)
    cov.combine([str(p) for p in data_files], keep=True)
    cov.save()
    report = session.dir / "coverage.json"
    cov.json_report(morfs=entry_points, outfile=str(report), ignore_errors=True)
    data = json.loads(report.read_text(encoding="utf-8"))
    by_real: dict[str, Any] = {}
    for name, info in data.get("files", {}).items():
        by_real[str(Path(name).resolve())] = info
    results = []
    for path in entry_points:
        info = by_real.get(path, {})
        summary = info.get("summary", {})
        rel = Path(path).relative_to(session.repo).as_posix()
        results.append(
            FileCover(
                path=rel,
                missing_lines=list(info.get("missing_lines", [])),
                missing_branches=[(a, b) for a, b in info.get("missing_branches", [])],
                lines=int(summary.get("num_statements", 0)),
                branches=int(summary.get("num_branches", 0)),
            )
        )
    return results
