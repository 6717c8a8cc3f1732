"""The folders a Python interpreter needs, found without running any of its start-up code. Runs on
boxes; stdlib only.

The sandbox view (sandview.py) is an allow-list, so every interpreter a run uses must bring its
own files: its executable, prefixes, site folders, and the folders its `.pth` files put on
sys.path (an editable install elsewhere, charpin's own source checkout on `local`). They are
asked of the interpreter with `-I -S` (no site, no .pth file runs: a planted one must not run
outside the sandbox) and the `.pth` files are read as text: a line that names a folder counts,
an `import` line is never executed here.
"""

from __future__ import annotations

import json
import os
import subprocess
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
try:
    sites.append(site.getusersitepackages())
except Exception:
    pass
print(json.dumps({"paths": found, "sites": sites + [paths.get("purelib", ""), paths.get("platlib", "")]}))
"""
_SECONDS = 30.0


@lru_cache(maxsize=32)
def paths_of(python: str) -> tuple[str, ...]:
    """Every folder python needs, as absolute paths that exist; the executable itself (and what
    its links point at) included. An interpreter that cannot be asked gives its own path only."""
    found = [os.path.abspath(python), os.path.realpath(python)]
    found.append(os.path.dirname(os.path.realpath(python)))
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
    found += [p for p in data.get("paths", []) if isinstance(p, str) and p]
    sites = [p for p in data.get("sites", []) if isinstance(p, str) and p]
    found += sites
    for folder in sites:
        found += pth_folders(folder)
    out: list[str] = []
    for path in found:
        path = os.path.abspath(path)
        if os.path.exists(path) and path not in out:
            out.append(path)
        real = os.path.realpath(path)
        if real != path and os.path.exists(real) and real not in out:
            out.append(real)
    return tuple(out)


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
