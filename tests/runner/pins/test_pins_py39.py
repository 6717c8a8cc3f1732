"""The pins commands run on a bare box Python (3.9, stdlib only, no coverage.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.py39 import PY39, needs_py39

RUNNER = Path(__file__).resolve().parents[3] / "runner"


def _charpin(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(RUNNER), "HOME": str(repo)}
    return subprocess.run(
        [str(PY39), "-m", "charpin_runner", "pins", *args, "--repo", str(repo)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@needs_py39()
def test_record_check_and_cover_on_python39(messy_repo: Path) -> None:
    done = _charpin(messy_repo, "record")
    assert done.returncode == 0, done.stdout + done.stderr
    done = _charpin(messy_repo, "check", "--prove")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 passed, 0 drifted" in done.stdout
    done = _charpin(messy_repo, "cover")
    if done.returncode == 0:
        pytest.skip("coverage.py is installed for Python 3.9 here")
    assert done.returncode == 64
    assert "pip install 'charpin-remote[cover]'" in done.stderr
