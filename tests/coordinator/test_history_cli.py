"""The run history end to end: real `charpin-remote run --hosts local,clean`, `compare --record`
and `verify` add their runs; the queries answer from them; `history rebuild` of the folders they
left answers the same; a corrupt database stops a run before anything runs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.history import store
from charpin_coordinator.remote.demo import build_demo_repo

from tests.conftest import git

RUNNER_PATH = str(Path(__file__).resolve().parents[2] / "runner")
TEST = "tests/test_rates.py::test_vat"

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", RUNNER_PATH)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def run(repo: Path, run_id: str, *extra: str) -> int:
    return main(["run", "--repo", str(repo), "--run-id", run_id, "-q", "--json", *extra])


def query(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    capsys.readouterr()
    code = main(["history", *argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def everything(capsys: pytest.CaptureFixture[str], repo: Path, runs: list[str]) -> dict[str, Any]:
    r = ["--repo", str(repo)]
    return {
        "recent": query(capsys, *r),
        "show": [query(capsys, "show", run_id, *r) for run_id in runs],
        "test": query(capsys, "test", TEST, *r),
        "boxes": [query(capsys, "box", name, *r) for name in ("local", "clean")],
    }


def test_runs_and_a_recorded_compare_are_history_and_a_rebuild_agrees(
    git_repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = git_repo / ".charpin" / "history.sqlite"
    assert run(git_repo, "r1") == 0
    assert db.is_file()
    (git_repo / "tests/fixtures/rates.json").write_text('{"vat": "0.21"}\n')  # stale on local
    assert run(git_repo, "r2") & 1
    (git_repo / "tests/fixtures/rates.json").write_text('{"vat": "0.20"}\n')
    runs = git_repo / ".charpin" / "runs"
    monkeypatch.chdir(git_repo)
    receipts = [str(runs / r / "clean" / "receipt.json") for r in ("r1", "r2")]
    assert main(["compare", "--record", "--json", *receipts]) == 0
    capsys.readouterr()
    [kept] = [p for p in runs.iterdir() if p.name not in ("r1", "r2")]
    assert (kept / "compare.json").is_file()
    assert len(list(kept.glob("*/receipt.json"))) == 2  # labels clean and clean#2

    recent = query(capsys, "--repo", str(git_repo))
    assert {(r["run_id"], r["kind"]) for r in recent} == {
        (kept.name, "compare"),
        ("r2", "run"),
        ("r1", "run"),
    }
    compared = next(r for r in recent if r["kind"] == "compare")
    assert [b["box"] for b in compared["boxes"]] == ["clean", "clean#2"]
    r1 = next(r for r in recent if r["run_id"] == "r1")
    commit = git(git_repo, "rev-parse", "HEAD")
    assert r1["commit"] == commit and r1["exit_code"] == 0
    assert [(b["box"], b["status"], b["clean"]) for b in r1["boxes"]] == [
        ("local", "ok", True),
        ("clean", "ok", True),
    ]
    r2 = query(capsys, "show", "r2", "--repo", str(git_repo))
    local = r2["boxes"][0]
    assert (local["box"], local["interpretation"], local["failing"]) == ("local", "failed", [TEST])
    gates = {g["gate"]: g["status"] for g in local["gates"]}
    assert gates["Fixture integrity"] == "FAIL" and gates["Clean tree"] == "FAIL"
    timeline = query(capsys, "test", TEST, "--repo", str(git_repo))
    by_box = {
        b["box"]: [(p["run_id"], p["outcome"]) for p in b["points"]] for b in timeline["boxes"]
    }
    assert by_box["local"] == [("r2", "failed"), ("r1", "passed")]
    assert all(p["commit"] == commit for b in timeline["boxes"] for p in b["points"])

    before = everything(capsys, git_repo, ["r1", "r2", kept.name])
    for path in [db, *store.side_files(db)]:
        path.unlink(missing_ok=True)
    assert main(["history", "rebuild", "--repo", str(git_repo)]) == 0  # .charpin/runs by default
    assert everything(capsys, git_repo, ["r1", "r2", kept.name]) == before


def test_a_corrupt_history_stops_a_run_before_anything_runs(
    git_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = git_repo / ".charpin" / "history.sqlite"
    db.parent.mkdir()
    db.write_bytes(b"\x00garbage" * 64)
    assert run(git_repo, "r1") == 8
    [line] = capsys.readouterr().err.splitlines()
    assert "is not a SQLite database" in line and "charpin-remote history rebuild" in line
    assert not (git_repo / ".charpin" / "runs").exists()
    assert db.read_bytes() == b"\x00garbage" * 64
    # A run id the history already holds (from another folder) is refused before running too.
    db.unlink()
    out = git_repo.parent / "elsewhere"
    assert run(git_repo, "r1", "--hosts", "clean") == 16
    assert main(["run", "--repo", str(git_repo), "--run-id", "r1", "--out", str(out)]) == 64
    assert "already in the history" in capsys.readouterr().err and not out.exists()


def test_verify_adds_both_runs_and_prune_keeps_the_base_a_kept_verify_reused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    repo = build_demo_repo(tmp_path / "invoice-export", stale=False).path
    code = repo / "export_invoices.py"
    text = code.read_text()
    assert '"; row skipped"' in text
    code.write_text(text.replace('"; row skipped"', '" (row skipped)"', 1))
    patch = tmp_path / "agent.diff"
    diff = subprocess.run(
        ["git", "-C", str(repo), "diff", "--binary"], capture_output=True, check=True
    )
    patch.write_bytes(diff.stdout)
    git(repo, "checkout", "--", ".")
    argv = ["verify", "--repo", str(repo), "--patch", str(patch), "--json", "--sandbox", "off"]
    assert main([*argv, "--run-id", "v0"]) & 2  # REJECT: stderr wording is behaviour
    assert main([*argv, "--run-id", "v1", "--reuse-base"]) & 2
    capsys.readouterr()
    h = ["--repo", str(repo)]
    recent = {r["run_id"]: r for r in query(capsys, *h)}
    assert set(recent) == {"v0/base", "v0/patched", "v1/patched"}  # v1 reused v0's base
    assert recent["v0/patched"]["verdict"] == "REJECT" and recent["v0/base"]["verdict"] is None
    # A verify's base is one box, never compared across boxes: listed as a base, not vacuous.
    assert main(["history", *h]) == 0
    rows = {line.split()[2]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "vacuous" not in rows["v0/base"] and " base " in rows["v0/base"], rows["v0/base"]
    assert " REJECT " in rows["v0/patched"]
    assert "vacuous" in str(recent["v0/base"]["bits"])  # the exit code itself is unchanged
    patched = query(capsys, "show", "v1/patched", *h)
    assert patched["needs"] == ["v0/base"] and patched["kind"] == "verify-patched"
    assert patched["boxes"][0]["patch_sha256"]
    assert query(capsys, "show", "v0/patched", *h)["needs"] == ["v0/base"]
    pruned = query(capsys, "prune", "--keep", "1", *h)
    assert pruned["removed"] == ["v0/patched"]
    assert pruned["protected"] == {"v0/base": "needed by v1/patched"}
    # The folders stay: a rebuild brings the pruned run back.
    assert main(["history", "rebuild", *h]) == 0
    assert {r["run_id"] for r in query(capsys, *h)} == set(recent)


@pytest.mark.slow
def test_a_working_tree_config_mid_edit_does_not_stop_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """run reads [tool.charpin] from the commit: an uncommitted, broken edit only warns, and
    the history goes to its default place."""
    repo = build_demo_repo(tmp_path / "invoice-export", stale=False).path
    pyproject = repo / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n[tool.charpin.oops\n")
    code = main(["run", "--repo", str(repo), "--hosts", "local", "--run-id", "w1", "-q", "--json"])
    assert not code & 64 and code != 8, capsys.readouterr().err
    assert (repo / ".charpin" / "history.sqlite").is_file()
