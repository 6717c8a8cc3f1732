"""flock(2) locks on files that a collector may remove meanwhile. Runs on boxes; stdlib only.

A lock file is opened, locked, and then checked to still be the file at its path: a collector
removes a lock file only while it holds it exclusively, so whoever locked the old (unlinked)
file retries on the new one, and two processes never believe they hold "the" lock on two
different files. The kernel drops a lock when its holder dies, so a crashed run never leaves a
stale lock or lease behind.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional


def hold(path: Path, *, exclusive: bool, wait: bool = True) -> Optional[int]:
    """The fd holding path's lock (shared or exclusive), or None when wait is False and
    another process holds a conflicting lock. The fd is not inherited by children."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB)
    while True:
        fd = os.open(str(path), os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, mode)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.stat(str(path)).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # removed while we waited: lock the file that is there now


def free(fd: Optional[int]) -> None:
    """Release a lock taken with hold() (closing the fd drops the flock)."""
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


@contextmanager
def held(path: Path, *, exclusive: bool) -> Iterator[int]:
    """hold() for a with block (always waits)."""
    fd = hold(path, exclusive=exclusive)
    assert fd is not None
    try:
        yield fd
    finally:
        free(fd)


def busy(path: Path) -> bool:
    """True when some process holds path's lock (a lease): tried exclusively, without waiting,
    and released at once. Meaningful only while the caller stops new holders (publish lock)."""
    fd = hold(path, exclusive=True, wait=False)
    if fd is None:
        return True
    free(fd)
    return False
