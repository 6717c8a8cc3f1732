"""The guard under the real pre-commit framework: the manifest is valid, a commit checks the
staged change, and CI's `pre-commit run --from-ref A --to-ref B` checks each commit of A..B
(PRE_COMMIT_FROM_REF/PRE_COMMIT_TO_REF), so a commit mixing pins and code cannot pass there.

The hook runs as `repo: local` with `language: system` and the manifest's own entry (its program
made this venv's), so nothing is installed from an index; the framework, its variables and its
verdict are real."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]
from charpin_runner.cli import main

from tests.conftest import git, make_repo

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / ".pre-commit-hooks.yaml"
PYPROJECT = '[tool.charpin]\nledger = "flake-ledger.json"\n'
PRE_COMMIT = shutil.which("pre-commit", path=str(Path(sys.executable).parent)) or shutil.which(
    "pre-commit"
)
pytestmark = pytest.mark.skipif(PRE_COMMIT is None, reason="pre-commit is not installed")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "shop",
        {"pyproject.toml": PYPROJECT, "app.py": "print('v1')\n", "pins.jsonl": "{}\n"},
    )


def _commit(repo: Path, message: str, files: dict[str, str]) -> str:
    for rel, text in files.items():
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def _hook() -> dict[str, object]:
    [hook] = yaml.safe_load(MANIFEST.read_text())
    assert isinstance(hook, dict)
    return hook


def _pre_commit(repo: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`pre-commit run` in repo with the manifest's hook as a local system hook."""
    hook = dict(_hook())
    program, rest = str(hook["entry"]).split(" ", 1)
    assert program == "charpin"
    hook["entry"] = f"{Path(sys.executable).parent / 'charpin'} {rest}"
    hook["language"] = "system"
    config = tmp_path / "pre-commit-config.yaml"
    config.write_text(yaml.safe_dump({"repos": [{"repo": "local", "hooks": [hook]}]}))
    assert PRE_COMMIT is not None
    return subprocess.run(
        [PRE_COMMIT, "run", "-c", str(config), "--hook-stage", "manual", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")},
    )


def test_the_manifest_is_valid_for_the_framework() -> None:
    assert PRE_COMMIT is not None
    done = subprocess.run(
        [PRE_COMMIT, "validate-manifest", str(MANIFEST)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    hook = _hook()
    assert hook["entry"] == "charpin guard --pre-commit"
    assert hook["minimum_pre_commit_version"] == "3.2.0"  # the first with stage `pre-commit`
    assert set(hook["stages"]) >= {"pre-commit", "pre-push", "manual"}  # type: ignore[arg-type]


def test_ci_mode_refuses_a_commit_of_the_range_that_mixes_pins_and_code(
    repo: Path, tmp_path: Path
) -> None:
    base = git(repo, "rev-parse", "HEAD")
    _commit(repo, "docs", {"README.md": "shop\n"})
    mixed = _commit(repo, "pins and code", {"app.py": "print('v2')\n", "pins.jsonl": "{ }\n"})
    # Nothing is staged: a staged-only hook would pass this range.
    done = _pre_commit(repo, tmp_path, "--from-ref", base, "--to-ref", "HEAD")
    assert done.returncode == 1, done.stdout
    assert "Failed" in done.stdout
    assert f"charpin guard: refused commit {mixed[:12]} 'pins and code'" in done.stdout
    assert f"refused 1 of 2 commits in {base}..HEAD" in done.stdout, done.stdout


def test_ci_mode_passes_pins_and_code_in_separate_commits(repo: Path, tmp_path: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    _commit(repo, "code", {"app.py": "print('v2')\n"})
    _commit(repo, "pins", {"pins.jsonl": "{ }\n"})
    done = _pre_commit(repo, tmp_path, "--from-ref", base, "--to-ref", "HEAD")
    assert done.returncode == 0, done.stdout
    assert "Passed" in done.stdout


def test_commit_mode_checks_the_staged_change(repo: Path, tmp_path: Path) -> None:
    (repo / "app.py").write_text("print('v2')\n")
    (repo / "pins.jsonl").write_text("{ }\n")
    git(repo, "add", "-A")
    done = _pre_commit(repo, tmp_path)
    assert done.returncode == 1, done.stdout
    assert "charpin guard: refused the staged change" in done.stdout


def test_one_ref_without_the_other_is_a_usage_error(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PRE_COMMIT_FROM_REF", "HEAD")
    monkeypatch.delenv("PRE_COMMIT_TO_REF", raising=False)
    assert main(["guard", "--pre-commit", "--repo", str(repo)]) == 64
    [line] = capsys.readouterr().err.splitlines()
    assert "PRE_COMMIT_FROM_REF and PRE_COMMIT_TO_REF come together" in line


def test_json_lists_every_verdict(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = git(repo, "rev-parse", "HEAD")
    _commit(repo, "code", {"app.py": "print('v2')\n"})
    mixed = _commit(repo, "both", {"app.py": "print('v3')\n", "pins.jsonl": "{ }\n"})
    code = main(["guard", "--range", f"{base}..HEAD", "--json", "--repo", str(repo)])
    out = capsys.readouterr()
    assert code == 2 and out.err == ""
    doc = json.loads(out.out)
    assert (doc["refused"], doc["checked"], doc["exit_code"]) == (1, 2, 2)
    assert [v["refused"] for v in doc["verdicts"]] == [False, True]
    assert doc["verdicts"][1]["label"].startswith(f"commit {mixed[:12]}")
    assert doc["verdicts"][1]["protected"] == ["pins.jsonl"]
    assert doc["verdicts"][1]["code"] == ["app.py"]
