"""The probe's record channel, and its check for code that changed the probe. Runs inside the
tests' pytest; stdlib only.

The record goes to `--charpin-receipt`: a path (the probe used by hand), or `fd:N`, the write
end of a pipe that `charpin receipt` drains as the run goes (rule 5: a line sent cannot be taken
back). Tampering is judged by content, not identity: a function whose code object, defaults or
globals were swapped in place, a constant table edited in place, or a record handle whose file
descriptor now points elsewhere (dup2) all differ from what was fingerprinted at import, before
any code of the checkout ran.

Under charpin's boot (probehost.py) the pipe never stays on the descriptor named on the command
line: before anything of the checkout is importable, adopt() checks that it is the parent's pipe
(its identity, given by the parent), moves it to two private close-on-exec descriptors and closes
the named one. Every write checks the descriptor's identity first: a conftest that dup2()s its
own pipe over it is found at the next line, which goes through the spare copy with a `tampered`
line; when no copy is the pipe any more, the process ends at once (status 3), so nothing the
interposer forges can pass for a complete run.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import types
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, Optional, cast

_FD = "fd:"
# Where the private copies go: above what a test opens by itself (the lowest free number).
_PRIVATE_FLOOR = 512
# probehost.TRIPWIRE_STATUS: pytest's "internal error", never read as a verdict.
_LOST_STATUS = 3
Identity = tuple[int, int, int]


class Record:
    """The record's writer over the boot's private copies of the parent's pipe: every write
    first checks that the descriptor still is that pipe."""

    def __init__(self, named: int, fds: list[int], identity: Identity) -> None:
        self._named = named
        self._fds = fds
        self._identity = identity
        self._closed = False

    def fileno(self) -> int:
        return self._fds[0] if self._fds else -1

    @property
    def identity(self) -> tuple[int, int]:
        """The pipe's identity as the boot took it (every write checks it)."""
        return (self._identity[0], self._identity[1])

    def _usable(self) -> int:
        lost: list[int] = []
        while self._fds and fd_identity(self._fds[0]) != self._identity:
            lost.append(self._fds.pop(0))
            try:  # no longer ours: closed, so the interposer's own pipe sees its end
                os.close(lost[-1])
            except OSError:
                pass
        if not self._fds:
            sys.stderr.write(
                f"charpin: the probe's record channel (fd {self._named}) was replaced by the "
                "code under test; the run stops here\n"
            )
            sys.stderr.flush()
            os._exit(_LOST_STATUS)
        if lost:
            what = (
                f"the record's file descriptor (fd {self._named}, kept as fd "
                f"{', '.join(map(str, lost))}) now points elsewhere: the code under test "
                "replaced the probe's channel"
            )
            _write_all(self._fds[0], json.dumps({"kind": "tampered", "what": [what]}) + "\n")
        return self._fds[0]

    def write(self, text: str) -> int:
        if self._closed:
            raise ValueError("write to a closed charpin record")
        _write_all(self._usable(), text)
        return len(text)

    def flush(self) -> None:
        """Every write reaches the pipe at once."""

    def close(self) -> None:
        if self._closed:
            return
        self._usable()  # the end is checked too
        self._closed = True
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = []


def _write_all(fd: int, text: str) -> None:
    data = memoryview(text.encode("utf-8"))
    while data:
        data = data[os.write(fd, data) :]


class _Adopted:
    """The boot's records by the descriptor number named on the command line (an object, so
    that the tamper check compares it by identity: it is filled after the probe's import)."""

    def __init__(self) -> None:
        self.records: dict[int, Record] = {}


_ADOPTED = _Adopted()


def fd_identity(fd: int) -> Optional[Identity]:
    """What descriptor fd points at (device, inode, file type), or None when it is closed."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, stat.S_IFMT(st.st_mode))


def adopt(argv: list[str], expected: Optional[str]) -> Optional[str]:
    """charpin's boot, before any code of the checkout can run: take the record's descriptor
    (`--charpin-receipt=fd:N` in argv) over. expected is the parent's `DEV:INO` of its pipe.
    Returns a one-line reason when the descriptor is not that pipe (the boot refuses to run)."""
    values = [a[len("--charpin-receipt=") :] for a in argv if a.startswith("--charpin-receipt=")]
    if not values or not values[-1].startswith(_FD):
        return None
    try:
        named = _fd_number(values[-1])
    except OSError as exc:
        return str(exc)
    identity = fd_identity(named)
    if identity is None:
        return f"the probe's record descriptor fd {named} is not open"
    if expected is not None and f"{identity[0]}:{identity[1]}" != expected:
        return (
            f"the probe's record descriptor fd {named} is not the parent's pipe: something on "
            "the interpreter's start-up path replaced it"
        )
    fds = [_private_copy(named), _private_copy(named)]
    os.close(named)
    _ADOPTED.records[named] = Record(named, fds, identity)
    return None


def _private_copy(fd: int) -> int:
    import fcntl

    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _PRIVATE_FLOOR)
    except OSError:  # a descriptor limit below the floor
        return os.dup(fd)  # close-on-exec as well (PEP 446)


def open_record(value: str, base: Path) -> IO[str]:
    """The record's handle, line buffered (a run cut short keeps every line written so far).
    OSError when it cannot be opened."""
    if value.startswith(_FD):
        fd = _fd_number(value)
        adopted = _ADOPTED.records.get(fd)
        if adopted is not None:
            return cast(IO[str], adopted)
        return os.fdopen(fd, "w", buffering=1, encoding="utf-8", newline="\n")
    return open(Path(base, value), "w", buffering=1, encoding="utf-8", newline="\n")


def append_line(value: str, base: Path, line: str) -> None:
    """One line added to the record before the probe itself exists (a conftest that broke)."""
    data = (line + "\n").encode("utf-8")
    if value.startswith(_FD):
        fd = _fd_number(value)
        adopted = _ADOPTED.records.get(fd)
        if adopted is not None:
            adopted.write(line + "\n")
            return
        os.write(fd, data)
        return
    with open(Path(base, value), "ab") as handle:
        handle.write(data)


def _fd_number(value: str) -> int:
    try:
        fd = int(value[len(_FD) :])
    except ValueError:
        raise OSError(f"{value!r} is not fd:NUMBER") from None
    if fd < 0:
        raise OSError(f"{value!r} is not fd:NUMBER")
    return fd


def identity(handle: Optional[IO[str]]) -> Optional[tuple[int, int]]:
    """What the handle's descriptor points at (device, inode), or None when it is gone."""
    if handle is None:
        return None
    if isinstance(handle, Record):
        return handle.identity
    try:
        st = os.fstat(handle.fileno())
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def fingerprint(value: Any) -> object:
    """A content key for value: a function by its code, defaults and globals; a constant
    table by its contents; anything else by identity."""
    function = getattr(value, "__func__", value)
    if isinstance(function, types.FunctionType):
        return (
            _code_key(function.__code__),
            repr(function.__defaults__),
            repr(function.__kwdefaults__),
            id(function.__globals__),
            tuple(id(cell) for cell in function.__closure__ or ()),
        )
    if isinstance(value, (dict, frozenset, set, tuple, str)):
        return ("value", repr(value))
    return ("object", id(value))


def _code_key(code: types.CodeType) -> str:
    """A digest of what a code object does (marshal's bytes vary with reference counts)."""
    digest = hashlib.sha256(code.co_code)
    for const in code.co_consts:
        digest.update(
            _code_key(const).encode() if isinstance(const, types.CodeType) else repr(const).encode()
        )
    for names in (code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars):
        digest.update(repr(names).encode())
    digest.update(repr((code.co_flags, code.co_argcount, code.co_kwonlyargcount)).encode())
    return digest.hexdigest()


def fingerprints(items: Iterable[tuple[str, Any]]) -> dict[str, object]:
    """name -> fingerprint for each (name, value)."""
    return {name: fingerprint(value) for name, value in items}


def changed(before: dict[str, object], now: dict[str, object]) -> list[str]:
    """The names whose fingerprint moved."""
    return [name for name, key in before.items() if now.get(name) != key]
