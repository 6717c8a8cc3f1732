"""Coordinator side; stdlib and verify.gitread only. Dependencies: every dependency declaration
a patch changed."""

from __future__ import annotations

import configparser
import fnmatch
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any

from charpin_coordinator.verify import gitread

# Files that declare dependencies as a whole: any change to one is a dependency change.
_WHOLE_FILES = (
    "*requirements*.txt",
    "*requirements*.in",
    "*constraints*.txt",
    "*constraints*.in",
    "setup.py",
    "Pipfile",
    "Pipfile.lock",
    "Pipfile*",
    "poetry.lock",
    "uv.lock",
    "pdm.lock",
    "pylock.toml",
    "pylock.*.toml",
    "environment.yml",
    "environment.yaml",
    "environment*.yml",
    "environment*.yaml",
    "conda-lock.yml",
)
# pyproject.toml: (keys, label, one entry per sub-key). Labels name the table as TOML does.
_PYPROJECT = (
    (("project", "dependencies"), "[project].dependencies", False),
    (("project", "optional-dependencies"), "[project.optional-dependencies]", True),
    (("build-system", "requires"), "[build-system].requires", False),
    (("dependency-groups",), "[dependency-groups]", True),
    (("tool", "poetry", "dependencies"), "[tool.poetry.dependencies]", False),
    (("tool", "poetry", "dev-dependencies"), "[tool.poetry.dev-dependencies]", False),
    (("tool", "poetry", "group"), "[tool.poetry.group]", True),
    (("tool", "poetry", "extras"), "[tool.poetry.extras]", True),
    (("tool", "poetry", "source"), "[tool.poetry].source", False),
    (("tool", "pdm", "dev-dependencies"), "[tool.pdm.dev-dependencies]", True),
    (("tool", "uv", "dev-dependencies"), "[tool.uv].dev-dependencies", False),
    (("tool", "uv", "constraint-dependencies"), "[tool.uv].constraint-dependencies", False),
    (("tool", "uv", "override-dependencies"), "[tool.uv].override-dependencies", False),
    (("tool", "uv", "sources"), "[tool.uv.sources]", True),
    (("tool", "uv", "index"), "[tool.uv].index", False),
    (
        ("tool", "setuptools", "dynamic", "dependencies"),
        "[tool.setuptools.dynamic].dependencies",
        False,
    ),
    (
        ("tool", "setuptools", "dynamic", "optional-dependencies"),
        "[tool.setuptools.dynamic.optional-dependencies]",
        True,
    ),
)
_SETUP_CFG_OPTIONS = ("install_requires", "setup_requires", "tests_require", "dependency_links")

def dependencies(repo: Path, base: str, patched: str) -> list[str]:
    """One entry per dependency declaration the patch changed (`path: [table].key`, or the path of
    a file that is a declaration as a whole)."""
    base, patched = gitread.commits(repo, base, patched)
    found: list[str] = []
    parsed: list[tuple[gitread.Change, bool]] = []  # (change, is a pyproject.toml rather than setup.cfg)
    for change in gitread.changes(repo, base, patched):
        names = {PurePosixPath(p).name for p in change.paths}
        if names & {"pyproject.toml", "setup.cfg"}:
            parsed.append((change, "pyproject.toml" in names))
        elif any(_is_whole_declaration(p) for p in change.paths):
            found.append(change.path)
    blobs = gitread.blobs(repo, [b for c, _ in parsed for b in (c.old_blob, c.new_blob) if b])
    for change, pyproject in parsed:
        # A side without the file (added, deleted, now a link) declares nothing: b"".
        old, new = blobs.get(change.old_blob, b""), blobs.get(change.new_blob, b"")
        moved = _pyproject_changes(old, new) if pyproject else _setup_cfg_changes(old, new)
        found += [f"{change.path}: {e}" for e in moved]
    return sorted(set(found))


def _is_whole_declaration(path: str) -> bool:
    pure = PurePosixPath(path)
    if any(fnmatch.fnmatchcase(pure.name, pattern) for pattern in _WHOLE_FILES):
        return True
    # pip-tools layouts keep one file per environment in a requirements/ folder.
    return pure.parent.name == "requirements" and pure.suffix in (".txt", ".in")


def _pyproject_changes(old: bytes, new: bytes) -> list[str]:
    before, after = _toml(old), _toml(new)
    if isinstance(before, str) or isinstance(after, str):
        return _unreadable(before, after)
    out = []
    for keys, label, per_key in _PYPROJECT:
        was, now = _dig(before, keys), _dig(after, keys)
        if was == now:
            continue
        if per_key and isinstance(was or {}, dict) and isinstance(now or {}, dict):
            was, now = was or {}, now or {}
            moved = [k for k in sorted(was.keys() | now.keys()) if was.get(k) != now.get(k)]
            out += [f"{label}.{k}" for k in moved]
        else:
            out.append(label)
    return out


def _unreadable(before: object, after: object) -> list[str]:
    """An entry for each side that does not parse (given as the reason why, a str)."""
    sides = (("base", before), ("patched", after))
    return [f"does not parse on the {s} side ({why})" for s, why in sides if isinstance(why, str)]


def _toml(data: bytes) -> dict[str, Any] | str:
    """The document, or why it does not parse (one line)."""
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
        return " ".join(str(exc).split()) or type(exc).__name__


def _dig(data: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _setup_cfg_changes(old: bytes, new: bytes) -> list[str]:
    before, after = _setup_cfg(old), _setup_cfg(new)
    if isinstance(before, str) or isinstance(after, str):
        return _unreadable(before, after)
    return [k for k in sorted(before.keys() | after.keys()) if before.get(k) != after.get(k)]


def _setup_cfg(data: bytes) -> dict[str, list[str]] | str:
    """`[options]` requirement keys and `[options.extras_require]`, each as its list of lines."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(data.decode("utf-8"))
    except (configparser.Error, UnicodeDecodeError) as exc:
        return " ".join(str(exc).split())
    out = {}
    for section, keys in (("options", _SETUP_CFG_OPTIONS), ("options.extras_require", None)):
        if parser.has_section(section):
            for key, value in parser.items(section):
                if keys is None or key in keys:
                    # One requirement a line; re-indenting or reflowing is not a change.
                    out[f"[{section}].{key}"] = [s.strip() for s in value.splitlines() if s.strip()]
    return out


