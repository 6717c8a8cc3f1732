"""Coordinator side. The two built-in boxes: `local` (this working tree, in place) and `clean`.

Both are LocalTransport boxes driven by the same pipeline and agent as an SSH box. `clean` goes
through shipping exactly like one (bundle, runner, fresh checkout), with a scrubbed
environment and a fresh temporary HOME; its cache (runners, repositories, venvs) lives in a
persistent per-user folder, like an SSH box's `~/.cache/charpin`, so the second run does not
rebuild its venv. `local` runs `charpin receipt` on the working tree in place, dirty state
included, with this interpreter and the runner package this coordinator imports.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import charpin_runner
from charpin_runner.box.layout import cache_root
from charpin_runner.errors import UsageError
from charpin_runner.owndir import OWN, ensure_folder

from charpin_coordinator import statedir
from charpin_coordinator.remote.boxrun import BoxTarget
from charpin_coordinator.remote.transport import LocalTransport

# What a clean box keeps from this process's environment: enough to find tools, and the
# locale/time zone (differences there are real drift, not an artefact of the clean box).
_CLEAN_KEEP = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_TIME", "TZ", "TMPDIR")


def clean_cache_home() -> Path:
    """The clean box's persistent cache root: $XDG_CACHE_HOME/charpin/clean-box (or ~/.cache)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # XDG: relative = unset
    return base / "charpin" / "clean-box"


class TempBox(LocalTransport):
    """A LocalTransport in a temporary folder, removed on close unless kept."""

    def __init__(
        self, name: str, root: Path, *, keep: bool, base_env: Mapping[str, str], home: str
    ):
        super().__init__(name, root, base_env=base_env, home=home)
        self._keep = keep

    def close(self) -> None:
        """Remove the box folder (unless --keep)."""
        if not self._keep:
            shutil.rmtree(self.root, ignore_errors=True)


def clean_target(
    label: str,
    *,
    keep: bool,
    python: str | None = None,
    setup: list[str] | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
) -> BoxTarget:
    """The `clean` box: a fresh folder on this machine with a lasting cache."""

    def connect() -> LocalTransport:
        cache = clean_cache_home()
        cache.mkdir(parents=True, exist_ok=True, mode=0o700)
        root = Path(tempfile.mkdtemp(prefix="charpin-clean-"))
        base = {k: v for k, v in os.environ.items() if k in _CLEAN_KEEP}
        base["HOME"] = str(root)  # tests on the clean box never see the user's dotfiles
        return TempBox(label, root, keep=keep, base_env=base, home=str(cache))

    return BoxTarget(
        label=label,
        connect=connect,
        python=python or sys.executable,
        setup=setup,
        timeout=timeout,
        env=dict(env or {}),
        read_only=coordinator_paths(),
        hidden=coordinator_secrets(),
    )


def _own_folder(repo: Path) -> str:
    """The repository's `.charpin/`, made first (a test must not make it, or a link there)."""
    ensure_folder(repo, repo / OWN)
    return str(repo / OWN)


def coordinator_secrets() -> tuple[str, ...]:
    """What tests on this machine must not even read: the key of verify's reuse records."""
    from charpin_coordinator.verify.reuse import KEY_FILE

    return (str(statedir.state_root() / KEY_FILE),)


def coordinator_paths() -> tuple[str, ...]:
    """What tests on this machine must not write, because this coordinator runs from it or
    trusts it later: its packages (an editable install lives outside its venv), the venv, the
    user site, and its state folder (created first: a test must not create it itself)."""
    import site

    import charpin_coordinator

    state = str(statedir.ensure_state_root())
    found = [sys.prefix, *site.getsitepackages(), site.getusersitepackages(), state]
    for package in (charpin_coordinator, charpin_runner):
        if package.__file__:
            found.append(str(Path(package.__file__).resolve().parent))
    return tuple(dict.fromkeys(p for p in found if os.path.isdir(p)))


def trusted_python(python: str | None, repo: Path, box: str) -> str | None:
    """A `[tool.charpin.hosts.X] python` for a box on this machine, refused when it lies inside
    the repository: the interpreter starts the box agent outside any sandbox, so it must never
    be a file of the tree under test (rule 1)."""
    if python is None or not os.path.isabs(python):
        return python
    found, top = os.path.realpath(python), os.path.realpath(repo)
    if found == top or found.startswith(top + os.sep):
        raise UsageError(
            f"[tool.charpin.hosts.{box}] python = {python!r} is a file of the repository under "
            "test, which would run outside the sandbox as charpin's own agent; name an "
            "interpreter installed on this machine (e.g. /usr/bin/python3)"
        )
    return python


def local_cache_home() -> Path:
    """Where `local` keeps the runner it starts: $XDG_CACHE_HOME/charpin/local-box (or ~/.cache),
    apart from the clean box's caches, which a local run's tests must not write."""
    return clean_cache_home().parent / "local-box"


def local_target(label: str, repo: Path, *, timeout: float | None = None) -> BoxTarget:
    """The `local` box: the working tree as it is, in this environment. The agent and the
    runner start from a folder outside the working tree (rule 1: charpin never imports from
    the checkout), placed from this coordinator's own runner like on any box."""

    def connect() -> LocalTransport:
        home = local_cache_home()
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        root = Path(tempfile.mkdtemp(prefix="charpin-local-"))
        return TempBox(label, root, keep=False, base_env=dict(os.environ), home=str(home))

    # The clean box's caches too: `local` runs beside it, and its tests must not plant a venv
    # or a runner the clean box then trusts.
    clean = cache_root(str(clean_cache_home()))
    caches = tuple(
        str(clean / name) for name in ("venvs", "repos", "runners", "locks", "stage", "trash")
    )
    return BoxTarget(
        label=label,
        connect=connect,
        python=sys.executable,
        timeout=timeout,
        in_place=str(repo),
        # The repository's .charpin/ too: earlier run folders and the history are read back
        # later (`run --against`, `history`), so its tests must not be able to rewrite them.
        read_only=coordinator_paths() + caches + (_own_folder(repo),),
        hidden=coordinator_secrets(),
    )
