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
  it. The box's cache folders are shared by concurrent runs: a change there counts against
  this run only when its own processes could have made it (see _containers).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

import charpin_runner
from charpin_runner import interpreters, sandview
from charpin_runner.caches import journal
from charpin_runner.caches.store import KINDS, Store
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
    return Guard(plan=plan, used=used, before=snapshot(roots, strict, plan.containers))


def again(guard: Guard) -> Guard:
    """A guard for a second command of the same run (the frozen tests' side run): the same
    decision about bwrap, a new before-snapshot, so finish() reports only what it changed."""
    roots, strict = _watched(guard.plan)
    return Guard(
        plan=guard.plan, used=guard.used, before=snapshot(roots, strict, guard.plan.containers)
    )


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
        # The runner's interpreter and the one charpin runs on (the agent's), read-only.
        pythons=(sys.executable, interpreters.trusted(), *pythons),
    )
    return [bwrap, *args, "--", *argv]


# Paths pip and its certificates come from that the environment names (read-only in setup).
_SETUP_ENV_PATHS = ("PIP_FIND_LINKS", "PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")


class SetupWrap:
    """How a box's setup and prepare lines run (rule 2: the sandbox shows only what the run
    needs): the allow-list view with the network (they install packages), the folders each
    line builds writable, a private HOME and TMPDIR, nothing of the user's home, keys or other
    caches. The commit's build code (a setup.py, a build backend) runs there."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.scratch = tempfile.mkdtemp(prefix="charpin-setup-")

    def __call__(
        self, argv: list[str], writable: Sequence[str], pythons: Sequence[str]
    ) -> list[str]:
        plan = replace(self.guard.plan, writable=tuple(os.path.abspath(p) for p in writable))
        named = [os.environ.get(name, "") for name in _SETUP_ENV_PATHS]
        shown = [p for value in named for p in value.split() if os.path.isabs(p)]
        shown += [p for p in ("/etc/pip.conf", "/etc/xdg/pip") if os.path.exists(p)]
        guard = Guard(plan=replace(plan, visible=(*plan.visible, *shown)), used=True)
        return wrap(guard, argv, self.scratch, pythons=tuple(pythons))

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


def for_setup(mode: str) -> SetupWrap | None:
    """The wrap for setup and prepare lines, or None when bubblewrap is off or not usable here
    (RunError for `required`)."""
    guard = begin(Plan(mode=check_mode(mode)))
    return SetupWrap(guard) if guard.used else None


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
    after = snapshot(roots, strict, guard.plan.containers)
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
    """Per cache folder: each entry this run's processes could have changed, and did, with a
    reason; the entry is then discarded (removed, or condemned while another run uses it).

    A box's caches are shared by concurrent runs, so a change is this run's only when its own
    processes could have made it and no journaled publication explains it: under bubblewrap an
    entry the tests see read-only is never theirs; otherwise the entry's publication journal
    (caches/journal.py) must hold a chain of records from the state seen before the tests to
    the state seen after, each written under the entry's lock by whoever published, fetched
    into or removed it."""
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
        store = _store_of(root)
        for name in entries:
            path = os.path.join(root, name)
            if guard.used and not _writable_by_tests(guard.plan, path):
                continue  # read-only to the tests: another run published or removed it
            if store is not None and _journaled(store, root, name, guard.before, after):
                continue
            what = _first_difference(guard.before, after, path)
            if store is None:
                _discard(path)
                fate = "it was removed, so the next run rebuilds it"
            elif store.discard(os.path.basename(root), name) == "removed":
                fate = "it was removed, so the next run rebuilds it"
            else:
                fate = (
                    "another run still uses it, so it is condemned: no run uses it again, and "
                    "it is removed once those runs end"
                )
            reasons.append(
                f"the test command wrote into {path}, which later runs read ({what}); {fate}"
            )
        if not entries and not (guard.used and not _writable_by_tests(guard.plan, root)):
            reasons.append(f"the test command changed {root} itself, which later runs read")
    return reasons


def _writable_by_tests(plan: Plan, path: str) -> bool:
    """Whether the tests could write path under bwrap: only where a writable bind reaches
    (path inside one, or one inside path); everything else of a cache folder is read-only."""
    return any(_inside(path, (w,)) or _inside(w, (path,)) for w in plan.writable)


def _store_of(container: str) -> Optional[Store]:
    """The cache store a container belongs to (`<root>/<kind>` with `<root>/locks`), if any."""
    root = os.path.dirname(container.rstrip(os.sep))
    if os.path.basename(container.rstrip(os.sep)) not in KINDS:
        return None
    if not os.path.isdir(os.path.join(root, "locks")):
        return None
    return Store(Path(root))


def _journaled(
    store: Store,
    root: str,
    name: str,
    before: dict[str, tuple[int, ...]],
    after: dict[str, tuple[int, ...]],
) -> bool:
    """True when the entry's publication journal leads from its state before to after."""
    kind, path = os.path.basename(root.rstrip(os.sep)), os.path.join(root, name)
    with store.publishing(kind, name, exclusive=False):
        recorded = journal.records(store.journal(kind, name))
    return journal.explains(
        recorded, journal.fingerprint(before, path), journal.fingerprint(after, path)
    )


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


def snapshot(
    roots: tuple[str, ...], strict: tuple[str, ...] = (), containers: tuple[str, ...] = ()
) -> dict[str, tuple[int, ...]]:
    """path -> (inode, mode, size, mtime_ns, ctime_ns) for every entry under roots (no links
    followed, `__pycache__` folders skipped except under the strict roots); a root that does
    not exist is recorded as missing. Each entry of a container root of a cache store is walked
    under its publish lock (shared): a concurrent fetch into it is seen whole or not at all."""
    out: dict[str, tuple[int, ...]] = {}
    for root in roots:
        if not os.path.lexists(root):
            out[root] = (-1,)
            continue
        _add(out, root)
        if not os.path.isdir(root) or os.path.islink(root):
            continue
        store = _store_of(root) if root in containers else None
        if store is None:
            if _walk(out, root, root in strict):
                return out
            continue
        kind = os.path.basename(root.rstrip(os.sep))
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            with store.publishing(kind, name, exclusive=False):
                if not os.path.lexists(path):
                    continue
                _add(out, path)
                if os.path.isdir(path) and not os.path.islink(path) and _walk(out, path, True):
                    return out
    return out


def _walk(out: dict[str, tuple[int, ...]], root: str, every: bool) -> bool:
    """Add everything under root; True when the snapshot is past its size limit."""
    for folder, dirs, files in os.walk(root):
        # Interpreters write byte-code caches as they import (the coordinator's own
        # lazy imports on `local`): not evidence. Under bwrap they are read-only anyway.
        if not every:
            dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in dirs + files:
            _add(out, os.path.join(folder, name))
        if len(out) > _MAX_ENTRIES:
            return True
    return False


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
