"""A pin whose program dies on a missing variable records the traceback plain Python prints:
the bootstrap that records env reads must not put its own (temporary) path into it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import make_repo

RUNNER = str(Path(__file__).resolve().parents[3] / "runner")


def _charpin(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "charpin_runner", "pins", *args],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": RUNNER},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_a_missing_variable_traceback_is_stable_and_has_no_bootstrap_frame(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"tool.py": 'import os\nprint(os.environ["NOPE_X"])\n'})
    # A crash is recorded only when the pin says it expects one (#11 item 2).
    done = _charpin(repo, "record", "--id", "k", "--expect-crash", "--", "tool.py")
    assert done.returncode == 0, done.stdout + done.stderr
    pin = json.loads((repo / "pins.jsonl").read_text().splitlines()[0])
    assert pin["expect_crash"] is True
    assert "bootstrap" not in pin["stderr"] and "charpin-pins-" not in pin["stderr"]
    assert pin["stderr"].rstrip().endswith("KeyError: 'NOPE_X'")
    for _ in range(2):  # every replay gets a new temporary folder
        done = _charpin(repo, "check")
        assert done.returncode == 0, done.stdout + done.stderr
