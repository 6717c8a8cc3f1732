"""Coordinator side; stdlib sqlite3, msgspec and the history's own modules. `history prune`.

Keeps the runs of the last N days (`90d`) or the newest N runs (`30`), and always, whatever
their age: the last clean run of every box (the reference a report compares against) and every
run a kept run needs (a verify's patched run needs its base, also a base reused from an earlier
verify), followed to the end. Test ids and box names no kept run uses go too. The database only:
run folders stay on disk, and `history rebuild` would bring their runs back.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
from charpin_runner.errors import UsageError

from charpin_coordinator.history import store

_KEEP = re.compile(r"(\d+)(d?)")
# Delete outcomes test by test (seeks) while the doomed boxes are under this share of all.
_SEEK_SHARE = 8


@dataclass(frozen=True)
class Keep:
    """--keep: days or a count (exactly one is set)."""

    days: int | None = None
    count: int | None = None


class PruneResult(msgspec.Struct, kw_only=True):
    """What prune removed (or would remove, with dry_run) and what it kept beyond --keep."""

    removed: list[str]
    kept: int
    # Run id -> why it was kept although --keep would have let it go.
    protected: dict[str, str]
    dry_run: bool


def parse_keep(text: str) -> Keep:
    """`90d` (days) or `30` (runs); UsageError otherwise."""
    match = _KEEP.fullmatch(text.strip())
    if not match or int(match.group(1)) < 1:
        raise UsageError(
            f"--keep {text!r}: give days as 90d or a number of runs as 30 (at least 1)"
        )
    number = int(match.group(1))
    return Keep(days=number) if match.group(2) else Keep(count=number)


def prune(
    path: Path, keep: Keep, *, now: datetime | None = None, dry_run: bool = False
) -> PruneResult:
    """Remove the runs keep lets go, except those the history still needs."""
    with store.opened(path) as conn, store.write(conn):
        runs = conn.execute(
            "SELECT id, run_id, started_at FROM run ORDER BY started_at DESC, run_id DESC"
        ).fetchall()
        kept = _by_keep(runs, keep, now or datetime.now(UTC))
        protected: dict[str, str] = {}
        by_pk = {int(pk): str(run_id) for pk, run_id, _ in runs}
        pk_of = {run_id: pk for pk, run_id in by_pk.items()}
        for pk, box in _last_clean(conn):
            if pk not in kept:
                kept.add(pk)
                protected[by_pk[pk]] = f"last clean run of box {box}"
        needs: dict[int, list[str]] = {}
        for pk, needed in conn.execute("SELECT run, needs FROM run_need"):
            needs.setdefault(int(pk), []).append(str(needed))
        todo = list(kept)
        while todo:
            pk = todo.pop()
            for needed in needs.get(pk, []):
                other = pk_of.get(needed)
                if other is not None and other not in kept:
                    kept.add(other)
                    protected[needed] = f"needed by {by_pk[pk]}"
                    todo.append(other)
        doomed = [pk for pk in by_pk if pk not in kept]
        if doomed and not dry_run:
            _delete(conn, doomed)
        removed = sorted(by_pk[pk] for pk in doomed)
        return PruneResult(removed=removed, kept=len(kept), protected=protected, dry_run=dry_run)


def _by_keep(runs: list[tuple[int, str, str]], keep: Keep, now: datetime) -> set[int]:
    if keep.count is not None:
        return {int(pk) for pk, _, _ in runs[: keep.count]}
    assert keep.days is not None
    cutoff = (now.astimezone(UTC) - timedelta(days=keep.days)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {int(pk) for pk, _, started in runs if str(started) >= cutoff}


def _last_clean(conn: sqlite3.Connection) -> list[tuple[int, str]]:
    """(run pk, box name) of every box's newest clean run."""
    out: list[tuple[int, str]] = []
    for box_pk, name in conn.execute("SELECT id, name FROM box ORDER BY name").fetchall():
        row = conn.execute(
            "SELECT run.id FROM run_box JOIN run ON run.id = run_box.run "
            "WHERE run_box.box = ? AND run_box.clean = 1 "
            "ORDER BY run.started_at DESC, run.run_id DESC LIMIT 1",
            (box_pk,),
        ).fetchone()
        if row is not None:
            out.append((int(row[0]), str(name)))
    return out


def _delete(conn: sqlite3.Connection, doomed: list[int]) -> None:
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS doomed_run (id INTEGER PRIMARY KEY)")
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS doomed_rb (id INTEGER PRIMARY KEY)")
    conn.execute("DELETE FROM temp.doomed_run")
    conn.execute("DELETE FROM temp.doomed_rb")
    conn.executemany("INSERT INTO temp.doomed_run (id) VALUES (?)", [(pk,) for pk in doomed])
    conn.execute(
        "INSERT INTO temp.doomed_rb (id) SELECT id FROM run_box "
        "WHERE run IN (SELECT id FROM temp.doomed_run)"
    )
    gone = [int(r[0]) for r in conn.execute("SELECT id FROM temp.doomed_rb")]
    total = int(conn.execute("SELECT count(*) FROM run_box").fetchone()[0])
    if gone and len(gone) * _SEEK_SHARE < total:
        # Outcomes are keyed test first: a few boxes' rows are one seek per test and box.
        tests = [int(r[0]) for r in conn.execute("SELECT id FROM test")]
        conn.executemany(
            "DELETE FROM outcome WHERE test = ? AND run_box = ?",
            ((test, rb) for test in tests for rb in gone),
        )
    elif gone:  # many boxes: one pass over the table costs less than the seeks
        conn.execute("DELETE FROM outcome WHERE run_box IN (SELECT id FROM temp.doomed_rb)")
    # Repeats and frozen side runs are keyed by box of a run first: one range each.
    for table in ("repeat_outcome", "repeat_box", "frozen_outcome", "frozen_rerun"):
        conn.execute(
            f"DELETE FROM {table} WHERE run_box IN (SELECT id FROM temp.doomed_rb)"  # noqa: S608
        )
    conn.execute("DELETE FROM gate WHERE run_box IN (SELECT id FROM temp.doomed_rb)")
    conn.execute("DELETE FROM run_box WHERE id IN (SELECT id FROM temp.doomed_rb)")
    conn.execute("DELETE FROM run_need WHERE run IN (SELECT id FROM temp.doomed_run)")
    conn.execute("DELETE FROM run WHERE id IN (SELECT id FROM temp.doomed_run)")
    # A frozen test may be named only by its side runs, a test only by a repeat.
    conn.execute(
        "DELETE FROM test WHERE NOT EXISTS (SELECT 1 FROM outcome WHERE outcome.test = test.id) "
        "AND NOT EXISTS (SELECT 1 FROM repeat_outcome r WHERE r.test = test.id) "
        "AND NOT EXISTS (SELECT 1 FROM frozen_outcome f WHERE f.test = test.id)"
    )
    conn.execute(
        "DELETE FROM box WHERE NOT EXISTS (SELECT 1 FROM run_box WHERE run_box.box = box.id)"
    )
