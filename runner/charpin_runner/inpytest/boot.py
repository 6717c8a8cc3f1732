"""What charpin's boot (probehost.py) does inside the tests' pytest before anything of the checkout
is importable, in the controller and in every pytest-xdist worker. Runs inside the tests' pytest
(and its workers' interpreters); stdlib + pytest only.

Rule 1 of the threat model, for the modules charpin's own harness runs on:

* preload() imports pytest's whole dependency closure while sys.path holds only the trusted
  interpreter's own folders: the top-level modules of every distribution pytest and
  pytest-xdist require (transitively, from their installed metadata), and every standard-library
  module their loaded sources import anywhere (a lazy `import tomllib` inside a function
  included). A same-named package in the checkout (`packaging/`, `tomllib.py`) can then never
  stand in for one: the name is already taken in sys.modules, and its submodules resolve
  through the real package's own folder.
* shadowed() names every module of those names that nevertheless resolves to a file inside the
  checkout (outside the interpreter's own site folders): the probe reports it as tampering, so
  the run is incomplete.
* guard_autoload() hides the checkout's `*.dist-info` folders from pytest's plugin autoload (one
  call, the harness's own; pytester runs of the tests see the metadata as it is).
* Workers: xdist starts each worker as `PYTHON -u -c BOOTSTRAP` in the checkout, where the
  checkout comes first on sys.path and PYTHONPATH's sitecustomize runs at start-up. Workers
  instead start the probe root's worker boot (probehost.WORKER_BOOT) with PYTHONPATH moved
  aside (BootPlugin sets each popen spec's python), which does all of the above before it runs
  xdist's bootstrap.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import re
import shlex
import shutil
import sys
import sysconfig
from collections.abc import Iterable
from typing import Any, Optional

import pytest

# The harness charpin runs the tests with: pytest, and pytest-xdist for its workers.
_ROOTS = ("pytest", "pytest-xdist")
# Standard-library modules whose import does something visible (prints, opens a window).
_SIDE_EFFECTS = frozenset({"this", "antigravity", "idlelib", "tkinter", "turtle", "turtledemo"})
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
# An import statement at any indentation (a literal newline first: ~5x faster than `^` with
# re.MULTILINE over the ~2 MB of pytest's loaded sources).
_IMPORTS = re.compile(r"\n[ \t]*(from|import)[ \t]+([A-Za-z_][\w., \t]*)")
PYTHONPATH_VAR = "CHARPIN_BOOT_PYTHONPATH"


class _Boot:
    """What preload() found: the names it holds for the harness, and the trusted folders."""

    names: frozenset[str] = frozenset()
    checkout: Optional[str] = None
    sites: tuple[str, ...] = ()

    @staticmethod
    def done() -> None:
        """Set by guard_autoload()."""


STATE = _Boot()


def _distribution_closure(roots: Iterable[str]) -> list[Any]:
    """The installed distributions roots need, transitively (markers aside: a requirement that
    is not installed is skipped, one that is installed is imported either way)."""
    import importlib.metadata as metadata

    seen: dict[str, Any] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except Exception:
            seen[key] = None
            continue
        seen[key] = dist
        for requirement in dist.requires or []:
            spec, _, marker = requirement.partition(";")
            found = _REQUIREMENT.match(spec)
            if found is not None and "extra" not in marker:
                todo.append(found.group(1))
    return [dist for dist in seen.values() if dist is not None]


def _top_level(dist: Any) -> set[str]:
    text = dist.read_text("top_level.txt")
    if text:
        return {line.strip() for line in text.splitlines() if line.strip().isidentifier()}
    names = set()
    for entry in dist.files or ():
        parts = entry.parts
        if not parts or parts[0] in ("..", "") or parts[0].endswith((".dist-info", ".data")):
            continue
        top = parts[0][:-3] if len(parts) == 1 and parts[0].endswith(".py") else parts[0]
        if top.isidentifier() and (len(parts) > 1 or parts[0].endswith(".py")):
            names.add(top)
    return names


def _imported_names(tops: set[str]) -> set[str]:
    """Top-level names every loaded module of tops imports, anywhere in its source."""
    found: set[str] = set()
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None)
        if name.partition(".")[0] not in tops or not isinstance(where, str):
            continue
        if not where.endswith(".py"):
            continue
        try:
            with open(where, encoding="utf-8") as handle:
                source = handle.read()
        except (OSError, ValueError):
            continue
        for keyword, names in _IMPORTS.findall("\n" + source):
            for one in names.split(",") if keyword == "import" else names.split()[:1]:
                first = one.strip().split(".")[0].split()
                if first:
                    found.add(first[0])
    return found


def _stdlib_folders() -> list[str]:
    paths = sysconfig.get_paths()
    folders = [paths["stdlib"], os.path.join(paths["platstdlib"], "lib-dynload")]
    return [f for f in folders if os.path.isdir(f)]


def _is_stdlib(name: str, folders: list[str]) -> bool:
    if name in sys.builtin_module_names:
        return True
    return importlib.machinery.PathFinder.find_spec(name, folders) is not None


def _load(name: str) -> bool:
    if name in sys.modules:
        return True
    try:
        importlib.import_module(name)
    except Exception:  # an optional module missing here (tomli on 3.11, msvcrt off Windows)
        return False
    return True


def _not_for_rewrite(tops: set[str]) -> None:
    """pytest marks a plugin's modules for assertion rewriting and warns (an error under
    `filterwarnings = error`) about each one already imported: the plugins preload() imported
    (pytest-xdist) say they are not to be rewritten, as charpin_runner itself does."""
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] in tops and module is not None:
            doc = getattr(module, "__doc__", None) or ""
            if "PYTEST_DONT_REWRITE" not in doc:
                try:
                    module.__doc__ = doc + "\n\nPYTEST_DONT_REWRITE: imported by charpin's boot."
                except (AttributeError, TypeError):
                    pass


def preload() -> None:
    """Import the harness's dependency closure now (call with only trusted folders on
    sys.path). Remembers the names for shadowed()."""
    tops: set[str] = set()
    plugins: set[str] = set()
    for dist in _distribution_closure(_ROOTS):
        names = _top_level(dist)
        tops |= names
        if any(entry.group == "pytest11" for entry in dist.entry_points):
            plugins |= names
    held = {name for name in sorted(tops) if _load(name)}
    _not_for_rewrite(plugins)
    folders = _stdlib_folders()
    lazy = _imported_names(held) - set(sys.modules) - _SIDE_EFFECTS - tops
    held |= {name for name in sorted(lazy) if _is_stdlib(name, folders) and _load(name)}
    STATE.names = frozenset(held)


def trusted_sites() -> tuple[str, ...]:
    """The interpreter's own site folders (an in-tree .venv included): trusted, wherever they
    are."""
    sites: set[str] = set()
    try:
        import site

        sites.update(os.path.realpath(p) for p in site.getsitepackages())
        sites.add(os.path.realpath(site.getusersitepackages()))
    except Exception:  # noqa: S110 - a stripped-down site module: no site folders to trust
        pass
    return tuple(sorted(sites))


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _untrusted(path: str) -> bool:
    checkout = STATE.checkout
    real = os.path.realpath(path)
    return (
        checkout is not None
        and _inside(real, checkout)
        and not any(_inside(real, site) for site in STATE.sites)
    )


def settle(checkout: str) -> None:
    """The checkout is about to become importable: remember where it is."""
    STATE.checkout = os.path.realpath(checkout)
    STATE.sites = trusted_sites()


def shadowed() -> list[str]:
    """One entry per harness module that resolves to a file inside the checkout."""
    if STATE.checkout is None:
        return []
    found = []
    for name, module in sorted(list(sys.modules.items())):
        if name.partition(".")[0] not in STATE.names or module is None:
            continue
        where = getattr(module, "__file__", None)
        paths = [where] if isinstance(where, str) else []
        paths += [p for p in getattr(module, "__path__", None) or () if isinstance(p, str)]
        bad = next((p for p in paths if _untrusted(p)), None)
        if bad is not None:
            shown = os.path.relpath(os.path.realpath(bad), STATE.checkout)
            found.append(f"pytest's own module {name} was imported from the checkout ({shown})")
    return found


def guard_autoload() -> None:
    """pytest's next configuration (the harness's own: its `-p` names and its plugin autoload)
    skips distributions found in the checkout outside the interpreter's site folders, until
    its initial conftests load (autoload_done()); pytester runs of the tests see the metadata
    as it is."""
    import importlib.metadata as metadata

    from _pytest.config import Config

    every = metadata.distributions
    original = Config.parse

    def installed(**kwargs: Any) -> Iterable[Any]:
        for dist in every(**kwargs):
            try:
                where = str(dist.locate_file(""))
            except Exception:  # noqa: S112 - a distribution without a place is none of ours
                continue
            if not _untrusted(where):
                yield dist

    def parse(self: Any, *args: Any, **kwargs: Any) -> Any:
        Config.parse = original  # type: ignore[method-assign]
        metadata.distributions = installed
        try:
            return original(self, *args, **kwargs)
        finally:
            autoload_done()

    def done() -> None:
        metadata.distributions = every

    STATE.done = done  # type: ignore[method-assign]
    Config.parse = parse  # type: ignore[method-assign]


def autoload_done() -> None:
    """The checkout's own metadata is visible again (its conftests are about to load)."""
    STATE.done()


def follow_sys_path() -> None:
    """pytest-xdist hands its workers the sys.path it saw at import; preload() imported it
    before the checkout was on sys.path, so it gets the tests' sys.path now."""
    module = sys.modules.get("xdist.plugin")
    frozen = getattr(module, "_sys_path", None)
    if isinstance(frozen, list):
        frozen[:] = sys.path


class BootPlugin:
    """The boot's plugin object in the controller: the autoload guard ends where the initial
    conftests load, and every popen xdist worker (a restarted one too) starts through the
    worker boot, its PYTHONPATH moved aside by `env` (its sitecustomize would run before the
    boot), both programs found now, before any code of the checkout can change PATH."""

    def __init__(self, worker_boot: str) -> None:
        self.worker_boot = worker_boot
        self.env = shutil.which("env") or "/usr/bin/env"

    @pytest.hookimpl(tryfirst=True)
    def pytest_load_initial_conftests(self) -> None:
        autoload_done()

    @pytest.hookimpl(optionalhook=True, trylast=True)
    def pytest_xdist_setupnodes(self, config: pytest.Config, specs: list[Any]) -> None:
        for spec in specs:
            if getattr(spec, "popen", False) and not getattr(spec, "via", None):
                spec.python = self.worker_command(spec.python)

    def worker_command(self, python: Optional[str]) -> str:
        words = shlex.split(python) if python else [sys.executable]
        pythonpath = os.environ.get("PYTHONPATH")
        if pythonpath is not None:
            words = [self.env, "-u", "PYTHONPATH", f"{PYTHONPATH_VAR}={pythonpath}", *words]
        return " ".join(shlex.quote(word) for word in (*words, self.worker_boot))


def worker_code(argv: list[str]) -> str:
    """The worker's command line after the boot's path (`-u [-B] -c CODE`): applies -u and -B
    and returns CODE, xdist's bootstrap."""
    at = argv.index("-c")
    flags = argv[:at]
    if "-B" in flags:
        sys.dont_write_bytecode = True
    if "-u" in flags:
        for stream in (sys.stdout, sys.stderr):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(write_through=True)
    sys.argv[:] = ["-c", *argv[at + 2 :]]
    return argv[at + 1]
