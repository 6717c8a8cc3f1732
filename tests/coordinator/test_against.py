"""Drift over time, end to end: real `charpin-remote run --hosts local,clean --against ...` on a
small repository; each box against its own earlier receipt in the run folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main

from tests.conftest import git

RUNNER_PATH = str(Path(__file__).resolve().parents[2] / "runner")
TEST = "tests/test_rates.py::test_vat"

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", RUNNER_PATH)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def run_json(
    capsys: pytest.CaptureFixture[str], repo: Path, run_id: str, *extra: str
) -> tuple[int, Any]:
    capsys.readouterr()
    code = main(["run", "--repo", str(repo), "--run-id", run_id, "-q", "--json", *extra])
    out, err = capsys.readouterr()
    assert out, err
    return code, json.loads(out)


def since_box(report: Any, box: str) -> Any:
    return next(b for b in report["since"]["boxes"] if b["box"] == box)


def break_test(repo: Path) -> None:
    path = repo / "tests/test_rates.py"
    path.write_text(path.read_text().replace("'0.20'", "'0.25'"))
    git(repo, "commit", "-q", "-am", "expect another rate")


def test_a_test_that_starts_failing_is_named_since_the_last_run(
    git_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, first = run_json(capsys, git_repo, "r1", "--against", "last")
    assert code == 0
    assert since_box(first, "local") == {
        "box": "local",
        "reference": None,
        "reference_commit": None,
        "summary": "no earlier receipt for this box",
        "changed": False,
        "new_failures": [],
        "likely_cause": None,
        "dimensions": [],
    }
    old = git(git_repo, "rev-parse", "HEAD")
    break_test(git_repo)

    code, second = run_json(capsys, git_repo, "r2", "--against", "last")
    assert code == 1  # tests failed on both boxes alike: no cross-box drift, no gating
    for box in ("local", "clean"):
        entry = since_box(second, box)
        assert entry["reference"] == "r1"
        assert entry["reference_commit"] == old
        assert entry["changed"] is True
        assert entry["new_failures"] == [TEST]
        assert entry["likely_cause"] is None
        outcomes = next(d for d in entry["dimensions"] if d["name"] == "outcomes")
        assert outcomes["summary"] == "1 test(s) differ since then"
        assert outcomes["matrix"] == [
            {"item": TEST, "values": {"before": "passed", "now": "failed"}}
        ]
    assert json.loads((git_repo / ".charpin/runs/r2/drift.json").read_bytes()) == second

    # The text and Markdown reports have the section, naming the test and the reference.
    capsys.readouterr()
    assert main(["run", "--repo", str(git_repo), "--run-id", "r3", "-q", "--against", "r1"]) == 1
    text = capsys.readouterr().out
    assert "since (each box against its own earlier receipt, --against r1; informational)" in text
    assert "  clean: since r1 on this box · commit " in text
    assert f"    new failure: {TEST}" in text
    markdown = (git_repo / ".charpin/runs/r3/drift.md").read_text()
    assert "#### clean: since `r1` on this box" in markdown
    assert f"- new failure: `{TEST}`" in markdown

    # A commit picks its newest earlier run: r1 is the only run of the old commit.
    _, by_commit = run_json(capsys, git_repo, "r4", "--against", old[:10])
    assert since_box(by_commit, "clean")["reference"] == "r1"
    _, by_head = run_json(capsys, git_repo, "r5", "--against", "HEAD")
    assert since_box(by_head, "clean")["reference"] == "r4"
    assert since_box(by_head, "clean")["changed"] is False
    assert since_box(by_head, "clean")["summary"] == "no changes"


def test_an_upgrade_on_the_box_is_named_as_the_likely_cause_and_gates_only_when_asked(
    git_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = run_json(capsys, git_repo, "r1")
    assert code == 0
    # The box was upgraded since r1: say so in r1's stored receipt.
    stored = git_repo / ".charpin/runs/r1/clean/receipt.json"
    receipt = json.loads(stored.read_bytes())
    now_python = receipt["environment"]["python"]
    receipt["environment"]["python"] = "3.9.0"
    receipt["environment"]["plugins"] = [*receipt["environment"]["plugins"], "pytest-old-1.0"]
    stored.write_text(json.dumps(receipt))
    break_test(git_repo)

    code, report = run_json(capsys, git_repo, "r2", "--against", "last")
    assert code == 1  # informational by default
    clean = since_box(report, "clean")
    assert clean["new_failures"] == [TEST]
    assert clean["likely_cause"] == (
        f"Python 3.9.0 → {now_python}; plugin pytest-old-1.0 removed"
        " (coincides with the changes below)"
    )
    assert since_box(report, "local")["likely_cause"] is None
    assert any(d["name"] == "environment" for d in clean["dimensions"])

    code, gated = run_json(capsys, git_repo, "r3", "--gate-against-last")
    assert gated["since"]["against"] == "last" and gated["since"]["gating"] is True
    # r2 already failed the same way: nothing changed since, so no bit 2.
    assert since_box(gated, "clean")["changed"] is False
    assert code == 1

    code, gated = run_json(capsys, git_repo, "r4", "--against", "r1", "--gate-against-last")
    assert code == 1 | 2
    assert "2 changed since the reference run (--gate-against-last)" in gated["exit_bits"]
    assert gated["exit_code"] == 3


def test_a_bad_reference_is_a_usage_error(git_repo: Path) -> None:
    assert main(["run", "--repo", str(git_repo), "-q", "--against", "no-such-thing"]) == 64
