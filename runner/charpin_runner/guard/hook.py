"""Write the git pre-commit hook that runs `charpin guard --staged`. Runs on any box; stdlib only.

The hook calls the interpreter and the charpin_runner copy that installed it (absolute paths), so
it works whether charpin was installed with pip, run from a checkout, or shipped as a zipapp.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import charpin_runner
from charpin_runner.errors import UsageError
from charpin_runner.guard import gitio
from charpin_runner.receipt import write_atomic

MARKER = "# charpin-guard hook"


def hook_text() -> str:
    """The shell script; PYTHONPATH points at the folder (or .pyz) holding charpin_runner."""
    package_root = Path(charpin_runner.__file__).resolve().parent.parent
    python = shlex.quote(sys.executable)
    root = shlex.quote(str(package_root))
    return (
        "#!/bin/sh\n"
        f"{MARKER} (written by `charpin guard install`; rerun it to update)\n"
        "# Refuses a commit that changes pins and production code together.\n"
        f'PYTHONPATH={root}"${{PYTHONPATH:+:$PYTHONPATH}}"\n'
        "export PYTHONPATH\n"
        f"exec {python} -m charpin_runner guard --staged\n"
    )


def install_hook(repo: Path, *, force: bool) -> tuple[Path, Path | None]:
    """Write the pre-commit hook; returns (hook path, backup path if a foreign hook was moved)."""
    hook = gitio.hooks_dir(repo) / "pre-commit"
    backup: Path | None = None
    if hook.exists() or hook.is_symlink():
        if not _is_ours(hook):
            if not force:
                raise UsageError(
                    f"{hook} exists and is not a charpin hook; add `charpin guard --staged` to it "
                    "yourself, or pass --force to replace it (a .bak copy is kept)"
                )
            backup = hook.with_name("pre-commit.bak")
            os.replace(hook, backup)
    write_atomic(hook, hook_text().encode("utf-8"), overwrite=True)
    hook.chmod(0o755)
    return hook, backup


def _is_ours(hook: Path) -> bool:
    try:
        return MARKER in hook.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
