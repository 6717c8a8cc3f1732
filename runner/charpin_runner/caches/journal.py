"""The publication journal of a cache entry: every change charpin itself makes to an entry, as
(state before, state after), appended under the entry's publish lock. Runs on boxes; stdlib only.

A state is a fingerprint of the entry's stat snapshot (sandbox.snapshot: inode, mode, size,
mtime and ctime of every file, byte-code caches included, paths relative to the entry): any
write moves it, and an unprivileged process cannot set a ctime back. Two readers use it:

* a run's cache watch (sandbox.finish) accepts a change to an entry during the run only when a
  chain of journal records leads from the state it saw before the tests to the state it sees
  after: what a concurrent setup, fetch or collection did, under its lock, is theirs;
* a run about to use an entry checks that the entry is still in the state of its last record,
  so a change nobody journaled (a test that was never watched, a crash mid-run) is never used.

The journal lives in `locks/`, read-only to the tests under bubblewrap. Without bubblewrap a
test runs as the box user and could append a forged record; ARCHITECTURE.md says what that
leaves open.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Optional

ABSENT = "-"
_MAX_BYTES = 1 << 20  # a journal longer than this is read from its end


def fingerprint(snap: Mapping[str, tuple[int, ...]], entry: str) -> str:
    """The state of entry (an absolute path) in a snapshot taken with sandbox.snapshot."""
    prefix = entry.rstrip(os.sep) + os.sep
    items = sorted(
        ("" if path == entry else path[len(prefix) :], value)
        for path, value in snap.items()
        if path == entry or path.startswith(prefix)
    )
    if not items or items == [("", (-1,))]:
        return ABSENT
    digest = hashlib.sha256()
    for rel, value in items:
        digest.update(os.fsencode(rel) + b"\0" + ",".join(map(str, value)).encode() + b"\n")
    return digest.hexdigest()


def state(entry: Path) -> str:
    """The entry's state now (walks it; call it under the entry's publish lock)."""
    from charpin_runner.sandbox import snapshot  # the one walk the cache watch uses too

    path = str(entry)
    return fingerprint(snapshot((path,), (path,)), path)


def append(journal: Path, before: str, after: str, what: str) -> None:
    """Record one change (caller holds the entry's publish lock)."""
    if before == after:
        return
    journal.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(
        {"from": before, "to": after, "what": what, "pid": os.getpid(), "t": round(time.time(), 3)},
        separators=(",", ":"),
    )
    fd = os.open(str(journal), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, line.encode("ascii") + b"\n")
    finally:
        os.close(fd)


def records(journal: Path) -> list[tuple[str, str]]:
    """(before, after) of every record, oldest first; lines that do not parse are skipped."""
    try:
        with open(journal, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - _MAX_BYTES))
            data = handle.read()
    except OSError:
        return []
    found = []
    for line in data.splitlines():
        try:
            item = json.loads(line)
            found.append((str(item["from"]), str(item["to"])))
        except (ValueError, KeyError, TypeError):
            continue
    return found


def last(recorded: Sequence[tuple[str, str]]) -> Optional[str]:
    """The state the newest record left the entry in (None when there is no record)."""
    return recorded[-1][1] if recorded else None


def explains(recorded: Iterable[tuple[str, str]], before: str, after: str) -> bool:
    """True when a chain of records leads from before to after."""
    if before == after:
        return True
    current = before
    for old, new in recorded:
        if old == current:
            current = new
            if current == after:
                return True
    return False
