"""Coordinator side; stdlib, gitcmd and the runner's inventory. What a patch changes, judged on
this machine from the two commits: the functions it edits (Scope), the dependency declarations
(Dependencies) and the entry points with the environment keys they read (Entry points).

Files are read from git objects (`git show COMMIT:PATH`), never from a working tree.
"""

from __future__ import annotations

import ast
import configparser
import fnmatch
import io
import tarfile
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from charpin_runner.config import CharpinConfig
from charpin_runner.inventory.build import build_inventory
from charpin_runner.inventory.model import compare

from charpin_coordinator.gitcmd import git_bytes, git_run

MODULE = "<module>"
# Files that declare dependencies as a whole (any change is a dependency change).
_DEPENDENCY_FILES = (
    "requirements*.txt",
    "requirements/*.txt",
    "constraints*.txt",
    "Pipfile",
    "Pipfile.lock",
    "poetry.lock",
    "uv.lock",
    "pdm.lock",
    "setup.py",
)
# pyproject.toml tables (dotted) that declare dependencies.
_PYPROJECT_KEYS = (
    ("project", "dependencies"),
    ("project", "optional-dependencies"),
    ("build-system", "requires"),
    ("dependency-groups",),
    ("tool", "poetry", "dependencies"),
    ("tool", "poetry", "group"),
    ("tool", "pdm", "dev-dependencies"),
)


@dataclass(frozen=True)
class Scope:
    """Functions (file:qualname) the patch changed or removed; new ones only called from
    changed ones (an extract, not counted); files that do not parse on one side."""

    changed: list[str] = field(default_factory=list)
    helpers: list[str] = field(default_factory=list)
    unparsable: list[str] = field(default_factory=list)


def scope(repo: Path, base: str, patched: str) -> Scope:
    """Compare every changed .py file function by function."""
    changed: list[str] = []
    helpers: list[str] = []
    unparsable: list[str] = []
    for old_path, new_path in _python_changes(repo, base, patched):
        shown = new_path or old_path
        old = _parse(repo, base, old_path)
        new = _parse(repo, patched, new_path)
        if isinstance(old, _Unparsable) or isinstance(new, _Unparsable):
            unparsable.append(shown)
            continue
        before = _definitions(old) if old is not None else {}
        after = _definitions(new) if new is not None else {}
        edited = sorted(q for q in before if after.get(q) != before[q])
        added = sorted(q for q in after if q not in before)
        calls = _callers(new) if new is not None else {}
        edited_names = {q.rsplit(".", 1)[-1] for q in edited}
        for qualname in added:
            name = qualname.rsplit(".", 1)[-1]
            callers = calls.get(name, set())
            if callers and callers <= {q.rsplit(".", 1)[-1] for q in edited} | edited_names:
                helpers.append(f"{shown}:{qualname}")
            else:
                edited.append(qualname)
        changed += [f"{shown}:{q}" for q in sorted(edited)]
    return Scope(sorted(changed), sorted(helpers), sorted(unparsable))


def dependencies(repo: Path, base: str, patched: str) -> list[str]:
    """One entry per dependency declaration the patch changed."""
    found: list[str] = []
    for path in _changed(repo, base, patched):
        name = path.rsplit("/", 1)[-1]
        if name == "pyproject.toml":
            found += _pyproject_changes(repo, base, patched, path)
        elif name == "setup.cfg":
            found += _setup_cfg_changes(repo, base, patched, path)
        elif any(fnmatch.fnmatch(path, pattern) for pattern in _DEPENDENCY_FILES) or any(
            fnmatch.fnmatch(name, pattern) for pattern in _DEPENDENCY_FILES
        ):
            found.append(path)
    return sorted(dict.fromkeys(found))


def entry_points(repo: Path, base: str, patched: str) -> list[str]:
    """What moved in the entry-point inventory: scripts added or removed, env keys read."""
    before, after = _inventory(repo, base), _inventory(repo, patched)
    drift = compare(before, after)
    out = [f"new entry point {e.label} ({e.file})" for e in drift.appeared]
    out += [f"entry point {e.label} ({e.file}) is gone" for e in drift.disappeared]
    for old, new in drift.env_changed:
        added = sorted(set(new.env) - set(old.env))
        dropped = sorted(set(old.env) - set(new.env))
        parts = [f"reads {', '.join(added)} (new)"] if added else []
        parts += [f"no longer reads {', '.join(dropped)}"] if dropped else []
        if new.dynamic_env != old.dynamic_env:
            parts.append(f"computed env reads {old.dynamic_env} -> {new.dynamic_env}")
        out.append(f"{new.label} ({new.file}) " + "; ".join(parts))
    return out


# -- scope -----------------------------------------------------------------------------------


def _python_changes(repo: Path, base: str, patched: str) -> Iterator[tuple[str, str]]:
    """(old path or "", new path or "") for each .py file that differs; renames paired."""
    raw = git_bytes(repo, "diff", "--name-status", "-z", "-M", base, patched)
    parts = [p.decode("utf-8", "surrogateescape") for p in raw.split(b"\0")]
    index = 0
    while index < len(parts) and parts[index]:
        status = parts[index]
        if status[0] in "RC":
            old, new = parts[index + 1], parts[index + 2]
            index += 3
        else:
            old = new = parts[index + 1]
            index += 2
            if status[0] == "A":
                old = ""
            elif status[0] == "D":
                new = ""
        if (old or new).endswith(".py") or new.endswith(".py"):
            yield old, new


class _Unparsable:
    """A file that does not parse on one side."""


_BROKEN = _Unparsable()


def _parse(repo: Path, commit: str, path: str) -> ast.Module | _Unparsable | None:
    """The module at commit:path; None when there is no such file; _BROKEN when it does not
    parse."""
    if not path:
        return None
    done = git_run(repo, "show", f"{commit}:{path}")
    if done.returncode != 0:
        return None
    try:
        return ast.parse(done.stdout)
    except (SyntaxError, ValueError):
        return _BROKEN


def _definitions(module: ast.Module) -> dict[str, str]:
    """qualname -> the function's AST without positions; MODULE -> the other top-level code."""
    out: dict[str, str] = {}
    rest: list[str] = []

    def walk(body: list[ast.stmt], prefix: str, keep: list[str]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[prefix + node.name] = ast.dump(node, include_attributes=False)
            elif isinstance(node, ast.ClassDef):
                inner: list[str] = []
                walk(node.body, f"{prefix}{node.name}.", inner)
                parts = [*node.bases, *node.keywords, *node.decorator_list]
                header = node.name + "".join(ast.dump(p, include_attributes=False) for p in parts)
                keep.append(header + "".join(inner))
            elif not isinstance(node, (ast.Import, ast.ImportFrom)):
                # An import is what an edit of a function body needs, not an edit of its own.
                keep.append(ast.dump(node, include_attributes=False))

    walk(module.body, "", rest)
    out[MODULE] = "\n".join(rest)
    return out


def _callers(module: ast.Module) -> dict[str, set[str]]:
    """Simple name -> the names of the functions (or MODULE) whose code refers to it."""
    found: dict[str, set[str]] = {}

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name)
                continue
            if isinstance(child, ast.Name):
                found.setdefault(child.id, set()).add(owner)
            elif isinstance(child, ast.Attribute):
                found.setdefault(child.attr, set()).add(owner)
            visit(child, owner)

    visit(module, MODULE)
    return found


# -- dependencies ----------------------------------------------------------------------------


def _changed(repo: Path, base: str, patched: str) -> list[str]:
    raw = git_bytes(repo, "diff", "--name-only", "-z", "--no-renames", base, patched)
    return [p.decode("utf-8", "surrogateescape") for p in raw.split(b"\0") if p]


def _pyproject_changes(repo: Path, base: str, patched: str, path: str) -> list[str]:
    old, new = _toml(repo, base, path), _toml(repo, patched, path)
    if isinstance(old, str) or isinstance(new, str):
        return [f"{path}: {old if isinstance(old, str) else new}"]
    out = []
    for keys in _PYPROJECT_KEYS:
        before, after = _dig(old, keys), _dig(new, keys)
        if before == after:
            continue
        table = f"[{'.'.join(keys[:-1])}].{keys[-1]}" if len(keys) > 1 else f"[{keys[0]}]"
        if isinstance(before, dict) or isinstance(after, dict):
            names = sorted(set(_as_dict(before)) | set(_as_dict(after)))
            moved = [n for n in names if _as_dict(before).get(n) != _as_dict(after).get(n)]
            out += [f"{path}: {table}.{n}" for n in moved]
        else:
            out.append(f"{path}: {table}")
    return out


def _toml(repo: Path, commit: str, path: str) -> dict[str, Any] | str:
    done = git_run(repo, "show", f"{commit}:{path}")
    if done.returncode != 0:
        return {}
    try:
        return tomllib.loads(done.stdout.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        return f"does not parse ({' '.join(str(exc).split())})"


def _dig(data: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _setup_cfg_changes(repo: Path, base: str, patched: str, path: str) -> list[str]:
    def read(commit: str) -> dict[str, str] | None:
        done = git_run(repo, "show", f"{commit}:{path}")
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(done.stdout.decode("utf-8") if done.returncode == 0 else "")
        except (configparser.Error, UnicodeDecodeError):
            return None
        out = {}
        for section in ("options", "options.extras_require"):
            if parser.has_section(section):
                for key, value in parser.items(section):
                    if section != "options" or key in ("install_requires", "setup_requires"):
                        out[f"[{section}].{key}"] = value
        return out

    old, new = read(base), read(patched)
    if old is None or new is None:
        return [f"{path}: does not parse"]
    return [f"{path}: {k}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


# -- entry points ----------------------------------------------------------------------------


def _inventory(repo: Path, commit: str) -> Any:
    """The inventory of commit's tree, exported to a temporary folder (regular files only)."""
    archive = git_bytes(repo, "archive", "--format=tar", commit)
    with tempfile.TemporaryDirectory(prefix="charpin-verify-tree-") as tmp:
        root = Path(tmp)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.endswith((".py", ".toml", ".cfg", ".jsonl")):
                    tar.extract(member, root, filter="data")
        return build_inventory(root, CharpinConfig())


__all__ = ["Scope", "dependencies", "entry_points", "scope"]
