"""Coordinator side; stdlib sqlite3 and the receipt dataclasses. Flake evidence beside a box's
receipt of record, as the history keeps it (schema v3): the records folders.py reads from a run
folder (`<box>/repeats/<k>/`, each receipt's `frozen_rerun`) and the rows record.py inserts.

    RepeatRecord      repeat k (2..N) of a box of a run (`run --repeat N`)
    FrozenRecord      one frozen side run (`--include-frozen`) of a box of a run and repeat
    insert_box        both kinds' rows for one box of a run
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from charpin_runner.receipt import FrozenRerun

from charpin_coordinator.history.schema import OUTCOME_CODES


@dataclass(frozen=True)
class FrozenRecord:
    """A frozen side run: each test it was asked for -> its outcome (None: asked, not run)."""

    repeat: int
    interpretation: str
    clean: bool
    fixtures_changed: int
    outcomes: Mapping[str, str | None]
    # The side run is no evidence about any test (receipt's frozen_rerun.tainted).
    tainted: bool = False


@dataclass(frozen=True)
class RepeatRecord:
    """Repeat k (2..N) of one box of a run: evidence only, never the box's result."""

    repeat: int
    run_id: str
    evaluated: bool
    reason: str = ""
    commit: str = ""
    patch_sha256: str | None = None
    interpretation: str = "not-evaluated"
    exit_status: int | None = None
    outcomes: Mapping[str, str] = field(default_factory=dict)
    frozen: FrozenRecord | None = None
    tree_state: str | None = None  # treestate.tree_state of the repeat's receipt


def frozen_record(side: FrozenRerun | None, repeat: int) -> FrozenRecord | None:
    """A receipt's frozen_rerun as the history keeps it."""
    if side is None:
        return None
    return FrozenRecord(
        repeat=repeat,
        interpretation=side.interpretation,
        clean=side.clean,
        fixtures_changed=len(side.fixtures_changed),
        outcomes={nodeid: side.outcomes.get(nodeid) for nodeid in side.requested},
        tainted=bool(side.tainted),
    )


def nodeids(repeats: Sequence[RepeatRecord], frozen: Sequence[FrozenRecord]) -> set[str]:
    """Every test id these records name (for the test-id dictionary)."""
    found = {nodeid for rep in repeats for nodeid in rep.outcomes}
    return found | {nodeid for side in frozen for nodeid in side.outcomes}


def insert_box(
    conn: sqlite3.Connection,
    run_box: int,
    repeats: Sequence[RepeatRecord],
    frozen: Sequence[FrozenRecord],
    ids: Mapping[str, int],
) -> None:
    """The repeat and frozen side-run rows of one box of a run, inside the caller's write
    transaction (record.insert)."""
    conn.executemany(
        "INSERT INTO repeat_box (run_box, repeat, run_id, evaluated, reason, commit_sha, "
        "patch_sha256, interpretation, exit_status, tree_state) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                run_box,
                rep.repeat,
                rep.run_id,
                int(rep.evaluated),
                rep.reason,
                rep.commit,
                rep.patch_sha256,
                rep.interpretation,
                rep.exit_status,
                rep.tree_state,
            )
            for rep in repeats
        ],
    )
    conn.executemany(
        "INSERT INTO repeat_outcome (run_box, repeat, test, code) VALUES (?, ?, ?, ?)",
        sorted(
            (run_box, rep.repeat, ids[nodeid], OUTCOME_CODES[outcome])
            for rep in repeats
            for nodeid, outcome in rep.outcomes.items()
        ),
    )
    conn.executemany(
        "INSERT INTO frozen_rerun (run_box, repeat, interpretation, clean, fixtures_changed, "
        "tainted) VALUES (?, ?, ?, ?, ?, ?)",
        [
            (
                run_box,
                side.repeat,
                side.interpretation,
                int(side.clean),
                side.fixtures_changed,
                int(side.tainted),
            )
            for side in frozen
        ],
    )
    conn.executemany(
        "INSERT INTO frozen_outcome (run_box, repeat, test, code) VALUES (?, ?, ?, ?)",
        sorted(
            (run_box, side.repeat, ids[nodeid], None if code is None else OUTCOME_CODES[code])
            for side in frozen
            for nodeid, code in side.outcomes.items()
        ),
    )
