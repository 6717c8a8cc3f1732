"""Copies charpin makes of a checkout's folders for a run. Runs on boxes; stdlib only; pure.

Class E of the threat model (what the commit's code can write is never trusted later): a
committed symbolic link is the commit's to choose, and a copy made by charpin's own (unsandboxed)
process must not follow one out of the checkout. A pin's `fixtures` folder that is a link to
`~/.ssh` was copied whole into the pin's folder, where the pin printed the key. Every folder
charpin copies is checked here first: its real path must lie inside the repository; links
inside it are copied as links (`symlinks=True`), never followed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Optional


def outside(repo: Path, source: Path) -> Optional[str]:
    """The real path source leads to when that is outside repo (through a link of its own or
    of a parent folder), else None."""
    top, real = os.path.realpath(repo), os.path.realpath(source)
    if real == top or real.startswith(top.rstrip(os.sep) + os.sep):
        return None
    return real


def refusal(what: str, rel: str, real: str) -> str:
    """The one line a refused copy gives."""
    return (
        f"{what} {rel} leads to {real}, outside the repository (a symbolic link): charpin "
        "copies nothing from outside the checkout; commit the files themselves"
    )


def copy_folder(source: Path, dest: Path) -> None:
    """Copy a folder already checked with outside(); links inside it stay links."""
    shutil.copytree(source, dest, symlinks=True)
