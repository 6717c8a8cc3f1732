"""Coordinator side; stdlib and verify.gitread only. Scope: which functions a patch changed,
function by function from the AST of both commits."""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
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


def scope(repo: Path, base: str, patched: str) -> Scope:
    """Compare every changed .py file function by function (methods as Class.method); module-level
    code is one unit, path:<module>."""
    base, patched = gitread.commits(repo, base, patched)
    changes = [c for c in gitread.changes(repo, base, patched) if c.old_py or c.new_py]
    blobs = gitread.blobs(repo, [b for c in changes for b in (c.old_py, c.new_py) if b])
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


