"""Everything under a repository's git directory, and what a run changed there. Runs on boxes;
stdlib only.

Rule 4 of the threat model, deny by default: a test can write `.git/`, and what it writes there
can change what every later git command reads (a replace ref, a graft, an alternate object
store, a commit-graph or pack index pointing an id at other bytes, a hook, config). So the parent
takes a stat key of every file under the git directory before and after the run, and every
change is a finding, except what git itself does while it only reads or only adds: the index's
stat refresh, reflogs, lock files, and new loose objects (a new id cannot change what an
existing name means). Stat keys include the change time, which no unprivileged process can set
back.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Optional

# Past this many files the watch stops and says so (a repository with millions of loose
# objects); the finding is then "not fully watched", never silence.
MAX_ENTRIES = 500_000
TRUNCATED = "<more files than charpin watches>"
_LOOSE = re.compile(r"objects/[0-9a-f]{2}/[0-9a-f]{38,62}")


def snapshot(folders: list[Path], label: Callable[[Path], str]) -> dict[str, str]:
    """label -> stat key of every file and link under folders (each walked once)."""
    out: dict[str, str] = {}
    seen: set[str] = set()
    for folder in folders:
        real = os.path.realpath(folder)
        if real in seen or not os.path.isdir(real):
            continue
        seen.add(real)
        for top, dirs, files in os.walk(real):
            dirs.sort()
            for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
                path = os.path.join(top, name)
                out[label(Path(path))] = _key(path)
                if len(out) >= MAX_ENTRIES:
                    out[TRUNCATED] = "truncated"
                    return out
    return out


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Every file the run added, changed or removed under the git directory that git does not
    touch while only reading, each as `LABEL (added|changed|removed)`."""
    out = []
    for label in sorted(set(before) | set(after)):
        old, new = before.get(label), after.get(label)
        if old == new or _harmless(label, old, new):
            continue
        what = "added" if old is None else "removed" if new is None else "changed"
        out.append(f"{label} ({what})")
    return out


def _harmless(label: str, old: Optional[str], new: Optional[str]) -> bool:
    rel = label[len(".git/") :] if label.startswith(".git/") else label
    name = rel.rsplit("/", 1)[-1]
    if rel == "index" or rel.startswith("logs/") or name.endswith(".lock"):
        return True
    if rel.startswith("objects/pack/tmp_"):
        return True  # git's own temporary files while it writes a pack; never read as one
    # A new loose object: its id is new, so no name git could read before means anything else.
    return old is None and new is not None and _LOOSE.fullmatch(rel) is not None


def _key(path: str) -> str:
    try:
        st = os.lstat(path)
    except OSError:
        return "unreadable"
    if stat.S_ISLNK(st.st_mode):
        try:
            return "link:" + os.readlink(path)
        except OSError:
            return "link:?"
    return f"{st.st_ino}:{st.st_mode}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
