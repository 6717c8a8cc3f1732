"""Every process that holds a run's seal key is non-dumpable, so a test running as the same
(non-root) user cannot read the key out of /proc/PID/mem and seal a forged receipt.

An audit did exactly that to the box agent (the runner itself was already protected): it read
the key from the agent's memory, wrote a sealed `ok` receipt and stopped the runner. A process
that is not dumpable has its /proc/PID files owned by root, which is what is checked here, with
the process run as an unprivileged user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

RUNNER = str(Path(__file__).resolve().parents[2] / "runner")
NOBODY = 65534


def _as_nobody(argv: list[str], tmp_path: Path) -> subprocess.Popen[bytes]:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the process as an unprivileged user")
    tmp_path.chmod(0o777)
    return subprocess.Popen(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": RUNNER, "HOME": str(tmp_path)},
        cwd=str(tmp_path),
    )


def _mem_owner(pid: int) -> int:
    # setpriv execs python in place, so pid is the interpreter's.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        owner = os.stat(f"/proc/{pid}/mem").st_uid
        if owner == 0:
            return owner
        time.sleep(0.05)
    return os.stat(f"/proc/{pid}/mem").st_uid


def test_the_box_agent_cannot_be_read_by_its_tests(tmp_path: Path) -> None:
    proc = _as_nobody(
        [sys.executable, "-I", "-c", _AGENT, RUNNER, str(tmp_path)], tmp_path
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline()  # the ready frame: the agent is serving
        assert _mem_owner(proc.pid) == 0, "the agent is dumpable: its memory is readable"
    finally:
        _stop(proc)


def test_a_control_process_of_the_same_user_is_readable(tmp_path: Path) -> None:
    """The check above can fail: an ordinary process of that user owns its /proc files."""
    code = "import sys; print('ready', flush=True); sys.stdin.read()"
    proc = _as_nobody([sys.executable, "-I", "-c", code], tmp_path)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"  # setpriv has become that python
        assert os.stat(f"/proc/{proc.pid}/mem").st_uid == NOBODY
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.communicate()


_AGENT = """
import sys
sys.path.insert(0, sys.argv[1])
from charpin_runner.box.agent import serve
raise SystemExit(serve(sys.argv[2]))
"""
