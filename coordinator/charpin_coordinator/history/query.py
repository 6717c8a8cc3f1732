"""Coordinator side; stdlib sqlite3, msgspec and the history's own modules. Reading the history.

Every function takes the database's path, opens it (checked, see store.py), answers, closes it,
and returns msgspec Structs (`--json` prints them as they are) or plain tuples. Nothing here
writes, except the one-time migration of an older database on open. This is the read API the CLI
and the HTML report use; `charpin_coordinator.history` re-exports it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import NamedTuple

import msgspec
from charpin_runner.errors import UsageError

from charpin_coordinator.history import store
from charpin_coordinator.history.query_evidence import (
    ABSENT,
    RUN,
    FrozenDetail,
    RepeatDetail,
    first_seen,
    frozen_details,
    repeat_details,
    side_points,
)
from charpin_coordinator.history.schema import OUTCOME_CODES, OUTCOME_NAMES

EXIT_BITS = {
    1: "tests-failed",
    2: "drift",
    4: "not-evaluated",
    8: "integrity",
    16: "vacuous",
    64: "usage",
}


class Row(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Rows of the history as the API returns them."""


class BoxCell(Row):
    """One box of a run at a glance."""

    box: str
    status: str  # the receipt's interpretation (ok, failed, ...) or "not-evaluated"
    clean: bool  # ran, tests ok, and every gate of this box passed


class RunSummary(Row):
    """One run in the list of recent runs."""

    run_id: str
    kind: str  # run | compare | verify-base | verify-patched
    started_at: str
    commit: str
    exit_code: int
    bits: list[str]
    verdict: str | None
    boxes: list[BoxCell]


class GateRow(Row):
    gate: str
    status: str
    detail: str


class BoxDetail(Row):
    """One box of one run, in full."""

    box: str
    evaluated: bool
    reason: str
    commit: str
    patch_sha256: str | None
    interpretation: str
    exit_status: int | None
    collected: int
    executed: int
    counts: dict[str, int]
    clean: bool
    gates: list[GateRow]
    failing: list[str]  # failed or error, sorted
    # Evidence beside the result (`run --repeat N`, `--include-frozen`); never the result.
    repeats: list[RepeatDetail] = msgspec.field(default_factory=list)
    frozen_reruns: list[FrozenDetail] = msgspec.field(default_factory=list)


class RunDetail(Row):
    """`history show RUN`."""

    run_id: str
    kind: str
    started_at: str
    commit: str
    exit_code: int
    bits: list[str]
    verdict: str | None
    folder: str
    needs: list[str]
    boxes: list[BoxDetail]


class OutcomePoint(Row):
    run_id: str  # the receipt's id: a repeat's is `<run id>.r<k>`
    started_at: str
    commit: str
    # a receipt outcome, "absent" (the box ran, this test did not), "frozen" (the ledger
    # deselected it, as that run's frozen side run shows), "not run"
    outcome: str
    # 1: the box's receipt of record; k > 1: repeat k of that run (`run --repeat`).
    repeat: int = 1
    # "run", or "frozen-rerun": the ledger's frozen tests re-run on the side (--include-frozen).
    source: str = RUN
    # What the working tree held besides the commit ("" clean, else a digest; treestate.py);
    # None for a run recorded before the history kept it.
    tree_state: str | None = None


class BoxTimeline(Row):
    box: str
    # Runs newest first; each run's receipt of record first, then its repeats and side runs.
    points: list[OutcomePoint]


class OutcomeTimeline(Row):
    """`history test NODEID`: the test's outcomes per box, newest first."""

    nodeid: str
    boxes: list[BoxTimeline]


class BoxRun(Row):
    run_id: str
    kind: str
    started_at: str
    commit: str
    status: str
    clean: bool
    counts: dict[str, int]
    gates_not_passed: list[str]  # "Fixture integrity: FAIL"


class BoxHistory(Row):
    """`history box NAME`: the box's runs, newest first."""

    box: str
    runs: list[BoxRun]


class TrendPoint(NamedTuple):
    run_id: str
    started_at: str
    clean: bool


def bits(exit_code: int) -> list[str]:
    """The exit code's bits by name."""
    return [name for bit, name in EXIT_BITS.items() if exit_code & bit]


def recent_runs(store_path: Path, limit: int = 20) -> list[RunSummary]:
    """The newest runs first, each with its boxes' status."""
    with store.opened(store_path) as conn:
        runs = conn.execute(
            "SELECT id, run_id, kind, started_at, commit_sha, exit_code, verdict FROM run "
            "ORDER BY started_at DESC, run_id DESC LIMIT ?",
            (limit,),
        ).fetchall()
        cells: dict[int, list[BoxCell]] = {int(r[0]): [] for r in runs}
        if cells:
            for run_pk, name, status, clean in conn.execute(
                "SELECT run_box.run, box.name, run_box.interpretation, run_box.clean "
                "FROM run_box JOIN box ON box.id = run_box.box "
                "WHERE run_box.run IN (SELECT value FROM json_each(?)) ORDER BY run_box.id",
                (json.dumps(list(cells)),),
            ):
                cells[int(run_pk)].append(BoxCell(box=name, status=status, clean=bool(clean)))
    return [
        RunSummary(
            run_id=run_id,
            kind=kind,
            started_at=started,
            commit=commit,
            exit_code=code,
            bits=bits(code),
            verdict=verdict,
            boxes=cells[int(pk)],
        )
        for pk, run_id, kind, started, commit, code, verdict in runs
    ]


def show_run(store_path: Path, run_id: str) -> RunDetail:
    """One run in full; run_id may be a unique prefix."""
    with store.opened(store_path) as conn:
        pk, full = _find_run(conn, run_id, store_path)
        run = conn.execute(
            "SELECT kind, started_at, commit_sha, exit_code, verdict, folder FROM run WHERE id = ?",
            (pk,),
        ).fetchone()
        needs = [str(r[0]) for r in conn.execute("SELECT needs FROM run_need WHERE run = ?", (pk,))]
        boxes = [_box_detail(conn, row) for row in _run_boxes(conn, pk)]
    kind, started, commit, code, verdict, folder = run
    return RunDetail(
        run_id=full,
        kind=kind,
        started_at=started,
        commit=commit,
        exit_code=code,
        bits=bits(code),
        verdict=verdict,
        folder=folder,
        needs=sorted(needs),
        boxes=boxes,
    )


FROZEN_OUT = "frozen"


def outcome_timeline(store_path: Path, nodeid: str, limit: int = 30) -> OutcomeTimeline:
    """The test's outcome on each box that ever ran it, newest `limit` runs per box, from its
    first appearance on that box on ("absent" where the box ran without it)."""
    with store.opened(store_path) as conn:
        row = conn.execute("SELECT id FROM test WHERE nodeid = ?", (nodeid,)).fetchone()
        if row is None:
            raise UsageError(_no_test(conn, nodeid, store_path))
        test = int(row[0])
        timelines = []
        for box_pk, name, first in first_seen(conn, test):
            rows = conn.execute(
                "SELECT run_box.id, run.run_id, run.started_at, run_box.commit_sha, outcome.code, "
                "run_box.tree_state FROM run_box JOIN run ON run.id = run_box.run "
                "LEFT JOIN outcome ON outcome.test = ? AND outcome.run_box = run_box.id "
                "WHERE run_box.box = ? AND run_box.evaluated = 1 AND run.started_at >= ? "
                "ORDER BY run.started_at DESC, run.run_id DESC LIMIT ?",
                (test, box_pk, first, limit),
            ).fetchall()
            sides = side_points(conn, test, [(int(r[0]), str(r[1])) for r in rows])
            points = []
            for rb, run_id, started, commit, code, state in rows:
                mine = sides.get(int(rb), [])
                if code is not None:
                    outcome = OUTCOME_NAMES[int(code)]
                elif any(side.source != RUN for side in mine):
                    # The run's side run was asked for it: the ledger froze it out of the run.
                    outcome = FROZEN_OUT
                else:
                    outcome = ABSENT
                points.append(
                    OutcomePoint(
                        run_id=run_id,
                        started_at=started,
                        commit=commit,
                        outcome=outcome,
                        tree_state=state,
                    )
                )
                points += [
                    OutcomePoint(
                        run_id=side.run_id,
                        started_at=started,
                        commit=side.commit,
                        outcome=side.outcome,
                        repeat=side.repeat,
                        source=side.source,
                        tree_state=side.tree_state,
                    )
                    for side in mine
                    # A test the run's gated set never had (a frozen one) is absent from every
                    # repeat too: said once, by the record's point.
                    if not (code is None and side.source == RUN and side.outcome == ABSENT)
                ]
            timelines.append(BoxTimeline(box=name, points=points))
    return OutcomeTimeline(nodeid=nodeid, boxes=timelines)


def box_runs(store_path: Path, box: str, limit: int = 30) -> BoxHistory:
    """The box's runs, newest first."""
    with store.opened(store_path) as conn:
        box_pk = _find_box(conn, box, store_path)
        rows = conn.execute(
            "SELECT run_box.id, run.run_id, run.kind, run.started_at, run_box.commit_sha, "
            "run_box.interpretation, run_box.clean, run_box.passed, run_box.failed, "
            "run_box.error, run_box.skipped, run_box.xfailed, run_box.xpassed "
            "FROM run_box JOIN run ON run.id = run_box.run WHERE run_box.box = ? "
            "ORDER BY run.started_at DESC, run.run_id DESC LIMIT ?",
            (box_pk, limit),
        ).fetchall()
        runs = []
        for rb, run_id, kind, started, commit, status, clean, *counts in rows:
            bad = conn.execute(
                "SELECT gate, status FROM gate WHERE run_box = ? AND status <> 'PASS'", (rb,)
            ).fetchall()
            runs.append(
                BoxRun(
                    run_id=run_id,
                    kind=kind,
                    started_at=started,
                    commit=commit,
                    status=status,
                    clean=bool(clean),
                    counts=_counts(counts),
                    gates_not_passed=sorted(f"{gate}: {st}" for gate, st in bad),
                )
            )
    return BoxHistory(box=box, runs=runs)


def box_trend(store_path: Path, box: str, limit: int = 30) -> list[TrendPoint]:
    """(run_id, started_at, clean) of the box's newest `limit` runs, oldest first (a trend
    reads left to right). For the HTML report."""
    with store.opened(store_path) as conn:
        box_pk = _find_box(conn, box, store_path)
        rows = conn.execute(
            "SELECT run.run_id, run.started_at, run_box.clean FROM run_box "
            "JOIN run ON run.id = run_box.run WHERE run_box.box = ? "
            "ORDER BY run.started_at DESC, run.run_id DESC LIMIT ?",
            (box_pk, limit),
        ).fetchall()
    return [TrendPoint(str(r), str(s), bool(c)) for r, s, c in reversed(rows)]


def _run_boxes(conn: sqlite3.Connection, run_pk: int) -> list[tuple[object, ...]]:
    return conn.execute(
        "SELECT run_box.id, box.name, evaluated, reason, commit_sha, patch_sha256, "
        "interpretation, exit_status, collected, executed, clean, "
        "passed, failed, error, skipped, xfailed, xpassed "
        "FROM run_box JOIN box ON box.id = run_box.box WHERE run_box.run = ? ORDER BY run_box.id",
        (run_pk,),
    ).fetchall()


def _box_detail(conn: sqlite3.Connection, row: tuple[object, ...]) -> BoxDetail:
    rb, name, evaluated, reason, commit, patch, interp, status, collected, executed, clean = row[
        :11
    ]
    gates = [
        GateRow(gate=g, status=s, detail=d)
        for g, s, d in conn.execute(
            "SELECT gate, status, detail FROM gate WHERE run_box = ?", (rb,)
        )
    ]
    failing = sorted(
        str(r[0])
        for r in conn.execute(
            "SELECT test.nodeid FROM outcome JOIN test ON test.id = outcome.test "
            # The partial index outcome_failing is used only for this exact condition.
            "WHERE outcome.run_box = ? AND outcome.code IN (1, 2)",
            (rb,),
        )
    )
    counts = _counts(list(row[11:]))
    pk = int(str(rb))
    return BoxDetail(
        box=str(name),
        evaluated=bool(evaluated),
        reason=str(reason),
        commit=str(commit),
        patch_sha256=None if patch is None else str(patch),
        interpretation=str(interp),
        exit_status=None if status is None else int(str(status)),
        collected=int(str(collected)),
        executed=int(str(executed)),
        counts=counts,
        clean=bool(clean),
        gates=_gate_order(gates),
        failing=failing,
        repeats=repeat_details(conn, pk, sum(counts.values())),
        frozen_reruns=frozen_details(conn, pk),
    )


def _gate_order(gates: list[GateRow]) -> list[GateRow]:
    from charpin_coordinator.report import GATES

    order: dict[str, int] = {name: i for i, name in enumerate(GATES)}
    return sorted(gates, key=lambda g: (order.get(g.gate, len(order)), g.gate))


def _counts(values: list[object]) -> dict[str, int]:
    return {
        name: int(str(value)) for name, value in zip(OUTCOME_CODES, values, strict=True) if value
    }


def _find_run(conn: sqlite3.Connection, run_id: str, path: Path) -> tuple[int, str]:
    row = conn.execute("SELECT id, run_id FROM run WHERE run_id = ?", (run_id,)).fetchone()
    if row is not None:
        return int(row[0]), str(row[1])
    rows = conn.execute(
        "SELECT id, run_id FROM run WHERE substr(run_id, 1, ?) = ? ORDER BY run_id LIMIT 6",
        (len(run_id), run_id),
    ).fetchall()
    if len(rows) == 1:
        return int(rows[0][0]), str(rows[0][1])
    if rows:
        names = ", ".join(str(r[1]) for r in rows[:5])
        raise UsageError(
            f"run id {run_id!r} is ambiguous in {path} ({names}, ...); give more of it"
        )
    raise UsageError(
        f"no run {run_id!r} in the history {path}; `charpin-remote history` lists the recent ones"
    )


def _find_box(conn: sqlite3.Connection, box: str, path: Path) -> int:
    row = conn.execute("SELECT id FROM box WHERE name = ?", (box,)).fetchone()
    if row is not None:
        return int(row[0])
    names = [str(r[0]) for r in conn.execute("SELECT name FROM box ORDER BY name LIMIT 20")]
    known = ", ".join(names) if names else "none yet"
    raise UsageError(f"no box {box!r} in the history {path}; boxes: {known}")


def _no_test(conn: sqlite3.Connection, nodeid: str, path: Path) -> str:
    tail = nodeid.rsplit("::", 1)[-1]
    near = [
        str(r[0])
        for r in conn.execute(
            "SELECT nodeid FROM test WHERE instr(nodeid, ?) > 0 ORDER BY nodeid LIMIT 3", (tail,)
        )
    ]
    hint = f"; did you mean {', '.join(near)}?" if near else "; give the full node id"
    return f"no test {nodeid!r} in the history {path}{hint}"
