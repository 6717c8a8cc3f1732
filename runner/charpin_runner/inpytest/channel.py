"""The probe's record channel, and its check for code that changed the probe. Runs inside the
tests' pytest; stdlib only.

The record goes to `--charpin-receipt`: a path (the probe used by hand), or `fd:N`, the write
end of a pipe that `charpin receipt` drains as the run goes (rule 5: a line sent cannot be taken
back). Tampering is judged by content, not identity: a function whose code object, defaults or
globals were swapped in place, a constant table edited in place, or a record handle whose file
descriptor now points elsewhere (dup2) all differ from what was fingerprinted at import, before
any code of the checkout ran.
"""

from __future__ import annotations

import hashlib
import os
import types
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, Optional

_FD = "fd:"


def open_record(value: str, base: Path) -> IO[str]:
    """The record's handle, line buffered (a run cut short keeps every line written so far).
    OSError when it cannot be opened."""
    if value.startswith(_FD):
        fd = _fd_number(value)
        return os.fdopen(fd, "w", buffering=1, encoding="utf-8", newline="\n")
    return open(Path(base, value), "w", buffering=1, encoding="utf-8", newline="\n")


def append_line(value: str, base: Path, line: str) -> None:
    """One line added to the record before the probe itself exists (a conftest that broke)."""
    data = (line + "\n").encode("utf-8")
    if value.startswith(_FD):
        os.write(_fd_number(value), data)
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
