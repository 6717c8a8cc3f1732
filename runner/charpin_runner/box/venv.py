"""Setup commands in a venv cached by the project's dependency files. Runs on boxes; stdlib only.

The venv's name is a hash of this Python's version, the setup commands and the dependency files
of the checkout, so a second run with the same dependencies reuses it; a lock keeps two boxes
that share one home from building the same venv twice, and `.ok` marks a venv whose setup
finished (a half-built one is rebuilt).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from charpin_runner import procgroup
from charpin_runner.errors import BoxStepError

DEPENDENCY_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "poetry.lock", "uv.lock")
_OUTPUT_TAIL = 2000


def venv_key(src: Path, commands: Sequence[str]) -> str:
    """The cache key of the venv for src's dependency files and these setup commands."""
    key = hashlib.sha256(sys.version.encode() + json.dumps(list(commands)).encode())
    names = set(DEPENDENCY_FILES) | {p.name for p in src.glob("requirements*.txt")}
    for name in sorted(names):
        path = src / name
        if path.is_file():
            key.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return key.hexdigest()[:20]


def build(venvs: Path, src: Path, commands: Sequence[str], seconds: float) -> dict[str, Any]:
    """Return {"python", "venv", "cached"} for a venv where commands ran (or had run).

    The commands run in a throwaway copy of the checkout, never in src: what they write
    (`*.egg-info`, build/) would otherwise be in the first run's checkout only. An editable
    install of the project made here would point at that copy after it is gone, so it is
    refused with the fix (install the project in `prepare`, which runs for every checkout).
    """
    ends = time.monotonic() + seconds
    venv = venvs / venv_key(src, commands)
    python = venv / "bin" / "python"
    # "a": opening must not touch the file (a concurrent run watches the venvs folder).
    with open(f"{venv}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cached = (venv / ".ok").exists()
        if not cached:
            shutil.rmtree(venv, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(venv)], src, dict(os.environ), ends)
            # In the run's folder: the box's cache folders change only by what they cache.
            work = src.parent / "setup-work"
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(src, work, symlinks=True, ignore=shutil.ignore_patterns(".git"))
            try:
                before = _listing(work)
                for command in commands:
                    _run(command, work, _venv_env(venv), ends, shell=True)  # noqa: S604 - shell
                editable = _editables(venv, work) + _own_packages(venv, work)
                wrote = _changed(before, _listing(work))
            finally:
                shutil.rmtree(work, ignore_errors=True)
            if wrote and not editable:
                shutil.rmtree(venv, ignore_errors=True)
                shown = ", ".join(wrote[:5]) + (
                    f" and {len(wrote) - 5} more" if len(wrote) > 5 else ""
                )
                raise BoxStepError(
                    "setup-failed",
                    f"setup wrote {shown} into the checkout; setup runs once per dependency set "
                    "in a throwaway copy, so the tests would never see it: install into the venv "
                    "charpin gives setup (first on its PATH: `pip install ...`, no `.venv` of "
                    "your own) and make files each checkout needs in `prepare`",
                )
            if editable:
                shutil.rmtree(venv, ignore_errors=True)
                raise BoxStepError(
                    "setup-failed",
                    f"setup installed the project itself ({', '.join(editable)}) into the "
                    "cached venv, where every later commit would import this first checkout: "
                    'install it in `prepare` (prepare = ["pip install -e . --no-deps"]), which '
                    "runs for each checkout, and keep only its dependencies in `setup`",
                )
            (venv / ".ok").touch()
    return {"python": str(python), "venv": str(venv), "cached": cached}


def prepare(run: Path, base_python: str, src: Path, commands: Sequence[str], seconds: float) -> str:
    """Run the prepare commands in src with a per-run venv over base_python's packages; return
    that venv's python.

    The per-run venv sees every package of base_python (a site directory added by a .pth file)
    and takes whatever the commands install (an editable install of this checkout), so the
    cached venv is never written by a run, whatever the commit's build code does.
    """
    ends = time.monotonic() + seconds
    venv = run / "venv"
    _run([base_python, "-m", "venv", "--without-pip", str(venv)], src, dict(os.environ), ends)
    python = venv / "bin" / "python"
    base_sites = _site_dirs(base_python, src, ends)
    ours = _site_dirs(str(python), src, ends)
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
        _run(command, src, _venv_env(venv), ends, shell=True, what="prepare")  # noqa: S604
    return str(python)


def _venv_env(venv: Path) -> dict[str, str]:
    return dict(
        os.environ,
        VIRTUAL_ENV=str(venv),
        PATH=str(venv / "bin") + os.pathsep + os.environ.get("PATH", ""),
    )


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


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    """relative path -> (size, mtime_ns) of every file and link under root, byte code aside."""
    found: dict[str, tuple[int, int]] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            found[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
    return found


def _changed(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    """Top-level-first list of what appeared or changed (a new folder is named once)."""
    moved = sorted(p for p in after if before.get(p) != after[p])
    tops = {p.split(os.sep, 1)[0] for p in before}
    named: list[str] = []
    for path in moved:
        top = path.split(os.sep, 1)[0]
        shown = top + "/" if top != path and top not in tops else path
        if shown not in named and not any(p.endswith("/") and path.startswith(p) for p in named):
            named.append(shown)
    return named


def _own_packages(venv: Path, work: Path) -> list[str]:
    """The checkout's own top-level packages that setup copied into the venv (`pip install .`):
    every later commit would import that copy instead of its checkout."""
    own: set[str] = set()
    for base in (work, work / "src"):
        own.update(p.parent.name for p in base.glob("*/__init__.py"))
    sites = list(venv.glob("lib/python*/site-packages"))
    return sorted(name for name in own if any((site / name).is_dir() for site in sites))


def _editables(venv: Path, work: Path) -> list[str]:
    """Distributions pip installed in editable mode from inside work (PEP 610 direct_url.json,
    or a legacy .egg-link)."""
    found = []
    where = os.path.realpath(work)
    for meta in sorted(venv.glob("lib/python*/site-packages/*.dist-info/direct_url.json")):
        try:
            info = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        url = str(info.get("url", ""))
        if info.get("dir_info", {}).get("editable") and url.startswith("file://"):
            if os.path.realpath(url[len("file://") :]).startswith(where):
                found.append(meta.parent.name.split("-")[0])
    for link in sorted(venv.glob("lib/python*/site-packages/*.egg-link")):
        try:
            target = link.read_text(encoding="utf-8").splitlines()[0]
        except (OSError, IndexError):
            continue
        if os.path.realpath(target).startswith(where):
            found.append(link.stem)
    return found


def _run(
    command: str | list[str],
    cwd: Path,
    env: dict[str, str],
    ends: float,
    *,
    shell: bool = False,
    what: str = "setup",
) -> None:
    # Its own session, so a timeout kills the commands a setup line started, not just its shell.
    proc = subprocess.Popen(
        command,
        shell=shell,
        cwd=str(cwd),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=max(ends - time.monotonic(), 1.0))
    except subprocess.TimeoutExpired:
        procgroup.kill_group(proc.pid)
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
