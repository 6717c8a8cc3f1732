"""Console scripts declared in pyproject.toml, setup.cfg and setup.py. Runs anywhere; stdlib only.

setup.py is read by AST (never executed), setup.cfg with configparser, pyproject.toml with tomllib
when this Python has it (3.11+). Older Pythons (boxes run 3.9) read only the script tables of
pyproject.toml, line by line (`name = "module:function"`), and note any line of them they cannot
read, so a pin of a console script runs the same on every box.
"""

from __future__ import annotations

import ast
import configparser
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charpin_runner import tomlread


@dataclass(frozen=True)
class Script:
    """`name = module:function` declared in one of the packaging files."""

    name: str
    target: str
    file: str
    line: int


def find_scripts(repo: Path) -> tuple[list[Script], list[str]]:
    """Scripts from the repository's top-level packaging files, plus notes on what was skipped."""
    scripts: list[Script] = []
    notes: list[str] = []
    readers = (
        ("pyproject.toml", _from_pyproject),
        ("setup.cfg", _from_setup_cfg),
        ("setup.py", _from_setup_py),
    )
    for name, reader in readers:
        path = repo / name
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            notes.append(f"{name}: not read ({exc})")
            continue
        found, note = reader(text, name)
        scripts.extend(found)
        if note:
            notes.append(note)
    return scripts, notes


def _pairs_to_scripts(pairs: Iterable[tuple[str, str]], text: str, file: str) -> list[Script]:
    return [
        Script(name=n.strip(), target=t.strip(), file=file, line=_line_of(text, n.strip()))
        for n, t in pairs
        if n.strip() and t.strip()
    ]


def _line_of(text: str, name: str) -> int:
    """The declaration's line, found textually (neither tomllib nor configparser keep lines)."""
    pattern = re.compile(rf"""^\s*['"]?{re.escape(name)}['"]?\s*=""")
    quoted = re.compile(rf"""['"]\s*{re.escape(name)}\s*=""")
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.match(line) or quoted.search(line):
            return number
    return 1


def _from_pyproject(text: str, file: str) -> tuple[list[Script], str | None]:
    if not tomlread.available():  # 3.9 without tomli: the script tables line by line
        return _from_pyproject_lines(text, file)
    try:
        doc = tomlread.loads(text)
    except ValueError as exc:
        return [], f"{file}: not read ({exc}); fix the TOML syntax"
    tables = [
        _dig(doc, "project", "scripts"),
        _dig(doc, "project", "gui-scripts"),
        _dig(doc, "tool", "poetry", "scripts"),
        _dig(doc, "tool", "flit", "scripts"),
    ]
    pairs: list[tuple[str, str]] = []
    for table in tables:
        for name, target in table.items():
            if isinstance(target, dict):  # poetry's {reference = "...", type = "console"}
                target = target.get("reference", target.get("callable", ""))
            if isinstance(target, str):
                pairs.append((str(name), target))
    return _pairs_to_scripts(pairs, text, file), None


_SCRIPT_TABLES = frozenset(
    {"project.scripts", "project.gui-scripts", "tool.poetry.scripts", "tool.flit.scripts"}
)
_HEADER = re.compile(r"""^\[\s*([A-Za-z0-9_.\-"' ]+?)\s*\]\s*(#.*)?$""")
_BASIC_STRING = r'"((?:[^"\\]|\\.)*)"'
_PAIR = re.compile(
    rf"""^(?:([A-Za-z0-9_\-]+)|{_BASIC_STRING}|'([^']*)')\s*=\s*"""
    rf"""(?:{_BASIC_STRING}|'([^']*)')\s*(#.*)?$"""
)


def _from_pyproject_lines(text: str, file: str) -> tuple[list[Script], str | None]:
    """The script tables of pyproject.toml without tomllib: `[project.scripts]` and the like,
    one `name = "module:function"` a line; anything else inside them is noted, not guessed."""
    pairs: list[tuple[str, str]] = []
    unread: list[int] = []
    table = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            header = _HEADER.match(line)
            table = "" if header is None else re.sub(r"""["' ]""", "", header.group(1))
            continue
        if table == "project" and re.match(r"(gui-)?scripts\s*=", line):
            unread.append(number)  # an inline table: [project] scripts = {...}
        if table not in _SCRIPT_TABLES:
            continue
        pair = _PAIR.match(line)
        if pair is None or "\\" in line:  # escapes and inline tables: not guessed
            unread.append(number)
            continue
        key = next(g for g in pair.group(1, 2, 3) if g is not None)
        value = next(g for g in pair.group(4, 5) if g is not None)
        pairs.append((key, value))
    note = None
    if unread:
        lines = ", ".join(str(n) for n in unread[:5])
        note = (
            f"{file}: script table line(s) {lines} not read (this Python has no tomllib; "
            'use 3.11+ or write them as name = "module:function")'
        )
    return _pairs_to_scripts(pairs, text, file), note


def _dig(doc: dict[str, Any], *keys: str) -> dict[str, Any]:
    node: Any = doc
    for key in keys:
        node = node.get(key, {}) if isinstance(node, dict) else {}
    return node if isinstance(node, dict) else {}


def _from_setup_cfg(text: str, file: str) -> tuple[list[Script], str | None]:
    parser = _case_keeping_parser(("=", ":"))
    try:
        parser.read_string(text, source=file)
    except configparser.Error as exc:
        first = str(exc).splitlines()[0]
        return [], f"{file}: not read ({first}); fix the INI syntax"
    pairs: list[tuple[str, str]] = []
    for key in ("console_scripts", "gui_scripts"):
        if parser.has_option("options.entry_points", key):
            pairs.extend(_ini_pairs(parser.get("options.entry_points", key)))
    return _pairs_to_scripts(pairs, text, file), None


def _ini_pairs(block: str) -> list[tuple[str, str]]:
    """`name = module:func` lines, as setuptools writes them in entry-point groups."""
    pairs = []
    for line in block.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";")):
            name, _, target = line.partition("=")
            pairs.append((name, target))
    return pairs


def _from_setup_py(text: str, file: str) -> tuple[list[Script], str | None]:
    try:
        tree = ast.parse(text, filename=file)
    except (SyntaxError, ValueError) as exc:
        return [], f"{file}: not parsed ({type(exc).__name__}: {exc})"
    # Every module-level assignment, also inside if/try blocks: pyflakes, for one, builds
    # `extra = {'entry_points': ...}` in a try/else and calls setup(**extra).
    every: dict[str, list[ast.AST]] = {}
    for stmt in _module_statements(tree):
        if isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    every.setdefault(t.id, []).append(stmt.value)
    assigned = {name: values[-1] for name, values in every.items()}
    pairs: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_setup(node.func):
            for kw in node.keywords:
                if kw.arg == "entry_points":
                    pairs.extend(_entry_points_value(kw.value, assigned))
                elif kw.arg is None and isinstance(kw.value, ast.Name):  # setup(**extra)
                    for value in every.get(kw.value.id, []):
                        pairs.extend(_entry_points_in_dict(value, assigned))
    unique = list(dict.fromkeys((n.strip(), t.strip()) for n, t in pairs))
    return _pairs_to_scripts(unique, text, file), None


def _module_statements(tree: ast.Module) -> list[ast.stmt]:
    """Statements that run at module level: the body, and the bodies of if/try/with there."""
    out: list[ast.stmt] = []
    stack: list[ast.stmt] = list(reversed(tree.body))
    while stack:
        stmt = stack.pop()
        out.append(stmt)
        blocks: list[list[ast.stmt]] = []
        if isinstance(stmt, (ast.If, ast.With)):
            blocks = [stmt.body, getattr(stmt, "orelse", [])]
        elif isinstance(stmt, ast.Try):
            blocks = [stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody]
        for block in reversed(blocks):
            stack.extend(reversed(block))
    return out


def _entry_points_in_dict(value: ast.AST, assigned: dict[str, ast.AST]) -> list[tuple[str, str]]:
    if not isinstance(value, ast.Dict):
        return []
    pairs: list[tuple[str, str]] = []
    for key, item in zip(value.keys, value.values):
        if isinstance(key, ast.Constant) and key.value == "entry_points":
            pairs.extend(_entry_points_value(item, assigned))
    return pairs


def _is_setup(func: ast.AST) -> bool:
    return (isinstance(func, ast.Name) and func.id == "setup") or (
        isinstance(func, ast.Attribute) and func.attr == "setup"
    )


def _entry_points_value(value: ast.AST, assigned: dict[str, ast.AST]) -> list[tuple[str, str]]:
    if isinstance(value, ast.Name) and value.id in assigned:
        value = assigned[value.id]
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return _ini_section(value.value)
    if not isinstance(value, ast.Dict):
        return []
    pairs: list[tuple[str, str]] = []
    for key, group in zip(value.keys, value.values):
        if isinstance(key, ast.Constant) and key.value in ("console_scripts", "gui_scripts"):
            resolved: ast.AST = group
            if isinstance(group, ast.Name) and group.id in assigned:
                resolved = assigned[group.id]
            pairs.extend(_string_items(resolved))
    return pairs


def _string_items(group: ast.AST) -> list[tuple[str, str]]:
    if isinstance(group, ast.Constant) and isinstance(group.value, str):
        return _ini_pairs(group.value)
    if not isinstance(group, (ast.List, ast.Tuple)):
        return []
    values = [e.value for e in group.elts if isinstance(e, ast.Constant)]
    lines = [v for v in values if isinstance(v, str)]
    return _ini_pairs("\n".join(lines))


def _ini_section(text: str) -> list[tuple[str, str]]:
    """entry_points given as an INI string: only the [console_scripts]/[gui_scripts] groups."""
    parser = _case_keeping_parser(("=",))
    try:
        parser.read_string(text)
    except configparser.Error:
        return []
    return [
        (name, target)
        for group in ("console_scripts", "gui_scripts")
        if parser.has_section(group)
        for name, target in parser.items(group)
    ]


def _case_keeping_parser(delimiters: tuple[str, ...]) -> configparser.ConfigParser:
    """configparser lower-cases keys by default; script names are case-sensitive."""
    parser = configparser.ConfigParser(interpolation=None, delimiters=delimiters)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    return parser
