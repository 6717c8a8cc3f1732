"""Entries of a box's caches: where they live, who may use them and who may remove them. Runs
on boxes; stdlib only; imports charpin_runner.caches.{locks,journal}.

Under the cache root (`~/.cache/charpin`, the clean box's own folder on this machine):

    venvs/<key>  repos/<key>.git  runners/<name>   entries, each published whole by a rename
    stage/<name>                 entries being built (nothing runs from here)
    trash/                       entries being removed
    locks/<kind>/<name>.lock     publish lock: exclusive to publish, fetch into or remove the
                                 entry; shared to read one consistent state of it
    locks/<kind>/<name>.build    build lock: one builder of an entry at a time
    locks/<kind>/<name>.lease    lease: held shared by every agent using the entry, until that
                                 agent ends; its mtime is the entry's last use
    locks/<kind>/<name>.journal  publication journal (caches/journal.py)
    locks/<kind>/<name>.condemned  the entry must not be used again; removed once unleased
    locks/runs/<run-id>+<box>.lease  runs/<run-id>/<box> is in use

An entry is removed only under its publish lock and only when nobody holds its lease; one that
is in use and must not be used again is condemned instead, and whoever finds it unleased later
removes it. A run that needs an entry whose name is condemned but still in use builds a one-off
entry (`<name>~<hex>`) that nobody else looks up and the collector removes once unleased.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from charpin_runner.caches import journal, locks

KINDS = ("venvs", "repos", "runners")
ONE_OFF = "~"
RUNS = "runs"


class Store:
    """The cache root of one box."""

    def __init__(self, root: Path) -> None:
        self.root = root

    # -- where things are ---------------------------------------------------------------------

    def entry(self, kind: str, name: str) -> Path:
        return self.root / kind / name

    def lock_file(self, kind: str, name: str, what: str) -> Path:
        return self.root / "locks" / kind / f"{name}.{what}"

    def journal(self, kind: str, name: str) -> Path:
        return self.lock_file(kind, name, "journal")

    def stage(self, name: str) -> Path:
        """Where an entry is built before it is published (same length as venvs/<name> and
        repos/<name>, so a path baked into a venv's scripts can be rewritten in place)."""
        return self.root / "stage" / name

    @staticmethod
    def one_off(name: str) -> str:
        """A private name for an entry whose usual name is condemned but still in use."""
        stem, dot, ext = name.partition(".")
        return f"{stem}{ONE_OFF}{secrets.token_hex(4)}{dot}{ext}"

    # -- locks and leases ---------------------------------------------------------------------

    @contextmanager
    def publishing(self, kind: str, name: str, *, exclusive: bool = True) -> Iterator[None]:
        with locks.held(self.lock_file(kind, name, "lock"), exclusive=exclusive):
            yield

    @contextmanager
    def building(self, kind: str, name: str) -> Iterator[None]:
        with locks.held(self.lock_file(kind, name, "build"), exclusive=True):
            yield

    def lease(self, kind: str, name: str) -> int:
        """A shared lease on the entry, held until the fd is closed (or its holder dies)."""
        path = self.lock_file(kind, name, "lease")
        fd = locks.hold(path, exclusive=False)
        assert fd is not None
        try:
            os.utime(str(path))  # the entry's last use, for least-recently-used collection
        except OSError:
            pass
        return fd

    def lease_run(self, run_id: str, folder: str) -> int:
        fd = locks.hold(self.lock_file(RUNS, f"{run_id}+{folder}", "lease"), exclusive=False)
        assert fd is not None
        return fd

    def in_use(self, kind: str, name: str) -> bool:
        return locks.busy(self.lock_file(kind, name, "lease"))

    def condemned(self, kind: str, name: str) -> bool:
        return self.lock_file(kind, name, "condemned").exists()

    def condemn(self, kind: str, name: str) -> None:
        marker = self.lock_file(kind, name, "condemned")
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()

    # -- states -------------------------------------------------------------------------------

    def current(self, kind: str, name: str) -> bool:
        """True when the entry exists, is not condemned and is exactly as its last journal
        record left it (call under its publish lock, shared or exclusive)."""
        if self.condemned(kind, name) or not self.entry(kind, name).is_dir():
            return False
        newest = journal.last(journal.records(self.journal(kind, name)))
        return newest is not None and newest == journal.state(self.entry(kind, name))

    def record(self, kind: str, name: str, before: str, what: str) -> str:
        """Journal the entry's change from before to its state now (caller holds the publish
        lock exclusively); returns the state now."""
        after = journal.state(self.entry(kind, name))
        journal.append(self.journal(kind, name), before, after, what)
        return after

    # -- removal ------------------------------------------------------------------------------

    def remove_locked(self, kind: str, name: str) -> bool:
        """Remove the entry when nobody leases it (caller holds its publish lock exclusively);
        False when it is in use."""
        lease = locks.hold(self.lock_file(kind, name, "lease"), exclusive=True, wait=False)
        if lease is None:
            return False
        try:
            path = self.entry(kind, name)
            trash: Optional[Path] = None
            if os.path.lexists(path):
                before = journal.state(path)
                trash = self.root / "trash" / f"{kind}-{name}-{os.getpid()}-{secrets.token_hex(3)}"
                trash.parent.mkdir(parents=True, exist_ok=True)
                os.rename(path, trash)
                journal.append(self.journal(kind, name), before, journal.ABSENT, "remove")
            try:
                os.unlink(self.lock_file(kind, name, "condemned"))
            except FileNotFoundError:
                pass
        finally:
            locks.free(lease)
        if trash is not None:
            remove_tree(trash)
        return True

    def remove(self, kind: str, name: str) -> bool:
        with self.publishing(kind, name):
            return self.remove_locked(kind, name)

    def discard(self, kind: str, name: str) -> str:
        """An entry that must not be used again: "removed" now, or "condemned" while in use."""
        with self.publishing(kind, name):
            if self.remove_locked(kind, name):
                return "removed"
            self.condemn(kind, name)
            return "condemned"


def store_of(entry: Path) -> tuple[Store, str, str]:
    """(store, kind, name) of an entry path `<root>/<kind>/<name>`."""
    return Store(entry.parent.parent), entry.parent.name, entry.name


def remove_tree(path: Path) -> None:
    """Remove a folder or file, never following links; what cannot be removed stays."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def age_seconds(path: Path, now: Optional[float] = None) -> float:
    try:
        return (now or time.time()) - os.lstat(path).st_mtime
    except OSError:
        return 0.0
