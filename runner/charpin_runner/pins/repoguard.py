"""Notice writes into the repository during a replay and find the pins that made them. Stdlib only.

Python targets run from the repository itself, so a target can write next to its own __file__.
The normal path is cheap: one stat snapshot of the repository before the whole batch and one
after. Only when they differ are the pins replayed again, one by one, each between two snapshots,
in a scratch copy of the repository from which the newly appeared paths are left out (so a
write-once cache is written again), while the real repository is watched too (for targets
given an absolute path into it). The user's repository is never restored or cleaned: the
paths are reported so the user can remove them.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from charpin_runner.errors import CharpinError
from charpin_runner.pins.execute import Session, run_case
from charpin_runner.pins.model import Case

# Version control, charpin's own folder and tool caches are written by other programs all the
# time; watching them would blame pins for what an editor or a linter did.
SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".charpin",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        ".tox",
        ".nox",
    }
)

Snapshot = dict[str, tuple[int, int, int]]


def snapshot(repo: Path) -> Snapshot:
    """Repo-relative path -> (mode, size, mtime_ns) of every entry outside SKIP_DIRS.

    Folders record their mode only: what changes inside them shows up as entries of their own.
    """
    out: Snapshot = {}
    stack = [(str(repo), "")]
    while stack:
        folder, prefix = stack.pop()
        try:
            entries = os.scandir(folder)
        except OSError:
            continue
        with entries:
            for entry in entries:
                rel = prefix + entry.name
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if entry.name in SKIP_DIRS:
                        continue
                    out[rel] = (st.st_mode, 0, 0)
                    stack.append((entry.path, rel + "/"))
                else:
                    out[rel] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def changed(before: Snapshot, after: Snapshot) -> list[str]:
    """Repo-relative paths that appeared, disappeared or changed between two snapshots."""
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


@dataclass(frozen=True)
class Attribution:
    """Which pins write into the repository, and the changed paths no pin wrote again."""

    by_pin: dict[str, list[str]] = field(default_factory=dict)
    unexplained: list[str] = field(default_factory=list)


def attribute(
    session: Session, cases: list[Case], paths: list[str], before: Snapshot
) -> Attribution:
    """Replay cases one at a time in a scratch copy of the repository to see who writes there.

    paths are the repository changes seen during the batch; those absent from before are left
    out of the copy, so a pin that only writes a file when it is missing writes it again.
    """
    appeared = {p for p in paths if p not in before}
    scratch_root = Path(tempfile.mkdtemp(prefix="repo-copy.", dir=str(session.dir)))
    scratch = scratch_root / session.repo.name

    def ignore(folder: str, names: list[str]) -> set[str]:
        rel = os.path.relpath(folder, session.repo)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        return {n for n in names if n in SKIP_DIRS or prefix + n in appeared}

    by_pin: dict[str, list[str]] = {}
    try:
        shutil.copytree(session.repo, scratch, symlinks=True, ignore=ignore)
        with Session(scratch, session.config, python=session.python, within=session.dir) as copy:
            outer = session.wrap
            if outer is not None:
                # In the same sandbox as the pins themselves: the copy and its pins' folders
                # all lie inside this session's folder, which the pins may write.
                copy.wrap = lambda argv, _folder: outer(argv, str(session.dir))
            for case in cases:
                start = snapshot(scratch)
                # A target given an absolute path into the repository (an env value, say) writes
                # there even from the copy, so the real repository is watched as well.
                start_real = snapshot(session.repo)
                try:
                    run_case(copy, case)
                except CharpinError:
                    continue
                end = snapshot(scratch)
                written = sorted(
                    {*changed(start, end), *changed(start_real, snapshot(session.repo))}
                )
                if written:
                    by_pin[case.id] = written
                # Each pin starts from the same copy: what one pin created (a write-once cache)
                # must not hide that the next pin would create it too.
                _remove_new(scratch, start, end)
    finally:
        shutil.rmtree(scratch_root, ignore_errors=True)
    explained = {p for written in by_pin.values() for p in written}
    return Attribution(by_pin, [p for p in paths if p not in explained])


def _remove_new(scratch: Path, start: Snapshot, end: Snapshot) -> None:
    for rel in sorted(set(end) - set(start), reverse=True):
        path = scratch / rel
        if stat.S_ISDIR(end[rel][0]):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                path.unlink()
            except OSError:
                pass


def describe(paths: list[str], limit: int = 5) -> str:
    """A short list of repository paths for a one-line message."""
    shown = ", ".join(paths[:limit])
    if len(paths) > limit:
        shown += f" and {len(paths) - limit} more"
    return shown
