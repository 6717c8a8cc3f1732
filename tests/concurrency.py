"""Test helper: coordinators as real subprocesses started together, and FIFO rendezvous points.

Concurrent runs are made to overlap on purpose, never by luck: a test inside a box run opens a
FIFO for writing (`arrive`), which blocks until this process reads it, then opens another FIFO
for reading (`wait_for`), which blocks until this process opens it for writing and closes it.
FIFOs work where nothing else may be written: a FIFO on a read-only mount can still be opened
for writing, so even a confined (`verify`) test run can reach a rendezvous point.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# How long any one rendezvous may take before the test gives up and says which one.
RENDEZVOUS_SECONDS = 600.0

# Code a box's test runs: arrive at ARRIVE (when the SYNC file exists), then wait for GO.
# Formatted with sync, arrive and go paths. Stdlib only; never touches the clock.
RENDEZVOUS_TEST = """
import os


def test_meets_the_others():
    if os.path.exists({sync!r}):
        with open({arrive!r}, "w"):
            pass
        with open({go!r}) as go:
            go.read()
"""


def make_fifos(folder: Path, *names: str) -> list[Path]:
    """FIFOs named names in folder (made), in order."""
    folder.mkdir(parents=True, exist_ok=True)
    made = []
    for name in names:
        path = folder / name
        os.mkfifo(path)
        made.append(path)
    return made


def await_arrival(fifo: Path, timeout: float = RENDEZVOUS_SECONDS) -> None:
    """Block until something opened fifo for writing and closed it (AssertionError after
    timeout): the reading end is opened without blocking, then read until its end."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        import select

        while True:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                raise AssertionError(f"nobody arrived at {fifo} within {timeout:g}s")
            try:
                if not os.read(fd, 4096):
                    return
            except BlockingIOError:
                continue
    finally:
        os.close(fd)


def await_arrivals(
    fifos: Sequence[Path], still_running: Callable[[], bool], timeout: float = RENDEZVOUS_SECONDS
) -> list[Path]:
    """Wait until every fifo had its writer (see await_arrival), or until still_running() says
    nobody else can arrive (a coordinator that broke before its tests); return those that did
    not arrive. select() wakes on an arrival; it returns every second only to ask that."""
    import select

    fds = {os.open(f, os.O_RDONLY | os.O_NONBLOCK): f for f in fifos}
    ends = time.monotonic() + timeout
    try:
        while fds and time.monotonic() < ends:
            ready, _, _ = select.select(list(fds), [], [], 1.0)
            for fd in ready:
                try:
                    data = os.read(fd, 4096)
                except BlockingIOError:
                    continue
                if not data:
                    os.close(fd)
                    del fds[fd]
            if not ready and not still_running():
                break
        return sorted(fds.values())
    finally:
        for fd in fds:
            os.close(fd)


def release(fifo: Path, timeout: float = RENDEZVOUS_SECONDS) -> None:
    """Open fifo for writing once a reader waits on it, and close it (its reader sees the end).
    The blocking open runs in a thread; on timeout this process opens the reading end itself
    so the thread ends, and says which rendezvous nobody came to."""
    failed: list[BaseException] = []

    def opener() -> None:
        try:
            os.close(os.open(fifo, os.O_WRONLY))
        except OSError as exc:  # pragma: no cover - shown below
            failed.append(exc)

    thread = threading.Thread(target=opener, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        thread.join(10)
        os.close(fd)
        raise AssertionError(f"nobody waited at {fifo} within {timeout:g}s")
    if failed:
        raise failed[0]


def unblock(fifo: Path) -> None:
    """Best effort: let whoever waits on fifo (either end) go on; used when a test fails."""
    for flags in (os.O_WRONLY | os.O_NONBLOCK, os.O_RDONLY | os.O_NONBLOCK):
        try:
            os.close(os.open(fifo, flags))
        except OSError as exc:
            if exc.errno not in (errno.ENXIO, errno.ENOENT):
                raise


@dataclass
class Coordinator:
    """One `charpin-remote` process and where its result lands."""

    name: str
    argv: list[str]
    result: Path  # drift.json or verify.json
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    code: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def start(self, env: Mapping[str, str], logs: Path) -> Coordinator:
        logs.mkdir(parents=True, exist_ok=True)
        self.log = logs / f"{self.name}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "charpin_coordinator", *self.argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env),
                start_new_session=True,
            )
        return self

    def wait(self, timeout: float = 1200.0) -> int:
        assert self.proc is not None
        try:
            self.code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                f"{self.name} still ran after {timeout:g}s: {self.output()}"
            ) from None
        return self.code

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log else ""

    def report(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.result.read_text()))
        except (OSError, ValueError) as exc:
            raise AssertionError(f"{self.name} left no report ({exc}): {self.output()}") from exc


def coordinator_env(cache: Path, state: Path) -> dict[str, str]:
    """The environment of a coordinator subprocess: this one's, its own caches and state."""
    env = dict(os.environ)
    env["XDG_CACHE_HOME"] = str(cache)
    env["XDG_STATE_HOME"] = str(state)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "runner"), str(ROOT / "coordinator")])
    return env


def run_argv(
    repo: Path, hosts: str, out: Path, run_id: str, *extra: str, ssh_config: Path | None = None
) -> list[str]:
    argv = ["run", "--repo", str(repo), "--hosts", hosts, "--out", str(out), "--run-id", run_id]
    argv += ["--json", "-q", "--timeout", "900", *extra]
    if ssh_config is not None:
        argv += ["--ssh-config", str(ssh_config)]
    return argv


def verify_argv(
    repo: Path,
    hosts: str,
    patch: Path,
    out: Path,
    run_id: str,
    *extra: str,
    ssh_config: Path | None = None,
) -> list[str]:
    argv = ["verify", "--repo", str(repo), "--hosts", hosts, "--patch", str(patch)]
    argv += ["--out", str(out), "--run-id", run_id, "--json", "-q", "--timeout", "900", *extra]
    if ssh_config is not None:
        argv += ["--ssh-config", str(ssh_config)]
    return argv


def summary(report: Mapping[str, Any]) -> dict[str, Any]:
    """What must be the same whether a run or verify ran alone or beside others: the verdict or
    exit code, every gate's status and detail, each box's outcomes, and what was not evaluated
    (run ids, times and paths left out)."""
    if "verdict" in report:
        return {
            "verdict": report["verdict"],
            "gates": sorted((g["gate"], g["box"], g["status"]) for g in report.get("gates", [])),
            "not_evaluated": sorted(
                (n["label"], n["kind"]) for n in report.get("not_evaluated", [])
            ),
        }
    return {
        "exit_code": report["exit_code"],
        "gates": sorted((g["gate"], g["box"], g["status"], g["detail"]) for g in report["gates"]),
        "boxes": sorted(
            (
                b["label"],
                b["interpretation"],
                json.dumps(b["counts"], sort_keys=True),
                tuple(b["failing"]),
            )
            for b in report["boxes"]
        ),
        "not_evaluated": sorted((n["label"], n["kind"]) for n in report["not_evaluated"]),
    }


def findings(report: Mapping[str, Any]) -> list[str]:
    """Every gate that did not PASS and every box not evaluated, as lines (for messages)."""
    lines = [
        f"{g['gate']}@{g['box']}: {g['status']} {g.get('detail', '')}"
        for g in report.get("gates", [])
        if g["status"] != "PASS"
    ]
    lines += [
        f"{n['label']}: NOT EVALUATED {n['kind']}: {n['reason']}"
        for n in report.get("not_evaluated", [])
    ]
    return lines


def wait_all(coordinators: Sequence[Coordinator], timeout: float = 1200.0) -> None:
    for one in coordinators:
        one.wait(timeout)
