"""Run a command in its own process group and make sure nothing of it survives. Runs on boxes; stdlib.

The test command runs in a new session; when it ends (or at its deadline, or when charpin is
asked to stop) the whole group is killed and reaped before the parent measures anything again.
On Linux the CLI may also become a child subreaper (become_subreaper), so a daemon that called
setsid() is re-parented to charpin and can be killed too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from charpin_runner.errors import RunError
from charpin_runner.interpret import Ending

# The supervisor of each pin (pins/reaper.py) must not import charpin, so these live there.
from charpin_runner.pins.reaper import become_subreaper as become_subreaper
from charpin_runner.pins.reaper import kill_children, processes

# Grace between SIGTERM and SIGKILL for a test command we are stopping.
TERM_GRACE = 5.0
# Shorter when charpin itself was asked to stop: the receipt still has to be written quickly.
INTERRUPT_GRACE = 1.0
# Upper bound on waiting for killed group members to disappear.
_REAP_BOUND = 5.0


class StopFlag:
    """Set by SIGINT/SIGTERM while a receipt is being produced; the run then winds down."""

    def __init__(self) -> None:
        self.requested = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True


@contextmanager
def stop_on_signals() -> Iterator[StopFlag]:
    """Turn SIGINT/SIGTERM into a flag (main thread only), so the receipt is still written."""
    flag = StopFlag()
    old: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, flag._handle)
    try:
        yield flag
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def run_child(
    argv: list[str],
    repo: Path,
    env: dict[str, str],
    timeout: float | None,
    stop: StopFlag,
    adopted: bool = False,
    *,
    pass_fds: Collection[int] = (),
    started: Callable[[], None] | None = None,
) -> Ending:
    """Run argv in its own process group; on any end, SIGKILL the group and wait it out.

    With adopted=True (see become_subreaper) every remaining child of this process, which
    includes daemons that left the group with setsid(), is killed as well. pass_fds reach the
    child; started() runs once it holds them (the parent then closes its own copies)."""
    try:
        proc = subprocess.Popen(
            argv, cwd=str(repo), env=env, start_new_session=True, pass_fds=tuple(pass_fds)
        )
    except OSError as exc:
        raise RunError(
            f"cannot start the test command {argv[0]!r}: {exc.strerror}; "
            "fix test_command in [tool.charpin]"
        ) from exc
    finally:
        if started is not None:
            started()
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        status, timed_out = _supervise(proc, deadline, lambda: stop.requested)
    finally:
        if proc.poll() is None:
            _stop(proc, INTERRUPT_GRACE)
        # Lingering background processes of the run die here, before anything is re-hashed.
        kill_group(proc.pid)
        if adopted:
            kill_adopted()
    return Ending(status=status, timed_out=timed_out, timeout=timeout)


def _supervise(
    proc: subprocess.Popen[bytes], deadline: float | None, stopping: Callable[[], bool]
) -> tuple[int, bool]:
    while True:
        try:
            return proc.wait(timeout=0.05), False
        except subprocess.TimeoutExpired:
            pass
        if stopping():
            # Whoever stopped us waits for the receipt (the coordinator allows a few seconds).
            return _stop(proc, INTERRUPT_GRACE), False
        if deadline is not None and time.monotonic() >= deadline:
            return _stop(proc, TERM_GRACE), True


def _stop(proc: subprocess.Popen[bytes], grace: float) -> int:
    """SIGTERM the group, give it grace seconds, then SIGKILL it."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        return proc.wait()


def kill_group(pgid: int) -> None:
    """SIGKILL every process in group pgid and wait (bounded) until none is left running."""
    _signal_group(pgid, signal.SIGKILL)
    until = time.monotonic() + _REAP_BOUND
    while time.monotonic() < until and group_alive(pgid):
        time.sleep(0.01)


def group_alive(pgid: int) -> bool:
    """True while some non-zombie process is in group pgid (zombies cannot write files)."""
    if not Path("/proc").is_dir():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    return any(group == pgid and state not in "ZX" for _, _, group, state in processes())


def kill_adopted(spare: Collection[int] = ()) -> bool:
    """SIGKILL and reap every child of this process, repeatedly: each kill can orphan that
    process's own children onto us. Bounded in time like kill_group; True when none is left.
    Children in spare (still running work of this process, e.g. live pin supervisors) are left
    alone; the caller must keep new children from appearing outside spare meanwhile."""
    return kill_children(spare, _REAP_BOUND)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
