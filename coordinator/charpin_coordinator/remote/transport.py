"""Coordinator side; stdlib only. The Transport interface every box speaks, and LocalTransport.

A box is anything that can start one program and give us its stdin and stdout as a byte stream:
the whole run with a box then happens over that one channel (the box agent's framed protocol,
see session.py). SshTransport (ssh.py) opens it as an SSH exec channel; LocalTransport starts a
subprocess in a folder on this machine, which is both the built-in `clean` box and `local`, and
the fast real stand-in used by tests.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

# A dead agent's last words: enough to explain a traceback or "python3: not found".
STDERR_KEEP = 64 * 1024
# After SIGTERM, what a program that does not end by itself gets to clean up before SIGKILL.
TERM_GRACE = 3.0


def watchdog(deadline: float | None) -> list[str]:
    """The argv prefix that ends a program on its own box at deadline seconds from now even when
    nobody is left to stop it (a lost connection, a coordinator killed outright): coreutils'
    `timeout`, SIGTERM then SIGKILL 10 s later. Empty without a deadline."""
    if deadline is None:
        return []
    return ["timeout", "-s", "TERM", "-k", "10", f"{max(1, round(deadline))}"]


@dataclass
class TransferStats:
    """Bytes moved to and from one box, and channels opened, measured at the transport."""

    sent: int = 0
    received: int = 0
    channels: int = 0


@dataclass(frozen=True)
class Finished:
    """How a channel's program ended: its exit status (None if unknown) and its stderr's end."""

    status: int | None
    stderr: bytes


class Channel(Protocol):
    """One program on a box, its stdin and stdout a byte stream; its stderr kept for errors."""

    def send(self, data: bytes) -> None:
        """Write all of data to the program's stdin (a program that exited swallows it)."""
        ...

    def recv(self, size: int, timeout: float) -> bytes | None:
        """Up to size bytes of stdout; b"" at its end; None when nothing came within timeout."""
        ...

    def finish(self, timeout: float) -> Finished:
        """Close stdin, wait at most timeout for the program to end (killing it after), close."""
        ...


class Transport(Protocol):
    """One box, connected. None of its methods retries."""

    name: str
    stats: TransferStats
    # The folder holding `.cache/charpin` on the box; "" means the box user's home directory.
    home: str
    host_key_fingerprint: str | None
    host_key_accepted_new: bool

    def open(self, argv: Sequence[str], *, deadline: float | None = None) -> Channel:
        """Start argv on the box and return its channel. deadline: seconds after which the box
        itself ends the program (and what it started in its process group)."""
        ...

    def close(self) -> None:
        """Release the connection (and whatever the box was, for a temporary one)."""
        ...


class LocalTransport:
    """A box that is a folder on this machine; its programs are real subprocesses."""

    host_key_fingerprint: str | None = None
    host_key_accepted_new = False

    def __init__(
        self,
        name: str,
        root: Path,
        *,
        base_env: Mapping[str, str] | None = None,
        home: str | None = None,
    ):
        self.name = name
        self.root = root
        self.home = str(root) if home is None else home
        self.stats = TransferStats()
        self._base_env = dict(os.environ if base_env is None else base_env)

    def open(self, argv: Sequence[str], *, deadline: float | None = None) -> LocalChannel:
        """Start argv in root, in its own session (so a kill reaches all it started); with a
        deadline, under `timeout` where it is installed, so that it ends even if this process
        is killed outright."""
        self.stats.channels += 1
        err = tempfile.TemporaryFile()  # a file, not a pipe: nobody has to drain it
        prefix = watchdog(deadline) if shutil.which("timeout") else []
        proc = subprocess.Popen(
            [*prefix, *argv],
            cwd=str(self.root),
            env=self._base_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
        )
        return LocalChannel(proc, err, self.stats)

    def close(self) -> None:
        """Nothing to release."""


class LocalChannel:
    """The stdin and stdout of a local subprocess, read with deadlines."""

    def __init__(self, proc: subprocess.Popen[bytes], err: IO[bytes], stats: TransferStats):
        assert proc.stdin is not None and proc.stdout is not None
        self._proc, self._err, self._stats = proc, err, stats
        self._in, self._out = proc.stdin.fileno(), proc.stdout.fileno()

    def send(self, data: bytes) -> None:
        """Write data to stdin; a program that already exited is noticed by the next recv."""
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._in, view) :]
        except BrokenPipeError:
            return
        self._stats.sent += len(data)

    def recv(self, size: int, timeout: float) -> bytes | None:
        """Up to size bytes of stdout, b"" at its end, None after timeout seconds of nothing."""
        ready, _, _ = select.select([self._out], [], [], max(timeout, 0.0))
        if not ready:
            return None
        data = os.read(self._out, size)
        self._stats.received += len(data)
        return data

    def finish(self, timeout: float) -> Finished:
        """Close stdin, wait for the end (kill the session after timeout), keep stderr's end."""
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            status: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # SIGTERM first: an agent stops the runner it started in a session of its own.
            _kill_session(proc.pid, signal.SIGTERM)
            try:
                status = proc.wait(timeout=TERM_GRACE)
            except subprocess.TimeoutExpired:
                _kill_session(proc.pid, signal.SIGKILL)
                status = proc.wait()
        proc.stdout.close()
        self._err.seek(0, os.SEEK_END)
        self._err.seek(max(0, self._err.tell() - STDERR_KEEP))
        tail = self._err.read()
        self._err.close()
        return Finished(status, tail)


def _kill_session(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
