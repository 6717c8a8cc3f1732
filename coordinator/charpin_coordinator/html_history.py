"""Coordinator side; imports the history's read API and html_report: the run history database as drift.html's trend and flaky sections (plain data). Never raises: no history, no sections."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from charpin_runner.errors import CharpinError

from charpin_coordinator.html_report import FlakyTest, TrendPoint, box_change, box_clean
from charpin_coordinator.report import DriftReport

TREND_RUNS = 30  # earlier runs per box in the trend
FLAKY_CHECKED = 50  # failing tests of this run looked up in the history, per box
_FAILING = frozenset(("failed", "error"))
# What the read API may raise (its own errors are CharpinError; the rest would be a disk problem).
_HISTORY_ERRORS = (CharpinError, OSError, sqlite3.Error)

Sections = tuple[dict[str, list[TrendPoint]] | None, list[FlakyTest] | None]


def history_sections(history: Path | None, report: DriftReport, run_id: str) -> Sections:
    """(trend, flaky) for drift.html from the history database at `history`, or (None, None)
    when there is none yet (or it cannot be read: the report never waits on it).

    This run is not in the database yet (it is recorded once its folder is written), so each
    box's trend is its earlier runs followed by this one, judged from the report; a flaky test
    is one failing here that had another outcome on the same box and commit before."""
    if history is None or not history.is_file():
        return None, None
    try:
        from charpin_coordinator.history import box_trend, outcome_timeline
    except ImportError:
        return None, None
    labels = [b.label for b in report.boxes] + [m.label for m in report.not_evaluated]
    trend: dict[str, list[TrendPoint]] = {}
    for label in dict.fromkeys(labels):
        try:
            earlier = [
                TrendPoint(str(r), str(s), bool(c))
                for r, s, c in box_trend(history, label, TREND_RUNS)
            ]
        except _HISTORY_ERRORS:
            earlier = []  # a box the history has not seen yet (or an unreadable database)
        clean, why = box_clean(report, label)
        # Only this run says whether the box changed since its earlier receipt (the report's
        # since section); the database keeps no such mark, so earlier nights stay unmarked.
        changed, since = box_change(report, label)
        trend[label] = [*earlier, TrendPoint(run_id, "this run", clean, why, changed, since)]
    flaky: list[FlakyTest] = []
    for box in report.boxes:
        for test in box.failing[:FLAKY_CHECKED]:
            try:
                timeline = outcome_timeline(history, test, TREND_RUNS)
            except _HISTORY_ERRORS:
                continue  # a test the history has never seen
            points = [
                p.outcome
                for line in timeline.boxes
                if line.box == box.label
                for p in line.points
                if p.commit == box.commit and p.outcome != "absent"
            ]
            if any(outcome not in _FAILING for outcome in points):
                failed = 1 + sum(1 for outcome in points if outcome in _FAILING)
                flaky.append(FlakyTest(test, box.label, failed, 1 + len(points)))
    return trend, flaky
