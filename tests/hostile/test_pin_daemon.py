"""Attack: a pin target double-forks a daemon that writes into the repository after the run."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import git, make_repo
from tests.runner.test_receipt_cmd import charpin_env

TARGET = '''
import os, sys, time
print("hello")
if os.path.exists({arm!r}):
    sys.stdout.flush()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            # Written whole or not at all: the daemon may be killed at any instruction.
            open({pidfile!r} + ".tmp", "w").write(str(os.getpid()))
            os.rename({pidfile!r} + ".tmp", {pidfile!r})
            time.sleep(1.0)
            open({planted!r}, "w").write("print('owned')\\n")
            os._exit(0)
        os._exit(0)
'''


def _charpin(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "charpin_runner", *args],
        cwd=repo, env=charpin_env(), capture_output=True, text=True, timeout=120, check=False,
    )


@pytest.mark.parametrize("sandbox", ["off", "auto"])
def test_a_pin_daemon_is_dead_before_the_receipt_is_written(sandbox: str, tmp_path: Path) -> None:
    pidfile = tmp_path / "daemon-pid"
    repo = make_repo(
        tmp_path / "repo",
        {
            "tool.py": TARGET.format(
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
    time.sleep(2.5)  # past the moment the daemon would have written
    # Nothing happens after the receipt: it is not rewritten, and a file the daemon wrote exists
    # only if the receipt names it (the run is then not clean).
    assert out.read_bytes() == written
    if (repo / "planted.py").exists():
        assert "planted.py" in receipt["tree"]["written"], receipt["tree"]
        assert done.returncode != 0
    else:
        assert done.returncode == 0, (done.stderr, receipt["exit"])
    if sandbox == "off" and pidfile.exists():
        assert not Path(f"/proc/{int(pidfile.read_text())}").exists()
