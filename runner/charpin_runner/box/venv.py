"""Setup commands in a venv cached by the project's dependency files. Runs on boxes; stdlib only.

The venv's name is a hash of this Python's version, the setup commands and the dependency files
of the checkout, so a second run with the same dependencies reuses it. A venv is built in the
box's staging folder and published whole by a rename (caches/store.py), so a run never sees a
half-built one and a concurrent run's cache watch sees it appear in one step, journaled; one
builder per venv at a time (its build lock), and the agent that uses it holds its lease, so it
is never removed while in use.

charpin's own processes here (venv creation, site-dir queries) start isolated (`-I`) in a folder
outside the checkout: a `venv/` package in a commit must never be what `python -m venv` runs.
The setup and prepare lines are the commit's code: each runs as `/bin/sh -c LINE`, through
`wrap` when the caller gives one (the sandbox).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from charpin_runner import childenv, procgroup
from charpin_runner.box import setupcheck
from charpin_runner.caches import journal, locks
from charpin_runner.caches.store import Store, remove_tree
from charpin_runner.errors import BoxStepError

DEPENDENCY_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "poetry.lock", "uv.lock")
KIND = "venvs"
_OUTPUT_TAIL = 2000

# Prefixes the argv of a command that runs the commit's code (bubblewrap, for instance), given
# the folders that command writes (everything else it sees read-only, or not at all).
Wrap = Callable[[list[str], Sequence[str], Sequence[str]], list[str]]


@dataclass(frozen=True)
class Venv:
    """A cached venv for this run: its python, its folder, whether it was there already, and the
    fd of the lease the caller holds while the run uses it."""

    python: str
    venv: str
    cached: bool
    lease: int


def venv_key(src: Path, commands: Sequence[str]) -> str:
    """The cache key of the venv for src's dependency files and these setup commands."""
    key = hashlib.sha256(sys.version.encode() + json.dumps(list(commands)).encode())
    names = set(DEPENDENCY_FILES) | {p.name for p in src.glob("requirements*.txt")}
    for name in sorted(names):
        path = src / name
        if path.is_file():
            key.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return key.hexdigest()[:20]


def build(
    venvs: Path,
    src: Path,
    commands: Sequence[str],
    seconds: float,
    *,
    wrap: Optional[Wrap] = None,
) -> Venv:
    """A leased venv where commands ran (or had run); the caller frees the lease when done.

    The commands run in a throwaway copy of the checkout, never in src: what they write
    (`*.egg-info`, build/) would otherwise be in the first run's checkout only. An editable
    install of the project made here would point at that copy after it is gone, so it is
    refused with the fix (install the project in `prepare`, which runs for every checkout).
    """
    ends = time.monotonic() + seconds
    store = Store(venvs.parent)
    key = venv_key(src, commands)
    lease: Optional[int] = store.lease(KIND, key)
    try:
        found = _cached(store, key, lease)
        if found is not None:
            return found
        with store.building(KIND, key):
            with store.publishing(KIND, key):
                found = _cached(store, key, lease, locked=True)
                if found is not None:
                    return found
                name = key
                if os.path.lexists(store.entry(KIND, key)):
                    # Half-built by an older charpin, changed since it was published, or
                    # condemned: replaced when nobody uses it, else this run builds its own.
                    locks.free(lease)
                    lease = None
                    if not store.remove_locked(KIND, key):
                        name = store.one_off(key)
                    lease = store.lease(KIND, name)
            if name == key:
                _make(store, name, src, commands, ends, wrap)
            else:
                with store.building(KIND, name):  # its staging folder is not collected
                    _make(store, name, src, commands, ends, wrap)
        venv = store.entry(KIND, name)
        assert lease is not None
        return Venv(python=str(venv / "bin" / "python"), venv=str(venv), cached=False, lease=lease)
    except BaseException:
        locks.free(lease)
        raise


def _cached(
    store: Store, key: str, lease: Optional[int], *, locked: bool = False
) -> Optional[Venv]:
    """The published venv of key when it is whole and as it was published, else None."""
    venv = store.entry(KIND, key)
    if locked:
        ok = store.current(KIND, key) and (venv / ".ok").is_file()
    else:
        with store.publishing(KIND, key, exclusive=False):
            ok = store.current(KIND, key) and (venv / ".ok").is_file()
    if not ok or lease is None:
        return None
    return Venv(python=str(venv / "bin" / "python"), venv=str(venv), cached=True, lease=lease)


def _make(
    store: Store,
    name: str,
    src: Path,
    commands: Sequence[str],
    ends: float,
    wrap: Optional[Wrap],
) -> None:
    """Build venv name in the staging folder, check what setup did, and publish it."""
    stage, final = store.stage(name), store.entry(KIND, name)
    remove_tree(stage)
    stage.parent.mkdir(parents=True, exist_ok=True)
    try:
        _own([sys.executable, "-I", "-m", "venv", str(stage)], stage.parent, ends)
        # In the run's folder: the box's cache folders change only by what they cache.
        work = src.parent / "setup-work"
        remove_tree(work)
        shutil.copytree(src, work, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        try:
            before = setupcheck.listing(work)
            for command in commands:
                argv = _line(command, wrap, [str(stage), str(work)], [])
                _run(argv, work, _venv_env(stage), ends, shown=command)
            itself = setupcheck.installed_itself(stage, work)
            wrote = setupcheck.changed(before, setupcheck.listing(work))
        finally:
            remove_tree(work)
        _refuse(wrote, itself)
        relocate(stage, final)
        (stage / ".ok").touch()
        with store.publishing(KIND, name):
            os.rename(stage, final)
            store.record(KIND, name, journal.ABSENT, "publish")
    finally:
        remove_tree(stage)


def _refuse(wrote: list[str], itself: list[str]) -> None:
    if itself:
        raise BoxStepError(
            "setup-failed",
            f"setup installed the project itself ({', '.join(itself)}) into the "
            "cached venv, where every later commit would import this first checkout: "
            'install it in `prepare` (prepare = ["pip install -e . --no-deps"]), which '
            "runs for each checkout, and keep only its dependencies in `setup`",
        )
    if wrote:
        shown = ", ".join(wrote[:5]) + (f" and {len(wrote) - 5} more" if len(wrote) > 5 else "")
        raise BoxStepError(
            "setup-failed",
            f"setup wrote {shown} into the checkout; setup runs once per dependency set "
            "in a throwaway copy, so the tests would never see it: install into the venv "
            "charpin gives setup (first on its PATH: `pip install ...`, no `.venv` of "
            "your own) and make files each checkout needs in `prepare`",
        )


def relocate(stage: Path, final: Path) -> None:
    """Rewrite the staging path baked into the venv's scripts (shebangs, activate), its
    pyvenv.cfg and its .pth files to the path it is published at. Both paths have the same
    length, so no shebang grows past the kernel's limit. Byte code needs nothing: the import
    system sets a code object's file name from where its source is found."""
    old, new = os.fsencode(str(stage)), os.fsencode(str(final))
    candidates = [stage / "pyvenv.cfg"]
    candidates += sorted(p for p in (stage / "bin").iterdir()) if (stage / "bin").is_dir() else []
    candidates += sorted(stage.glob("lib/python*/site-packages/*.pth"))
    candidates += sorted(stage.glob("lib/python*/site-packages/*.egg-link"))
    for path in candidates:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > (4 << 20):
            continue
        data = path.read_bytes()
        if old in data:
            mode = path.stat().st_mode
            path.write_bytes(data.replace(old, new))
            os.chmod(path, mode & 0o7777)


def prepare(
    run: Path,
    base_python: str,
    src: Path,
    commands: Sequence[str],
    seconds: float,
    *,
    wrap: Optional[Wrap] = None,
) -> str:
    """Run the prepare commands in src with a per-run venv over base_python's packages; return
    that venv's python.

    The per-run venv sees every package of base_python (a site directory added by a .pth file)
    and takes whatever the commands install (an editable install of this checkout), so the
    cached venv is never written by a run, whatever the commit's build code does.
    """
    ends = time.monotonic() + seconds
    venv = run / "venv"
    _own([base_python, "-I", "-m", "venv", "--without-pip", str(venv)], run, ends)
    python = venv / "bin" / "python"
    base_sites = _site_dirs(base_python, run, ends)
    ours = _site_dirs(str(python), run, ends)
    line = "; ".join(f"site.addsitedir({d!r})" for d in base_sites if d not in ours)
    (Path(ours[0]) / "_charpin_base.pth").write_text(f"import site; {line}\n")
    # The venv has no pip of its own (a copy costs seconds): `pip` here is the base's pip run
    # by this venv's python, so it installs into this venv, never into the base (the cache, or
    # on `clean` the coordinator's own venv) and never with whatever `pip` is next on PATH.
    for name in ("pip", "pip3"):
        shim = venv / "bin" / name
        shim.write_text(f"#!{python}\nimport runpy\nrunpy.run_module('pip', run_name='__main__')\n")
        shim.chmod(0o755)
    for command in commands:
        # The prepare lines are shell, as written in [tool.charpin].
        argv = _line(command, wrap, [str(src), str(venv)], [base_python])
        _run(argv, src, _venv_env(venv, venv / "pycache"), ends, what="prepare", shown=command)
    return str(python)


def state(venv: Path) -> str:
    """The cached venv's state (every entry's inode, mode, size, mtime and ctime, byte-code
    caches included), as its publication journal records it (caches/journal.py)."""
    store = Store(venv.parent.parent)
    with store.publishing(KIND, venv.name, exclusive=False):
        return journal.state(venv)


def unchanged_by_prepare(venv: Path, before: str) -> None:
    """Class E: only setup writes a cached venv, once, when it builds it. Prepare that changed
    it (possible without bubblewrap, which shows it read-only) fails the run, and the venv is
    discarded so that no later run uses what prepare planted (the journal check in _cached
    would refuse it too)."""
    if state(venv) == before:
        return
    Store(venv.parent.parent).discard(KIND, venv.name)
    raise BoxStepError(
        "setup-failed",
        f"prepare wrote into the cached venv {venv}, which only setup writes (once, when it "
        "builds it): the venv was removed, so the next run rebuilds it; install into the "
        "run's own venv (`pip install ...` in prepare does), never into the cached one",
    )


def _line(
    command: str, wrap: Optional[Wrap], writable: Sequence[str], pythons: Sequence[str]
) -> list[str]:
    """A setup or prepare line as the shell runs it, through wrap: writable the folders it
    builds, pythons the interpreters it runs besides the venv's own."""
    argv = ["/bin/sh", "-c", command]
    return wrap(argv, writable, pythons) if wrap is not None else argv


def _venv_env(venv: Path, pycache: Optional[Path] = None) -> dict[str, str]:
    """A setup or prepare line's environment: the allow-list (childenv.py: none of this
    machine's credentials), the venv first on PATH; for prepare, byte code in a folder of its
    own (a cached venv is never written by a run, not even a __pycache__ in it)."""
    extra = {
        "VIRTUAL_ENV": str(venv),
        "PATH": str(venv / "bin") + os.pathsep + os.environ.get("PATH", ""),
    }
    if pycache is not None:
        pycache.mkdir(parents=True, exist_ok=True)
        extra["PYTHONPYCACHEPREFIX"] = str(pycache)
    return childenv.for_setup(os.environ, **extra)


def _own(argv: list[str], cwd: Path, ends: float) -> None:
    """One of charpin's own commands (never the commit's): isolated, outside the checkout."""
    _run(argv, cwd, dict(os.environ), ends, what="setup")


def _site_dirs(python: str, cwd: Path, ends: float) -> list[str]:
    code = "import sysconfig as s; p = s.get_paths(); print(p['purelib']); print(p['platlib'])"
    done = subprocess.run(
        [python, "-I", "-c", code],
        cwd=str(cwd),
        capture_output=True,
        text=True,
        timeout=max(ends - time.monotonic(), 1.0),
        check=False,
    )
    if done.returncode != 0:
        raise BoxStepError(
            "setup-failed", f"{python} cannot report its site-packages: {done.stderr}"
        )
    return list(dict.fromkeys(done.stdout.split()))


def _run(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    ends: float,
    *,
    what: str = "setup",
    shown: Optional[str] = None,
) -> None:
    command = shown if shown is not None else " ".join(argv)
    # Its own session, so a timeout kills the commands a setup line started, not just its shell.
    proc = subprocess.Popen(
        argv,
        cwd=str(cwd),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=max(ends - time.monotonic(), 1.0))
    except BaseException as exc:
        # The deadline, or the agent told to stop (SIGTERM, the coordinator gone): nothing
        # this command started may outlive it.
        procgroup.kill_group(proc.pid)
        if not isinstance(exc, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
            raise
        try:
            output, _ = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # something left the group and holds the pipe
            proc.kill()
            output = b""
        raise BoxStepError(
            "timeout",
            f"{what} command {command!r} ran past the box deadline: {failure_tail(output)}",
        ) from None
    if proc.returncode != 0:
        raise BoxStepError(
            "setup-failed",
            f"{what} command {command!r} exited {proc.returncode}: {failure_tail(output)}",
        )


# pip's advice about itself, not about the failure.
_NOISE = ("[notice]",)
# A Python exception's last line ("ModuleNotFoundError: No module named 'setuptools'").
_EXCEPTION = re.compile(r"\A[A-Za-z_][\w.]*(Error|Exception): ")


def failure_tail(output: bytes | None) -> str:
    """The last lines of a failed command's output as one line; when the exception that made it
    fail is further up (pip ends with its own hints), that line first."""
    text = (output or b"")[-_OUTPUT_TAIL:].decode("utf-8", "replace")
    lines = [
        ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(_NOISE)
    ]
    tail = lines[-6:]
    cause = next((ln for ln in reversed(lines[:-6]) if _EXCEPTION.match(ln)), None)
    if cause is not None and not any(_EXCEPTION.match(ln) for ln in tail):
        tail = [cause, "...", *tail]
    return " | ".join(tail) or "(no output)"
