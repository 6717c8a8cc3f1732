"""Coordinator side; stdlib sqlite3 only. The history database's schema: versions and migrations.

The schema is built by applying MIGRATIONS in order, a fresh database as much as an old one, so
a migrated database and a new one hold exactly the same definitions (`expected_definitions`).
`PRAGMA user_version` is the version; `PRAGMA application_id` marks the file as ours.

Version 1: runs, boxes, one row per box of a run, gates, the test-id dictionary and outcomes
(one row per test and box of a run, WITHOUT ROWID, keyed test first so one test's timeline is a
range; outcome a small integer, `passed` being 0, which SQLite stores in no bytes at all).
Version 2: `run_box.clean` (the box ran ok and every gate passed), filled in for old rows, an
index to find a box's last clean run, and a partial index of failing outcomes per box of a run.
Version 3: flake evidence beside the receipt of record (which stays in run_box and outcome).
`repeat_box`, one row per repeat 2..N of a box of a run (`run --repeat N`; repeat 1 is the
run_box itself) with that repeat's run id, commit and result, and `repeat_outcome`, its tests'
outcomes; `frozen_rerun`, one row per frozen side run (`--include-frozen`) of a box of a run and
repeat (1 for the record's), and `frozen_outcome`, one row per frozen test it was asked for
(code NULL: asked for, not run). Keyed box of a run first (written and pruned together), with
an index by test for one test's timeline and the ledger review, and a partial index of failing
repeat outcomes like outcome's (`ledger suggest` starts from the tests that ever failed).
Version 4: `tree_state` on run_box and repeat_box, what the box's working tree held besides the
commit at the start ('' clean, else the digest of its uncommitted changes and untracked files;
treestate.py). Flake evidence compares runs of one tree state only. NULL in rows recorded
before version 4 (they group with each other, as before; `history rebuild` fills it in).
"""

from __future__ import annotations

import sqlite3
from functools import cache

APPLICATION_ID = 0x63687069  # "chpi"

# Outcome codes (receipt outcomes as small integers); 0 and 1 cost no bytes in a record.
OUTCOME_CODES = {
    "passed": 0,
    "failed": 1,
    "error": 2,
    "skipped": 3,
    "xfailed": 4,
    "xpassed": 5,
}
OUTCOME_NAMES = {code: name for name, code in OUTCOME_CODES.items()}
FAILING_CODES = (OUTCOME_CODES["failed"], OUTCOME_CODES["error"])

_V1 = """
CREATE TABLE run (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    started_at TEXT NOT NULL,
    commit_sha TEXT NOT NULL,
    exit_code INTEGER NOT NULL,
    verdict TEXT,
    folder TEXT NOT NULL
);
CREATE INDEX run_by_time ON run (started_at, run_id);
CREATE TABLE run_need (
    run INTEGER NOT NULL,
    needs TEXT NOT NULL,
    PRIMARY KEY (run, needs)
) WITHOUT ROWID;
CREATE TABLE box (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);
CREATE TABLE run_box (
    id INTEGER PRIMARY KEY,
    run INTEGER NOT NULL,
    box INTEGER NOT NULL,
    evaluated INTEGER NOT NULL,
    reason TEXT NOT NULL,
    commit_sha TEXT NOT NULL,
    patch_sha256 TEXT,
    interpretation TEXT NOT NULL,
    exit_status INTEGER,
    collected INTEGER NOT NULL,
    executed INTEGER NOT NULL,
    passed INTEGER NOT NULL,
    failed INTEGER NOT NULL,
    error INTEGER NOT NULL,
    skipped INTEGER NOT NULL,
    xfailed INTEGER NOT NULL,
    xpassed INTEGER NOT NULL,
    UNIQUE (run, box)
);
CREATE INDEX run_box_by_box ON run_box (box, run);
CREATE TABLE gate (
    run_box INTEGER NOT NULL,
    gate TEXT NOT NULL,
    status TEXT NOT NULL,
    detail TEXT NOT NULL,
    PRIMARY KEY (run_box, gate)
) WITHOUT ROWID;
CREATE TABLE test (
    id INTEGER PRIMARY KEY,
    nodeid TEXT NOT NULL UNIQUE
);
CREATE TABLE outcome (
    test INTEGER NOT NULL,
    run_box INTEGER NOT NULL,
    code INTEGER NOT NULL,
    PRIMARY KEY (test, run_box)
) WITHOUT ROWID;
"""

_V2 = """
ALTER TABLE run_box ADD COLUMN clean INTEGER NOT NULL DEFAULT 0;
UPDATE run_box SET clean = (
    evaluated = 1
    AND interpretation = 'ok'
    AND EXISTS (SELECT 1 FROM gate WHERE gate.run_box = run_box.id)
    AND NOT EXISTS (SELECT 1 FROM gate WHERE gate.run_box = run_box.id AND gate.status <> 'PASS')
);
CREATE INDEX run_box_clean ON run_box (box, clean, run);
CREATE INDEX outcome_failing ON outcome (run_box, code) WHERE code IN (1, 2);
"""

_V3 = """
CREATE TABLE repeat_box (
    run_box INTEGER NOT NULL,
    repeat INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    evaluated INTEGER NOT NULL,
    reason TEXT NOT NULL,
    commit_sha TEXT NOT NULL,
    patch_sha256 TEXT,
    interpretation TEXT NOT NULL,
    exit_status INTEGER,
    PRIMARY KEY (run_box, repeat)
) WITHOUT ROWID;
CREATE TABLE repeat_outcome (
    run_box INTEGER NOT NULL,
    repeat INTEGER NOT NULL,
    test INTEGER NOT NULL,
    code INTEGER NOT NULL,
    PRIMARY KEY (run_box, repeat, test)
) WITHOUT ROWID;
CREATE INDEX repeat_outcome_by_test ON repeat_outcome (test);
CREATE INDEX repeat_outcome_failing ON repeat_outcome (run_box, code) WHERE code IN (1, 2);
CREATE TABLE frozen_rerun (
    run_box INTEGER NOT NULL,
    repeat INTEGER NOT NULL,
    interpretation TEXT NOT NULL,
    clean INTEGER NOT NULL,
    fixtures_changed INTEGER NOT NULL,
    tainted INTEGER NOT NULL,
    PRIMARY KEY (run_box, repeat)
) WITHOUT ROWID;
CREATE TABLE frozen_outcome (
    run_box INTEGER NOT NULL,
    repeat INTEGER NOT NULL,
    test INTEGER NOT NULL,
    code INTEGER,
    PRIMARY KEY (run_box, repeat, test)
) WITHOUT ROWID;
CREATE INDEX frozen_outcome_by_test ON frozen_outcome (test);
"""

_V4 = """
ALTER TABLE run_box ADD COLUMN tree_state TEXT;
ALTER TABLE repeat_box ADD COLUMN tree_state TEXT;
"""

# MIGRATIONS[n - 1] takes a database from version n - 1 to version n.
MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4)
LATEST = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection, *, upto: int = LATEST) -> int:
    """Bring the database to version `upto` inside the caller's write transaction; return the
    version it had. A fresh database (version 0) gets every step and the application id."""
    found = version(conn)
    for number in range(found + 1, upto + 1):
        for statement in _statements(MIGRATIONS[number - 1]):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number}")
    if found == 0:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    return found


def version(conn: sqlite3.Connection) -> int:
    """PRAGMA user_version."""
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def application_id(conn: sqlite3.Connection) -> int:
    """PRAGMA application_id (0 in a database nobody marked)."""
    row = conn.execute("PRAGMA application_id").fetchone()
    return int(row[0])


def definitions(conn: sqlite3.Connection) -> set[tuple[str, str, str]]:
    """(type, name, sql) of every table, index, view and trigger the database defines."""
    rows = conn.execute(
        "SELECT type, name, coalesce(sql, '') FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'"
    ).fetchall()
    return {(str(t), str(n), str(s)) for t, n, s in rows}


@cache
def expected_definitions(number: int = LATEST) -> frozenset[tuple[str, str, str]]:
    """What a database at version `number` defines: the migrations applied to an empty one."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        migrate(conn, upto=number)
        return frozenset(definitions(conn))
    finally:
        conn.close()


def _statements(script: str) -> list[str]:
    """A migration split into statements (none of ours holds a ';' inside a literal)."""
    return [part.strip() for part in script.split(";") if part.strip()]
