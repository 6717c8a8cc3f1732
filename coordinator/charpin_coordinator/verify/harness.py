"""Coordinator side; stdlib only, pure. The Harness awareness gate: lines a patch adds to
production code that look at the test harness or at charpin's replay, instead of at their input.

Production code has no reason to know whether pytest is running, which test is current, whether
hash randomisation is off (the pins' PYTHONHASHSEED=0), what its parent's command line was, or to
patch another module's function when it is imported; code that does can serve the old answer
to the tests and the new one to everybody else. Each such reference on an added line is a FAIL
with the line shown. What counts, by AST (so a comment or a docstring never does):

* importing pytest, _pytest, pluggy, xdist, unittest.mock, or charpin's own packages;
* a name or attribute `pytest`/`_pytest`, `sys.flags`, `sys.orig_argv`, `sys._getframe`,
  `inspect.stack`/`currentframe`/`getouterframes`/`trace`, `traceback.extract_stack`/`walk_stack`
  or `sys.modules` (but a module reaching itself, `sys.modules[__name__]`);
* a string naming the harness: `pytest`, `PYTEST_`, `CHARPIN_`, `PYTHONHASHSEED`, `/proc/self`,
  `conftest`;
* at module level, an assignment to an attribute of an imported module (monkeypatching at import
  time).
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

_MODULES = re.compile(r"^(pytest|_pytest|pluggy|xdist|charpin_runner|charpin_coordinator)(\.|$)")
_MOCK = re.compile(r"^unittest\.mock(\.|$)")
_ATTRIBUTES = {
    ("sys", "flags"): "reads sys.flags (the interpreter's flags, e.g. hash randomisation)",
    ("sys", "orig_argv"): "reads sys.orig_argv (how the interpreter was started)",
    ("sys", "_getframe"): "inspects the call stack (sys._getframe)",
    ("sys", "modules"): "looks into sys.modules (which modules, e.g. pytest, are loaded)",
    ("inspect", "stack"): "inspects the call stack (inspect.stack)",
    ("inspect", "currentframe"): "inspects the call stack (inspect.currentframe)",
    ("inspect", "getouterframes"): "inspects the call stack (inspect.getouterframes)",
    ("inspect", "trace"): "inspects the call stack (inspect.trace)",
    ("traceback", "extract_stack"): "inspects the call stack (traceback.extract_stack)",
    ("traceback", "walk_stack"): "inspects the call stack (traceback.walk_stack)",
}
_STRINGS = (
    ("PYTEST_", "names a pytest environment variable"),
    ("CHARPIN_", "names a charpin environment variable"),
    ("PYTHONHASHSEED", "names PYTHONHASHSEED (the pins' replay pins it)"),
    ("/proc/self", "reads /proc/self (its own environment or command line, around os.environ)"),
    ("conftest", "names conftest"),
    ("pytest", "names pytest"),
)


@dataclass(frozen=True)
class Finding:
    """One harness-aware reference on an added line."""

    path: str
    line: int
    what: str
    source: str

    def shown(self) -> str:
        return f"{self.path}:{self.line}: {self.what}: {self.source.strip()[:160]}"


def scan(path: str, source: bytes, added: Iterable[int]) -> list[Finding]:
    """The harness-aware references of source on the given (1-based) line numbers."""
    lines = set(added)
    if not lines:
        return []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    text = source.decode("utf-8", "replace").splitlines()
    docstrings = _docstrings(tree)
    imported = _imported_modules(tree)
    found: dict[tuple[int, str], Finding] = {}

    def hit(node: ast.AST, what: str) -> None:
        line = getattr(node, "lineno", 0)
        end = getattr(node, "end_lineno", line) or line
        touched = [n for n in range(line, end + 1) if n in lines]
        if touched:
            first = touched[0]
            source_line = text[first - 1] if 0 < first <= len(text) else ""
            found.setdefault((first, what), Finding(path, first, what, source_line))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _MODULES.match(alias.name) or _MOCK.match(alias.name):
                    hit(node, f"imports {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if _MODULES.match(node.module) or _MOCK.match(node.module):
                hit(node, f"imports from {node.module}")
            elif node.module == "unittest" and any(a.name == "mock" for a in node.names):
                hit(node, "imports unittest.mock")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            why = _ATTRIBUTES.get((node.value.id, node.attr))
            line = text[node.lineno - 1] if 0 < node.lineno <= len(text) else ""
            if why and not (node.attr == "modules" and "__name__" in line):
                # sys.modules[__name__] is a module reaching itself (lazy attributes), not a
                # look at which others are loaded.
                hit(node, why)
            elif node.value.id in ("pytest", "_pytest"):
                hit(node, f"uses {node.value.id}")
        elif isinstance(node, ast.Name) and node.id in ("pytest", "_pytest"):
            hit(node, f"uses {node.id}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in docstrings:
                continue
            for needle, why in _STRINGS:
                if needle in node.value:
                    hit(node, why)
                    break
    for node in tree.body:
        for target in _assigned(node):
            if isinstance(target, ast.Attribute) and _root_name(target) in imported:
                hit(node, f"replaces {ast.unparse(target)} at import time")
    return sorted(found.values(), key=lambda f: (f.line, f.what))


def added_lines(diff: bytes, removals: bool = False) -> dict[str, set[int]]:
    """path -> the new file's line numbers a unified diff (`git diff -U0`) adds; removals: also,
    for a hunk that only removes lines, the line that now follows the removal (what runs in
    place of what was removed)."""
    out: dict[str, set[int]] = {}
    path = ""
    for raw in diff.split(b"\n"):
        if raw.startswith(b"+++ "):
            name = raw[4:].decode("utf-8", "surrogateescape")
            path = name[2:] if name.startswith("b/") else ""
        elif raw.startswith(b"@@") and path:
            match = re.match(rb"@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", raw)
            if match:
                start = int(match.group(1))
                count = int(match.group(2)) if match.group(2) is not None else 1
                lines = range(start, start + count) if count or not removals else [start + 1]
                out.setdefault(path, set()).update(lines)
    return out


def _docstrings(tree: ast.Module) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _imported_modules(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _assigned(node: ast.stmt) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    return []


def _root_name(node: ast.expr) -> str:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""
