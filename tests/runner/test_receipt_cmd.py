"""`charpin receipt` end to end: a real subprocess in a real repository with the real plugin."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, make_repo

RUNNER = Path(__file__).resolve().parents[2] / "runner"
VAT = "tests/test_rates.py::test_vat"


def charpin_env(**extra: str) -> dict[str, str]:
    """The environment for a charpin subprocess: ours, minus the outer pytest's own variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env["PYTHONPATH"] = str(RUNNER)
    env.update(extra)
    return env


def charpin(
    repo: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run `python -m charpin_runner receipt ARGS` with cwd repo."""
    return subprocess.run(
        [sys.executable, "-m", "charpin_runner", "receipt", *args],
        cwd=repo,
        env=env or charpin_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def only_receipt(repo: Path) -> dict[str, Any]:
    """The single receipt under repo/.charpin/receipts, decoded."""
    found = sorted((repo / ".charpin" / "receipts").glob("*.json"))
    assert len(found) == 1, found
    data: dict[str, Any] = json.loads(found[0].read_text())
    return data


def add_test(repo: Path, name: str, body: str) -> None:
    """Commit one more test file so the tree stays clean."""
    (repo / "tests" / name).write_text(body)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"add {name}")


def test_passing_run_writes_a_receipt_and_a_five_line_summary(git_repo: Path) -> None:
    result = charpin(git_repo, "--run-id", "r-pass", "--label", "laptop")
    assert result.returncode == 0, result.stderr
    receipt = only_receipt(git_repo)
    head = git(git_repo, "rev-parse", "HEAD")
    assert receipt["run_id"] == "r-pass" and receipt["label"] == "laptop"
    assert receipt["identity"]["head_before"] == receipt["identity"]["head_after"] == head
    assert receipt["identity"]["tree_before"] == git(git_repo, "rev-parse", "HEAD^{tree}")
    assert receipt["tree"]["dirty_before"] == receipt["tree"]["written"] == []
    assert receipt["collection"]["executed"] == receipt["collection"]["selected"] == [VAT]
    assert receipt["outcomes"] == {VAT: "passed"}
    assert receipt["exit"] == {
        "status": 0,
        "interpretation": "ok",
        "reasons": [],
        "pytest_status": 0,
    }
    assert [f["path"] for f in receipt["fixtures"]["after"]] == ["tests/fixtures/rates.json"]
    lines = result.stdout.splitlines()[-5:]
    assert lines == [
        f"charpin receipt r-pass · label laptop · commit {head[:7]} · 0 dirty paths",
        "tests     collected 1 · ledger-deselected 0 · selected 1 · executed 1",
        "outcomes  1 passed",
        "fixtures  tests/fixtures: 1 file · unchanged",
        "exit      0 → ok · receipt .charpin/receipts/r-pass.json",
    ]
    # The receipt folder ignores itself, so the tree is still clean for git.
    assert git(git_repo, "status", "--porcelain") == ""


def test_failing_run_exits_1(git_repo: Path) -> None:
    add_test(git_repo, "test_bad.py", "def test_bad():\n    assert 1 == 2\n")
    result = charpin(git_repo, "-q")
    assert result.returncode == 1, result.stderr
    assert "charpin receipt" not in result.stdout  # -q: no summary
    receipt = only_receipt(git_repo)
    assert receipt["outcomes"] == {VAT: "passed", "tests/test_bad.py::test_bad": "failed"}
    assert receipt["exit"]["interpretation"] == "failed"


def test_arguments_after_double_dash_go_to_pytest(git_repo: Path) -> None:
    add_test(git_repo, "test_more.py", "def test_one():\n    pass\ndef test_two():\n    pass\n")
    result = charpin(git_repo, "--", "-k", "test_two or test_vat")
    assert result.returncode == 0, result.stderr
    collection = only_receipt(git_repo)["collection"]
    assert collection["executed"] == ["tests/test_more.py::test_two", VAT]
    assert collection["filtered"] == ["tests/test_more.py::test_one"]
    assert "-k" in only_receipt(git_repo)["command"]


def test_existing_output_is_refused_before_anything_runs(git_repo: Path) -> None:
    target = git_repo / "old.json"
    target.write_text("keep me")
    result = charpin(git_repo, "-o", str(target))
    assert result.returncode == 64
    assert str(target) in result.stderr and "never overwritten" in result.stderr
    assert target.read_text() == "keep me"
    assert "test session starts" not in result.stdout


def test_bad_config_value_is_one_line_with_its_path(git_repo: Path) -> None:
    (git_repo / "pyproject.toml").write_text('[tool.charpin]\nwatch = "tests/fixtures"\n')
    result = charpin(git_repo)
    assert result.returncode == 64
    assert result.stderr.count("\n") == 1, result.stderr
    assert "$.tool.charpin.watch" in result.stderr
    assert "Traceback" not in result.stderr


def test_watch_root_outside_the_repository_is_a_config_error(git_repo: Path) -> None:
    (git_repo / "pyproject.toml").write_text('[tool.charpin]\nwatch = ["../elsewhere"]\n')
    result = charpin(git_repo)
    assert result.returncode == 64
    assert "'../elsewhere'" in result.stderr


def test_not_a_git_repository_is_a_usage_error(tmp_path: Path) -> None:
    folder = tmp_path / "plain folder"
    folder.mkdir()
    result = charpin(folder)
    assert result.returncode == 64
    assert "plain folder is not inside a git repository" in result.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--run-id", "../escape"], "--run-id"),
        (["--timeout", "soon"], "--timeout"),
        (["--today", "30/11/2026"], "--today"),
        (["--snapshot-sha256", "abc"], "--snapshot-sha256"),
        (["--host-key-fingerprint", "SHA256:a b\nc"], "--host-key-fingerprint"),
        (["--timeout", "-1"], "--timeout"),
    ],
)
def test_bad_flags_are_usage_errors(git_repo: Path, flags: list[str], message: str) -> None:
    result = charpin(git_repo, *flags)
    assert result.returncode == 64
    assert message in result.stderr and "Traceback" not in result.stderr


def test_config_json_flags_and_outputs_are_recorded(git_repo: Path, tmp_path: Path) -> None:
    (git_repo / "data").mkdir()
    (git_repo / "data" / "golden.txt").write_text("gold\n")
    settings = tmp_path / "config.json"
    settings.write_text(json.dumps({"watch": ["data"], "outputs": ["out"], "env_allow": ["X_OK"]}))
    (git_repo / "tests" / "test_writes.py").write_text(
        "import pathlib\ndef test_writes():\n"
        "    pathlib.Path('out').mkdir(exist_ok=True)\n"
        "    pathlib.Path('out/report.txt').write_text('r')\n"
    )
    head = git(git_repo, "rev-parse", "HEAD")
    out = tmp_path / "receipts" / "box.json"
    result = charpin(
        git_repo,
        "--config-json",
        str(settings),
        "-o",
        str(out),
        "--expected-commit",
        head,
        "--snapshot-sha256",
        "a" * 64,
        "--host-key-fingerprint",
        "SHA256:abc",
        "--host-key-accepted-new",
        "--no-pins",
        env=charpin_env(X_OK="shown"),
    )
    assert result.returncode == 0, result.stderr
    receipt = json.loads(out.read_text())
    assert receipt["fixtures"]["roots"] == ["data"]
    assert receipt["tree"]["outputs"] == ["out"]
    assert receipt["tree"]["dirty_before"] == ["data/golden.txt", "tests/test_writes.py"]
    assert receipt["tree"]["written"] == ["out/report.txt"]
    assert receipt["identity"]["expected_commit"] == head
    assert receipt["identity"]["snapshot_sha256"] == "a" * 64
    assert receipt["environment"]["host_key_fingerprint"] == "SHA256:abc"
    assert receipt["environment"]["host_key_accepted_new"] is True
    assert receipt["environment"]["variables"]["X_OK"] == "shown"
    assert receipt["pins"] == {"source": None, "replayed": False, "results": []}
    assert "· 2 dirty paths" in result.stdout


def test_explicit_ledger_that_does_not_exist_is_refused(git_repo: Path) -> None:
    (git_repo / "pyproject.toml").write_text('[tool.charpin]\nledger = "quarantine.json"\n')
    result = charpin(git_repo)
    assert result.returncode == 64
    assert "quarantine.json" in result.stderr


def test_conftest_is_hashed_by_the_parent(tmp_path: Path) -> None:
    conftest = "import pytest\n"
    repo = make_repo(
        tmp_path / "r",
        {"tests/conftest.py": conftest, "tests/test_a.py": "def test_a():\n    pass\n"},
    )
    assert charpin(repo).returncode == 0
    environment = only_receipt(repo)["environment"]
    expected = hashlib.sha256(conftest.encode()).hexdigest()
    assert environment["conftest_sha256"] == {"tests/conftest.py": expected}


def test_no_selected_tests_exit_16(git_repo: Path) -> None:
    result = charpin(git_repo, "--", "-k", "matches_nothing")
    assert result.returncode == 16, result.stderr
    assert only_receipt(git_repo)["exit"]["interpretation"] == "no-tests"
    assert "5 → no-tests" in result.stdout


def test_a_test_command_that_cannot_start_exits_4(git_repo: Path, tmp_path: Path) -> None:
    settings = tmp_path / "config.json"
    settings.write_text(json.dumps({"test_command": [str(tmp_path / "no-such-python")]}))
    result = charpin(git_repo, "--config-json", str(settings))
    assert result.returncode == 4
    assert "no-such-python" in result.stderr and result.stderr.count("\n") == 1


def test_a_repository_without_commits_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "empty"
    repo.mkdir()
    git(repo, "init", "-q")
    result = charpin(repo)
    assert result.returncode == 64
    assert "has no commit" in result.stderr
