"""`charpin-remote history html DIR`: index.html over every run folder in DIR. Coordinator side.

Each run folder's drift.json is decoded strictly into a DriftReport; a folder whose drift.json
cannot be read is listed with the reason, never skipped silently, and never stops the index.
history/cli.py makes the `history` group and calls `add_html_parser` to add `html` to it.
"""

from __future__ import annotations

import argparse
import os
import re
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from charpin_runner.errors import UsageError
from charpin_runner.receipt import write_atomic

from charpin_coordinator.report import DriftReport
from charpin_coordinator.reports.html_index import IndexedRun, render_index

MAX_DRIFT_JSON = 256 * 1024 * 1024
_RUN_ID_TIME = re.compile(r"^(\d{8}T\d{6}Z)")


def add_html_parser(history_sub: Any) -> None:
    """Add `html` to the `history` group's subparsers."""
    page = history_sub.add_parser(
        "html",
        exit_codes=(
            "0 written, 8 a database that is not charpin's, 64 usage or configuration "
            "error, 130 interrupted"
        ),
        help="write index.html over every run folder in DIR",
        description="Read drift.json in every run folder of DIR and write one self-contained "
        "page (no script, nothing fetched): the runs newest first, each linking to its "
        "drift.html, the per-box trend (clean or not, run by run) and the tests that failed "
        "in some runs of a commit and not in others. Exit 0, or 64 when DIR is not a folder.",
    )
    page.add_argument("dir", type=Path, metavar="DIR", help="the run folders' parent (--out)")
    page.add_argument(
        "--out", type=Path, metavar="FILE", help="where to write (default DIR/index.html)"
    )
    page.set_defaults(handler=run_history_html)


def run_history_html(args: argparse.Namespace) -> int:
    """Handle `charpin-remote history html DIR`."""
    folder: Path = args.dir
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder; pass the folder holding the run folders")
    runs = load_runs(folder)
    out: Path = args.out or folder / "index.html"
    page = render_index(runs, where=str(folder.absolute())).encode()
    try:
        write_atomic(out, page)
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror}; pass a writable --out") from exc
    unreadable = sum(1 for run in runs if run.report is None)
    extra = f", {unreadable} unreadable (listed with the reason)" if unreadable else ""
    print(f"wrote {out}: {len(runs)} run(s){extra}")
    return 0


def load_runs(folder: Path) -> list[IndexedRun]:
    """Every run folder in folder (a real folder holding drift.json), newest first."""
    runs = []
    with os.scandir(folder) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
            continue  # hidden: a run still being written (.<id>.partial-...)
        path = Path(entry.path)
        drift = path / "drift.json"
        if not os.path.lexists(drift):
            continue  # not a run folder
        report, problem, mtime = _read_report(drift)
        runs.append(
            IndexedRun(
                name=entry.name,
                started=_started(entry.name, mtime),
                report=report,
                problem=problem,
                has_html=(path / "drift.html").is_file(),
            )
        )
    runs.sort(key=lambda run: (run.started, run.name), reverse=True)
    return runs


def _read_report(path: Path) -> tuple[DriftReport | None, str, float]:
    """(report, "", mtime), or (None, why not, mtime). Never follows a link, reads at most
    MAX_DRIFT_JSON bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return None, f"drift.json cannot be opened: {exc.strerror}", 0.0
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            return None, "drift.json is not a regular file", info.st_mtime
        if info.st_size > MAX_DRIFT_JSON:
            return None, f"drift.json is larger than {MAX_DRIFT_JSON} bytes", info.st_mtime
        data = handle.read(MAX_DRIFT_JSON + 1)
    try:
        return msgspec.json.decode(data, type=DriftReport), "", info.st_mtime
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return None, f"drift.json is not a drift report: {exc}", info.st_mtime


def _started(name: str, mtime: float) -> str:
    """When a run started: from a default run id (UTC), else the time drift.json was written."""
    match = _RUN_ID_TIME.match(name)
    if match:
        try:
            moment = datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ")
        except ValueError:
            pass  # digits shaped like a time that is none: the file's time instead
        else:
            return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
    return datetime.fromtimestamp(mtime, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
