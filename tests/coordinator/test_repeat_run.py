"""`charpin-remote run --repeat N` and `--include-frozen`, end to end: real runs on `local` and
`clean` of small repositories whose tests fail on a planted schedule (a counter file outside
the checkout, named by a variable the boxes are allowed to see), then the history's answers:
`ledger suggest` on the repeats, `ledger review` on the frozen re-runs, `history rebuild`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.history import flaky

from tests.conftest import make_repo

RUNNER_PATH = str(Path(__file__).resolve().parents[2] / "runner")
COUNTER = "CHARPIN_FLAKE_COUNTER"
# Fails on the executions the schedule names, counted across every box and repeat of a run.
SCHEDULED = """\
import os, pathlib

def test_steady():
    pass

def test_scheduled():
    counter = pathlib.Path(os.environ["{var}"])
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    assert not ({fails}), f"planted failure on execution {{n}}"
"""
NODEID = "tests/test_sched.py::test_scheduled"
RELAY = "tests/test_mail.py::test_relay"

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", RUNNER_PATH)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv(COUNTER, str(tmp_path / "counter"))  # outside every checkout
    # The clean box's throwaway HOME (kept with --keep) goes under the test's folder.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def scheduled_repo(tmp_path: Path, fails: str, **files: str) -> Path:
    # The tests' environment is an allow-list (rule 6): local's tests get the counter by name.
    toml = f'[tool.charpin]\nenv_allow = ["{COUNTER}"]\n'
    toml += f'[tool.charpin.hosts.clean]\nenv = ["{COUNTER}"]\n'
    return make_repo(
        tmp_path / "repo",
        {
            "pyproject.toml": toml,
            "tests/__init__.py": "",
            "tests/test_sched.py": SCHEDULED.format(var=COUNTER, fails=fails),
            **files,
        },
    )


def run_json(
    capsys: pytest.CaptureFixture[str], repo: Path, run_id: str, *extra: str
) -> tuple[int, Any]:
    capsys.readouterr()
    # The schedule's counter lives outside the checkout, which the sandbox's view hides (rule 2
    # of the threat model): these runs are about repeats, not confinement.
    argv = ["run", "--repo", str(repo), "--run-id", run_id, "-q", "--json", "--sandbox", "off"]
    code = main([*argv, *extra])
    out, err = capsys.readouterr()
    assert out, err
    return code, json.loads(out)


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    capsys.readouterr()
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_a_repeat_that_fails_never_gates_and_against_compares_with_the_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = scheduled_repo(tmp_path, "n == 2")
    # One box at a time: local's record (execution 1), local's repeat 2 (fails), clean's two.
    code, report = run_json(
        capsys, repo, "r1", "--hosts", "local,clean", "--repeat", "2", "--jobs", "1"
    )
    assert code == 0, report["exit_bits"]
    assert all(g["status"] == "PASS" for g in report["gates"])
    assert [b["interpretation"] for b in report["boxes"]] == ["ok", "ok"]
    local, clean = report["repeats"]["boxes"]
    assert (local["run_ids"], local["evaluated"]) == (["r1", "r1.r2"], 2)
    assert local["differing"] == [{"item": NODEID, "outcomes": ["passed", "failed"]}]
    assert (clean["differing"], clean["not_evaluated"]) == ([], [])
    assert "frozen_reruns" not in report
    folder = repo / ".charpin" / "runs" / "r1"
    assert json.loads((folder / "drift.json").read_text()) == report
    record = json.loads((folder / "local" / "receipt.json").read_text())
    repeat = json.loads((folder / "local" / "repeats" / "2" / "receipt.json").read_text())
    assert (record["run_id"], record["outcomes"][NODEID]) == ("r1", "passed")
    assert (repeat["run_id"], repeat["outcomes"][NODEID]) == ("r1.r2", "failed")
    markdown = (folder / "drift.md").read_text()
    assert "### Repeats" in markdown and "| `tests/test_sched.py::test_scheduled` |" in markdown

    # The next night against the last: each box against its receipt of record, not a repeat.
    code, second = run_json(capsys, repo, "r2", "--hosts", "local,clean", "--against", "last")
    assert code == 0
    for entry in second["since"]["boxes"]:
        assert (entry["reference"], entry["changed"], entry["new_failures"]) == ("r1", False, [])
    assert "repeats" not in second

    # The history holds the repeat beside the record, and rebuilds the same from the folders.
    show = cli_json(capsys, "history", "show", "r1", "--repo", str(repo))
    (rep,) = show["boxes"][0]["repeats"]
    assert (rep["run_id"], rep["failing"], rep["differs"]) == ("r1.r2", [NODEID], [NODEID])
    assert show["boxes"][0]["failing"] == [] and show["boxes"][0]["clean"] is True


def test_a_test_failing_every_third_execution_over_nine_repeats_is_suggested(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = scheduled_repo(tmp_path, "n % 3 == 0")
    code, report = run_json(capsys, repo, "night", "--hosts", "local", "--repeat", "9")
    assert code == 16  # one box is vacuous; its record passed, the repeats never gate
    (local,) = report["repeats"]["boxes"]
    (row,) = local["differing"]
    assert row["outcomes"] == ["passed", "passed", "failed"] * 3
    assert (tmp_path / "counter").read_text() == "9"
    history = ["--repo", str(repo)]
    found = cli_json(capsys, "ledger", "suggest", *history)
    (candidate,) = found["candidates"]
    (group,) = candidate["groups"]
    assert candidate["nodeid"] == NODEID and group["box"] == "local"
    assert group["failed"] == ["night.r3", "night.r6", "night.r9"]
    assert group["passed"] == ["night", "night.r2", "night.r4", "night.r5", "night.r7", "night.r8"]
    assert (group["rate"]["failures"], group["rate"]["runs"]) == (3, 9)
    capsys.readouterr()
    assert main(["ledger", "suggest", *history]) == 0
    text = capsys.readouterr().out
    bound = flaky.percent(flaky.binomial_upper(3, 9))
    assert f"3 failures in 9 runs (observed 33.3 %; failure rate < {bound} at 95 %" in text
    assert "3 failures in 9 runs on box local" in text  # the proposed entry's reason

    show = cli_json(capsys, "history", "show", "night", *history)
    db = repo / ".charpin" / "history.sqlite"
    db.unlink()
    capsys.readouterr()
    assert main(["history", "rebuild", *history]) == 0
    assert cli_json(capsys, "ledger", "suggest", *history) == found
    assert cli_json(capsys, "history", "show", "night", *history) == show


def test_repeat_count_and_reserved_run_ids_are_usage_errors(
    git_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv, words in (
        (["--repeat", "0"], "--repeat 0 must be between 1 and 20"),
        (["--repeat", "21"], "--repeat 21 must be between 1 and 20"),
        (["--run-id", "night.r2"], "reserved for --repeat"),
        (["--run-id", "x" * 126, "--repeat", "20"], "too long for --repeat 20"),
    ):
        capsys.readouterr()
        code = main(["run", "--repo", str(git_repo), "-q", *argv])
        out, err = capsys.readouterr()
        assert code == 64 and out == ""
        (line,) = err.splitlines()
        assert words in line
    assert not (git_repo / ".charpin" / "runs").exists()


def test_repeat_one_is_the_run_it_always_was_and_keep_keeps_every_repeat(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = scheduled_repo(tmp_path, "False")
    code, once = run_json(capsys, repo, "one", "--hosts", "local", "--repeat", "1")
    code_plain, plain = run_json(capsys, repo, "plain", "--hosts", "local")
    assert code == code_plain == 16
    assert "repeats" not in once and "frozen_reruns" not in once
    assert once.keys() == plain.keys()
    runs = repo / ".charpin" / "runs"
    assert sorted(p.name for p in (runs / "one" / "local").iterdir()) == sorted(
        p.name for p in (runs / "plain" / "local").iterdir()
    )
    assert not (runs / "one" / "local" / "repeats").exists()
    # --keep leaves each repeat's folder on the box: each under its own run id.
    code, kept = run_json(capsys, repo, "k", "--hosts", "clean", "--repeat", "3", "--keep")
    assert code == 16 and kept["repeats"]["boxes"][0]["evaluated"] == 3
    box_runs = tmp_path / "xdg-cache" / "charpin" / "clean-box" / ".cache" / "charpin" / "runs"
    assert sorted(p.name for p in box_runs.iterdir()) == ["k", "k.r2", "k.r3"]


def test_frozen_tests_re_run_ten_times_clean_are_unfreeze_candidates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = {
        "version": 1,
        "entries": [
            {"id": RELAY, "reason": "needs the relay", "owner": "ops", "expires": "2099-01-01"}
        ],
    }
    repo = scheduled_repo(
        tmp_path,
        "False",
        **{
            "tests/test_mail.py": "def test_relay():\n    pass\n",
            "flake-ledger.json": json.dumps(ledger),
        },
    )
    code, report = run_json(
        capsys, repo, "f1", "--hosts", "local", "--repeat", "10", "--include-frozen"
    )
    assert code == 16  # vacuous (one box) and nothing else: the side runs never gate
    sides = report["frozen_reruns"]["boxes"]
    assert [(s["repeat"], s["clean"], s["outcomes"]) for s in sides] == [
        (k, True, {RELAY: "passed"}) for k in range(1, 11)
    ]
    receipt = json.loads((repo / ".charpin/runs/f1/local/receipt.json").read_text())
    assert RELAY not in receipt["outcomes"]  # the gated run still deselects it
    capsys.readouterr()
    assert main(["ledger", "review", "--repo", str(repo)]) == 0
    text = capsys.readouterr().out
    assert (
        f"{RELAY}  ran clean 10 times in a row when re-run: consider unfreezing; "
        "0 failures in 10 runs: failure rate < 25.9 % at 95 %" in text
    )
    timeline = cli_json(capsys, "history", "test", RELAY, "--repo", str(repo))
    (points,) = [b["points"] for b in timeline["boxes"]]
    # The gated run deselected it (its side run shows that): "frozen", once for the run.
    assert [(p["repeat"], p["source"], p["outcome"]) for p in points] == [(1, "run", "frozen")] + [
        (k, "frozen-rerun", "passed") for k in range(1, 11)
    ]


SLOW_SECOND = """\
import os, pathlib, time

def test_slow_on_the_second_execution():
    counter = pathlib.Path(os.environ["{var}"])
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    if n == 2:
        pathlib.Path(os.environ["{var}"] + ".waiting").write_text("")
        time.sleep(60)
"""


def test_ctrl_c_during_a_repeat_is_said_in_the_report_and_is_no_flake(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {
            "tests/__init__.py": "",
            "tests/test_slow.py": SLOW_SECOND.format(var=COUNTER),
            # The tests' environment is an allow-list (rule 6): the counter is named to reach them.
            "pyproject.toml": f'[tool.charpin]\nenv_allow = ["{COUNTER}"]\n',
        },
    )
    counter = Path(tmp_path / "counter")
    env = dict(os.environ, PYTHONPATH=RUNNER_PATH)
    env[COUNTER] = str(counter)
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "charpin_coordinator", "run", "--repo", str(repo)),
            *("--hosts", "local", "--repeat", "3", "--run-id", "r1", "-q", "--sandbox", "off"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    waiting = Path(str(counter) + ".waiting")
    deadline = time.monotonic() + 90
    while not waiting.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert waiting.exists(), proc.communicate(timeout=60)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=90)
    report = json.loads((repo / ".charpin" / "runs" / "r1" / "drift.json").read_text())
    # The report left behind says what the process exit says.
    assert proc.returncode == report["exit_code"] and report["exit_code"] & 4, err
    (entry,) = report["repeats"]["boxes"]
    # Repeat 2 was stopped mid-test and repeat 3 never ran: misses, not a flip.
    assert entry["differing"] == [] and entry["evaluated"] == 1
    assert [m["repeat"] for m in entry["not_evaluated"]] == [2, 3]
