"""`charpin ledger` is `charpin-remote ledger` under the name people look for beside the ledger."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parents[2] / "runner"


def _charpin(*args: str, python: str, path: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path, "PYTHONPATH": str(RUNNER), "HOME": os.environ.get("HOME", "/")}
    return subprocess.run(
        [python, "-m", "charpin_runner", "ledger", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_charpin_ledger_runs_the_coordinators_ledger_command() -> None:
    beside = Path(sys.executable).parent / "charpin-remote"
    if not beside.exists():
        pytest.skip("charpin-remote is not installed beside this interpreter")
    done = _charpin("review", "--help", python=sys.executable, path="/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: charpin-remote ledger review")
    assert "--clean-runs" in done.stdout


def test_without_charpin_remote_one_line_says_how_to_get_it(tmp_path: Path) -> None:
    # An interpreter with no charpin-remote beside it, and a PATH without one.
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python3").symlink_to(os.path.realpath(sys.executable))
    done = _charpin("suggest", python=str(bare / "python3"), path=str(bare))
    assert done.returncode == 64
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "install charpin-remote" in lines[0], done.stderr
    assert "Traceback" not in done.stderr
