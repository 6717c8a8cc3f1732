"""The run history (SQLite): recording run folders, queries, rebuild, prune, schema versions,
refusals of a database that is not ours, and two processes writing at once. Run folders are
written by the coordinator's own writers from receipt_factory receipts (tests/history_factory.py);
tests/coordinator/test_history_cli.py drives real `run`, `compare` and `verify`."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.history import (
    box_trend,
    outcome_timeline,
    recent_runs,
    schema,
    show_run,
    store,
)
from charpin_coordinator.history import record as history_record
from charpin_coordinator.history.prune import Keep, parse_keep, prune
from charpin_coordinator.report import NotEvaluated
from charpin_runner.errors import CharpinError, IntegrityError, UsageError

from tests.history_factory import box, days_ago, run_folder, verify_folder
from tests.receipt_factory import IDS

ROOT = Path(__file__).resolve().parents[2]
FAILING = IDS[1]
NOW = datetime.now(UTC)


def ago(days: float) -> str:
    return days_ago(days, NOW)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """Four nights on boxes a and b, a verify, and one night b was not evaluated."""
    out = tmp_path / "runs"
    run_folder(out, "n1", [box("a", "n1", ago(100)), box("b", "n1", ago(100))])
    run_folder(
        out,
        "n2",
        [box("a", "n2", ago(95)), box("b", "n2", ago(95), failing=[FAILING])],
    )
    run_folder(
        out,
        "n3",
        [
            box("a", "n3", ago(50), failing=[FAILING], extra=["tests/test_gone.py::test_x"]),
            box("b", "n3", ago(50), failing=[FAILING]),
        ],
    )
    gone = NotEvaluated(label="b", kind="timeout", reason="b: no answer in 120 s")
    run_folder(out, "n4", [box("a", "n4", ago(10), failing=[FAILING])], not_evaluated=[gone])
    verify = tmp_path / "verify"
    verify_folder(
        verify,
        "v1",
        [box("a", "base", ago(120))],
        [box("a", "patched", ago(120), failing=[FAILING])],
    )
    verify_folder(
        verify, "v2", None, [box("a", "patched", ago(5))], verdict="ACCEPT", base_from="v1"
    )
    return tmp_path


def recorded(tmp: Path) -> Path:
    db = tmp / "history.sqlite"
    folders = sorted((tmp / "runs").iterdir()) + sorted((tmp / "verify").iterdir())
    for folder in folders:
        history_record.record(db, [folder])
    return db


def answers(capsys: pytest.CaptureFixture[str], db: Path) -> dict[str, Any]:
    """Every query's JSON answer over the fixture's history."""
    h = ["--history", str(db)]
    return {
        "recent": cli_json(capsys, "history", *h),
        "show": [cli_json(capsys, "history", "show", r, *h) for r in ("n3", "n4", "v2/patched")],
        "test": cli_json(capsys, "history", "test", FAILING, *h),
        "box": [cli_json(capsys, "history", "box", b, *h) for b in ("a", "b")],
    }


def test_recorded_runs_answer_every_query(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = recorded(runs)
    recent = recent_runs(db, limit=10)
    assert [r.run_id for r in recent] == [
        "v2/patched",
        "n4",
        "n3",
        "n2",
        "n1",
        "v1/patched",
        "v1/base",
    ]
    v2, n4, _, n2, n1 = recent[:5]
    assert (v2.kind, v2.verdict) == ("verify-patched", "ACCEPT")
    assert [(c.box, c.status, c.clean) for c in n1.boxes] == [("a", "ok", True), ("b", "ok", True)]
    assert [(c.box, c.status) for c in n4.boxes] == [("a", "failed"), ("b", "not-evaluated")]
    assert "tests-failed" in n2.bits and n1.bits == [] and "not-evaluated" in n4.bits
    detail = show_run(db, "n4")
    a, b = detail.boxes
    assert a.failing == [FAILING] and a.counts == {"passed": 2, "failed": 1}
    assert {g.gate: g.status for g in a.gates}["Identity"] == "PASS"
    assert (b.evaluated, b.reason) == (False, "timeout: b: no answer in 120 s")
    assert show_run(db, "v2").needs == ["v1/base"]  # a unique prefix will do
    timeline = outcome_timeline(db, FAILING)
    by_box = {line.box: [(p.run_id, p.outcome) for p in line.points] for line in timeline.boxes}
    assert by_box["a"] == [
        ("v2/patched", "passed"),
        ("n4", "failed"),
        ("n3", "failed"),
        ("n2", "passed"),
        ("n1", "passed"),
        ("v1/patched", "failed"),
        ("v1/base", "passed"),
    ]
    assert by_box["b"] == [("n3", "failed"), ("n2", "failed"), ("n1", "passed")]
    assert all(p.commit == "1" * 40 for line in timeline.boxes for p in line.points)
    # A test that appeared later is "absent" nowhere before it, and where its box ran without it.
    later = outcome_timeline(db, "tests/test_gone.py::test_x")
    assert [(p.run_id, p.outcome) for p in later.boxes[0].points] == [
        ("v2/patched", "absent"),
        ("n4", "absent"),
        ("n3", "passed"),
    ]
    assert [(p.run_id, p.clean) for p in box_trend(db, "b", 3)] == [
        ("n2", False),
        ("n3", False),
        ("n4", False),  # not evaluated
    ]
    # Oldest first; a one-box run (v2's patched run) is vacuous, never clean.
    assert box_trend(db, "a", 4) == [
        ("n2", ago(95), True),
        ("n3", ago(50), False),
        ("n4", ago(10), False),
        ("v2/patched", ago(5), False),
    ]
    # Recording the same folder again changes nothing.
    before = answers(capsys, db)
    history_record.record(db, [runs / "runs" / "n1"])
    assert answers(capsys, db) == before


def test_rebuild_from_the_folders_gives_the_same_answers(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = recorded(runs)
    before = answers(capsys, db)
    for path in [db, *store.side_files(db)]:
        path.unlink(missing_ok=True)
    code, out, err = cli(
        capsys, "history", "rebuild", str(runs / "runs"), str(runs / "verify"), "--history", str(db)
    )
    assert code == 0, err
    assert "7 run(s), 11 box result(s)" in out
    assert answers(capsys, db) == before
    # Over an existing database too (it is replaced whole, nothing counted twice).
    assert cli(capsys, "history", "rebuild", str(runs), "--history", str(db))[0] == 0
    assert answers(capsys, db) == before


def test_a_corrupt_database_is_refused_naming_rebuild_and_never_emptied(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = recorded(runs)
    good = db.read_bytes()
    # Garbage where the database was.
    db.write_bytes(b"this is not a database\n" * 100)
    garbage = db.read_bytes()
    for argv in (["history"], ["history", "show", "n1"], ["history", "prune", "--keep", "1"]):
        code, out, err = cli(capsys, *argv, "--history", str(db))
        assert code == 8 and out == ""
        [line] = err.splitlines()
        assert "is not a SQLite database" in line and "charpin-remote history rebuild" in line
    with pytest.raises(IntegrityError, match="history rebuild"):
        history_record.record(db, [runs / "runs" / "n1"])
    assert db.read_bytes() == garbage  # refused, never emptied or recreated
    # A database cut short: SQLite's header is there, the pages are not.
    db.write_bytes(good[: len(good) // 3])
    code, _, err = cli(capsys, "history", "test", FAILING, "--history", str(db))
    assert code == 8 and "history rebuild" in err and len(err.splitlines()) == 1
    # The fix named works, over the corrupt file.
    assert cli(capsys, "history", "rebuild", str(runs), "--history", str(db))[0] == 0
    assert [r.run_id for r in recent_runs(db, 2)] == ["v2/patched", "n4"]


def test_a_database_that_is_not_ours_is_refused(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    with pytest.raises(IntegrityError, match="not a charpin history"):
        recent_runs(foreign)
    # Ours, edited by hand: a trigger or a missing index is not the schema this version reads.
    db = tmp_path / "edited.sqlite"
    history_record.record(db, [])
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TRIGGER t AFTER INSERT ON run BEGIN DELETE FROM run; END")
    with pytest.raises(IntegrityError, match="edited by hand"):
        recent_runs(db)
    # Written by a newer charpin-remote.
    newer = tmp_path / "newer.sqlite"
    history_record.record(newer, [])
    with sqlite3.connect(newer) as conn:
        conn.execute(f"PRAGMA user_version = {schema.LATEST + 1}")
    with pytest.raises(IntegrityError, match="newer than this charpin-remote"):
        recent_runs(newer)


def test_a_missing_database_is_created_by_recording_but_not_by_reading(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = runs / "deep" / "folder" / "history.sqlite"
    code, _, err = cli(capsys, "history", "--history", str(db))
    assert code == 64 and "no history database" in err and not db.exists()
    history_record.record(db, [runs / "runs" / "n1"])
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.LATEST
        assert conn.execute("PRAGMA application_id").fetchone()[0] == schema.APPLICATION_ID


V1_ROWS = """
INSERT INTO run VALUES (1, 'old1', 'run', '2026-01-01T00:00:00Z', 'c1', 0, NULL, '/x/old1');
INSERT INTO run VALUES (2, 'old2', 'run', '2026-01-02T00:00:00Z', 'c2', 3, NULL, '/x/old2');
INSERT INTO box VALUES (1, 'ci');
INSERT INTO run_box VALUES (1, 1, 1, 1, '', 'c1', NULL, 'ok', 0, 2, 2, 2, 0, 0, 0, 0, 0);
INSERT INTO run_box VALUES (2, 2, 1, 1, '', 'c2', NULL, 'failed', 1, 2, 2, 1, 1, 0, 0, 0, 0);
INSERT INTO gate VALUES (1, 'Identity', 'PASS', 'ran c1');
INSERT INTO gate VALUES (2, 'Identity', 'FAIL', 'ran c2');
INSERT INTO test VALUES (1, 'tests/t.py::a');
INSERT INTO test VALUES (2, 'tests/t.py::b');
INSERT INTO outcome VALUES (1, 1, 0);
INSERT INTO outcome VALUES (2, 1, 0);
INSERT INTO outcome VALUES (1, 2, 0);
INSERT INTO outcome VALUES (2, 2, 1);
"""


def test_a_version_1_database_is_migrated_to_the_latest_schema(tmp_path: Path) -> None:
    db = tmp_path / "v1.sqlite"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    schema.migrate(conn, upto=1)
    for statement in V1_ROWS.strip().splitlines():
        conn.execute(statement)
    assert schema.version(conn) == 1
    conn.close()
    # Opening it migrates it: `clean` is filled in from the gates and interpretation.
    assert box_trend(db, "ci") == [
        ("old1", "2026-01-01T00:00:00Z", True),
        ("old2", "2026-01-02T00:00:00Z", False),
    ]
    assert show_run(db, "old2").boxes[0].failing == ["tests/t.py::b"]
    with sqlite3.connect(db) as conn:
        assert schema.version(conn) == schema.LATEST
        assert schema.definitions(conn) == schema.expected_definitions()
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT test FROM outcome "
            "WHERE outcome.run_box = 2 AND outcome.code IN (1, 2)"
        ).fetchall()
    assert "outcome_failing" in str(plan)
    assert schema.FAILING_CODES == (1, 2)
    # Every migration from every earlier version ends in the same schema as a fresh database.
    for start in range(schema.LATEST + 1):
        conn = sqlite3.connect(":memory:", isolation_level=None)
        schema.migrate(conn, upto=start)
        schema.migrate(conn)
        assert schema.definitions(conn) == schema.expected_definitions()


def test_prune_keeps_each_boxs_last_clean_run_and_what_kept_runs_need(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = recorded(runs)
    code, out, _ = cli(
        capsys, "history", "prune", "--keep", "30d", "--dry-run", "--history", str(db)
    )
    assert code == 0 and "would remove 2 run(s)" in out
    assert len(recent_runs(db, 50)) == 7  # a dry run removes nothing
    result = prune(db, parse_keep("30d"))
    # n4 and v2/patched are recent; n2 is box a's last clean run, n1 box b's; v2/patched was
    # judged against v1's base (reused), so v1/base stays too.
    assert result.removed == ["n3", "v1/patched"]
    assert result.protected == {
        "n2": "last clean run of box a",
        "n1": "last clean run of box b",
        "v1/base": "needed by v2/patched",
    }
    assert [r.run_id for r in recent_runs(db, 50)] == ["v2/patched", "n4", "n2", "n1", "v1/base"]
    # A test only the removed runs had leaves the dictionary; every kept outcome stays.
    with pytest.raises(UsageError, match="no test"):
        outcome_timeline(db, "tests/test_gone.py::test_x")
    points = {ln.box: len(ln.points) for ln in outcome_timeline(db, FAILING).boxes}
    assert points == {"a": 5, "b": 2}
    # By count: the newest run, and again what may not go.
    assert prune(db, Keep(count=1)).removed == ["n4"]
    assert (
        cli_json(capsys, "history", "prune", "--keep", "1", "--history", str(db))["removed"] == []
    )


def test_prune_of_a_few_runs_among_many_removes_exactly_their_outcomes(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    db = tmp_path / "h.sqlite"
    for night in range(20):
        run_id = f"n{night:02d}"
        extra = [f"tests/test_n.py::test_{night}"]
        history_record.record(
            db, [run_folder(out, run_id, [box("a", run_id, days_ago(40 - night), extra=extra)])]
        )
    result = prune(db, Keep(count=18))  # 2 of 20 boxes: deleted test by test
    assert result.removed == ["n00", "n01"]
    with sqlite3.connect(db) as conn:
        count = conn.execute("SELECT count(*) FROM outcome").fetchone()[0]
        tests = conn.execute("SELECT count(*) FROM test").fetchone()[0]
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert (count, tests) == (18 * 4, 3 + 18)
    result = prune(db, Keep(count=2))  # most of them: one pass over the table
    assert len(result.removed) == 16
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM outcome").fetchone()[0] == 2 * 4


@pytest.mark.parametrize("bad", ["0", "90", "x", "90w", "-3d", "0d", ""])
def test_keep_takes_days_or_a_count(bad: str) -> None:
    assert parse_keep("90d") == Keep(days=90) and parse_keep("30") == Keep(count=30)
    if bad != "90":
        with pytest.raises(UsageError, match="--keep"):
            parse_keep(bad)


# Says it is ready once everything is imported, then starts when its stdin says go: both
# writers are released at the same moment, neither still importing.
WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from charpin_coordinator.history.record import record
    db, *folders = sys.argv[1:]
    print("ready", flush=True)
    sys.stdin.readline()
    for folder in folders:
        record(Path(db), [Path(folder)])
    """
)


def test_two_processes_recording_at_once_lose_nothing_and_corrupt_nothing(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite"  # missing: both race to create it too
    many = [f"tests/test_many.py::test_{i}" for i in range(300)]
    jobs = []
    for name in ("nightly-a", "nightly-b"):
        folders = [
            run_folder(
                tmp_path / name,
                f"{name}-{i}",
                [box(name, f"{name}-{i}", days_ago(30 - i), extra=many, failing=many[: i * 3])],
            )
            for i in range(12)
        ]
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(ROOT / "runner"), str(ROOT / "coordinator")]),
        )
        argv = [sys.executable, "-c", WRITER, str(db), *map(str, folders)]
        jobs.append(
            subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for job in jobs:
        assert job.stdout is not None and job.stdout.readline() == "ready\n"
    for job in jobs:
        assert job.stdin is not None
        job.stdin.write("go\n")
        job.stdin.flush()
    for job in jobs:
        _, err = job.communicate(timeout=120)
        assert job.returncode == 0, err
    runs = recent_runs(db, 100)
    assert len(runs) == 24
    assert {r.run_id for r in runs} == {
        f"{n}-{i}" for n in ("nightly-a", "nightly-b") for i in range(12)
    }
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM outcome").fetchone()[0] == 24 * 303
    failing = [p.outcome for p in outcome_timeline(db, many[0]).boxes[0].points]
    assert failing == ["failed"] * 11 + ["passed"]


def test_a_run_id_recorded_from_another_folder_is_refused(runs: Path) -> None:
    db = recorded(runs)
    other = run_folder(runs / "elsewhere", "n1", [box("a", "n1", days_ago(1))])
    with pytest.raises(UsageError, match="already in the history"):
        history_record.record(db, [other])
    with pytest.raises(UsageError, match="pick another --run-id"):
        history_record.check_free(db, ["n1"])
    history_record.check_free(db, ["n9"])


def test_rebuild_names_and_skips_an_unreadable_folder_with_exit_8(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    receipt = runs / "runs" / "n2" / "a" / "receipt.json"
    receipt.write_bytes(receipt.read_bytes().replace(b'"passed"', b'"green"', 1))
    db = runs / "h.sqlite"
    code, out, err = cli(capsys, "history", "rebuild", str(runs), "--history", str(db))
    assert code == 8
    [warning] = err.splitlines()
    assert "n2: skipped" in warning and "receipt refused" in warning
    assert "6 run(s)" in out and "1 folder(s) skipped" in out
    assert "n2" not in {r.run_id for r in recent_runs(db, 50)}


def test_the_rebuild_lock_keeps_readers_out_until_the_new_file_is_in(runs: Path) -> None:
    db = recorded(runs)
    with store.locked(db, exclusive=True):
        with pytest.raises(store.HistoryBusyError, match="being rebuilt"):
            with store.locked(db, exclusive=False, wait=0.2):
                pass
    with store.locked(db, exclusive=False), store.locked(db, exclusive=False, wait=0.2):
        pass  # readers and writers share it


def test_every_command_speaks_json_and_text(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = recorded(runs)
    h = ["--history", str(db)]
    code, out, _ = cli(capsys, "history", *h, "--limit", "3")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["TIME", "RUN", "KIND", "COMMIT", "RESULT", "BOXES"]
    assert len(lines) == 4 and "a:ok,gates" in lines[1] and "ACCEPT" in lines[1]
    assert "a:failed b:not-evaluated" in lines[2]
    code, out, _ = cli(capsys, "history", "show", "n4", *h)
    assert "box b: NOT EVALUATED (timeout: b: no answer in 120 s)" in out
    assert f"failing {FAILING}" in out
    code, out, _ = cli(capsys, "history", "test", FAILING, *h)
    assert out.splitlines()[:2] == [FAILING, "  a"]
    code, out, _ = cli(capsys, "history", "box", "b", *h)
    assert "not-evaluated" in out and "tests-failed" not in out
    assert cli_json(capsys, "history", "box", "b", *h)["runs"][0]["status"] == "not-evaluated"
    code, _, err = cli(capsys, "history", "box", "nope", *h)
    assert code == 64 and "boxes: a, b" in err
    code, _, err = cli(capsys, "history", "test", "test_one", *h)
    assert code == 64 and "did you mean tests/test_a.py::test_one" in err
    code, _, err = cli(capsys, "history", "show", "n", *h)
    assert code == 64 and "ambiguous" in err
    assert cli(capsys, "history", "--limit", "0", *h)[0] == 64


def test_a_configured_history_path_is_used_and_the_flag_beats_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.conftest import make_repo

    repo = make_repo(
        tmp_path / "repo", {"pyproject.toml": '[tool.charpin]\nhistory = "var/h.db"\n'}
    )
    run_folder(repo / ".charpin" / "runs", "n1", [box("a", "n1", days_ago(1))])
    monkeypatch.chdir(repo)
    assert cli(capsys, "history", "rebuild")[0] == 0
    assert (repo / "var" / "h.db").is_file()
    assert cli_json(capsys, "history")[0]["run_id"] == "n1"
    other = tmp_path / "other.db"
    code, _, err = cli(capsys, "history", "--history", str(other))
    assert code == 64 and str(other) in err
    (repo / "pyproject.toml").write_text('[tool.charpin]\nhistory = ""\n')
    code, _, err = cli(capsys, "history")
    assert code == 64 and "history must be a file path" in err


def test_read_api_errors_are_charpin_errors(runs: Path) -> None:
    with pytest.raises(UsageError, match="no history database"):
        box_trend(runs / "missing.sqlite", "a")
    db = recorded(runs)
    with pytest.raises(UsageError, match="no box 'c'"):
        box_trend(db, "c")
    (runs / "garbage.sqlite").write_bytes(b"x" * 200)
    with pytest.raises(CharpinError, match="history rebuild"):
        recent_runs(runs / "garbage.sqlite")
