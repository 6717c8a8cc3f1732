"""Build the inventory of a working tree: walk, scan, resolve, join with pins. Stdlib only.

An entry's env keys and import-time effects cover its own module and every module of the repository
it imports (statically, transitively), because a script's behaviour usually hides in a config
module it imports.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from charpin_runner import config as charpin_config
from charpin_runner import tomlread
from charpin_runner.config import CharpinConfig
from charpin_runner.inventory.model import Entry, Inventory, sort_entries
from charpin_runner.inventory.pinned import read_targets
from charpin_runner.inventory.scan import ModuleFacts, scan_module
from charpin_runner.inventory.scripts import Script, find_scripts

SKIP_DIRS = frozenset(
    {".git", ".venv", "venv", "node_modules", "__pycache__", ".charpin", "build", "dist"}
)
MAX_SOURCE_BYTES = 4 * 1024 * 1024  # generated monsters are not entry points


def load_config(repo: Path) -> tuple[CharpinConfig, list[str]]:
    """`[tool.charpin]`, or the defaults with a note where this Python cannot read TOML."""
    pyproject = repo / "pyproject.toml"
    if not tomlread.available() and pyproject.is_file():
        try:
            if charpin_config.could_hold_charpin(pyproject.read_bytes()):
                note = (
                    "pyproject.toml: [tool.charpin] not read (no tomllib before 3.11 and no "
                    "tomli: pip install charpin-runner); defaults used"
                )
                return CharpinConfig(), [note]
        except OSError:
            pass
    return charpin_config.load(repo), []


def build_inventory(repo: Path, cfg: CharpinConfig) -> Inventory:
    """Everything runnable in repo, with env reads, import-time effects and pin coverage."""
    modules, notes = _scan_tree(repo)
    scripts, script_notes = find_scripts(repo)
    by_name = {m.dotted: m for m in modules}
    entries = _main_entries(modules) + [_script_entry(s, by_name, modules) for s in scripts]
    graph = _Graph(modules)
    entries = [_with_reads(e, graph) for e in entries]
    targets, pin_notes = read_targets(repo, cfg.pins.file, cfg.pins.cases)
    entries = [replace(e, pinned=targets.targets(e)) for e in entries]
    return Inventory(entries=sort_entries(entries), notes=sorted(notes + script_notes + pin_notes))


def _walk(repo: Path) -> Iterator[tuple[str, Path]]:
    for top, dirs, files in os.walk(repo):
        dirs[:] = sorted(d for d in dirs if not _skipped(d))
        for name in sorted(files):
            path = Path(top) / name
            if name.endswith(".py") and not path.is_symlink():
                yield path.relative_to(repo).as_posix(), path


def _skipped(dirname: str) -> bool:
    return (
        dirname in SKIP_DIRS
        or dirname.startswith(".")
        or dirname in ("site-packages", "dist-packages")
        or dirname.endswith(".egg-info")
    )


def _scan_tree(repo: Path) -> tuple[list[ModuleFacts], list[str]]:
    modules: list[ModuleFacts] = []
    notes: list[str] = []
    for rel, path in _walk(repo):
        try:
            if path.stat().st_size > MAX_SOURCE_BYTES:
                notes.append(f"{rel}: skipped (larger than {MAX_SOURCE_BYTES} bytes)")
                continue
            modules.append(scan_module(path.read_bytes(), rel, _dotted(repo, path)))
        except SyntaxError as exc:
            notes.append(f"{rel}: not parsed (SyntaxError at line {exc.lineno}: {exc.msg})")
        except (ValueError, RecursionError, OSError) as exc:
            notes.append(f"{rel}: not parsed ({type(exc).__name__}: {exc})")
    return modules, notes


def _dotted(repo: Path, path: Path) -> str:
    """The import name: climb while the folder is a package (has __init__.py)."""
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while folder != repo and (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    if path.name == "__main__.py" and len(parts) == 1 and folder != repo:
        parts.insert(0, path.parent.name)  # namespace package: `python -m pkg` still works
    return ".".join(parts)


def _main_entries(modules: list[ModuleFacts]) -> list[Entry]:
    entries: list[Entry] = []
    for module in modules:
        if module.path.endswith("__main__.py") or module.path == "__main__.py":
            package = module.dotted.rpartition(".")[0] or module.dotted
            entries.append(Entry("main-module", package, module.path, 1, source=module.path))
        elif module.main_line is not None:
            entries.append(
                Entry(
                    "main-block",
                    module.path,
                    module.path,
                    module.main_line,
                    target=module.dotted,
                    source=module.path,
                )
            )
    return entries


def _script_entry(
    script: Script, by_name: dict[str, ModuleFacts], mods: list[ModuleFacts]
) -> Entry:
    module_name = script.target.partition(":")[0].strip()
    facts = by_name.get(module_name) or _by_suffix(module_name, mods)
    return Entry(
        "console-script",
        script.name,
        script.file,
        script.line,
        target=script.target.replace(" ", ""),
        source=facts.path if facts else "",
    )


def _by_suffix(module_name: str, modules: list[ModuleFacts]) -> ModuleFacts | None:
    """Namespace packages have no __init__.py chain; match the path's tail when it is unique."""
    tails = (module_name.replace(".", "/") + ".py", module_name.replace(".", "/") + "/__init__.py")
    hits = [m for m in modules if m.path.endswith(tails) or m.path in tails]
    return hits[0] if len(hits) == 1 else None


class _Graph:
    """Static import edges between repository modules, resolved once."""

    def __init__(self, modules: list[ModuleFacts]) -> None:
        self.by_path = {m.path: m for m in modules}
        by_name: dict[str, ModuleFacts] = {}
        for module in modules:  # sorted by path, so a duplicate name resolves the same way
            by_name.setdefault(module.dotted, module)
        self.edges = {
            m.path: sorted({by_name[n].path for n in _resolve_imports(m, by_name)}) for m in modules
        }

    def closure(self, path: str) -> list[ModuleFacts]:
        seen = {path}
        queue = [path]
        while queue:
            for found in self.edges[queue.pop()]:
                if found not in seen:
                    seen.add(found)
                    queue.append(found)
        return [self.by_path[p] for p in sorted(seen)]


def _with_reads(entry: Entry, graph: _Graph) -> Entry:
    if entry.source not in graph.by_path:
        return entry
    closure = graph.closure(entry.source)
    env = sorted(set().union(*(m.env for m in closure)))
    effects = sorted(
        {f for m in closure for f in m.effects}, key=lambda e: (e.file, e.line, e.kind, e.detail)
    )
    dynamic = sum(m.dynamic_env for m in closure)
    return replace(entry, env=env, dynamic_env=dynamic, effects=effects)


def _resolve_imports(module: ModuleFacts, by_name: dict[str, ModuleFacts]) -> set[str]:
    """Repository modules named by this module's imports, parents included (they run first)."""
    is_package = module.path.endswith("__init__.py")
    package = module.dotted if is_package else module.dotted.rpartition(".")[0]
    names: set[str] = set()
    for name, level in module.imports:
        if level:
            base = package.split(".") if package else []
            base = base[: len(base) - (level - 1)] if level > 1 else base
            name = ".".join([*base, name] if name else base)
        parts = name.split(".")
        names.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return {n for n in names if n in by_name}


def module_files(repo: Path, roots: list[str]) -> tuple[frozenset[str], list[str]]:
    """Every Python file of repo this inventory walks, and the ones roots import (statically,
    transitively; the roots themselves included when they are such files), sorted.

    `charpin pins cover` reports these next to the files the pins ran, so a module an entry point
    imports but no pin runs shows up at 0%.
    """
    modules, _notes = _scan_tree(repo)
    graph = _Graph(modules)
    reached: set[str] = set()
    for root in roots:
        if root in graph.by_path and root not in reached:
            reached.update(m.path for m in graph.closure(root))
    return frozenset(graph.by_path), sorted(reached)
