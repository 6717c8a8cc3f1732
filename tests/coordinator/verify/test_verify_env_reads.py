"""Reading fewer environment keys is no new input (#22, seen on termcolor): two independent env
checks swapped give the same bytes in the pin's environment while the program stops looking one
key up; `charpin-remote verify` ACCEPTs that. A key read for the first time still REJECTs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main

from tests.conftest import git, make_repo

pytestmark = pytest.mark.slow

RUNNER_PATH = str(Path(__file__).resolve().parents[3] / "runner")

CHECKS = (
    '    if "ANSI_COLORS_DISABLED" in os.environ:\n'
    "        return False\n"
    '    if "NO_COLOR" in os.environ:\n'
    "        return False\n"
)
FORCE = '    if "FORCE_COLOR" in os.environ:\n        return True\n'
PROGRAM = (
    "import os\nimport sys\n\n\n"
    "def can_colorize():\n" + CHECKS + FORCE + "    return sys.stdout.isatty()\n\n\n"
    'print("\\x1b[31mred\\x1b[0m" if can_colorize() else "red")\n'
)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", RUNNER_PATH)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = make_repo(
        tmp_path / "termcolorish",
        {"color.py": PROGRAM, "tests/test_ok.py": "def test_ok():\n    pass\n"},
    )
    record = ["pins", "record", "--id", "forced", "--env", "FORCE_COLOR=1", "--", "color.py"]
    done = subprocess.run(
        [sys.executable, "-m", "charpin_runner", *record],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    line = json.loads((root / "pins.jsonl").read_text())
    assert line["env_read"] == ["ANSI_COLORS_DISABLED", "FORCE_COLOR", "NO_COLOR"]
    git(root, "add", "-A")
    git(root, "commit", "-qm", "pin the forced colour")
    return root


def _verify(repo: Path, program: str, run_id: str) -> tuple[int, dict[str, Any]]:
    (repo / "color.py").write_text(program)
    diff = subprocess.run(
        ["git", "-C", str(repo), "diff", "--binary"], capture_output=True, check=True
    ).stdout
    git(repo, "checkout", "--", "color.py")
    patch = repo.parent / f"{run_id}.diff"
    patch.write_bytes(diff)
    out = repo.parent / "verify"
    argv = ["verify", "--repo", str(repo), "--patch", str(patch), "--out", str(out)]
    code = main([*argv, "--run-id", run_id, "--json", "--hosts", "clean", "--timeout", "120"])
    return code, json.loads((out / run_id / "verify.json").read_text())


def _pin(repo: Path, *record: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "charpin_runner", "pins", "record", *record],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "another pin")


def test_swapping_two_independent_env_checks_is_accepted(repo: Path) -> None:
    # A second pin without FORCE_COLOR reaches the statement after the moved check: with it,
    # every changed statement ran under both versions (#19).
    _pin(repo, "--id", "plain", "--", "color.py")
    code, report = _verify(repo, PROGRAM.replace(CHECKS + FORCE, FORCE + CHECKS), "swap")
    assert report["verdict"] == "ACCEPT", report["observations"]
    assert code == 0
    behaviour = [g for g in report["gates"] if g["gate"] == "Behaviour"]
    assert [g["status"] for g in behaviour] == ["PASS"]


def test_the_swap_that_no_pin_reaches_is_never_new_input(repo: Path) -> None:
    # Only the forced pin. Reading fewer keys is no new input: never REJECT. (The statement
    # after the moved check is reached by verify's generated calls of can_colorize(), which
    # answer alike on both versions; the case that differs, NO_COLOR and FORCE_COLOR both set,
    # is an environment no evidence varies: a limit said in #19's note.)
    code, report = _verify(repo, PROGRAM.replace(CHECKS + FORCE, FORCE + CHECKS), "swap-alone")
    assert report["verdict"] != "REJECT", report["observations"]
    assert not [g for g in report["gates"] if g["status"] == "FAIL"], report["gates"]
    assert not code & 2


def test_reading_a_new_key_is_still_new_input(repo: Path) -> None:
    new = PROGRAM.replace(CHECKS + FORCE, CHECKS + '    os.environ.get("TERM")\n' + FORCE)
    code, report = _verify(repo, new, "new-key")
    assert report["verdict"] == "REJECT" and code & 2
    [drift] = [o for o in report["observations"] if o["gate"] == "Behaviour"]
    assert drift["what"] == "failed (env-read)"
    assert "new ['TERM']" in " ".join(drift["detail"])
