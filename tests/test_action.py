"""action.yml's own script, run for real: the step that runs `charpin-remote run` or `verify` is
taken out of the action and run with bash as GitHub runs it (`bash --noprofile --norc -eo
pipefail`), with this venv's Python, on the demo's repository. What GitHub itself provides (the
event's commits, GITHUB_OUTPUT) is given as the runner would give it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]
from charpin_coordinator.remote.demo import build_demo_repo
from charpin_coordinator.remote.demo_cli import AGENT_PATCH_NEW, AGENT_PATCH_OLD

from tests.conftest import git

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def _step(step_id: str) -> str:
    action = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
    [step] = [s for s in action["runs"]["steps"] if s.get("id") == step_id]
    script: str = step["run"]
    return script


def _run_step(repo: Path, tmp_path: Path, **env: str) -> tuple[dict[str, str], str]:
    out = tmp_path / "github-output"
    out.write_text("")
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", _step("charpin")],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={
            **os.environ,
            "PYTHON": sys.executable,
            "PYTHONPATH": f"{ROOT / 'runner'}:{ROOT / 'coordinator'}",
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "OUT": str(tmp_path / "charpin-action"),
            "GITHUB_OUTPUT": str(out),
            "HOSTS": "",
            "ARGS": "",
            "BASE_SHA": "",
            "HEAD_SHA": "",
            **env,
        },
    )
    assert done.returncode == 0, done.stderr  # the step itself never fails; the last one does
    outputs = dict(line.split("=", 1) for line in out.read_text().splitlines() if line)
    return outputs, done.stdout + done.stderr


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return build_demo_repo(tmp_path / "invoice-export", stale=False).path


def test_run_writes_the_report_and_says_the_exit_code(repo: Path, tmp_path: Path) -> None:
    outputs, log = _run_step(repo, tmp_path, COMMAND="run", ARGS="--include-frozen --jobs 2")
    assert outputs["exit-code"] == "0", log
    report = Path(outputs["report"])
    assert report == tmp_path / "charpin-action" / "report.md"
    assert "charpin drift" in report.read_text()
    assert (tmp_path / "charpin-action" / "report.xml").is_file()
    assert list((tmp_path / "charpin-action" / "runs").iterdir())  # the run folder, for upload
    assert not (repo / ".charpin" / "runs").exists()  # nothing left in the checkout


def test_verify_judges_the_pull_requests_head_against_its_base(
    repo: Path, tmp_path: Path
) -> None:
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "agent")
    code = repo / "export_invoices.py"
    code.write_text(code.read_text().replace(AGENT_PATCH_OLD, AGENT_PATCH_NEW, 1))
    git(repo, "commit", "-qam", "round the way the bank does")
    head = git(repo, "rev-parse", "HEAD")
    outputs, log = _run_step(repo, tmp_path, COMMAND="verify", BASE_SHA=base, HEAD_SHA=head)
    assert int(outputs["exit-code"]) & 2, log  # REJECT: a cent moved
    assert "REJECT" in Path(outputs["report"]).read_text()
    assert (tmp_path / "charpin-action" / "evidence.tar").is_file()


def test_verify_outside_a_pull_request_and_a_bad_command_are_usage_errors(
    repo: Path, tmp_path: Path
) -> None:
    outputs, log = _run_step(repo, tmp_path, COMMAND="verify")
    assert outputs["exit-code"] == "64"
    assert "::error::charpin-remote verify needs a pull_request event" in log
    outputs, log = _run_step(repo, tmp_path, COMMAND="deploy")
    assert outputs["exit-code"] == "64" and "::error::command must be run or verify" in log
