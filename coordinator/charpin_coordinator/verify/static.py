"""Coordinator side (stdlib, gitcmd, charpin_runner): Scope, Dependencies, Entry points of a patch."""

from __future__ import annotations

import ast
import configparser
import fnmatch
import subprocess
import tempfile
import tomllib
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from charpin_runner.config import CharpinConfig
from charpin_runner.errors import RunError, UsageError
from charpin_runner.inventory.build import build_inventory
from charpin_runner.inventory.model import Entry, Inventory, compare

from charpin_coordinator.gitcmd import git_run

MODULE = "<module>"
_REGULAR = ("100644", "100755")  # other modes are links (120000) or submodules (160000)

# Files that declare dependencies as a whole: any change to one is a dependency change.
_WHOLE_FILES = (
    "requirements*.txt",
    "requirements*.in",
    "constraints*.txt",
    "constraints*.in",
    "setup.py",
    "Pipfile",
    "Pipfile.lock",
    "poetry.lock",
    "uv.lock",
    "pdm.lock",
    "pylock.toml",
    "pylock.*.toml",
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
# What build_inventory reads besides .py files: the packaging files at the top of the tree.
_SCRIPT_FILES = ("pyproject.toml", "setup.cfg", "setup.py")


@dataclass(frozen=True)
class Scope:
    """Units (path:qualname) the patch changed or removed, new units only changed code refers to
    (an extract, not counted), and .py files that do not parse on one side (counted)."""

    changed: list[str]
    helpers: list[str]
    unparsable: list[str]


def scope(repo: Path, base: str, patched: str) -> Scope:
    """Compare every changed .py file function by function (methods as Class.method); module-level
    code is one unit, path:<module>."""
    base, patched = _commits(repo, base, patched)
    changes = [c for c in _changes(repo, base, patched) if c.old_py or c.new_py]
    blobs = _blobs(repo, [b for c in changes for b in (c.old_py, c.new_py) if b])
    edited: set[str] = set()
    new: dict[str, str] = {}  # path:qualname -> the qualname of its class when that is new too
    refs: dict[str, set[str]] = {}  # simple name -> path:unit of the code that names it
    unparsable: list[str] = []
    for change in changes:
        try:
            old = _module(blobs.get(change.old_py))
            now = _module(blobs.get(change.new_py))
        except (SyntaxError, ValueError, RecursionError):
            unparsable.append(change.path)
            continue
        prefix = f"{change.path}:"
        edited |= {prefix + q for q in old.units if now.units.get(q) != old.units[q]}
        if _module_edited(old, now):
            edited.add(prefix + MODULE)
        for qualname in now.units.keys() - old.units.keys():
            parent = qualname.rpartition(".")[0]
            fresh = parent in now.units and parent not in old.units
            new[prefix + qualname] = prefix + parent if fresh else ""
        for name, owners in now.refs.items():
            refs.setdefault(name, set()).update(prefix + o for o in owners)
    helpers = _extracts(edited, new, refs)
    changed = edited | (new.keys() - helpers)
    return Scope(sorted(changed), sorted(helpers), sorted(unparsable))


def dependencies(repo: Path, base: str, patched: str) -> list[str]:
    """One entry per dependency declaration the patch changed (`path: [table].key`, or the path of
    a file that is a declaration as a whole)."""
    base, patched = _commits(repo, base, patched)
    found: list[str] = []
    parsed: list[tuple[_Change, bool]] = []  # (change, is a pyproject.toml rather than setup.cfg)
    for change in _changes(repo, base, patched):
        names = {PurePosixPath(p).name for p in change.paths}
        if names & {"pyproject.toml", "setup.cfg"}:
            parsed.append((change, "pyproject.toml" in names))
        elif any(_is_whole_declaration(p) for p in change.paths):
            found.append(change.path)
    blobs = _blobs(repo, [b for c, _ in parsed for b in (c.old_blob, c.new_blob) if b])
    for change, pyproject in parsed:
        # A side without the file (added, deleted, now a link) declares nothing: b"".
        old, new = blobs.get(change.old_blob, b""), blobs.get(change.new_blob, b"")
        moved = _pyproject_changes(old, new) if pyproject else _setup_cfg_changes(old, new)
        found += [f"{change.path}: {e}" for e in moved]
    return sorted(set(found))


def entry_points(repo: Path, base: str, patched: str) -> list[str]:
    """Drift of the runner's entry-point inventory from base to patched: entry points added or
    removed, environment keys (and import-time effects) that an entry point newly reads."""
    base, patched = _commits(repo, base, patched)
    # The inventory is a function of the .py files and the top-level packaging files only;
    # a patch touching neither cannot move it, and most patches are small.
    if not any(_feeds_inventory(p) for c in _changes(repo, base, patched) for p in c.paths):
        return []
    with tempfile.TemporaryDirectory(prefix="charpin-verify-") as tmp:
        sides = [(Path(tmp, "base"), _inventory_files(repo, base))]
        sides.append((Path(tmp, "patched"), _inventory_files(repo, patched)))
        # Blobs the two trees share (nearly all of them) are read once.
        blobs = _blobs(repo, [sha for _, files in sides for sha in files.values()])
        inventories = []
        for root, files in sides:
            _write_tree(root, files, blobs)
            # Default config: pin coverage is not part of the drift, and the export has no pins.
            inventories.append(build_inventory(root, CharpinConfig()))
    return _drift(*inventories)


# -- git ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Change:
    """One line of `git diff --raw`: paths ("" where absent) and regular-file blobs ("" if none)."""

    old_path: str
    new_path: str
    old_blob: str
    new_blob: str

    @property
    def path(self) -> str:
        return self.new_path or self.old_path

    @property
    def paths(self) -> list[str]:
        return [p for p in (self.old_path, self.new_path) if p]

    @property
    def old_py(self) -> str:
        return self.old_blob if self.old_path.endswith(".py") else ""

    @property
    def new_py(self) -> str:
        return self.new_blob if self.new_path.endswith(".py") else ""


def _run(repo: Path, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    try:
        return git_run(repo, *args, input=input)
    except subprocess.TimeoutExpired as exc:
        raise RunError(
            f"git {args[0]} did not finish within {exc.timeout:.0f} s in {repo}; check the "
            "repository (a hung mount, a huge tree)"
        ) from exc
    except OSError as exc:
        raise RunError(f"cannot run git ({exc}); install git") from exc


def _git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    done = _run(repo, *args, input=input)
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no message"]
        raise RunError(f"git {args[0]} failed in {repo}: {lines[0]}; check it with git fsck")
    return done.stdout


def _commits(repo: Path, base: str, patched: str) -> tuple[str, str]:
    """Both revisions as commit ids; one that names no commit is a UsageError."""
    found = []
    for rev in (base, patched):
        # A leading dash would be read as an option (older git has no --end-of-options here).
        done = (
            None
            if rev.startswith("-")
            else _run(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
        )
        if done is None or done.returncode != 0:
            raise UsageError(f"{rev!r} is not a commit in {repo}; pass a commit id or branch")
        found.append(done.stdout.decode().strip())
    return found[0], found[1]


def _changes(repo: Path, base: str, patched: str) -> list[_Change]:
    """What differs between the two commits; renames (git's -M) are one change with both paths."""
    raw = _git(repo, "diff", "--raw", "-z", "-M", "--no-abbrev", base, patched, "--")
    parts = raw.split(b"\0")
    out = []
    index = 0
    while index + 1 < len(parts) and parts[index].startswith(b":"):
        old_mode, new_mode, old_sha, new_sha, status = parts[index][1:].decode().split()
        paths = [p.decode("utf-8", "surrogateescape") for p in parts[index + 1 : index + 3]]
        two = status[0] in "RC"
        old_path = paths[0] if status != "A" else ""
        new_path = (paths[1] if two else paths[0]) if status != "D" else ""
        out.append(
            _Change(
                old_path,
                new_path,
                old_sha if old_mode in _REGULAR else "",
                new_sha if new_mode in _REGULAR else "",
            )
        )
        index += 3 if two else 2
    return out


def _blobs(repo: Path, shas: Iterable[str]) -> dict[str, bytes]:
    """The contents of these blobs, through one `git cat-file --batch` (no filters applied)."""
    wanted = sorted(set(shas))
    if not wanted:
        return {}
    raw = _git(repo, "cat-file", "--batch", input="".join(f"{s}\n" for s in wanted).encode())
    out: dict[str, bytes] = {}
    at = 0
    for sha in wanted:
        end = raw.index(b"\n", at)
        header = raw[at:end].split()
        at = end + 1
        if len(header) != 3 or header[1] != b"blob":
            raise RunError(f"git cat-file has no blob {sha} in {repo}; check it with git fsck")
        size = int(header[2])
        out[sha] = raw[at : at + size]
        at += size + 1  # the content is followed by a newline
    return out


# -- scope -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Parsed:
    """One side of a .py file: its units, module-level code, import bindings and references."""

    units: dict[str, tuple[str, ...]]  # qualname -> dumps (a name defined twice keeps both)
    code: tuple[str, ...]  # module-level statements, less imports and the docstring
    imports: dict[str, frozenset[str]]  # bound name -> what binds it
    refs: dict[str, set[str]]  # simple name -> the units (or MODULE) whose code names it


_ABSENT = _Parsed({}, (), {}, {})


def _module(source: bytes | None) -> _Parsed:
    """Parse one side; SyntaxError, ValueError or RecursionError when it does not parse."""
    if source is None:
        return _ABSENT
    with warnings.catch_warnings():
        # Invalid escapes in old code warn at parse time; they are not ours to print.
        warnings.simplefilter("ignore")
        tree = ast.parse(source)
    units: dict[str, list[str]] = {}
    refs: dict[str, set[str]] = {}
    code: list[str] = []
    imports: dict[str, set[str]] = {}
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            body = body[1:]  # the module docstring is documentation, and new modules carry one
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for name, source_ in _bindings(node):
                imports.setdefault(name, set()).add(source_)
        elif not _collect_unit(node, "", units, refs):
            code.append(ast.dump(node))
            _note_refs(node, MODULE, refs)
    return _Parsed(
        {q: tuple(d) for q, d in units.items()},
        tuple(code),
        {n: frozenset(s) for n, s in imports.items()},
        refs,
    )


def _collect_unit(
    node: ast.stmt, prefix: str, units: dict[str, list[str]], refs: dict[str, set[str]]
) -> bool:
    """Record a function or class at node as units; False when node is neither."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        qualname = prefix + node.name
        units.setdefault(qualname, []).append(ast.dump(node))
        _note_refs(node, qualname, refs)
        return True
    if not isinstance(node, ast.ClassDef):
        return False
    # The class itself is a unit too: its bases, keywords, decorators and class-level statements
    # (attributes), with each method and nested class a unit of its own.
    qualname = prefix + node.name
    header = [ast.dump(n) for n in (*node.bases, *node.keywords, *node.decorator_list)]
    header += [ast.dump(n) for n in getattr(node, "type_params", [])]
    for part in (*node.bases, *node.keywords, *node.decorator_list):
        _note_refs(part, qualname, refs)
    for stmt in node.body:
        if not _collect_unit(stmt, qualname + ".", units, refs):
            header.append(ast.dump(stmt))
            _note_refs(stmt, qualname, refs)
    units.setdefault(qualname, []).append("\n".join(header))
    return True


def _bindings(node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, str]]:
    for alias in node.names:
        if isinstance(node, ast.Import):
            yield alias.asname or alias.name.partition(".")[0], f"import {alias.name}"
        else:
            origin = "." * node.level + (node.module or "")
            yield alias.asname or alias.name, f"from {origin} import {alias.name}"


def _note_refs(node: ast.AST, owner: str, refs: dict[str, set[str]]) -> None:
    """Every name node's code uses, by simple name, attribute or string (getattr, __all__)."""
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            refs.setdefault(child.id, set()).add(owner)
        elif isinstance(child, ast.Attribute):
            refs.setdefault(child.attr, set()).add(owner)
        elif isinstance(child, ast.Constant) and isinstance(child.value, str):
            if child.value.isidentifier():
                refs.setdefault(child.value, set()).add(owner)


def _module_edited(old: _Parsed, new: _Parsed) -> bool:
    """Module-level code changed, or an import now binds a name differently. Added imports are
    what an edited function needs, and removed ones would fail loudly; neither counts."""
    if old.code != new.code:
        return True
    return any(old.imports[n] != new.imports[n] for n in old.imports.keys() & new.imports.keys())


def _extracts(edited: set[str], new: dict[str, str], refs: dict[str, set[str]]) -> set[str]:
    """New units whose every user is edited code or another extract: a function pulled out of an
    edited one. A new method nothing names (a dunder, an override) belongs to its new class."""
    users: dict[str, set[str]] = {}
    for unit, parent in new.items():
        name = unit.rpartition(":")[2].rpartition(".")[2]
        found = refs.get(name, set()) - {unit}
        users[unit] = found or ({parent} if parent else set())
    helpers: set[str] = set()
    grew = True
    while grew:  # grows one layer of extracts per pass (a helper's own helper)
        grew = False
        for unit, found in users.items():
            if unit not in helpers and found and found <= edited | helpers:
                helpers.add(unit)
                grew = True
    return helpers


# -- dependencies ------------------------------------------------------------------------------


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


# -- entry points ------------------------------------------------------------------------------


def _feeds_inventory(path: str) -> bool:
    return path.endswith(".py") or path in _SCRIPT_FILES


def _inventory_files(repo: Path, commit: str) -> dict[str, str]:
    """path -> blob of every regular file of commit's tree that build_inventory reads."""
    raw = _git(repo, "ls-tree", "-r", "-z", "--full-tree", commit)
    out = {}
    for record in raw.split(b"\0"):
        if not record:
            continue
        meta, _, name = record.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        path = name.decode("utf-8", "surrogateescape")
        if kind == "blob" and mode in _REGULAR and _feeds_inventory(path) and _safe(path):
            out[path] = sha
    return out


def _safe(path: str) -> bool:
    """A relative path that stays under the export root (git refuses others, but a crafted tree
    object can hold anything)."""
    parts = path.split("/")
    return not path.startswith("/") and all(p not in ("", ".", "..", ".git") for p in parts)


def _write_tree(root: Path, files: dict[str, str], blobs: dict[str, bytes]) -> None:
    """Regular files only, in a folder this process just made: nothing in it can be a link."""
    for path, sha in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blobs[sha])


def _drift(before: Inventory, after: Inventory) -> list[str]:
    drift = compare(before, after)
    out = [f"added entry point {_named(e)}{_reading(e)}" for e in drift.appeared]
    out += [f"removed entry point {_named(e)}" for e in drift.disappeared]
    for old, new in drift.env_changed:
        named = _named(new)
        # Reading fewer keys is no new input: only keys read now and not before widen what runs.
        out += [f"{named} reads env {k} (new)" for k in sorted(set(new.env) - set(old.env))]
        if new.dynamic_env > old.dynamic_env:
            out.append(
                f"{named} reads {new.dynamic_env} computed env key(s) (was {old.dynamic_env})"
            )
    kept = {e.key: e for e in before.entries}
    for now in after.entries:
        was = kept.get(now.key)
        if was is not None:
            out += _moved(was, now)
    return sorted(out)


def _moved(was: Entry, now: Entry) -> list[str]:
    """What compare() leaves out for an entry kept by name: its target, import-time effects."""
    out = []
    if was.target != now.target and now.kind == "console-script":
        out.append(f"console script {now.name} now runs {now.target} (was {was.target})")
    # Opening files or reading the cwd at import time is what an entry point does before
    # main(); a patch that starts doing it widens what runs. A line moving is not drift.
    before = {(f.kind, f.detail, f.file) for f in was.effects if f.kind != "env"}
    after = {(f.kind, f.detail, f.file) for f in now.effects if f.kind != "env"}
    for kind, detail, file in sorted(after - before):
        out.append(f"{_named(now)} at import: {kind} {detail} in {file} (new)")
    return out


def _named(entry: Entry) -> str:
    if entry.kind == "console-script":
        return f"console script {entry.name} ({entry.target})"
    if entry.kind == "main-module":
        return f"{entry.label} ({entry.file})"
    return entry.file


def _reading(entry: Entry) -> str:
    return f", reads env {', '.join(entry.env)}" if entry.env else ""


__all__ = ["MODULE", "Scope", "dependencies", "entry_points", "scope"]
