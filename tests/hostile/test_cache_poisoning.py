"""Attack: a test writes a `.pth` file into the environment later runs use (the cached venv of a
box, or on `local` the coordinator's own), so that every later run executes the attacker's code."""

from __future__ import annotations

import json
import site
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git
from tests.hostile.harness import SAY_TOML, host_for, repo_with, require_bwrap, run, said

# The box's fresh venv gets this interpreter's pytest through a .pth file: no network needed.
_OUTER = (
    "import site; open(site.getsitepackages()[0] + '/outer.pth', 'w')"
    f".write({site.getsitepackages()[0]!r})"
)
SETUP = f'[tool.charpin]\nsetup = [{json.dumps(f"python -c {chr(34)}{_OUTER}{chr(34)}")}]\n'
SAID = 'pytest_args = ["-s"]\n'

POISONER = '''
import site, sys
from pathlib import Path


def test_poisons_the_environment():
    evil = Path(site.getsitepackages()[0]) / "zz_evil.pth"
    try:
        evil.write_text("import os; open({marker!r}, 'a').write('ran\\\\n')\\n")
        print("ATTEMPT written " + str(evil), flush=True)
    except OSError as exc:
        print("ATTEMPT refused " + str(exc), flush=True)
'''


def _poison_then_fail(
    kind: str, sandbox: str, sshd_factory: Any, tmp_path: Path
) -> tuple[dict[str, Any], dict[str, Any], str, int, Path]:
    hosts, boxes, ssh_config = host_for(kind, sshd_factory, tmp_path)
    marker = tmp_path / "pth-ran"
    repo = repo_with(
        tmp_path / "repo",
        {"tests/test_poison.py": POISONER.format(marker=str(marker))},
        boxes,
        toml=SETUP + SAID if kind != "local" else SAY_TOML,
    )
    _, first, folder = run(repo, hosts, "--sandbox", sandbox, ssh_config=ssh_config, run_id="r1")
    receipt = json.loads((folder / hosts / "receipt.json").read_text())
    ran_in_first = marker.exists()
    if ran_in_first:
        marker.unlink()
    # The next commit has a failing test; the poisoned environment must not get to hide it.
    (repo / "tests/test_poison.py").write_text("def test_fails():\n    assert False\n")
    git(repo, "commit", "-qam", "a failing commit")
    code, second, _ = run(repo, hosts, "--sandbox", sandbox, ssh_config=ssh_config, run_id="r2")
    assert not marker.exists(), "the planted .pth ran in the next run"
    assert code & 1, second
    assert not second["not_evaluated"], second
    return receipt, first, said(folder, hosts), code, folder


@pytest.mark.parametrize("kind", ["clean", "ssh"])
def test_without_a_sandbox_the_write_is_caught_and_the_venv_rebuilt(
    kind: str, sshd_factory: Any, tmp_path: Path
) -> None:
    receipt, first, attempt, _, _ = _poison_then_fail(kind, "off", sshd_factory, tmp_path)
    assert attempt.startswith("written"), attempt
    assert receipt["environment"]["sandbox"] == "none"
    assert receipt["exit"]["interpretation"] == "incomplete"
    assert any("wrote into" in r and "removed" in r for r in receipt["exit"]["reasons"])
    # The first run's gate says what to look for: the write, not dropped tests.
    (completeness,) = [g for g in first["gates"] if g["gate"] == "Completeness"]
    assert completeness["status"] == "FAIL"
    assert completeness["action"].startswith("find what wrote the named path"), completeness


@pytest.mark.parametrize("kind", ["local", "clean", "ssh"])
def test_under_bubblewrap_the_environment_is_read_only(
    kind: str, sshd_factory: Any, tmp_path: Path
) -> None:
    require_bwrap()
    receipt, _, attempt, _, _ = _poison_then_fail(kind, "auto", sshd_factory, tmp_path)
    assert attempt.startswith("refused"), attempt
    assert receipt["environment"]["sandbox"] == "bwrap"
    assert receipt["exit"]["interpretation"] == "ok"
