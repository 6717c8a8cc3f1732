"""`.charpin/` ignores itself: after a run, a verify or a receipt with the default folders,
`git status` shows nothing new and `git add -A` would commit nothing of charpin's."""

from __future__ import annotations

from pathlib import Path

import pytest
from charpin_coordinator.cli import main
from charpin_runner.owndir import ensure_folder

from tests.conftest import git, make_repo

RUNNER_PATH = str(Path(__file__).resolve().parents[2] / "runner")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", RUNNER_PATH)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


@pytest.mark.slow
def test_a_run_with_the_default_folder_leaves_git_status_clean(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"tests/test_a.py": "def test_a():\n    pass\n"})
    main(["run", "--repo", str(repo), "--hosts", "clean", "--run-id", "r1", "--json"])
    assert (repo / ".charpin" / "runs" / "r1" / "drift.json").is_file()
    assert git(repo, "status", "--porcelain") == ""
    git(repo, "add", "-A")
    assert git(repo, "diff", "--cached", "--name-only") == ""


def test_an_existing_gitignore_is_never_rewritten(tmp_path: Path) -> None:
    own = tmp_path / ".charpin"
    own.mkdir()
    (own / ".gitignore").write_text("mine\n")
    ensure_folder(tmp_path, own / "runs" / "x")
    assert (own / ".gitignore").read_text() == "mine\n" and (own / "runs" / "x").is_dir()


def test_a_folder_outside_charpins_own_gets_no_gitignore(tmp_path: Path) -> None:
    ensure_folder(tmp_path, tmp_path / "elsewhere")
    assert not (tmp_path / ".charpin").exists() and (tmp_path / "elsewhere").is_dir()
