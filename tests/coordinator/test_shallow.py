"""A shallow clone (what actions/checkout makes: depth 1) runs and verifies like any other
(#20 item 4): the box gets the commit and the clone's shallow boundary, never a bundle whose
parents it lacks, and its checkout has exactly the history the clone has."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from charpin_coordinator.cli import main

from tests.conftest import git, make_repo

pytestmark = pytest.mark.slow

# A test that reads the checkout's own git: the clean box must look like this clone.
HISTORY_TEST = """
import subprocess


def test_the_history_is_the_clones():
    count = subprocess.run(["git", "rev-list", "--count", "HEAD"], capture_output=True,
                           text=True, check=True).stdout.strip()
    assert count == {count!r}
"""


def _test_file(text: str) -> dict[str, str]:
    return {"tests/test_calc.py": text}


CALC_TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def _shallow(tmp_path: Path, depth: int, test: str, commits: int = 3) -> Path:
    origin = make_repo(
        tmp_path / "origin",
        {
            "tests/__init__.py": "",
            "calc.py": "def add(a, b):\n    return a + b\n",
            **_test_file(test),
        },
    )
    for n in range(commits - 1):
        (origin / "notes.txt").write_text(f"change {n}\n")
        git(origin, "add", "-A")
        git(origin, "commit", "-qm", f"change {n}")
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "-q", f"--depth={depth}", origin.as_uri(), str(clone)], check=True
    )
    assert git(clone, "rev-parse", "--is-shallow-repository") == "true"
    return clone


def _run(repo: Path, run_id: str) -> tuple[int, dict[str, object]]:
    out = repo.parent / "runs"
    code = main(
        ["run", "--repo", str(repo), "--hosts", "clean", "--out", str(out), "--run-id", run_id,
         "--json", "-q", "--timeout", "120"]
    )  # fmt: skip
    return code, json.loads((out / run_id / "drift.json").read_text())


@pytest.mark.parametrize("depth", [1, 2])
def test_a_shallow_clone_runs_on_clean_with_the_clones_history(tmp_path: Path, depth: int) -> None:
    clone = _shallow(tmp_path, depth, HISTORY_TEST.format(count=str(depth)))
    code, report = _run(clone, "r1")
    assert report["not_evaluated"] == [], report["not_evaluated"]
    [box] = report["boxes"]  # type: ignore[misc]
    assert box["interpretation"] == "ok" and box["failing"] == [], box
    assert box["commit"] == git(clone, "rev-parse", "HEAD")
    assert code == 16  # one box: vacuous, and nothing else
    # A commit on top of the shallow clone ships incrementally into the same cache repository.
    (clone / "notes.txt").write_text("on top\n")
    (clone / "tests" / "test_calc.py").write_text(HISTORY_TEST.format(count=str(depth + 1)))
    git(clone, "commit", "-qam", "on top")
    code, report = _run(clone, "r2")
    assert report["not_evaluated"] == [], report["not_evaluated"]
    assert report["boxes"][0]["interpretation"] == "ok", report["boxes"]  # type: ignore[index]


def test_a_patch_on_a_shallow_clone_is_verified(tmp_path: Path) -> None:
    clone = _shallow(tmp_path, 1, CALC_TEST)
    (clone / "calc.py").write_text("def add(a, b):\n    total = a + b\n    return total\n")
    patch = clone.parent / "agent.diff"
    patch.write_bytes(
        subprocess.run(["git", "-C", str(clone), "diff"], capture_output=True, check=True).stdout
    )
    git(clone, "checkout", "-q", "--", "calc.py")
    out = clone.parent / "verify"
    code = main(
        ["verify", "--repo", str(clone), "--patch", str(patch), "--hosts", "clean", "--out",
         str(out), "--run-id", "v1", "--json", "-q", "--timeout", "120"]
    )  # fmt: skip
    report = json.loads((out / "v1" / "verify.json").read_text())
    assert report["not_evaluated"] == [], report["not_evaluated"]
    assert report["verdict"] == "ACCEPT", [g for g in report["gates"] if g["status"] != "PASS"]
    assert code == 0
