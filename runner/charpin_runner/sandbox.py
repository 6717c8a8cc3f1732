"""Keep the test command away from what later runs trust. Runs on boxes; stdlib only.

Two layers, because a box may or may not have bubblewrap:

* With `bwrap` (Linux, Debian package `bubblewrap`) the test command runs in a mount namespace
  where the protected paths (the interpreter's environment, the runner, the box caches, the
  folder the receipt goes to) are read-only, and in a PID namespace of its own: a process
  cannot see its parents' command lines, and every process it starts, double-forked daemons
  included, dies with the namespace.
* Always, the parent takes a cheap stat snapshot (inode, size, mode, mtime and ctime: ctime
  cannot be set back by an unprivileged process) of the protected paths before the run and
  compares it after; a change is evidence against the run, and a protected path the coordinator
  marked disposable (a cached venv, the cache repository) is removed so that no later run reads
  it.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import charpin_runner
from charpin_runner import sandview
from charpin_runner.errors import RunError, UsageError

MODES = ("auto", "required", "off")
# Above this many entries a protected tree is not walked again (it is still read-only under
# bwrap); a venv has a few thousand files, the snapshot takes milliseconds.
_MAX_ENTRIES = 200_000
_probed: dict[str, bool] = {}


@dataclass(frozen=True)
class Plan:
    """What the parent protects for one run. Paths are absolute."""

    mode: str = "auto"
    protect: tuple[str, ...] = ()  # read-only in the sandbox; stat-checked after the run
    disposable: tuple[str, ...] = ()  # subset of protect: removed when found changed
    writable: tuple[str, ...] = ()  # stay writable even inside a protected or read-only path
    # Protected trees whose byte-code caches are watched too: a shipped runner folder is
    # compiled once when it is placed, so a new or changed .pyc there is a planted one.
    strict: tuple[str, ...] = ()
    # Under bwrap: the whole file system read-only but `writable`, a private /tmp and HOME,
    # and no network (`verify` runs agents' tests so).
    confine: bool = False
    # Folders of caches (a box's venvs, cache repositories, runners): read-only under bwrap,
    # watched with their byte-code caches, and each entry the run changed or added is removed.
    containers: tuple[str, ...] = ()
    # Read-only under bwrap and nothing more (never walked): what this run must not write but
    # another process may be changing meanwhile (the coordinator's packages, the clean box's
    # caches while `local` runs beside it).
    read_only: tuple[str, ...] = ()
    # Hidden under bwrap (an empty folder, or /dev/null for a file): secrets of this machine
    # the tests must not even read (the coordinator's reuse key), should a visible path hold one.
    hidden: tuple[str, ...] = ()
    # Read-only under bwrap and nothing more: what the run needs to see that is neither
    # protected nor an interpreter's (e.g. the folder a prepared run's venv reads from).
    visible: tuple[str, ...] = ()


@dataclass
class Guard:
    """The state of one protected run: whether bwrap is used, and the before-snapshot."""

    plan: Plan
    used: bool
    before: dict[str, tuple[int, ...]] = field(default_factory=dict)


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise UsageError(f"--sandbox {mode!r} is not one of auto, required, off")
    return mode


def bwrap_works() -> bool:
    """True when bwrap is installed and can create the namespaces here (probed once)."""
    found = shutil.which("bwrap")
    if found is None or not sys.platform.startswith("linux"):
        return False
    if found not in _probed:
        try:
            done = subprocess.run(
                [found, "--dev-bind", "/", "/", "--unshare-pid", "--", "true"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=20,
                check=False,
            )
            _probed[found] = done.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _probed[found] = False
    return _probed[found]


def begin(plan: Plan) -> Guard:
    """Decide whether bwrap is used and snapshot the protected paths (before the run)."""
    used = plan.mode != "off" and bwrap_works()
    if plan.mode == "required" and not used:
        raise RunError(
            "--sandbox required but bubblewrap is not usable on this box; install it "
            "(apt-get install bubblewrap) or run with --sandbox auto"
        )
    roots, strict = _watched(plan)
    return Guard(plan=plan, used=used, before=snapshot(roots, strict))


def again(guard: Guard) -> Guard:
    """A guard for a second command of the same run (the frozen tests' side run): the same
    decision about bwrap, a new before-snapshot, so finish() reports only what it changed."""
    roots, strict = _watched(guard.plan)
    return Guard(plan=guard.plan, used=guard.used, before=snapshot(roots, strict))


def _watched(plan: Plan) -> tuple[tuple[str, ...], tuple[str, ...]]:
    roots = tuple(dict.fromkeys(plan.protect + plan.containers))
    return roots, tuple(dict.fromkeys(plan.strict + plan.containers))


def wrap(
    guard: Guard,
    argv: list[str],
    scratch: str | None = None,
    visible: tuple[Path, ...] = (),
    pythons: tuple[str, ...] = (),
    private_home: bool = True,
) -> list[str]:
    """argv run under bwrap in the plan's allow-list view (sandview.py), or argv itself.

    scratch: a folder this command may write (its HOME and TMPDIR are made inside it unless
    private_home is False: pins bring their own); visible: more read-only paths (the probe
    root); pythons: interpreters the command runs, made visible with their whole environment."""
    if not guard.used:
        return argv
    bwrap = shutil.which("bwrap") or "bwrap"
    plan = guard.plan
    writable = list(plan.writable)
    home = tmp = None
    if scratch:
        writable.append(scratch)
        if private_home:
            home, tmp = os.path.join(scratch, "home"), os.path.join(scratch, "tmp")
            os.makedirs(home, exist_ok=True)
            os.makedirs(tmp, exist_ok=True)
    runner = Path(charpin_runner.__file__).resolve().parent
    shown = [*plan.protect, *plan.visible, *(str(p) for p in visible), str(runner.parent)]
    shown += _git_dirs_outside(writable)
    again = [p for p in plan.read_only if _inside(p, tuple(writable))]
    # Rule 3 and 4: inside the checkout, its git directory and any interpreter environment
    # stay read-only (a test must not plant a ref, a hook or a .pth file there).
    again += protected_inside(writable)
    args = sandview.arguments(
        visible=shown,
        writable=writable,
        read_only_inside=again,
        hidden=plan.hidden,
        home=home,
        tmp=tmp,
        network=not plan.confine,
        pythons=(sys.executable, *pythons),
    )
    return [bwrap, *args, "--", *argv]


def for_pins(
    repo: Path, python: str, mode: str = "auto"
) -> Callable[[list[str], str], list[str]] | None:
    """How `charpin pins` run by hand wraps each pin's supervisor: in the allow-list view with
    the repository and the pins' own folder writable (a pin that writes the repository is
    still caught by repoguard, as without a sandbox), or None when bubblewrap is off or not
    usable here (RunError for `required`)."""
    guard = begin(Plan(mode=check_mode(mode), writable=(str(repo),)))
    if not guard.used:
        return None

    def wrapped(argv: list[str], folder: str) -> list[str]:
        return wrap(guard, argv, folder, pythons=(python,), private_home=False)

    return wrapped


def _git_dirs_outside(writable: list[str]) -> list[str]:
    """Object stores a checkout reads from outside itself: a linked worktree's git directory
    (`.git` is a file) and the folders its alternates name (a clone --shared from a cache)."""
    found: list[str] = []
    for top in writable:
        dot = os.path.join(top, ".git")
        git_dir = dot
        if os.path.isfile(dot):
            try:
                with open(dot, encoding="utf-8") as handle:
                    line = handle.readline().strip()
            except OSError:
                continue
            if line.startswith("gitdir:"):
                git_dir = os.path.normpath(os.path.join(top, line[len("gitdir:") :].strip()))
                found.append(git_dir)
                common = os.path.join(git_dir, "commondir")
                if os.path.isfile(common):
                    with open(common, encoding="utf-8") as handle:
                        found.append(os.path.normpath(os.path.join(git_dir, handle.read().strip())))
        for store in (git_dir, *found):
            alternates = os.path.join(store, "objects", "info", "alternates")
            try:
                with open(alternates, encoding="utf-8") as handle:
                    lines = handle.read().splitlines()
            except OSError:
                continue
            objects = os.path.join(store, "objects")
            found += [os.path.normpath(os.path.join(objects, ln)) for ln in lines if ln.strip()]
    return found


def protected_inside(writable: list[str]) -> list[str]:
    """In each writable tree: its `.git`, and every folder holding a pyvenv.cfg (a venv), at
    the top or one level down (`.venv/`, `venv/`, `env/`)."""
    found: list[str] = []
    for top in writable:
        dot = os.path.join(top, ".git")
        if os.path.lexists(dot):
            found.append(dot)
        try:
            names = sorted(os.listdir(top))
        except OSError:
            continue
        for name in names:
            folder = os.path.join(top, name)
            if os.path.isfile(os.path.join(folder, "pyvenv.cfg")) and not os.path.islink(folder):
                found.append(folder)
    return found


def finish(guard: Guard) -> list[str]:
    """After the run: one reason per protected path that changed; disposable ones removed."""
    roots, strict = _watched(guard.plan)
    after = snapshot(roots, strict)
    reasons = _containers(guard, after)
    changed = [
        root
        for root in guard.plan.protect
        if not _inside(root, guard.plan.containers)
        and before_of(guard.before, root) != before_of(after, root)
    ]
    for root in changed:
        what = _first_difference(guard.before, after, root)
        if root in guard.plan.disposable:
            _discard(root)
            fate = "it was removed, so the next run rebuilds it"
        else:
            fate = _restore(guard.before, after, root)
        reasons.append(
            f"the test command wrote into {root}, which later runs read ({what}); {fate}"
        )
    return reasons


def _restore(
    before: dict[str, tuple[int, ...]], after: dict[str, tuple[int, ...]], root: str
) -> str:
    """Put back what can be put back in an environment that is not charpin's to rebuild (a
    user's venv, the interpreter's site folder): files the run added are removed, so a planted
    .pth or sitecustomize.py cannot run in the next process; what it changed is named."""
    old, new = before_of(before, root), before_of(after, root)
    added = sorted(p for p in new if p not in old)
    changed = sorted(p for p in old if p in new and old[p] != new[p] and len(new[p]) > 2)
    removed = []
    for path in reversed(added):  # children before their folders
        if os.path.islink(path) or not os.path.isdir(path):
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:
                pass
        else:
            try:
                os.rmdir(path)
            except OSError:
                pass
    parts = []
    if removed:
        parts.append(f"the {len(removed)} file(s) it added were removed")
    if changed:
        parts.append(f"{changed[0]} was changed: check it before trusting anything run from it")
    return "; ".join(parts) or "check it before trusting anything run from it again"


def _inside(path: str, folders: tuple[str, ...]) -> bool:
    return any(path == f or path.startswith(f.rstrip(os.sep) + os.sep) for f in folders)


def _containers(guard: Guard, after: dict[str, tuple[int, ...]]) -> list[str]:
    """Per cache folder: each entry the run changed or added is removed, with a reason."""
    reasons = []
    for root in guard.plan.containers:
        old, new = before_of(guard.before, root), before_of(after, root)
        if old == new:
            continue
        prefix = root.rstrip(os.sep) + os.sep
        entries = sorted(
            {p[len(prefix) :].split(os.sep, 1)[0] for p in set(old) ^ set(new) if p != root}
            | {
                p[len(prefix) :].split(os.sep, 1)[0]
                for p in set(old) & set(new)
                if p != root and old[p] != new[p]
            }
        )
        for name in entries:
            path = os.path.join(root, name)
            what = _first_difference(guard.before, after, path)
            _discard(path)
            reasons.append(
                f"the test command wrote into {path}, which later runs read ({what}); "
                "it was removed, so the next run rebuilds it"
            )
        if not entries:
            reasons.append(f"the test command changed {root} itself, which later runs read")
    return reasons


def before_of(snap: dict[str, tuple[int, ...]], root: str) -> dict[str, tuple[int, ...]]:
    prefix = root.rstrip(os.sep) + os.sep
    return {k: v for k, v in snap.items() if k == root or k.startswith(prefix)}


def _first_difference(
    before: dict[str, tuple[int, ...]], after: dict[str, tuple[int, ...]], root: str
) -> str:
    old, new = before_of(before, root), before_of(after, root)
    for path in sorted(set(old) | set(new)):
        if path not in old:
            return f"{path} appeared"
        if path not in new:
            return f"{path} vanished"
        if old[path] != new[path]:
            return f"{path} changed"
    return "changed"


def snapshot(roots: tuple[str, ...], strict: tuple[str, ...] = ()) -> dict[str, tuple[int, ...]]:
    """path -> (inode, mode, size, mtime_ns, ctime_ns) for every entry under roots (no links
    followed, `__pycache__` folders skipped except under the strict roots); a root that does
    not exist is recorded as missing."""
    out: dict[str, tuple[int, ...]] = {}
    for root in roots:
        if not os.path.lexists(root):
            out[root] = (-1,)
            continue
        _add(out, root)
        if not os.path.isdir(root) or os.path.islink(root):
            continue
        every = root in strict
        for folder, dirs, files in os.walk(root):
            # Interpreters write byte-code caches as they import (the coordinator's own
            # lazy imports on `local`): not evidence. Under bwrap they are read-only anyway.
            if not every:
                dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in dirs + files:
                _add(out, os.path.join(folder, name))
            if len(out) > _MAX_ENTRIES:
                return out
    return out


def _add(out: dict[str, tuple[int, ...]], path: str) -> None:
    try:
        st = os.lstat(path)
    except OSError:
        out[path] = (-1,)
        return
    if stat.S_ISDIR(st.st_mode):
        # A folder's times move when a byte-code cache appears in it; its entries are
        # compared one by one instead.
        out[path] = (st.st_ino, st.st_mode)
    else:
        out[path] = (st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _discard(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def _existing(paths: tuple[str, ...]) -> list[str]:
    seen: list[str] = []
    for path in paths:
        if os.path.exists(path) and path not in seen:
            seen.append(path)
    return seen
