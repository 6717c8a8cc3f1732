"""Where a run lives on a box, and the facts the coordinator needs first. Runs on boxes; stdlib only.

Everything charpin keeps on a box is under `~/.cache/charpin` (the `clean` box passes its own
home): `runners/` (zipapps by content hash), `repos/` (one bare cache repository per project),
`venvs/` (setup venvs by dependency hash) and `runs/<run-id>/<box>/` (one run: the checkout, its
config, receipt, seal and logs; removed afterwards unless --keep), plus what keeps them right
under concurrent runs (`locks/`, `stage/`, `trash/`: caches/store.py).
"""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from charpin_runner import gitcmd
from charpin_runner.caches import locks
from charpin_runner.caches.store import Store
from charpin_runner.errors import BoxStepError, UsageError
from charpin_runner.runid import RUN_ID

_FOLDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_HEX = re.compile(r"[0-9a-f]{16}|[0-9a-f]{40}|[0-9a-f]{64}")
HAVES_LIMIT = 32  # the most recent cached commits offered as bundle prerequisites
REPOS = "repos"


@dataclass(frozen=True)
class Layout:
    """The paths of one box run."""

    root: Path
    run: Path
    src: Path
    cache_repo: Optional[Path]  # None for a run in place (the `local` box ships nothing)

    @property
    def config(self) -> Path:
        return self.run / "config.json"

    @property
    def receipt(self) -> Path:
        return self.run / "receipt.json"

    @property
    def stdout(self) -> Path:
        return self.run / "stdout.log"

    @property
    def stderr(self) -> Path:
        return self.run / "stderr.log"

    @property
    def bundle(self) -> Path:
        return self.run / "snapshot.bundle"

    @property
    def venvs(self) -> Path:
        return self.root / "venvs"


def cache_root(home: str) -> Path:
    """The box's charpin folder under home (the user's home directory when home is empty)."""
    return Path(home or os.path.expanduser("~")) / ".cache" / "charpin"


def prepare(
    home: str, request: dict[str, Any], config: bytes
) -> tuple[Layout, dict[str, Any], list[int]]:
    """Make this run's folder, store its config and report what the box has: Python, pytest,
    bubblewrap, and whether its cache repository already holds the commit (and which it holds).
    Also returns the leases the run holds from here on (its run folder, its cache repository),
    fds the caller keeps open until the run is cleaned up."""
    run_id = _field(request, "run_id", RUN_ID)
    folder = _field(request, "folder", _FOLDER)
    in_place = str(request.get("in_place") or "")
    if request.get("need_venv"):
        missing = [m for m in ("venv", "ensurepip") if not importable(m)]
        if missing:
            raise BoxStepError(
                "unsupported-box",
                f"{sys.executable} lacks {' and '.join(missing)}; install python3-venv "
                "(Debian/Ubuntu) or set python to an interpreter that has it",
            )
    if shutil.which("git") is None:
        raise BoxStepError("unsupported-box", "git is not installed on the box; install git")
    root = cache_root(home)
    store = Store(root)
    for sub in ("runners", "repos", "venvs", "stage", "trash", os.path.join("runs", run_id)):
        (root / sub).mkdir(parents=True, exist_ok=True)
    run, lease = _run_folder(store, run_id, folder)
    leases = [lease]
    try:
        if in_place:
            layout = Layout(root=root, run=run, src=Path(in_place), cache_repo=None)
        else:
            repo_key = _field(request, "repo_key", _HEX)
            name, lease = _cache_repo(store, f"{repo_key}.git")
            leases.append(lease)
            layout = Layout(
                root=root, run=run, src=run / "src", cache_repo=store.entry(REPOS, name)
            )
        layout.config.write_bytes(config)
        has, haves = False, list[str]()
        if layout.cache_repo is not None:
            has, haves = cached_commits(layout.cache_repo, _field(request, "commit", _HEX))
    except BaseException:
        for fd in leases:
            locks.free(fd)
        raise
    facts = {
        "python": sys.version.split()[0],
        "has_pytest": importable("pytest"),
        "bwrap": shutil.which("bwrap") is not None,
        "has": has,
        "haves": haves,
    }
    return layout, facts, leases


def _run_folder(store: Store, run_id: str, folder: str) -> tuple[Path, int]:
    """A new folder for this run, and its lease (taken before the folder exists, so that a
    collector never takes a live run's folder for a dead one's). A run folder is never reused:
    when runs/<run-id>/<box> exists (two runs with one --run-id on a shared box, or two verifies,
    whose runs are all named base and patched), this run's folder gets a suffix of its own."""
    name = folder
    while True:
        lease = store.lease_run(run_id, name)
        run = store.root / "runs" / run_id / name
        try:
            # parents: another run of this id may just have removed the (empty) run-id folder
            run.mkdir(parents=True)
            return run, lease
        except FileExistsError:
            locks.free(lease)
            name = f"{folder}~{secrets.token_hex(3)}"


def _cache_repo(store: Store, name: str) -> tuple[str, int]:
    """The cache repository this run uses, leased: the project's own, unless it changed since
    its last journal record or was condemned, in which case it is removed first (nobody uses
    it) or this run gets a one-off repository of its own (someone still does)."""
    lease = store.lease(REPOS, name)
    with store.publishing(REPOS, name, exclusive=False):
        fine = not os.path.lexists(store.entry(REPOS, name)) or store.current(REPOS, name)
    if fine:
        return name, lease
    locks.free(lease)
    with store.publishing(REPOS, name):
        if not store.remove_locked(REPOS, name):
            name = store.one_off(name)
        return name, store.lease(REPOS, name)


def cached_commits(cache: Path, commit: str) -> tuple[bool, list[str]]:
    """Whether cache holds commit, and its most recent cached commits (bundle prerequisites)."""
    if not cache.is_dir():
        return False, []
    has = gitcmd.run(["cat-file", "-e", f"{commit}^{{commit}}"], cwd=cache).returncode == 0
    listed = gitcmd.run(
        [
            "for-each-ref",
            "--sort=-committerdate",
            f"--count={HAVES_LIMIT}",
            "--format=%(objectname)",
            "refs/charpin/",
        ],
        cwd=cache,
    )
    haves = listed.stdout.decode("ascii", "replace").split() if listed.returncode == 0 else []
    return has, haves


def probe(home: str) -> dict[str, Any]:
    """What `hosts check` reports: this Python, venv/ensurepip/pytest, git, disk and bubblewrap."""
    found = {m: importable(m) for m in ("venv", "ensurepip", "pytest")}
    git = ""
    if shutil.which("git"):
        git = gitcmd.run(["--version"]).stdout.decode("utf-8", "replace").strip()
    where = Path(home or os.path.expanduser("~"))
    stat = os.statvfs(where)
    return {
        "version": list(sys.version_info[:3]),
        "executable": sys.executable,
        **found,
        "git": git,
        "home": str(where),
        "free_mb": stat.f_bavail * stat.f_frsize // (1024 * 1024),
        "bwrap": shutil.which("bwrap") is not None,
    }


def importable(module: str) -> bool:
    """True when module imports: a distribution can ship a stub that only fails on import."""
    if module == "pytest":  # importing pytest costs a quarter second; its presence is enough
        return importlib.util.find_spec(module) is not None
    try:
        importlib.import_module(module)
    except Exception:
        return False
    return True


def _field(request: dict[str, Any], name: str, pattern: re.Pattern[str]) -> str:
    value = request.get(name)
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise UsageError(f"box protocol: {name} {value!r} is not valid")
    return value
