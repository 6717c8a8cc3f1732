"""Coordinator side; stdlib only. `run --notify CMD`: a shell command run once the report is out.

The command gets the Markdown summary on stdin and `CHARPIN_EXIT` and `CHARPIN_RUN_DIR` in its
environment; its own output goes to stderr (stdout may be carrying `--json`). Whatever happens to
it (non-zero, not found, over the time limit, Ctrl-C) comes back as one line for the CLI to
print; it never changes the run's exit code. The command line is never repeated in that line (a
webhook URL often holds a token): only its first word is.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from pathlib import Path

NOTIFY_TIMEOUT = 60.0
_GRACE = 2.0  # seconds between SIGTERM and SIGKILL for a hook that overran


def notify(
    command: str,
    summary: bytes,
    *,
    exit_code: int,
    run_dir: Path,
    timeout: float | None = None,
) -> str | None:
    """Run command with /bin/sh; None when it exited 0, else one line saying what went wrong.
    `timeout` defaults to NOTIFY_TIMEOUT (read at each call)."""
    timeout = NOTIFY_TIMEOUT if timeout is None else timeout
    env = {**os.environ, "CHARPIN_EXIT": str(exit_code), "CHARPIN_RUN_DIR": str(run_dir)}
    name = _first_word(command)
    try:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.PIPE,
            stdout=2,  # the hook's output joins ours on stderr, never stdout
            env=env,
            start_new_session=True,  # its whole process group can be stopped
        )
    except OSError as exc:
        return f"--notify command {name} could not start: {exc.strerror or exc}"
    try:
        proc.communicate(summary, timeout=timeout)  # a hook that ignores stdin is fine
    except subprocess.TimeoutExpired:
        _stop(proc)
        return f"--notify command {name} did not finish within {timeout:g} s and was stopped"
    except KeyboardInterrupt:
        _stop(proc)
        return f"--notify command {name} was interrupted (Ctrl-C) and stopped"
    code = proc.returncode
    if code == 0:
        return None
    if code < 0:
        return f"--notify command {name} was killed by signal {-code}"
    why = {127: " (command not found)", 126: " (not executable)"}.get(code, "")
    return f"--notify command {name} exited {code}{why}"


def _first_word(command: str) -> str:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return repr(words[0] if words else command)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the hook's process group, SIGKILL to what is left after a grace period."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=_GRACE)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(proc.pid, signal.SIGKILL)  # the shell's children, if it went first
    proc.wait()
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass


def _signal_group(group: int, sig: signal.Signals) -> None:
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        pass
