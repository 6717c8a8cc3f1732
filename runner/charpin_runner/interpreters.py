"""The folders a Python interpreter needs, found without running any of its start-up code. Runs on
boxes; stdlib only.

The sandbox view (sandview.py) is an allow-list, so every interpreter a run uses must bring its
own files: its executable, prefixes and site folders. They are asked of the interpreter with
`-I -S` (no site, no .pth file runs: a planted one must not run outside the sandbox). The user
site folder (~/.local/lib/pythonX.Y/site-packages) is never part of it: the tests run with
PYTHONNOUSERSITE.

A `.pth` file's path lines are read as text (an `import` line never runs here), and trusted only
as far as their writer is (class E: what the commit's code can write is never trusted later).
The trusted interpreter is the one charpin itself runs on (the box agent's, passed to the runner
as `--trusted-python`; the runner's own when started by hand): its `.pth` lines count (charpin's
own source checkout on `local`). Any other interpreter's environment (a setup venv, the per-run
venv prepare writes, a venv in the checkout) was written by the commit's code: a path line there
counts only when it names a folder of its own base installation or of the trusted interpreter's
environment, never anything else (`$HOME`, `/`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import lru_cache

_ASK = r"""
import json, os, site, sys, sysconfig
paths = sysconfig.get_paths()
found = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
found += [paths.get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")]
sites = []
# A venv: without site (-S) the prefix is the base installation's; the venv is found as site
# would find it, by the pyvenv.cfg beside the executable's folder.
venv = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
if os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
    found.append(venv)
    mine = sysconfig.get_paths(vars={"base": venv, "platbase": venv})
    sites += [mine.get("purelib", ""), mine.get("platlib", "")]
try:
    sites += list(site.getsitepackages())
except Exception:
    pass
base = [sys.base_prefix, sys.base_exec_prefix]
print(json.dumps({"paths": found, "base": base, "sites": sites + [paths.get("purelib", ""), paths.get("platlib", "")]}))
"""
_SECONDS = 30.0


_trusted: list[str] = []


def trust(python: str) -> None:
    """Name the interpreter charpin itself runs on (the box agent's): see the module docstring."""
    _trusted[:] = [os.path.abspath(python)]
    paths_of.cache_clear()


def trusted() -> str:
    return _trusted[0] if _trusted else os.path.abspath(sys.executable)


def _same(one: str, other: str) -> bool:
    return os.path.abspath(one) == os.path.abspath(other)


@lru_cache(maxsize=32)
def paths_of(python: str) -> tuple[str, ...]:
    """Every folder python needs, as absolute paths that exist; the executable itself (and what
    its links point at) included. An interpreter that cannot be asked gives its own path only."""
    found = [os.path.abspath(python), os.path.realpath(python)]
    found.append(os.path.dirname(os.path.realpath(python)))
    data = _ask(python)
    found += [p for p in data.get("paths", []) if isinstance(p, str) and p]
    sites = [p for p in data.get("sites", []) if isinstance(p, str) and p]
    found += sites
    named = [folder for site_dir in sites for folder in pth_folders(site_dir)]
    if not _same(python, trusted()):
        # Written by the commit's code: a path line widens nothing (module docstring).
        base = [p for p in data.get("base", []) if isinstance(p, str) and os.path.isabs(p)]
        allowed = tuple(base) + paths_of(trusted())
        named = [f for f in named if _within(f, allowed)]
    found += named
    out: list[str] = []
    for path in found:
        path = os.path.abspath(path)
        if os.path.exists(path) and path not in out:
            out.append(path)
        real = os.path.realpath(path)
        if real != path and os.path.exists(real) and real not in out:
            out.append(real)
    return tuple(out)


def _ask(python: str) -> dict[str, list[str]]:
    try:
        done = subprocess.run(
            [python, "-I", "-S", "-c", _ASK],
            capture_output=True,
            text=True,
            timeout=_SECONDS,
            check=False,
            cwd="/",
        )
        data = json.loads(done.stdout) if done.returncode == 0 else {}
    except (OSError, ValueError, subprocess.TimeoutExpired):
        data = {}
    return data if isinstance(data, dict) else {}


def _within(path: str, folders: tuple[str, ...]) -> bool:
    real = os.path.realpath(path)
    for folder in folders:
        top = os.path.realpath(folder)
        if real == top or real.startswith(top.rstrip(os.sep) + os.sep):
            return True
    return False


def pth_folders(site_dir: str) -> list[str]:
    """The folders the `.pth` files of site_dir name on their path lines (imports skipped)."""
    out: list[str] = []
    try:
        names = sorted(n for n in os.listdir(site_dir) if n.endswith(".pth"))
    except OSError:
        return out
    for name in names:
        try:
            with open(os.path.join(site_dir, name), encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.strip()
            if not line or line.startswith(("#", "import ", "import\t")):
                continue
            folder = line if os.path.isabs(line) else os.path.join(site_dir, line)
            if os.path.isdir(folder):
                out.append(os.path.normpath(folder))
    return out


def watch_roots(python: str) -> tuple[str, ...]:
    """What of python's environment a run without bubblewrap watches (rule 3): the venv it
    belongs to, its site folders and the standard library folder (where a planted .pth file or
    sitecustomize.py would run in every later process), not the whole base installation."""
    paths = paths_of(python)
    venv = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    found = [venv] if os.path.isfile(os.path.join(venv, "pyvenv.cfg")) else []
    found += [p for p in paths if os.path.basename(p) in ("site-packages", "dist-packages")]
    found += [p for p in paths if _is_stdlib(p)]
    out: list[str] = []
    for path in found:
        if path not in out and not any(path.startswith(o.rstrip(os.sep) + os.sep) for o in out):
            out.append(path)
    return tuple(out)


def _is_stdlib(path: str) -> bool:
    name = os.path.basename(path)
    return name.startswith("python3") and os.path.isfile(os.path.join(path, "os.py"))
