"""Flake evidence beside the receipts of record, in the history (schema v3): the repeats of
`run --repeat N` and the frozen side runs of `--include-frozen`. Run folders are written by the
coordinator's own writer (tests/history_factory.py, repeats as `<box>/repeats/<k>/`), recorded
by the history's recorder, and read back through the CLI; real ledger files."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.history import record as history_record
from charpin_coordinator.history import schema, show_run, store
from charpin_coordinator.history.prune import Keep, prune
from charpin_coordinator.report import NotEvaluated

from tests.history_factory import box, days_ago, run_folder
from tests.receipt_factory import HEAD, IDS, frozen_rerun

FLAKY = IDS[0]  # fails in repeats 3, 6 and 9 of n1 on box a
FROZEN = "tests/test_mail.py::test_relay"  # frozen; passes whenever it is re-run
OTHER = "tests/test_mail.py::test_smtp"  # frozen; its re-run fails in repeat 4 of n1 on box a
NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
TODAY = date(2026, 6, 1)


def _side(other: str = "passed", **kw: Any) -> Any:
    return frozen_rerun({FROZEN: "passed", OTHER: other}, **kw)


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """n0: one run of box a whose side run changed a fixture (not clean). n1: box a nine times
    (`--repeat 10`, repeat 10 timed out), box b once; n2: both boxes, clean, no side run."""
    out = tmp_path / "runs"
    n0 = box("a", "n0", days_ago(10, NOW), frozen_rerun=_side(fixtures_changed=["f.json"]))
    run_folder(out, "n0", [box("b", "n0", days_ago(10, NOW)), n0])
    started = days_ago(3, NOW)
    repeats: list[Any] = []
    for k in range(2, 10):
        failing = [FLAKY] if k % 3 == 0 else []
        side = _side("failed" if k == 4 else "passed")
        repeats.append(box("a", f"n1.r{k}", started, failing=failing, frozen_rerun=side))
    repeats.append(NotEvaluated(label="a", kind="timeout", reason="a: killed at the deadline"))
    run_folder(
        out,
        "n1",
        [
            box("a", "n1", started, frozen_rerun=_side()),
            box("b", "n1", started, frozen_rerun=_side()),
        ],
        repeats={"a": repeats},
    )
    run_folder(out, "n2", [box("a", "n2", days_ago(1, NOW)), box("b", "n2", days_ago(1, NOW))])
    return out


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    entries = [
        {"id": FROZEN, "reason": "needs a relay", "owner": "ops", "expires": "2027-01-01"},
        {"id": OTHER, "reason": "needs smtp", "owner": "ops", "expires": "2027-01-01"},
    ]
    path = tmp_path / "flake-ledger.json"
    path.write_text(json.dumps({"version": 1, "entries": entries}))
    return path


def recorded(runs: Path) -> Path:
    db = runs.parent / "history.sqlite"
    for folder in sorted(runs.iterdir()):
        history_record.record(db, [folder])
    return db


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def answers(capsys: pytest.CaptureFixture[str], db: Path, ledger: Path) -> dict[str, Any]:
    h = ["--history", str(db), "--json"]
    review = ["ledger", "review", "--ledger", str(ledger), "--today", TODAY.isoformat(), *h]
    return {
        "show": [json.loads(cli(capsys, "history", "show", r, *h)) for r in ("n0", "n1", "n2")],
        "test": [json.loads(cli(capsys, "history", "test", t, *h)) for t in (FLAKY, FROZEN)],
        "suggest": json.loads(cli(capsys, "ledger", "suggest", *h)),
        "review": json.loads(cli(capsys, *review)),
    }


def test_the_run_folder_keeps_repeats_beside_the_receipt_of_record(runs: Path) -> None:
    a = runs / "n1" / "a"
    assert json.loads((a / "receipt.json").read_text())["run_id"] == "n1"
    assert sorted(int(p.name) for p in (a / "repeats").iterdir()) == list(range(2, 11))
    meta = json.loads((a / "repeats" / "3" / "box.json").read_text())
    assert (meta["repeat"], meta["run_id"], meta["status"]) == (3, "n1.r3", "evaluated")
    assert json.loads((a / "repeats" / "3" / "receipt.json").read_text())["run_id"] == "n1.r3"
    missed = json.loads((a / "repeats" / "10" / "box.json").read_text())
    assert (missed["status"], missed["kind"]) == ("not-evaluated", "timeout")
    assert not (a / "repeats" / "10" / "receipt.json").exists()
    # The record's box.json is what a run without --repeat writes: no repeat fields.
    assert "repeat" not in json.loads((a / "box.json").read_text())
    assert not (runs / "n1" / "b" / "repeats").exists()


def test_suggest_counts_each_repeat_as_a_run_with_its_receipt_id(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = recorded(runs)
    found = json.loads(cli(capsys, "ledger", "suggest", "--history", str(db), "--json"))
    assert [c["nodeid"] for c in found["candidates"]] == [FLAKY]
    (group,) = found["candidates"][0]["groups"]
    assert (group["box"], group["commit"]) == ("a", HEAD)
    # One night's repeats on one box: the flip is the evidence. Repeat 10 gave no receipt.
    assert group["failed"] == ["n1.r3", "n1.r6", "n1.r9"]
    assert group["passed"] == ["n0", "n1", "n1.r2", "n1.r4", "n1.r5", "n1.r7", "n1.r8", "n2"]
    assert (group["rate"]["failures"], group["rate"]["runs"]) == (3, 11)
    text = cli(capsys, "ledger", "suggest", "--history", str(db))
    assert "failed: n1.r3, n1.r6, n1.r9" in text
    assert "3 failures in 11 runs (observed 27.3 %; failure rate <" in text


def test_review_lists_a_frozen_test_that_ran_clean_ten_times_when_re_run(
    runs: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = recorded(runs)
    argv = ["ledger", "review", "--history", str(db), "--ledger", str(ledger)]
    found = json.loads(cli(capsys, *argv, "--today", TODAY.isoformat(), "--json"))
    # FROZEN never ran in a gated run: only its re-runs speak for it.
    assert found["never_seen"] == []
    (note,) = found["unfreeze"]
    assert note["id"] == FROZEN and note["rate"] is None and note["overall"] is None
    # Ten clean re-runs newest first (OTHER failing beside it in repeat 4 does not count
    # against it), then n0's, where the side run changed a fixture.
    assert (note["reruns"]["failures"], note["reruns"]["runs"]) == (0, 10)
    assert note["reruns"]["upper_bound"] == pytest.approx(1 - 0.05 ** (1 / 10))
    assert (note["reruns_overall"]["failures"], note["reruns_overall"]["runs"]) == (1, 11)
    text = cli(capsys, *argv, "--today", TODAY.isoformat())
    assert (
        f"{FROZEN}  ran clean 10 times in a row when re-run: consider unfreezing; "
        "0 failures in 10 runs: failure rate < 25.9 % at 95 % (exact binomial" in text
    )
    assert "all re-runs: 1 not clean in 11" in text
    # OTHER failed in repeat 4: five clean re-runs since (repeats 5..9), not ten; n0's
    # changed fixture is not clean for it either.
    assert [n for n in found["unfreeze"] if n["id"] == OTHER] == []
    loose = json.loads(
        cli(capsys, *argv, "--today", TODAY.isoformat(), "--clean-runs", "5", "--json")
    )
    (other_note,) = [n for n in loose["unfreeze"] if n["id"] == OTHER]
    assert (other_note["reruns"]["runs"], other_note["reruns_overall"]["failures"]) == (5, 2)


def test_show_and_test_tell_repeats_and_frozen_re_runs_apart(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = recorded(runs)
    a, b = show_run(db, "n1").boxes
    assert a.interpretation == "ok" and a.failing == []  # the record is the result
    assert [r.repeat for r in a.repeats] == list(range(2, 11))
    third = a.repeats[1]
    assert (third.run_id, third.interpretation, third.failing) == ("n1.r3", "failed", [FLAKY])
    assert third.differs == [FLAKY] and third.absent == 0
    assert (a.repeats[-1].evaluated, a.repeats[-1].reason) == (
        False,
        "timeout: a: killed at the deadline",
    )
    assert [(f.repeat, f.clean) for f in a.frozen_reruns][:4] == [
        (1, True),
        (2, True),
        (3, True),
        (4, False),
    ]
    assert a.frozen_reruns[3].outcomes == {FROZEN: "passed", OTHER: "failed"}
    assert b.repeats == [] and [f.repeat for f in b.frozen_reruns] == [1]
    text = cli(capsys, "history", "show", "n1", "--history", str(db))
    assert "  repeat 3 (n1.r3, evidence only): failed (exit 1)" in text
    assert f"    differs from the record: {FLAKY}" in text
    assert "  repeat 10 (n1.r10, evidence only): NOT EVALUATED (timeout" in text
    assert "  frozen re-run, repeat 4 (outside the gate): not clean (failed)" in text

    timeline = json.loads(cli(capsys, "history", "test", FLAKY, "--history", str(db), "--json"))
    (points,) = [t["points"] for t in timeline["boxes"] if t["box"] == "a"]
    n1 = [(p["run_id"], p["repeat"], p["source"], p["outcome"]) for p in points][1:10]
    assert n1 == [("n1", 1, "run", "passed")] + [
        (f"n1.r{k}", k, "run", "failed" if k % 3 == 0 else "passed") for k in range(2, 10)
    ]
    frozen = json.loads(cli(capsys, "history", "test", FROZEN, "--history", str(db), "--json"))
    (points,) = [t["points"] for t in frozen["boxes"] if t["box"] == "a"]
    side = [(p["run_id"], p["repeat"], p["outcome"]) for p in points if p["source"] != "run"]
    assert side[:3] == [("n1", 1, "passed"), ("n1.r2", 2, "passed"), ("n1.r3", 3, "passed")]
    # The gated run never ran it: one point per run, not one per repeat; "frozen" where that
    # run's side run was asked for it, "absent" where the run had none (n2).
    record = [(p["run_id"], p["outcome"]) for p in points if p["source"] == "run"]
    assert record == [("n2", "absent"), ("n1", "frozen"), ("n0", "frozen")]
    text = cli(capsys, "history", "test", FROZEN, "--history", str(db))
    assert "frozen re-run, repeat 2" in text and "frozen re-run" in text


def test_rebuild_from_the_folders_gives_the_same_answers_with_repeats_and_re_runs(
    runs: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = recorded(runs)
    before = answers(capsys, db, ledger)
    for path in [db, *store.side_files(db)]:
        path.unlink(missing_ok=True)
    out = cli(capsys, "history", "rebuild", str(runs), "--history", str(db))
    assert "3 run(s), 6 box result(s)" in out
    assert answers(capsys, db, ledger) == before
    with sqlite3.connect(db) as conn:
        counts = [
            conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("repeat_box", "repeat_outcome", "frozen_rerun", "frozen_outcome")
        ]
        # `ledger suggest` finds the tests that ever failed through the partial indexes, never
        # by reading every passing row of the year.
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT test FROM outcome WHERE code IN (1, 2) "
            "UNION SELECT test FROM repeat_outcome WHERE code IN (1, 2)"
        ).fetchall()
    assert counts == [9, 8 * 3, 1 + 9 + 1, 2 * 11]
    assert "outcome_failing" in str(plan) and "repeat_outcome_failing" in str(plan)


V2_ROWS = """
INSERT INTO run VALUES (1, 'old1', 'run', '2026-01-01T00:00:00Z', 'c1', 0, NULL, '/x/old1');
INSERT INTO box VALUES (1, 'ci');
INSERT INTO run_box VALUES (1, 1, 1, 1, '', 'c1', NULL, 'ok', 0, 2, 2, 2, 0, 0, 0, 0, 0, 1);
INSERT INTO gate VALUES (1, 'Identity', 'PASS', 'ran c1');
INSERT INTO test VALUES (1, 'tests/t.py::a');
INSERT INTO outcome VALUES (1, 1, 0);
"""


def test_a_version_2_database_is_migrated_to_v3_and_takes_repeats(
    runs: Path, tmp_path: Path
) -> None:
    db = tmp_path / "v2.sqlite"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    schema.migrate(conn, upto=2)
    for statement in V2_ROWS.strip().splitlines():
        conn.execute(statement)
    conn.close()
    old = show_run(db, "old1")  # opening migrates
    assert old.boxes[0].clean and old.boxes[0].repeats == [] and old.boxes[0].frozen_reruns == []
    with sqlite3.connect(db) as conn:
        assert schema.version(conn) == schema.LATEST
        assert schema.definitions(conn) == schema.expected_definitions()
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT run_box FROM frozen_outcome WHERE test = 1"
        ).fetchall()
    assert "frozen_outcome_by_test" in str(plan)
    history_record.record(db, [runs / "n1"])
    assert [r.run_id for r in show_run(db, "n1").boxes[0].repeats][:2] == ["n1.r2", "n1.r3"]


def test_prune_removes_a_runs_repeats_and_re_runs_and_the_ids_only_they_named(
    runs: Path,
) -> None:
    db = recorded(runs)
    result = prune(db, Keep(count=1))
    assert result.removed == ["n0", "n1"]
    with sqlite3.connect(db) as conn:
        for table in ("repeat_box", "repeat_outcome", "frozen_rerun", "frozen_outcome"):
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0
        names = {r[0] for r in conn.execute("SELECT nodeid FROM test")}
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert FROZEN not in names and OTHER not in names and FLAKY in names


def test_a_tainted_side_run_breaks_the_streak_and_one_that_never_ran_does_not(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs"
    tainted = ["the measured run had changed the checkout the side run used: tests/test_mail.py"]
    never = frozen_rerun({}, requested=[FROZEN, OTHER], interpretation="timed-out")
    nights = [_side()] * 3 + [_side(tainted=tainted)] + [_side()] * 2 + [never]
    for day, side in enumerate(nights):
        run_id = f"d{day}"
        started = days_ago(len(nights) - day, NOW)
        run_folder(out, run_id, [box("a", run_id, started, frozen_rerun=side)])
    db = recorded(out)
    argv = ["ledger", "review", "--history", str(db), "--ledger", str(ledger)]
    found = json.loads(
        cli(capsys, *argv, "--today", TODAY.isoformat(), "--clean-runs", "2", "--json")
    )
    (note,) = [n for n in found["unfreeze"] if n["id"] == FROZEN]
    # Newest first: d6 never ran (skipped), d5 and d4 clean, d3 tainted (passed, yet no
    # evidence): a streak of two, and the tainted one counts against it overall.
    assert (note["reruns"]["failures"], note["reruns"]["runs"]) == (0, 2)
    assert (note["reruns_overall"]["failures"], note["reruns_overall"]["runs"]) == (1, 6)


def test_rebuild_refuses_a_repeat_folder_holding_another_runs_receipt(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A repeat's receipt swapped for the record's (or anything else's): named, never recorded.
    repeat = runs / "n1" / "a" / "repeats" / "3"
    (repeat / "receipt.json").write_bytes((runs / "n1" / "a" / "receipt.json").read_bytes())
    db = runs.parent / "history.sqlite"
    capsys.readouterr()
    code = main(["history", "rebuild", str(runs), "--history", str(db)])
    err = capsys.readouterr().err
    assert code == 8
    assert "the receipt is run 'n1', not this folder's repeat 'n1.r3'" in err, err
