"""Setup commands in a venv cached by the project's dependency files. Runs on boxes; stdlib only.

The venv's name is a hash of this Python's version, the setup commands and the dependency files
of the checkout, so a second run with the same dependencies reuses it; a lock keeps two boxes
that share one home from building the same venv twice, and `.ok` marks a venv whose setup
finished (a half-built one is rebuilt).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from charpin_runner import procgroup
from charpin_runner.errors import BoxStepError

DEPENDENCY_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "poetry.lock", "uv.lock")
_OUTPUT_TAIL = 2000


def venv_key(src: Path, commands: Sequence[str]) -> str:
    """The cache key of the venv for src's dependency files and these setup commands."""
    key = hashlib.sha256(sys.version.encode() + json.dumps(list(commands)).encode())
    names = set(DEPENDENCY_FILES) | {p.name for p in src.glob("requirements*.txt")}
    for name in sorted(names):
        path = src / name
        if path.is_file():
            key.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return key.hexdigest()[:20]


def build(venvs: Path, src: Path, commands: Sequence[str], seconds: float) -> dict[str, Any]:
    """Return {"python", "venv", "cached"} for a venv where commands ran (or had run) in src."""
    ends = time.monotonic() + seconds
    venv = venvs / venv_key(src, commands)
    python = venv / "bin" / "python"
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cached = (venv / ".ok").exists()
        if not cached:
            shutil.rmtree(venv, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(venv)], src, dict(os.environ), ends)
            env = dict(
                os.environ,
                VIRTUAL_ENV=str(venv),
                PATH=str(venv / "bin") + os.pathsep + os.environ.get("PATH", ""),
            )
            for command in commands:
                _run(command, src, env, ends, shell=True)  # noqa: S604 - the setup lines are shell
            (venv / ".ok").touch()
    return {"python": str(python), "venv": str(venv), "cached": cached}


def _run(
    command: str | list[str], cwd: Path, env: dict[str, str], ends: float, *, shell: bool = False
) -> None:
    # Its own session, so a timeout kills the commands a setup line started, not just its shell.
    proc = subprocess.Popen(
        command,
        shell=shell,
        cwd=str(cwd),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=max(ends - time.monotonic(), 1.0))
    except subprocess.TimeoutExpired:
        procgroup.kill_group(proc.pid)
        try:
            output, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # something left the group and holds the pipe
            proc.kill()
            output = b""
        raise BoxStepError(
            "timeout", f"setup command {command!r} ran past the box deadline: {_tail(output)}"
        ) from None
    if proc.returncode != 0:
        raise BoxStepError(
            "setup-failed",
            f"setup command {command!r} exited {proc.returncode}: {_tail(output)}",
        )


def _tail(output: bytes | None) -> str:
    lines = (output or b"")[-_OUTPUT_TAIL:].decode("utf-8", "replace").strip().splitlines()
    return " | ".join(line.strip() for line in lines[-6:]) or "(no output)"
