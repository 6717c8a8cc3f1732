"""Coordinator side; stdlib sqlite3 and msgspec. Reading the flake evidence the history keeps
beside a box's receipt of record (schema v3): its repeats (`run --repeat N`) and its frozen side
runs (`--include-frozen`), for `history show` and `history test` (query.py).

    repeat_details(conn, run_box)   each repeat 2..N of a box of a run
    frozen_details(conn, run_box)   each frozen side run of it (repeat 1 is the record's)
    first_seen(conn, test)          (box pk, name, first time) of each box that ran the test in
                                    any of its runs, repeats or side runs
    side_points(conn, test, boxes)  the test's repeat and side-run outcomes in those boxes of runs
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from charpin_coordinator.history.schema import FAILING_CODES, OUTCOME_CODES, OUTCOME_NAMES

RUN, FROZEN = "run", "frozen-rerun"
NOT_RUN = "not run"  # a frozen test the side run was asked for and did not run
ABSENT = "absent"


class Row(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Rows of the history as the API returns them."""


class RepeatDetail(Row):
    """Repeat k (2..N) of a box of a run: evidence only, never the box's result."""

    repeat: int
    run_id: str  # its receipt's run id, `<run id>.r<k>`
    evaluated: bool
    reason: str
    commit: str
    interpretation: str
    exit_status: int | None
    counts: dict[str, int]
    failing: list[str]  # failed or error, sorted
    # Tests it ran whose outcome is not the receipt of record's (or that the record lacks).
    differs: list[str]
    absent: int  # tests of the record this repeat did not run


class FrozenDetail(Row):
    """One frozen side run of a box of a run (repeat 1: the record's)."""

    repeat: int
    interpretation: str
    clean: bool
    fixtures_changed: int
    outcomes: dict[str, str]  # each frozen test asked for -> its outcome, or "not run"


class SidePoint(NamedTuple):
    """One outcome of a test beside a receipt of record (`history test`)."""

    run_box: int
    repeat: int
    source: str  # RUN (a repeat) or FROZEN
    run_id: str
    commit: str
    outcome: str
    tree_state: str | None = None


def repeat_details(conn: sqlite3.Connection, run_box: int, record_tests: int) -> list[RepeatDetail]:
    """record_tests: how many tests the receipt of record has outcomes for."""
    rows = conn.execute(
        "SELECT repeat, run_id, evaluated, reason, commit_sha, interpretation, exit_status "
        "FROM repeat_box WHERE run_box = ? ORDER BY repeat",
        (run_box,),
    ).fetchall()
    if not rows:
        return []
    # The record's outcome of each test a repeat ran, fetched once for every repeat: one seek
    # per test (outcome is keyed test first), never a scan of the whole table.
    record = dict(
        conn.execute(
            "SELECT o.test, o.code FROM outcome o WHERE o.run_box = ? AND o.test IN "
            "(SELECT DISTINCT test FROM repeat_outcome WHERE run_box = ?)",
            (run_box, run_box),
        ).fetchall()
    )
    out = []
    for repeat, run_id, evaluated, reason, commit, interpretation, status in rows:
        mine = dict(
            conn.execute(
                "SELECT test, code FROM repeat_outcome WHERE run_box = ? AND repeat = ?",
                (run_box, repeat),
            ).fetchall()
        )
        counts: dict[str, int] = {}
        for code in mine.values():
            counts[OUTCOME_NAMES[int(code)]] = counts.get(OUTCOME_NAMES[int(code)], 0) + 1
        failing = [test for test, code in mine.items() if int(code) in FAILING_CODES]
        differs = [test for test, code in mine.items() if record.get(test) != code]
        out.append(
            RepeatDetail(
                repeat=int(repeat),
                run_id=str(run_id),
                evaluated=bool(evaluated),
                reason=str(reason),
                commit=str(commit),
                interpretation=str(interpretation),
                exit_status=None if status is None else int(status),
                counts={name: counts[name] for name in OUTCOME_CODES if name in counts},
                failing=_nodeids(conn, failing),
                differs=_nodeids(conn, differs),
                absent=record_tests - sum(1 for t in mine if t in record) if evaluated else 0,
            )
        )
    return out


def _nodeids(conn: sqlite3.Connection, tests: list[int]) -> list[str]:
    """The node ids of these test-dictionary ids, sorted."""
    if not tests:
        return []
    rows = conn.execute(
        "SELECT nodeid FROM test WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps(tests),),
    )
    return sorted(str(r[0]) for r in rows)


def frozen_details(conn: sqlite3.Connection, run_box: int) -> list[FrozenDetail]:
    runs = conn.execute(
        "SELECT repeat, interpretation, clean, fixtures_changed FROM frozen_rerun "
        "WHERE run_box = ? ORDER BY repeat",
        (run_box,),
    ).fetchall()
    out = []
    for repeat, interpretation, clean, changed in runs:
        outcomes = {
            str(nodeid): _name(code)
            for nodeid, code in conn.execute(
                "SELECT test.nodeid, f.code FROM frozen_outcome f JOIN test ON test.id = f.test "
                "WHERE f.run_box = ? AND f.repeat = ? ORDER BY test.nodeid",
                (run_box, repeat),
            )
        }
        out.append(
            FrozenDetail(
                repeat=int(repeat),
                interpretation=str(interpretation),
                clean=bool(clean),
                fixtures_changed=int(changed),
                outcomes=outcomes,
            )
        )
    return out


def first_seen(conn: sqlite3.Connection, test: int) -> list[tuple[int, str, str]]:
    """(box pk, box name, first time) of each box whose runs, repeats or side runs have an
    outcome for the test, by box name."""
    rows = conn.execute(
        "SELECT run_box.box, box.name, min(run.started_at) FROM ("
        "SELECT run_box FROM outcome WHERE test = ? "
        "UNION ALL SELECT run_box FROM repeat_outcome WHERE test = ? "
        "UNION ALL SELECT run_box FROM frozen_outcome WHERE test = ?) e "
        "JOIN run_box ON run_box.id = e.run_box JOIN run ON run.id = run_box.run "
        "JOIN box ON box.id = run_box.box GROUP BY run_box.box ORDER BY box.name",
        (test, test, test),
    ).fetchall()
    return [(int(pk), str(name), str(first)) for pk, name, first in rows]


def side_points(
    conn: sqlite3.Connection, test: int, run_boxes: Sequence[tuple[int, str]]
) -> dict[int, list[SidePoint]]:
    """For each (box of a run, its run id): the test's outcome in each evaluated repeat
    (`absent` when that repeat ran without it) and in each side run asked for it, by repeat,
    side runs after the repeat they belong to."""
    run_ids = dict(run_boxes)
    wanted = json.dumps(list(run_ids))
    found: dict[int, list[SidePoint]] = {}
    for rb, repeat, run_id, commit, code, state in conn.execute(
        "SELECT b.run_box, b.repeat, b.run_id, b.commit_sha, r.code, b.tree_state FROM repeat_box b "
        "LEFT JOIN repeat_outcome r ON r.run_box = b.run_box AND r.repeat = b.repeat "
        "AND r.test = ? WHERE b.run_box IN (SELECT value FROM json_each(?)) AND b.evaluated = 1",
        (test, wanted),
    ):
        outcome = ABSENT if code is None else OUTCOME_NAMES[int(code)]
        point = SidePoint(int(rb), int(repeat), RUN, str(run_id), str(commit), outcome, state)
        found.setdefault(int(rb), []).append(point)
    for rb, repeat, code, run_id, commit, state in conn.execute(
        "SELECT f.run_box, f.repeat, f.code, coalesce(b.run_id, ''), "
        "coalesce(b.commit_sha, run_box.commit_sha), "
        "CASE WHEN b.run_box IS NULL THEN run_box.tree_state ELSE b.tree_state END "
        "FROM frozen_outcome f "
        "JOIN run_box ON run_box.id = f.run_box "
        "LEFT JOIN repeat_box b ON b.run_box = f.run_box AND b.repeat = f.repeat "
        "WHERE f.test = ? AND f.run_box IN (SELECT value FROM json_each(?))",
        (test, wanted),
    ):
        rid = str(run_id) or run_ids[int(rb)]
        point = SidePoint(int(rb), int(repeat), FROZEN, rid, str(commit), _name(code), state)
        found.setdefault(int(rb), []).append(point)
    for points in found.values():
        points.sort(key=lambda p: (p.repeat, p.source == FROZEN))
    return found


def _name(code: object) -> str:
    return NOT_RUN if code is None else OUTCOME_NAMES[int(str(code))]
