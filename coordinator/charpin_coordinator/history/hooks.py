"""Coordinator side; CLI glue (may print to stderr). Where the history lives, and recording into
it from the commands that make runs: `run`, `compare --record`, `verify`.

The database is `--history PATH`, else `[tool.charpin] history` of this machine's working tree
(relative to the repository), else `<repo>/.charpin/history.sqlite`. It is this machine's state,
so a commit under review never chooses it. Before a run, `check` refuses a database that cannot
be used (and a --run-id it already holds) so that nothing runs first; after the run, `record_after`
adds the run folder, and a failure there is one line on stderr and exit bit 8, never a lost run
folder: `history rebuild` can always add it later.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from charpin_runner.errors import EXIT_INTEGRITY, CharpinError, UsageError
from charpin_runner.owndir import ensure_folder

DEFAULT = Path(".charpin") / "history.sqlite"


def repo_or_cwd(repo: Path | None) -> Path:
    """The repository (--repo, else git's top level of the working folder), else the folder."""
    from charpin_coordinator.gitcmd import repo_root

    try:
        return repo_root(repo)
    except UsageError:
        return (repo or Path.cwd()).absolute()


def locate(repo: Path, given: Path | None, *, lenient: bool = False) -> Path:
    """The history database's path (see the module docstring). lenient (run, verify): a
    working tree whose [tool.charpin] does not read falls back to the default path instead of
    stopping a run that takes its configuration from the commit."""
    if given is not None:
        return Path(os.path.expanduser(given)).absolute()
    configured: str | None = None
    if (repo / "pyproject.toml").is_file():
        from charpin_runner.errors import CharpinError

        from charpin_coordinator.config import load_config

        try:
            configured = load_config(repo).charpin.history
        except CharpinError:
            if not lenient:
                raise
            configured = None
    if configured:
        return (repo / os.path.expanduser(configured)).absolute()
    return (repo / DEFAULT).absolute()


def check(path: Path, run_ids: Iterable[str]) -> None:
    """Before a run: the database must be usable and hold none of run_ids (CharpinError)."""
    from charpin_coordinator.history.record import check_free

    check_free(path, run_ids)


def prepare_folder(repo: Path, path: Path) -> None:
    """Create the database's folder; inside the repository's `.charpin/`, that folder ignores
    itself (its `.gitignore`), as for run folders."""
    try:
        ensure_folder(repo, path.parent)
    except OSError as exc:
        raise UsageError(
            f"cannot create {path.parent} ({exc.strerror}); pass --history PATH in a writable "
            "folder"
        ) from exc


def record_after(path: Path, folders: Sequence[Path], *, repo: Path | None = None) -> int:
    """Add the folders' runs; 0, or EXIT_INTEGRITY after one line on stderr."""
    from charpin_coordinator.history.record import record

    try:
        if repo is not None:
            prepare_folder(repo, path)
        record(path, folders)
    except (CharpinError, OSError) as exc:
        shown = ", ".join(str(f) for f in folders)
        sys.stderr.write(
            f"charpin-remote: error: the run was not added to the history: {exc} (the run "
            f"folder {shown} is complete; `charpin-remote history rebuild` adds it later)\n"
        )
        return EXIT_INTEGRITY
    return 0
