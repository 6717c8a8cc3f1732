"""Hash watched fixture roots before and after a run, and diff the two. Runs on boxes; stdlib only.

The walk never follows a symlink: a link is recorded with its target text, and a link that
resolves outside its watched root is also listed as escaping (the go-witness GHSA-v6px-jqx8-8xwj
lesson). Regular files are opened with O_NOFOLLOW and re-checked with fstat, so a file swapped
for a link or a fifo between the walk and the read is never followed and never blocks.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from charpin_runner.errors import ConfigError
from charpin_runner.receipt import FileKind, FileState, Fixtures

# Top-level folders never hashed even when a root covers the whole repository.
_SKIP_TOP = (".git", ".charpin")
_CHUNK = 1 << 20
_LOCAL = threading.local()


@dataclass(frozen=True)
class Snapshot:
    """One walk of every watched root: entries by repo-relative path, plus what was odd."""

    roots: list[str]
    files: dict[str, FileState]
    escaping: list[str]
    missing: list[str]


def printable(path: str) -> str:
    """Return path as valid UTF-8 text (undecodable bytes become backslash escapes)."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def check_roots(roots: Sequence[str], key: str = "watch") -> list[str]:
    """Normalise watched roots; an absolute root or one with `..` is a ConfigError."""
    clean: list[str] = []
    for root in roots:
        pure = PurePosixPath(root)
        if root == "" or pure.is_absolute() or ".." in pure.parts or "\\" in root:
            raise ConfigError(
                f"[tool.charpin] {key} entry {root!r} must be a relative path inside the "
                "repository without '..'; fix it in pyproject.toml"
            )
        clean.append(str(pure))
    return sorted(set(clean))


def hash_file(path: str) -> str | None:
    """sha256 of a regular file opened without following links; None when it is not one."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    with os.fdopen(fd, "rb", buffering=0) as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        digest = hashlib.sha256()
        view = _buffer()
        while True:
            count = handle.readinto(view)
            if not count:
                return digest.hexdigest()
            # hashlib drops the GIL for large updates, so worker threads hash in parallel.
            digest.update(view[:count])


def _buffer() -> memoryview:
    """A per-thread read buffer: allocating (and zeroing) 1 MiB per file costs more than a read."""
    view: memoryview | None = getattr(_LOCAL, "view", None)
    if view is None:
        view = _LOCAL.view = memoryview(bytearray(_CHUNK))
    return view


def hash_many(paths: Sequence[str]) -> list[str | None]:
    """hash_file over many paths with a small thread pool; results in input order."""
    if len(paths) < 4:
        return [hash_file(p) for p in paths]
    workers = min(8, (os.cpu_count() or 1) + 2)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(hash_file, paths, chunksize=8))


def snapshot(repo: Path, roots: Sequence[str]) -> Snapshot:
    """Walk and hash every watched root under repo (roots as returned by check_roots)."""
    entries: list[tuple[str, str, os.stat_result, str | None]] = []
    escaping: list[str] = []
    missing: list[str] = []
    repo_real = os.path.realpath(repo)
    for root in roots:
        top = os.path.join(str(repo), root)
        if not _inside(os.path.realpath(os.path.dirname(top)), repo_real):
            # A parent folder of the root was swapped for a link leading out of the repository.
            escaping.append(root)
            missing.append(root)
            continue
        try:
            st = os.lstat(top)
        except FileNotFoundError:
            missing.append(root)
            continue
        root_real = os.path.realpath(top) if stat.S_ISDIR(st.st_mode) else repo_real
        for rel, full, est in _walk(top, root, st):
            target = os.readlink(full) if stat.S_ISLNK(est.st_mode) else None
            if target is not None and not _inside(os.path.realpath(full), root_real):
                escaping.append(rel)
            entries.append((rel, full, est, target))
    return _build(list(roots), entries, escaping, missing)


def _build(
    roots: list[str],
    entries: list[tuple[str, str, os.stat_result, str | None]],
    escaping: list[str],
    missing: list[str],
) -> Snapshot:
    regular = [full for _, full, est, _ in entries if stat.S_ISREG(est.st_mode)]
    digests = dict(zip(regular, hash_many(regular)))
    files: dict[str, FileState] = {}
    for rel, full, est, target in entries:
        kind = _kind(est.st_mode)
        files[printable(rel)] = FileState(
            path=printable(rel),
            kind=kind,
            mode=stat.S_IMODE(est.st_mode),
            sha256=digests.get(full) if kind == "file" else None,
            target=printable(target) if target is not None else None,
        )
    return Snapshot(
        roots=roots,
        files=dict(sorted(files.items())),
        escaping=sorted({printable(e) for e in escaping}),
        missing=sorted(missing),
    )


def _walk(top: str, rel_top: str, st: os.stat_result) -> Iterator[tuple[str, str, os.stat_result]]:
    if not stat.S_ISDIR(st.st_mode):
        yield rel_top, top, st
        return
    stack = [(top, rel_top)]
    while stack:
        folder, rel_folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                children = list(it)
        except OSError:
            continue
        for entry in children:
            rel = entry.name if rel_folder == "." else f"{rel_folder}/{entry.name}"
            if rel_folder == "." and entry.name in _SKIP_TOP:
                continue
            est = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(est.st_mode):
                stack.append((entry.path, rel))
            else:
                yield rel, entry.path, est


def _kind(mode: int) -> FileKind:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def diff(before: Snapshot, after: Snapshot) -> Fixtures:
    """Compare two snapshots of the same roots into the receipt's fixtures block."""
    old, new = before.files, after.files
    common = sorted(set(old) & set(new))
    type_changed = [p for p in common if old[p].kind != new[p].kind]
    same_kind = [p for p in common if old[p].kind == new[p].kind]
    changed = [
        p for p in same_kind if (old[p].sha256, old[p].target) != (new[p].sha256, new[p].target)
    ]
    return Fixtures(
        roots=list(before.roots),
        before=list(old.values()),
        after=list(new.values()),
        added=sorted(set(new) - set(old)),
        removed=sorted(set(old) - set(new)),
        changed=changed,
        type_changed=type_changed,
        mode_changed=[p for p in same_kind if old[p].mode != new[p].mode],
        escaping_symlinks=_union(before.escaping, after.escaping),
        missing_roots=_union(before.missing, after.missing),
    )


def _union(first: Iterable[str], second: Iterable[str]) -> list[str]:
    return sorted(set(first) | set(second))
