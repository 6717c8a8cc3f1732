"""Coordinator side; stdlib and verify.gitread only. Scope: which functions a patch changed,
function by function from the AST of both commits."""

from __future__ import annotations

import ast
import copy
import posixpath
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from charpin_coordinator.verify import gitread

MODULE = "<module>"


@dataclass(frozen=True)
class Scope:
    """Units (path:qualname) the patch changed or removed, new units only changed code refers to
    (an extract, not counted), and .py files that do not parse on one side (counted)."""

    changed: list[str]
    helpers: list[str]
    unparsable: list[str]
    # Of the changed and helper units, the functions and methods as the base has them
    # (path:qualname): their calls are what verify captures in the base run.
    base_functions: list[str] = field(default_factory=list, compare=False)


def scope(
    repo: Path, base: str, patched: str, exclude: Callable[[str], bool] = lambda _path: False
) -> Scope:
    """Compare every changed Python source function by function (methods as Class.method).
    Python source is what Python would run: `*.py` files, scripts whose first line is a Python
    shebang (`bin/report`), and links to either (a `conftest.py` that links to a `.txt` is read
    as the text it links to). Module-level code is one unit, path:<module>, except statements
    that bind names (`a = b = lambda ...`, `f, g = h, i`): each name they bind is a unit. A
    function removed and one added with the same body under another name is a rename and not a
    change. exclude: paths left out (the test side: verify judges production code)."""
    base, patched = gitread.commits(repo, base, patched)
    trees = (gitread.tree_files(repo, base), gitread.tree_files(repo, patched))
    changes = [c for c in gitread.changes(repo, base, patched) if not any(map(exclude, c.paths))]
    wanted = [_resolve(trees[0], c.old_path) for c in changes if c.old_path]
    wanted += [_resolve(trees[1], c.new_path) for c in changes if c.new_path]
    blobs = gitread.blobs(repo, [sha for sha in wanted if sha])
    readers = (_Reader(repo, trees[0], blobs), _Reader(repo, trees[1], blobs))
    edited: set[str] = set()
    functions: set[tuple[str, str]] = set()  # (unit as named on patched, as named on base)
    new: dict[str, str] = {}  # path:qualname -> the qualname of its class when that is new too
    refs: dict[str, set[str]] = {}  # simple name -> path:unit of the code that names it
    gone_shapes: dict[str, str] = {}  # path:qualname removed -> its body without its name
    new_shapes: dict[str, str] = {}
    unparsable: list[str] = []
    for change in changes:
        sources = [readers[0].python(change.old_path), readers[1].python(change.new_path)]
        if sources == [None, None]:
            continue
        try:
            old, now = _module(sources[0]), _module(sources[1])
        except (SyntaxError, ValueError, RecursionError):
            unparsable.append(change.path)
            continue
        prefix = f"{change.path}:"
        edited |= {prefix + q for q in old.units if now.units.get(q) != old.units[q]}
        old_prefix = f"{change.old_path or change.path}:"
        functions |= {
            (prefix + q, old_prefix + q) for q in old.shapes if now.units.get(q) != old.units[q]
        }
        # A changed module-level binding (`RATE = 0.85`) or class body (`rate = 0.85` in the
        # class) changes what the functions reading it return: their calls are what shows it.
        for name in old.units.keys() - old.shapes.keys():
            if now.units.get(name) == old.units[name]:
                continue
            users = {q for q in old.shapes if q.startswith(name + ".")}
            users |= old.refs.get(name.rpartition(".")[2], set())
            functions |= {
                (prefix + name, old_prefix + user)
                for user in users
                if user in old.shapes and user in now.units
            }
        if _module_edited(old, now):
            edited.add(prefix + MODULE)
        for qualname in old.units.keys() - now.units.keys():
            if qualname in old.shapes:
                gone_shapes[prefix + qualname] = old.shapes[qualname]
        for qualname in now.units.keys() - old.units.keys():
            parent = qualname.rpartition(".")[0]
            fresh = parent in now.units and parent not in old.units
            new[prefix + qualname] = prefix + parent if fresh else ""
            if qualname in now.shapes:
                new_shapes[prefix + qualname] = now.shapes[qualname]
        for name, owners in now.refs.items():
            refs.setdefault(name, set()).update(prefix + o for o in owners)
    renamed = _renames(gone_shapes, new_shapes)
    edited -= renamed
    for unit in renamed:
        new.pop(unit, None)
    helpers = _extracts(edited, new, refs)
    changed = edited | (new.keys() - helpers)
    base_functions = sorted(b for unit, b in functions if unit in changed)
    return Scope(sorted(changed), sorted(helpers), sorted(unparsable), base_functions)


_LINKS_FOLLOWED = 8


def _resolve(tree: dict[str, tuple[str, str]], path: str) -> str:
    """The blob path holds in a tree (a link's own blob: the name it points at); "" for none."""
    entry = tree.get(path)
    if entry is None or entry[0] not in (*gitread.REGULAR, gitread.LINK):
        return ""
    return entry[1]


class _Reader:
    """Blobs of one commit's tree, read in one batch up front and on demand after."""

    def __init__(self, repo: Path, tree: dict[str, tuple[str, str]], blobs: dict[str, bytes]):
        self.repo, self.tree, self.blobs = repo, tree, blobs

    def blob(self, sha: str) -> bytes | None:
        if sha not in self.blobs:
            self.blobs.update(gitread.blobs(self.repo, [sha]))
        return self.blobs.get(sha)

    def python(self, path: str) -> bytes | None:
        """What Python would run from path: its source, or None when it is no Python source
        (neither *.py nor a Python shebang script, a link out of the tree, or gone)."""
        name = path
        for _ in range(_LINKS_FOLLOWED):
            sha = _resolve(self.tree, path) if path else ""
            if not sha:
                return None
            data = self.blob(sha)
            if data is None:
                return None
            if self.tree[path][0] == gitread.LINK:
                where = posixpath.dirname(path)
                target = posixpath.normpath(posixpath.join(where, data.decode("utf-8", "replace")))
                if target.startswith(("../", "/")):
                    return None
                path = target
                continue
            if name.endswith(".py") or path.endswith(".py") or python_shebang(data):
                return data
            return None
        return None


# Programs a shebang may name that end in Python: `env -S uv run --script`, `pipx run`,
# `poetry run python`... (b13 of attack report 1: a PEP 723 script was no Python to Scope).
_PYTHON_WRAPPERS = frozenset(
    {"uv", "uvx", "pipx", "pdm", "poetry", "hatch", "rye", "pyenv", "conda", "mamba", "pixi"}
)
# Interpreters that are not Python; any other one is Python when the file reads as Python.
_OTHER_INTERPRETERS = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "fish", "csh", "tcsh", "perl", "ruby", "node", "deno",
     "bun", "php", "lua", "Rscript", "awk", "gawk", "make", "tclsh", "osascript", "pwsh"}
)


def python_shebang(data: bytes) -> bool:
    """Whether a script with a shebang is Python, deny by default: a word of the shebang line
    names Python (`python3.12`, `pypy3`) or a wrapper that runs it (`uv run`), or it names no
    interpreter known to be something else and the file parses as Python."""
    if not data.startswith(b"#!"):
        return False
    line = data[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    names = [posixpath.basename(w) for w in line if not w.startswith("-") and "=" not in w]
    if any(re.fullmatch(r"(python|pypy)(\d+(\.\d+)*)?[a-z]?", n) for n in names):
        return True
    if any(n in _PYTHON_WRAPPERS for n in names):
        return True
    if any(n in _OTHER_INTERPRETERS for n in names):
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(data)
    except (SyntaxError, ValueError, RecursionError):
        return False
    return True


def _renames(gone: dict[str, str], added: dict[str, str]) -> set[str]:
    """Units removed and added with the same body under another name: both sides of a rename."""
    by_shape: dict[str, list[str]] = {}
    for unit, shape in added.items():
        by_shape.setdefault(shape, []).append(unit)
    out: set[str] = set()
    for unit, shape in gone.items():
        matches = by_shape.get(shape)
        if matches:
            out.add(unit)
            out.add(matches.pop(0))
    return out


@dataclass(frozen=True)
class _Parsed:
    """One side of a .py file: its units, module-level code, import bindings and references."""

    units: dict[str, tuple[str, ...]]  # qualname -> dumps (a name defined twice keeps both)
    code: tuple[str, ...]  # module-level statements, less imports and the docstring
    imports: dict[str, frozenset[str]]  # bound name -> what binds it
    refs: dict[str, set[str]]  # simple name -> the units (or MODULE) whose code names it
    # qualname -> a function's dump with its own name left out (to see a rename)
    shapes: dict[str, str] = field(default_factory=dict)


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
    shapes: dict[str, str] = {}
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for name, source_ in _bindings(node):
                imports.setdefault(name, set()).add(source_)
        elif _collect_unit(node, "", units, refs, shapes):
            continue
        elif bound := _bound_names(node):
            # One statement that binds several names changes each of them.
            for name in bound:
                units.setdefault(name, []).append(_binding_dump(node))
                _note_refs(node, name, refs)
        else:
            code.append(ast.dump(node))
            _note_refs(node, MODULE, refs)
    return _Parsed(
        {q: tuple(d) for q, d in units.items()},
        tuple(code),
        {n: frozenset(s) for n, s in imports.items()},
        refs,
        shapes,
    )


def _binding_dump(node: ast.stmt) -> str:
    """A module-level binding as compared: a type hint added to (or taken from) `RATES = [...]`
    binds the same value, so `RATES: list[str] = [...]` reads as the same unit (a patch adding
    hints to three tables was three changed units, a Scope false alarm)."""
    if isinstance(node, ast.AnnAssign) and node.value is not None and node.simple:
        return ast.dump(ast.Assign(targets=[node.target], value=node.value))
    return ast.dump(node)


def _bound_names(node: ast.stmt) -> list[str]:
    """The names a module-level assignment binds (`a = b = ...`, `f, g = ...`), else []."""
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    else:
        return []
    names: list[str] = []
    while targets:
        target = targets.pop()
        if isinstance(target, ast.Name):
            names.append(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            targets.extend(target.elts)
        elif isinstance(target, ast.Starred):
            targets.append(target.value)
        else:
            return []  # an attribute or item: module-level code, not a binding of its own
    return sorted(set(names))


def _collect_unit(
    node: ast.stmt,
    prefix: str,
    units: dict[str, list[str]],
    refs: dict[str, set[str]],
    shapes: dict[str, str] | None = None,
) -> bool:
    """Record a function or class at node as units; False when node is neither."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        qualname = prefix + node.name
        units.setdefault(qualname, []).append(ast.dump(node))
        _note_refs(node, qualname, refs)
        if shapes is not None:
            nameless = copy.copy(node)
            nameless.name = ""
            shapes[qualname] = ast.dump(nameless)
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
        if not _collect_unit(stmt, qualname + ".", units, refs, shapes):
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
    """Every name node's code uses, by simple name or attribute. A name only mentioned (in a
    string, a comment) is no use: a function it names is no extract of that code."""
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            refs.setdefault(child.id, set()).add(owner)
        elif isinstance(child, ast.Attribute):
            refs.setdefault(child.attr, set()).add(owner)


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
        if name.startswith("pytest_"):
            continue  # a hook is called by pytest, never an extract of the code that names it
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
