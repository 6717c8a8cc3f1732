"""Collection: a box's caches kept under a size and age cap, and what interrupted runs left.
Runs on boxes; stdlib only; imports charpin_runner.caches.{locks,store}.

Removed, in this order, never anything in use (a leased entry, a run folder whose agent lives,
an entry being built): the trash of interrupted removals; staging folders nobody builds in;
run folders whose run is over (an interrupted run's; a `--keep` one once it is older than the
age cap); condemned and one-off entries; entries unused for longer than the age cap; runner
folders beyond the few most recently used; then least recently used entries until the total
is under the size cap. Lock files of entries that are gone go last. One collector at a time
(`locks/gc.lock`); every run's clean-up runs one, so the box keeps the cap by itself.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from charpin_runner.caches import locks
from charpin_runner.caches.store import KINDS, ONE_OFF, RUNS, Store, remove_tree
from charpin_runner.errors import UsageError

DEFAULT_MAX_MB = 5 * 1024
DEFAULT_MAX_DAYS = 14.0
KEEP_RUNNERS = 3  # runner folders kept beyond the age cap: the most recently used
_LOCK_GRACE = 24 * 3600.0  # lock files of a removed entry outlive it this long (journals)
_PID_PART = re.compile(r"\.(?:part|init)-(\d+)\Z")
_LOCK_SUFFIXES = ("lock", "build", "lease", "journal", "condemned", "kept")


@dataclass(frozen=True)
class Cap:
    """How much a box may keep: total megabytes of its caches and run folders, and days an
    entry may go unused."""

    max_mb: int = DEFAULT_MAX_MB
    max_days: float = DEFAULT_MAX_DAYS

    @classmethod
    def from_request(cls, value: Any) -> Optional[Cap]:
        """A cap from a request frame's `{"max_mb": N, "max_days": D}`, None when absent."""
        if not isinstance(value, dict):
            return None
        max_mb, max_days = (
            value.get("max_mb", DEFAULT_MAX_MB),
            value.get("max_days", DEFAULT_MAX_DAYS),
        )
        if not isinstance(max_mb, int) or isinstance(max_mb, bool) or max_mb < 0:
            raise UsageError(f"box protocol: cache cap max_mb {max_mb!r} is not a size in MB")
        if not isinstance(max_days, (int, float)) or isinstance(max_days, bool) or max_days < 0:
            raise UsageError(f"box protocol: cache cap max_days {max_days!r} is not a day count")
        return cls(max_mb=max_mb, max_days=float(max_days))

    def as_request(self) -> dict[str, Any]:
        return {"max_mb": self.max_mb, "max_days": self.max_days}


@dataclass
class Item:
    """One thing collection may remove: an entry, a run folder or a leftover."""

    kind: str  # venvs, repos, runners, runs, stage, trash
    name: str
    path: Path
    size: int
    last_used: float
    in_use: bool = False
    condemned: bool = False
    kept: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "bytes": self.size, "in_use": self.in_use}


@dataclass
class Report:
    """What a collection found and did (or, dry, would do)."""

    root: str
    cap: Cap
    dry_run: bool
    before: int = 0
    after: int = 0
    removed: list[tuple[Item, str]] = field(default_factory=list)
    in_use: list[Item] = field(default_factory=list)
    held: list[Item] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "cap": self.cap.as_request(),
            "dry_run": self.dry_run,
            "bytes_before": self.before,
            "bytes_after": self.after,
            "removed": [{**item.as_dict(), "why": why} for item, why in self.removed],
            "in_use": [item.as_dict() for item in self.in_use],
            "kept": [item.as_dict() for item in self.held],
        }


def collect(root: Path, cap: Cap, *, dry_run: bool = False, now: Optional[float] = None) -> Report:
    """Bring root's caches under cap (or, dry, say what that would remove)."""
    report = Report(root=str(root), cap=cap, dry_run=dry_run)
    if not root.is_dir():
        return report
    store = Store(root)
    now = time.time() if now is None else now
    with locks.held(root / "locks" / "gc.lock", exclusive=True):
        items = _inventory(store)
        report.before = sum(i.size for i in items)
        report.in_use = [i for i in items if i.in_use]
        total = report.before
        for item, why in _plan(items, cap, now):
            if dry_run or _remove(store, item):
                report.removed.append((item, why))
                total -= item.size
            else:
                report.in_use.append(item)  # taken into use while we looked
        if not dry_run:
            _drop_stale_locks(store, now)
        report.after = total
        removed = {id(i) for i, _ in report.removed}
        report.held = [i for i in items if id(i) not in removed and not i.in_use]
    return report


def mark_kept(run: Path) -> None:
    """A run folder kept with --keep: collected only once older than the age cap."""
    root, run_id, folder = run.parent.parent.parent, run.parent.name, run.name
    marker = Store(root).lock_file(RUNS, f"{run_id}+{folder}", "kept")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()


def forget_run(run: Path) -> None:
    """Remove the lease file of a run folder that was just removed (its agent still holds the
    lease: a collector that opens the path meanwhile gets a new file, and finds no folder)."""
    root, run_id, folder = run.parent.parent.parent, run.parent.name, run.name
    try:
        os.unlink(Store(root).lock_file(RUNS, f"{run_id}+{folder}", "lease"))
    except OSError:
        pass


def _plan(items: list[Item], cap: Cap, now: float) -> list[tuple[Item, str]]:
    free = [i for i in items if not i.in_use]
    chosen: dict[int, str] = {}
    age = cap.max_days * 86400.0

    def take(item: Item, why: str) -> None:
        chosen.setdefault(id(item), why)

    for item in free:
        if item.kind == "trash":
            take(item, "left by an interrupted removal")
        elif item.kind == "stage":
            take(item, "left by an interrupted build")
        elif item.kind == RUNS and (not item.kept or now - item.last_used > age):
            take(
                item, "kept with --keep, older than the age cap" if item.kept else "its run is over"
            )
        elif item.kind in KINDS and item.condemned:
            take(item, "condemned (changed outside a journaled publication)")
        elif item.kind in KINDS and ONE_OFF in item.name:
            take(item, "a one-off entry its run no longer uses")
        elif item.kind in KINDS and now - item.last_used > age:
            take(item, f"unused for more than {cap.max_days:g} days")
    runners = sorted(
        (i for i in items if i.kind == "runners"), key=lambda i: i.last_used, reverse=True
    )
    for item in runners[KEEP_RUNNERS:]:
        if not item.in_use:
            take(item, f"an old runner (only the {KEEP_RUNNERS} most recently used are kept)")
    total = sum(i.size for i in items if id(i) not in chosen)
    limit = cap.max_mb * 1024 * 1024
    for item in sorted((i for i in free if i.kind in KINDS), key=lambda i: i.last_used):
        if total <= limit:
            break
        if id(item) not in chosen:
            take(item, f"least recently used, over the {cap.max_mb} MB cap")
            total -= item.size
    return [(i, chosen[id(i)]) for i in items if id(i) in chosen]


def _remove(store: Store, item: Item) -> bool:
    if item.kind in KINDS:
        return store.remove(item.kind, item.name)
    if item.kind == RUNS:
        run_id, _, folder = item.name.partition("/")
        lease = locks.hold(
            store.lock_file(RUNS, f"{run_id}+{folder}", "lease"), exclusive=True, wait=False
        )
        if lease is None:
            return False
        try:
            remove_tree(item.path)
            try:
                item.path.parent.rmdir()
            except OSError:
                pass
        finally:
            locks.free(lease)
        return True
    if item.kind == "stage" and _PID_PART.search(item.name) is None:
        # A venv's staging folder: removed under its build lock, so no build starts meanwhile.
        build = locks.hold(store.lock_file("venvs", item.name, "build"), exclusive=True, wait=False)
        if build is None:
            return False
        try:
            remove_tree(item.path)
        finally:
            locks.free(build)
        return True
    if item.kind == "stage" and _stage_busy(store, item.name):
        return False
    remove_tree(item.path)
    return True


def _inventory(store: Store) -> list[Item]:
    items: list[Item] = []
    for kind in KINDS:
        for path in _children(store.root / kind):
            name = path.name
            lease = store.lock_file(kind, name, "lease")
            items.append(
                Item(
                    kind=kind,
                    name=name,
                    path=path,
                    size=_size(path),
                    last_used=_mtime(lease) or _mtime(path),
                    in_use=locks.busy(lease),
                    condemned=store.condemned(kind, name),
                )
            )
    for run_dir in _children(store.root / RUNS):
        folders = _children(run_dir)
        if not folders and run_dir.is_dir():
            try:
                run_dir.rmdir()  # an empty run-id folder: nothing to account for
            except OSError:
                pass
        for folder in folders:
            key = f"{run_dir.name}+{folder.name}"
            lease = store.lock_file(RUNS, key, "lease")
            items.append(
                Item(
                    kind=RUNS,
                    name=f"{run_dir.name}/{folder.name}",
                    path=folder,
                    size=_size(folder),
                    last_used=_mtime(folder),
                    in_use=locks.busy(lease),
                    kept=store.lock_file(RUNS, key, "kept").exists(),
                )
            )
    for path in _children(store.root / "stage"):
        items.append(
            Item(
                kind="stage",
                name=path.name,
                path=path,
                size=_size(path),
                last_used=_mtime(path),
                in_use=_stage_busy(store, path.name),
            )
        )
    for path in _children(store.root / "trash"):
        items.append(Item("trash", path.name, path, _size(path), _mtime(path)))
    return items


def _stage_busy(store: Store, name: str) -> bool:
    """A staging folder is busy while its builder lives: a venv's build lock is held, a runner
    or repository being placed names its (living) process."""
    found = _PID_PART.search(name)
    if found is not None:
        return _alive(int(found.group(1)))
    return locks.busy(store.lock_file("venvs", name, "build"))


def _drop_stale_locks(store: Store, now: float) -> None:
    """Lock files of entries that are gone (and of run folders that are gone), once old and
    free: removed only while held exclusively, so a waiter retries on a new file."""
    folders = store.root / "locks"
    for kind in (*KINDS, RUNS):
        for path in _children(folders / kind):
            name, dot, suffix = path.name.rpartition(".")
            if not dot or suffix not in _LOCK_SUFFIXES or now - (_mtime(path) or now) < _LOCK_GRACE:
                continue
            if kind == RUNS:
                run_id, _, folder = name.partition("+")
                gone = not (store.root / RUNS / run_id / folder).exists()
            else:
                gone = not os.path.lexists(store.entry(kind, name))
            if not gone:
                continue
            fd = locks.hold(path, exclusive=True, wait=False)
            if fd is None:
                continue
            try:
                os.unlink(path)
            except OSError:
                pass
            finally:
                locks.free(fd)


def _children(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def _size(path: Path) -> int:
    """Bytes on disk under path (links not followed; a hard-linked file counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    total += st.st_blocks * 512
    if not os.path.isdir(path) or os.path.islink(path):
        return total
    for folder, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if st.st_nlink > 1 and not os.path.isdir(os.path.join(folder, name)):
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def _mtime(path: Path) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
