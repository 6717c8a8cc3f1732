"""charpin's own folder in a repository, `.charpin/`, which ignores itself. Runs everywhere;
stdlib only.

Receipts, run folders, verify folders and failing pins' outputs all go under `.charpin/` by
default. The folder holds a `.gitignore` of `*`, so none of it shows in `git status`, is swept in
by `git add -A`, or counts as an untracked file in the next receipt.
"""

from __future__ import annotations

from pathlib import Path

OWN = ".charpin"
_IGNORE = "# written by charpin: nothing in this folder belongs in git\n*\n"


def ensure_folder(repo: Path, folder: Path) -> None:
    """Create folder (and parents); when it lies in repo's `.charpin/`, that folder ignores
    itself (its `.gitignore` is written when missing, never changed when present)."""
    own = repo / OWN
    inside = folder == own or own in folder.parents
    if inside:
        own.mkdir(exist_ok=True)
        ignore = own / ".gitignore"
        if not ignore.exists():
            ignore.write_text(_IGNORE, encoding="utf-8")
    folder.mkdir(parents=True, exist_ok=True)
