"""Coordinator side. The Transport interface every box speaks, and LocalTransport (subprocess).

A box is anything that can run an argv, take bytes into a file and give a file back. SshTransport
(remote/ssh.py) talks to real machines; LocalTransport runs the same steps in a folder on this
machine, which is both the built-in `clean` box and the fast real stand-in used by tests.
Remote argv is always a list; implementations quote every element (shlex.quote) when a shell
string is unavoidable.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from charpin_runner.errors import IntegrityError


@dataclass(frozen=True)
class Completed:
    """What one command on a box did."""

    argv: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False


@dataclass
class TransferStats:
    """Bytes moved to and from one box, measured at the transport."""

    sent: int = 0
    received: int = 0
    commands: int = 0
    log: list[str] = field(default_factory=list)


class Transport(Protocol):
    """One box. Every method has a deadline; none of them retries."""

    name: str
    stats: TransferStats

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        stdin: bytes | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Completed:
        """Run argv on the box and wait at most timeout seconds."""
        ...

    def put(self, data: bytes, remote_path: str) -> None:
        """Write data to remote_path (parent folders must exist)."""
        ...

    def get(self, remote_path: str, *, max_bytes: int) -> bytes:
        """Return the bytes of remote_path; refuse files larger than max_bytes."""
        ...

    def home(self) -> str:
        """Return the folder charpin may use on the box (its cache root lives under it)."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


class LocalTransport:
    """A box that is a folder on this machine; commands are real subprocesses."""

    def __init__(self, name: str, root: Path, *, base_env: Mapping[str, str] | None = None):
        self.name = name
        self.root = root
        self.stats = TransferStats()
        self._base_env = dict(os.environ if base_env is None else base_env)

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        stdin: bytes | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Completed:
        """Run argv in its own session so a timeout can kill the whole process group."""
        self.stats.commands += 1
        self.stats.sent += len(stdin or b"")  # counted like SshTransport, which sends it
        merged = dict(self._base_env)
        merged.update(env or {})
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd or str(self.root),
            env=merged,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            out, err = proc.communicate()
            return Completed(tuple(argv), proc.returncode, out, err, timed_out=True)
        self.stats.received += len(out) + len(err)
        return Completed(tuple(argv), proc.returncode, out, err)

    def put(self, data: bytes, remote_path: str) -> None:
        """Write data atomically to remote_path."""
        target = Path(remote_path)
        tmp = target.with_name(f".{target.name}.part")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        self.stats.sent += len(data)

    def get(self, remote_path: str, *, max_bytes: int) -> bytes:
        """Read remote_path, refusing anything larger than max_bytes or not a regular file."""
        path = Path(remote_path)
        if path.is_symlink() or not path.is_file():
            raise IntegrityError(f"{self.name}: {remote_path} is not a regular file; refusing it")
        size = path.stat().st_size
        if size > max_bytes:
            raise IntegrityError(
                f"{self.name}: {remote_path} is {size} bytes, over the {max_bytes}-byte cap"
            )
        data = path.read_bytes()
        self.stats.received += len(data)
        return data

    def home(self) -> str:
        """The box's root folder."""
        return str(self.root)

    def close(self) -> None:
        """Nothing to release."""


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
