"""Coordinator side; stdlib sqlite3 and the history's own modules. Writing runs into the history.

`record(path, folders)` adds the runs of run or verify folders (after `run`, `compare --record`,
`verify`), in one write transaction; recording a folder twice is a no-op. `rebuild(path, dirs)`
makes a new database from every run and verify folder found under dirs and swaps it in, the old
one (corrupt or not) untouched until then. Both go through `insert`, from records read by
folders.py, so a rebuilt database answers every query as the recorded one did.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from charpin_runner.errors import IntegrityError, UsageError

from charpin_coordinator.history import evidence, folders, store
from charpin_coordinator.history.evidence import FrozenRecord
from charpin_coordinator.history.folders import BoxRecord, RunRecord
from charpin_coordinator.history.schema import OUTCOME_CODES


@dataclass
class RebuildResult:
    """What `rebuild` put in the new database, and the folders it could not read."""

    runs: int = 0
    boxes: int = 0
    outcomes: int = 0
    problems: list[str] = field(default_factory=list)


def record(path: Path, run_folders: Sequence[Path]) -> list[str]:
    """Add the runs of these run or verify folders; return their run ids. Creates the database
    when it is missing; refuses a run id the history holds from another folder."""
    records = [rec for folder in run_folders for rec in folders.read_folder(folder)]
    with store.opened(path, create=True) as conn, store.write(conn):
        for rec in records:
            insert(conn, rec, db=path)
    return [rec.run_id for rec in records]


def check_free(path: Path, run_ids: Iterable[str]) -> None:
    """Before a run: the database (when there is one) must open, and hold none of run_ids."""
    wanted = list(run_ids)
    if not store.has_content(path):
        return
    with store.opened(path) as conn:
        for run_id in wanted:
            row = conn.execute("SELECT folder FROM run WHERE run_id = ?", (run_id,)).fetchone()
            if row is not None:
                raise UsageError(
                    f"run id {run_id} is already in the history {path} (from {row[0]}); "
                    "pick another --run-id or leave it out"
                )


def rebuild(path: Path, dirs: Sequence[Path]) -> RebuildResult:
    """Recreate the database from the run and verify folders under dirs."""
    found = folders.find(dirs)
    result = RebuildResult()

    def build(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA synchronous = OFF")  # a new file: a crash leaves the old one
        seen: dict[str, str] = {}
        for folder in found:
            try:
                records = folders.read_folder(folder)
            except IntegrityError as exc:
                result.problems.append(f"{folder}: skipped: {exc}")
                continue
            for rec in records:
                if rec.run_id in seen:
                    result.problems.append(
                        f"{rec.folder}: skipped: run id {rec.run_id} is already recorded from "
                        f"{seen[rec.run_id]}"
                    )
                    continue
                seen[rec.run_id] = rec.folder
                try:
                    with store.write(conn):
                        insert(conn, rec, db=path)
                except IntegrityError as exc:
                    result.problems.append(f"{rec.folder}: skipped: {exc}")
                    continue
                result.runs += 1
                result.boxes += len(rec.boxes)
                result.outcomes += sum(len(b.outcomes) for b in rec.boxes)

    store.replace(path, build)
    return result


def insert(conn: sqlite3.Connection, rec: RunRecord, *, db: Path) -> bool:
    """Insert one run inside the caller's write transaction; False when it is already there."""
    row = conn.execute("SELECT folder FROM run WHERE run_id = ?", (rec.run_id,)).fetchone()
    if row is not None:
        if row[0] == rec.folder:
            return False
        raise UsageError(
            f"run id {rec.run_id} is already in the history {db} from {row[0]}, not "
            f"{rec.folder}; record each run once"
        )
    labels = [box.label for box in rec.boxes]
    if len(set(labels)) != len(labels):
        raise IntegrityError(f"{rec.folder}: two box folders name the same box; not recorded")
    run_pk = conn.execute(
        "INSERT INTO run (run_id, kind, started_at, commit_sha, exit_code, verdict, folder) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            rec.run_id,
            rec.kind,
            rec.started_at,
            rec.commit,
            rec.exit_code,
            rec.verdict,
            rec.folder,
        ),
    ).lastrowid
    conn.executemany(
        "INSERT OR IGNORE INTO run_need (run, needs) VALUES (?, ?)",
        [(run_pk, needed) for needed in rec.needs],
    )
    ids = _test_ids(conn, {nodeid for box in rec.boxes for nodeid in _nodeids(box)})
    rows: list[tuple[int, int, int]] = []
    for box in rec.boxes:
        counts = Counter(box.outcomes.values())
        rb = conn.execute(
            "INSERT INTO run_box (run, box, evaluated, reason, commit_sha, patch_sha256, "
            "interpretation, exit_status, collected, executed, passed, failed, error, skipped, "
            "xfailed, xpassed, clean, tree_state) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_pk,
                _box_id(conn, box.label),
                int(box.evaluated),
                box.reason,
                box.commit,
                box.patch_sha256,
                box.interpretation,
                box.exit_status,
                box.collected,
                box.executed,
                *(counts.get(name, 0) for name in OUTCOME_CODES),
                int(box.clean),
                box.tree_state,
            ),
        ).lastrowid
        assert rb is not None
        conn.executemany(
            "INSERT OR REPLACE INTO gate (run_box, gate, status, detail) VALUES (?, ?, ?, ?)",
            [(rb, gate, status, detail) for gate, status, detail in box.gates],
        )
        rows.extend((ids[nodeid], rb, OUTCOME_CODES[o]) for nodeid, o in box.outcomes.items())
        evidence.insert_box(conn, rb, box.repeats, _frozen(box), ids)
    rows.sort()  # in key order: each test's rows are one range, visited once, front to back
    conn.executemany("INSERT INTO outcome (test, run_box, code) VALUES (?, ?, ?)", rows)
    return True


def _frozen(box: BoxRecord) -> list[FrozenRecord]:
    """The box's frozen side runs: the record's, then each repeat's."""
    sides = [box.frozen, *(rep.frozen for rep in box.repeats)]
    return [side for side in sides if side is not None]


def _nodeids(box: BoxRecord) -> set[str]:
    return set(box.outcomes) | evidence.nodeids(box.repeats, _frozen(box))


def _box_id(conn: sqlite3.Connection, name: str) -> int:
    conn.execute("INSERT OR IGNORE INTO box (name) VALUES (?)", (name,))
    row = conn.execute("SELECT id FROM box WHERE name = ?", (name,)).fetchone()
    return int(row[0])


def _test_ids(conn: sqlite3.Connection, nodeids: set[str]) -> dict[str, int]:
    """The dictionary id of every node id, adding the new ones (cost follows the run's size,
    not the dictionary's)."""
    if not nodeids:
        return {}
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS wanted (nodeid TEXT PRIMARY KEY) WITHOUT ROWID")
    conn.execute("DELETE FROM temp.wanted")
    conn.executemany("INSERT INTO temp.wanted (nodeid) VALUES (?)", [(n,) for n in sorted(nodeids)])
    conn.execute("INSERT OR IGNORE INTO test (nodeid) SELECT nodeid FROM temp.wanted")
    rows = conn.execute("SELECT test.nodeid, test.id FROM temp.wanted JOIN test USING (nodeid)")
    return {str(nodeid): int(pk) for nodeid, pk in rows}
