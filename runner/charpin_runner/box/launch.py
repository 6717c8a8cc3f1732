"""Start `charpin receipt` for one box run and wait for its end without polling. Runs on boxes;
stdlib only.

The runner runs in its own session with its logs in the run folder and its seal key on stdin.
The agent waits on two things at once: the runner's exit (a thread that waits for it writes one
byte to a pipe) and the protocol stream (the coordinator may ask it to stop, or vanish). At the
deadline, on a stop request or when the coordinator is gone, the runner gets SIGTERM (it stops
its tests and still writes a sealed receipt), then SIGKILL for what is left of its group, and
then for anything else still working inside the run folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, Optional

import charpin_runner
from charpin_runner import procgroup
from charpin_runner.box.layout import Layout
from charpin_runner.pins.reaper import processes

GRACE_SECONDS = 20.0  # past the runner's own --timeout before the agent stops it
TERM_WAIT_SECONDS = 8.0  # time the runner gets after SIGTERM to write its receipt

# Blocks until the runner ended ("ended"), the coordinator asked to stop or left ("stop"), or
# the timeout passed ("idle").
Wake = Callable[[int, float], str]


def runner_command(python: str) -> tuple[list[str], Optional[Path]]:
    """How python starts this very runner: the shipped runner folder the agent runs from
    (returned too, so the run can protect it), or the package this agent imported."""
    root = Path(charpin_runner.__file__).resolve().parent.parent
    if (root / "__main__.py").is_file():
        # -B: the folder was compiled once when it was placed; nothing writes into it later.
        # -I -S: nothing from the environment or a site-packages .pth file runs in the parent
        # that measures the run (a poisoned venv must not reach the measurement).
        return [python, "-I", "-S", "-B", str(root)], root
    # The package imported from where it is (an agent started by hand, the test suite): still
    # isolated, so no working folder, PYTHONPATH or .pth file can stand in for it.
    start = (
        f"import sys; sys.path.insert(0, {str(root)!r}); import runpy; "
        "runpy.run_module('charpin_runner', run_name='__main__', alter_sys=True)"
    )
    return [python, "-I", "-S", "-B", "-c", start], None


def receipt_argv(
    python: str, layout: Layout, request: dict[str, Any], caches: Sequence[Path]
) -> list[str]:
    """The one place the runner's command line for a box run is built."""
    runner, shipped = runner_command(python)
    argv = [
        *runner,
        "receipt",
        "--repo",
        str(layout.src),
        "--label",
        str(request["label"]),
        "-o",
        str(layout.receipt),
        "--config-json",
        str(layout.config),
        "--run-id",
        str(request["run_id"]),
        "--expected-commit",
        str(request["commit"]),
        "--timeout",
        str(float(request["timeout"])),
        "--seal-stdin",
        # The agent's interpreter, not the venv's the tests use (setup and prepare wrote that).
        "--trusted-python",
        sys.executable,
        "--sandbox",
        str(request.get("sandbox") or "auto"),
        "-q",
    ]
    if shipped is not None:
        # Code later runs execute: watched through the run, and removed if anything changed it.
        argv += ["--disposable", str(shipped)]
    # Caches later runs read: watched through the run, removed by the runner if changed.
    for cache in caches:
        argv += ["--disposable", str(cache)]
    if layout.cache_repo is not None:
        # Every cache of the box, not only this run's: a test must not plant a venv, a
        # repository or a runner (byte code included) that another commit's run would use.
        for name in ("venvs", "repos", "runners"):
            argv += ["--cache-root", str(layout.root / name)]
        # What keeps the caches right under concurrent runs (leases, journals, staged builds).
        for name in ("locks", "stage", "trash"):
            argv += ["--read-only", str(layout.root / name)]
    for item in request.get("env") or []:
        # The box's configured variables (set by the agent): the tests' allow-list keeps them.
        argv += ["--pass-env", str(item).partition("=")[0]]
    for path in request.get("read_only") or []:
        argv += ["--read-only", str(path)]
    for path in request.get("hidden") or []:
        argv += ["--hide", str(path)]
    if request.get("snapshot_sha256"):
        argv += ["--snapshot-sha256", str(request["snapshot_sha256"])]
    if request.get("confine"):
        argv.append("--confine")
    if request.get("include_frozen"):
        argv.append("--include-frozen")
    for path in request.get("cover") or []:
        argv += ["--cover", str(path)]
    for target in request.get("capture") or []:
        argv += ["--capture", str(target)]
    for path in request.get("entries") or []:
        argv += ["--entries", str(path)]
    for path in request.get("entries_skip") or []:
        argv += ["--entries-skip", str(path)]
    if request.get("patch_sha256"):
        argv += ["--patch-sha256", str(request["patch_sha256"])]
    if request.get("host_key_fingerprint"):
        argv += ["--host-key-fingerprint", str(request["host_key_fingerprint"])]
        if request.get("host_key_accepted_new"):
            argv.append("--host-key-accepted-new")
    return argv


def run(
    argv: list[str],
    layout: Layout,
    env: dict[str, str],
    key: str,
    seconds: float,
    wake: Wake,
    grace: float = GRACE_SECONDS,
) -> tuple[Optional[int], str]:
    """Run argv until it ends, its deadline (seconds plus grace) passes, or wake says stop.

    wake(fd, timeout) blocks until fd (the runner ended) is readable: "ended"; or the protocol
    stream asks to stop or ends: "stop"; or timeout passes: "idle". Returns (the runner's exit
    status when it ended by itself, how the run ended: "exit", "deadline" or "stopped")."""
    with layout.stdout.open("wb") as out, layout.stderr.open("wb") as err:
        proc = subprocess.Popen(
            argv,
            # The run folder, never the checkout: nothing of it may be the runner's working
            # folder (rule 1; the runner is told --repo and starts the tests there itself).
            cwd=str(layout.run),
            env=env,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    _send_key(proc, key)
    ended_r, ended_w = os.pipe()
    threading.Thread(target=_signal_end, args=(proc, ended_w), daemon=True).start()
    try:
        ends = time.monotonic() + seconds + grace
        while True:
            left = ends - time.monotonic()
            if left <= 0:
                stop(proc, layout)
                return None, "deadline"
            what = wake(ended_r, left)
            if what == "ended":
                procgroup.kill_group(proc.pid)  # whatever the runner left in its group
                return proc.wait(), "exit"
            if what == "stop":
                stop(proc, layout)
                return None, "stopped"
    finally:
        os.close(ended_r)


def stop(proc: subprocess.Popen[bytes], layout: Layout) -> None:
    """SIGTERM the runner's group (it writes its receipt), SIGKILL the rest, then anything still
    working inside the run folder that escaped the group."""
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=TERM_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    procgroup.kill_group(proc.pid)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    kill_inside(layout.run)


def kill_inside(folder: Path) -> None:
    """SIGKILL every process of this user whose working directory is inside folder."""
    me = os.getpid()
    prefix = str(folder)
    for pid, _, _, _ in processes():
        if pid == me:
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd == prefix or cwd.startswith(prefix + os.sep):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _send_key(proc: subprocess.Popen[bytes], key: str) -> None:
    assert proc.stdin is not None
    # A runner that dies before reading (a broken interpreter) closes the pipe first: its
    # missing seal then refuses the receipt, so a broken pipe is not the agent's failure.
    try:
        proc.stdin.write(key.encode("ascii") + b"\n")
        proc.stdin.close()
    except BrokenPipeError:
        pass


def _signal_end(proc: subprocess.Popen[bytes], fd: int) -> None:
    proc.wait()
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
