"""Coordinator side; stdlib sqlite3 and msgspec. The run history: one SQLite file (WAL, no server).

Every `run`, `compare --record` and `verify` adds its runs; the run folders on disk stay the
source of truth, and `charpin-remote history rebuild` recreates the database from them.

Modules, one role each:

    schema.py   versions and migrations (PRAGMA user_version), the tables and indexes
    store.py    opening it safely: lock file, WAL, busy timeout, BEGIN IMMEDIATE, refusals
    folders.py  run and verify folders on disk -> RunRecord (no database)
    evidence.py repeats (`run --repeat`) and frozen side runs (`--include-frozen`): records, rows
    record.py   RunRecords into the database; rebuild
    prune.py    `history prune --keep`
    query.py    the read API (below); query_evidence.py its repeats and frozen side runs
    render.py   the read API's answers as text
    hooks.py    where the database is; recording after run, compare --record and verify
    cli.py      `charpin-remote history ...`
    flaky.py    flake evidence: flaky candidates, the ledger against the history
    ledger_cli.py `charpin-remote ledger suggest|review`

Read API (for the HTML report and other readers; each call opens and closes the database,
raises CharpinError with a one-line message, never a sqlite3 error):

    recent_runs(store_path, limit=20) -> list[RunSummary]
        newest first: run_id, kind (run | compare | verify-base | verify-patched),
        started_at ("YYYY-MM-DDTHH:MM:SSZ", UTC), commit, exit_code, bits (exit bits by name),
        verdict (verify's patched runs), boxes: [BoxCell(box, status, clean)]
    box_trend(store_path, box, limit=30) -> list[TrendPoint(run_id, started_at, clean)]
        the box's newest `limit` runs, oldest first; clean = evaluated, tests ok, every gate
        of that box PASS
    show_run(store_path, run_id) -> RunDetail            (a unique prefix of the id will do)
        each box's repeats and frozen side runs too (BoxDetail.repeats, .frozen_reruns)
    outcome_timeline(store_path, nodeid, limit=30) -> OutcomeTimeline
        each run's point (repeat 1, source "run"), then its repeats' and side runs' points
        (OutcomePoint.repeat, .source "run" or "frozen-rerun"): filter on them to count nights
    box_runs(store_path, box, limit=30) -> BoxHistory

Flake evidence (flaky.py, `charpin-remote ledger suggest|review` in ledger_cli.py):

    suggest(store_path) -> Suggestions
    review(store_path, ledger, today, near_days=14, clean_runs=10) -> Review
"""

from __future__ import annotations

from charpin_coordinator.history.query import (
    BoxCell,
    BoxHistory,
    OutcomeTimeline,
    RunDetail,
    RunSummary,
    TrendPoint,
    box_runs,
    box_trend,
    outcome_timeline,
    recent_runs,
    show_run,
)

__all__ = [
    "BoxCell",
    "BoxHistory",
    "OutcomeTimeline",
    "RunDetail",
    "RunSummary",
    "TrendPoint",
    "box_runs",
    "box_trend",
    "outcome_timeline",
    "recent_runs",
    "show_run",
]
