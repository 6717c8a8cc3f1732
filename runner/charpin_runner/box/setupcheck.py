"""What a setup run did that later commits would suffer from: files written into the checkout,
and the project installed into the cached venv. Runs on boxes; stdlib only.

The project installed itself when a top-level package of the checkout is in the venv and the
distribution that put it there came from the checkout (pip's direct_url.json, PEP 610, names a
`file://` path inside it), or nothing claims it at all (copied by hand). A distribution of the
same name that came from an index (the project is Pygments, and pytest depends on pygments)
has no direct_url.json: that is a dependency, not the project.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlparse


def listing(root: Path) -> dict[str, tuple[int, int]]:
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


def changed(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
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


def installed_itself(venv: Path, work: Path) -> list[str]:
    """The checkout's own packages or distributions that setup installed into the venv."""
    return sorted(set(editables(venv, work)) | set(own_packages(venv, work)))


def own_packages(venv: Path, work: Path) -> list[str]:
    """The checkout's top-level packages that setup copied into the venv from the checkout
    (`pip install .`): every later commit would import that copy instead of its checkout."""
    own: set[str] = set()
    for base in (work, work / "src"):
        own.update(p.parent.name for p in base.glob("*/__init__.py"))
    found = []
    for site in venv.glob("lib/python*/site-packages"):
        owners = _owners(site)
        for name in sorted(own):
            if not (site / name).is_dir():
                continue
            dists = owners.get(name, [])
            # Nothing claims the folder (copied by hand, or by an installer that keeps no
            # record): treat it as the checkout's. Claimed: the checkout's only when the
            # distribution was installed from a path inside it.
            if not dists or any(_from_inside(dist, work) for dist in dists):
                found.append(name)
    return sorted(set(found))


def editables(venv: Path, work: Path) -> list[str]:
    """Distributions pip installed in editable mode from inside work (PEP 610 direct_url.json,
    or a legacy .egg-link)."""
    found = []
    where = os.path.realpath(work)
    for meta in sorted(venv.glob("lib/python*/site-packages/*.dist-info/direct_url.json")):
        info = _json(meta)
        url = str(info.get("url", ""))
        dir_info = info.get("dir_info")
        if isinstance(dir_info, dict) and dir_info.get("editable") and _inside(url, where):
            found.append(meta.parent.name.split("-")[0])
    for link in sorted(venv.glob("lib/python*/site-packages/*.egg-link")):
        try:
            target = link.read_text(encoding="utf-8").splitlines()[0]
        except (OSError, IndexError):
            continue
        if os.path.realpath(target) == where or os.path.realpath(target).startswith(where + os.sep):
            found.append(link.stem)
    return found


def _owners(site: Path) -> dict[str, list[Path]]:
    """top-level name -> the dist-info folders whose RECORD lists a file under it."""
    owners: dict[str, list[Path]] = {}
    for dist in sorted(site.glob("*.dist-info")):
        try:
            lines = (dist / "RECORD").read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        tops = {line.split(",", 1)[0].split("/", 1)[0] for line in lines if "/" in line}
        for top in tops:
            owners.setdefault(top, []).append(dist)
    return owners


def _from_inside(dist: Path, work: Path) -> bool:
    """True when dist was installed from a file:// path inside work (a folder or an archive)."""
    url = str(_json(dist / "direct_url.json").get("url", ""))
    return _inside(url, os.path.realpath(work))


def _inside(url: str, where: str) -> bool:
    path = _file_path(url)
    if path is None:
        return False
    real = os.path.realpath(path)
    return real == where or real.startswith(where + os.sep)


def _file_path(url: str) -> Optional[str]:
    parsed = urlparse(url)
    return unquote(parsed.path) if parsed.scheme == "file" else None


def _json(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
