"""Coordinator side; imports the history's read API and html_trend: the run history database as drift.html's trend and flaky sections (plain data). Never raises: no history, no sections."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
from charpin_runner.errors import CharpinError

from charpin_coordinator.report import BoxSummary, DriftReport, Repeats
from charpin_coordinator.reports.html_trend import FlakyTest, TrendPoint, box_change, box_clean

TREND_RUNS = 30  # earlier runs per box in the trend
FLAKY_CHECKED = 50  # failing tests of this run looked up in the history, per box
_FAILING = frozenset(("failed", "error"))
# The outcomes that say whether a test is flaky, as `ledger suggest` counts (history/flaky.py):
# skipped, xfailed and xpassed say nothing either way, "absent" and "not run" are no run of it.
_COUNTED = _FAILING | {"passed"}
# What the read API may raise (its own errors are CharpinError; the rest would be a disk problem).
_HISTORY_ERRORS = (CharpinError, OSError, sqlite3.Error)

Sections = tuple[dict[str, list[TrendPoint]] | None, list[FlakyTest] | None]


def history_sections(history: Path | None, report: DriftReport, run_id: str) -> Sections:
    """(trend, flaky) for drift.html from the history database at `history`, or (None, None)
    when there is none yet (or it cannot be read: the report never waits on it).

    This run is not in the database yet (it is recorded once its folder is written), so each
    box's trend is its earlier runs followed by this one, judged from the report. The trend is
    one mark per run: its receipt of record's (box_trend reads no repeat and no side run)."""
    if history is None or not history.is_file():
        return None, None
    try:
        from charpin_coordinator.history import box_trend
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
    return trend, _flaky(history, report)


def _flaky(history: Path, report: DriftReport) -> list[FlakyTest]:
    """Each test that failed on a box in this run (its record or a repeat) and passed on the
    same box and tree state (commit and uncommitted changes) in another run or repeat, this
    run's own included. Counted as `ledger
    suggest` counts: each repeat is a run of its own (a flip within one night's repeats is flake
    evidence); frozen side runs are left out (run apart from the gated set, after it, and their
    "not run" is no outcome at all)."""
    try:
        from charpin_coordinator.history import outcome_timeline
        from charpin_coordinator.history.query_evidence import RUN
    except ImportError:
        return []
    flaky: list[FlakyTest] = []
    for box in report.boxes:
        for test, tonight in _tonight(box, report.repeats).items():
            try:
                timeline = outcome_timeline(history, test, TREND_RUNS)
            except _HISTORY_ERRORS:
                lines = []  # a test the history has never seen: this run's repeats still count
            else:
                lines = [line for line in timeline.boxes if line.box == box.label]
            # Runs of the same tree state only (commit and uncommitted changes): a failure an
            # uncommitted edit explains is no evidence of flakiness.
            earlier = [
                p.outcome
                for line in lines
                for p in line.points
                if p.source == RUN
                and (p.commit, p.tree_state) == (box.commit, box.tree_state)
                and p.outcome in _COUNTED
            ]
            outcomes = [*tonight, *earlier]
            failed = sum(1 for outcome in outcomes if outcome in _FAILING)
            if 0 < failed < len(outcomes):
                flaky.append(FlakyTest(test, box.label, failed, len(outcomes)))
    return flaky


def _tonight(box: BoxSummary, repeats: Repeats | msgspec.UnsetType) -> dict[str, list[str]]:
    """The tests that failed on box in this run, record or repeat (at most FLAKY_CHECKED; those
    that flipped between repeats first, flaky already), each with its counted outcome in every
    repeat that gave a receipt.

    The report lists the record's failing tests and, per box, the tests whose outcome differed
    between repeats: a failing test not among those failed in every repeat."""
    entry = None
    if isinstance(repeats, Repeats):
        entry = next((b for b in repeats.boxes if b.box == box.label), None)
    differing = {row.item: row.outcomes for row in entry.differing} if entry is not None else {}
    evaluated = entry.evaluated if entry is not None else 1
    found = {
        test: [outcome for outcome in outcomes if outcome in _COUNTED]
        for test, outcomes in differing.items()
        if any(outcome in _FAILING for outcome in outcomes)
    }
    for test in box.failing:
        found.setdefault(test, ["failed"] * evaluated)
    return dict(list(found.items())[:FLAKY_CHECKED])
