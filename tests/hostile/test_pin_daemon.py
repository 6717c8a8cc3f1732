"""Attack: a pin target double-forks a daemon that writes into the repository after the run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import git, make_repo
from tests.runner.test_receipt_cmd import charpin_env
from tests.waiting import make_gate, waiting

# The daemon waits at a gate (tests/waiting.py) where it would sleep: released only after
# charpin returned, and only if it still lives.
TARGET = '''
import os, select, sys
print("hello")
if os.path.exists({arm!r}):
    sys.stdout.flush()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            gate = os.open({gate!r}, os.O_RDONLY | os.O_NONBLOCK)
            # Written whole or not at all: the daemon may be killed at any instruction.
            open({pidfile!r} + ".tmp", "w").write(str(os.getpid()))
            os.rename({pidfile!r} + ".tmp", {pidfile!r})
            select.select([gate], [], [])
            open({planted!r}, "w").write("print('owned')\\n")
            os._exit(0)
        os._exit(0)
'''


def _charpin(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "charpin_runner", *args],
        cwd=repo, env=charpin_env(), capture_output=True, text=True, timeout=120, check=False,
    )


# Without bubblewrap only: the daemon's gate and pid file live outside the checkout, which the
# sandbox's view no longer shows (rule 2), so under bwrap the attack cannot arm. Under bwrap the
# PID namespace ends every pin process with the sandbox.
@pytest.mark.parametrize("sandbox", ["off"])
def test_a_pin_daemon_is_dead_before_the_receipt_is_written(sandbox: str, tmp_path: Path) -> None:
    pidfile = tmp_path / "daemon-pid"
    gate = make_gate(tmp_path / "gate")
    repo = make_repo(
        tmp_path / "repo",
        {
            "tool.py": TARGET.format(
                gate=str(gate),
                pidfile=str(pidfile),
                planted=str(tmp_path / "repo" / "planted.py"),
                arm=str(tmp_path / "repo" / "arm"),
            ),
            "tests/test_ok.py": "def test():\n    pass\n",
        },
    )
    recorded = _charpin(repo, "pins", "record", "--id", "hello", "--", "tool.py")
    assert recorded.returncode == 0, recorded.stderr
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "pins")
    (repo / "arm").write_text("")
    git(repo, "add", "arm")
    git(repo, "commit", "-qm", "arm the daemon")
    out = tmp_path / "receipt.json"
    done = _charpin(repo, "receipt", "-o", str(out), "--sandbox", sandbox, "-q")
    written = out.read_bytes()
    receipt = json.loads(written)
    # Nothing of the daemon is left to act after the receipt.
    assert not waiting(gate), "the pin's daemon outlived the run"
    assert out.read_bytes() == written
    assert not (repo / "planted.py").exists()
    assert done.returncode == 0, (done.stderr, receipt["exit"])
    if sandbox == "off" and pidfile.exists():
        assert not Path(f"/proc/{int(pidfile.read_text())}").exists()
