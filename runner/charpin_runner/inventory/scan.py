"""AST facts about one Python module: main block, env reads, import-time effects, imports.

Runs anywhere; stdlib only. Pure apart from the caller handing in source bytes: nothing is imported
or executed, so scanning a hostile tree is safe.
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass, field

from charpin_runner.inventory.model import Effect

DYNAMIC = "<dynamic>"
# Methods on os.environ that read a key; writes (update, clear, __setitem__) are not reads.
_READ_METHODS = frozenset({"get", "setdefault", "pop"})
_WRITE_METHODS = frozenset({"update", "clear", "popitem", "__setitem__", "__delitem__"})
_FILE_METHODS = frozenset({"read_text", "read_bytes", "write_text", "write_bytes"})


@dataclass
class ModuleFacts:
    """What one module does, found statically."""

    path: str
    dotted: str
    main_line: int | None = None
    env: set[str] = field(default_factory=set)
    dynamic_env: int = 0
    effects: list[Effect] = field(default_factory=list)
    imports: list[tuple[str, int]] = field(default_factory=list)  # (absolute name, level)


def scan_module(source: bytes, path: str, dotted: str) -> ModuleFacts:
    """Parse source; raises SyntaxError/ValueError/RecursionError for unparseable files."""
    with warnings.catch_warnings():
        # Old code is full of invalid escapes; the compiler's SyntaxWarnings are not ours to show.
        warnings.simplefilter("ignore")
        tree = ast.parse(source, filename=path)
    facts = ModuleFacts(path=path, dotted=dotted)
    nodes = list(ast.walk(tree))  # one walk, shared by every pass below
    names = _Aliases.collect(nodes)
    main = _main_block(tree)
    facts.main_line = main.lineno if main is not None else None
    reads = _EnvReads(names, _string_constants(tree))
    if b"environ" in source or b"getenv" in source:  # most modules never touch the environment
        reads.scan(nodes)
    facts.env = {k for k, _ in reads.found if k != DYNAMIC}
    facts.dynamic_env = sum(1 for k, _ in reads.found if k == DYNAMIC)
    facts.effects = _import_time_effects(tree, main, names, reads, path)
    facts.imports = _imports(nodes)
    return facts


class _Aliases:
    """Local names that mean `os`, `os.environ`, `os.getenv`, `pathlib.Path`, `os.getcwd`."""

    def __init__(self) -> None:
        self.os: set[str] = {"os"}
        self.environ: set[str] = set()
        self.getenv: set[str] = set()
        self.path_cls: set[str] = {"Path"}
        self.pathlib: set[str] = {"pathlib"}
        self.getcwd: set[str] = set()
        self.io: set[str] = {"io"}

    @classmethod
    def collect(cls, nodes: list[ast.AST]) -> _Aliases:
        names = cls()
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    local = alias.asname or alias.name
                    if alias.name in ("os", "pathlib", "io"):
                        getattr(names, alias.name).add(local)
            elif isinstance(node, ast.ImportFrom) and node.module in ("os", "pathlib"):
                for alias in node.names:
                    names._add_from(node.module, alias.name, alias.asname or alias.name)
        return names

    def _add_from(self, module: str, name: str, local: str) -> None:
        table = {
            ("os", "environ"): self.environ,
            ("os", "getenv"): self.getenv,
            ("os", "getcwd"): self.getcwd,
            ("pathlib", "Path"): self.path_cls,
        }
        target = table.get((module, name))
        if target is not None:
            target.add(local)

    def is_environ(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.environ
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "environ"
            and isinstance(node.value, ast.Name)
            and node.value.id in self.os
        )

    def is_os_attr(self, node: ast.AST, attr: str, bare: set[str]) -> bool:
        if isinstance(node, ast.Name):
            return node.id in bare
        return (
            isinstance(node, ast.Attribute)
            and node.attr == attr
            and isinstance(node.value, ast.Name)
            and node.value.id in self.os
        )

    def is_path_cls(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.path_cls
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "Path"
            and isinstance(node.value, ast.Name)
            and node.value.id in self.pathlib
        )


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = "literal"` so `os.environ[NAME]` still yields a literal key."""
    found: dict[str, str] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant):
            if isinstance(stmt.value.value, str):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = stmt.value.value
    return found


class _EnvReads:
    """Every env read in a module, with the node that performs it."""

    def __init__(self, names: _Aliases, constants: dict[str, str]) -> None:
        self.names = names
        self.constants = constants
        self.found: list[tuple[str, ast.AST]] = []
        self._handled: set[int] = set()

    def _key(self, node: ast.AST | None) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.constants:
            return self.constants[node.id]
        return DYNAMIC

    def _add(self, key_node: ast.AST | None, at: ast.AST, environ: ast.AST) -> None:
        self.found.append((self._key(key_node), at))
        self._handled.add(id(environ))

    def scan(self, nodes: list[ast.AST]) -> None:
        """Keyed reads first, so the second pass knows which `os.environ` uses are bare."""
        for node in nodes:
            if isinstance(node, ast.Subscript):
                self._subscript(node)
            elif isinstance(node, ast.Call):
                self._call(node)
            elif isinstance(node, ast.Compare):
                self._compare(node)
        for node in nodes:
            if isinstance(node, (ast.Name, ast.Attribute)):
                self._bare(node)

    def _subscript(self, node: ast.Subscript) -> None:
        if self.names.is_environ(node.value):
            self._handled.add(id(node.value))
            if isinstance(node.ctx, ast.Load):
                self._add(_subscript_key(node), node, node.value)

    def _call(self, node: ast.Call) -> None:
        func = node.func
        first = node.args[0] if node.args else None
        if isinstance(func, ast.Attribute) and self.names.is_environ(func.value):
            self._handled.add(id(func.value))
            if func.attr in _READ_METHODS:
                self._add(first, node, func.value)
            elif func.attr not in _WRITE_METHODS:
                self._add(None, node, func.value)  # copy(), items(), ...: the whole environment
        elif self.names.is_os_attr(func, "getenv", self.names.getenv):
            self.found.append((self._key(first), node))

    def _compare(self, node: ast.Compare) -> None:
        # `"KEY" in os.environ` reads a key too.
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)) and self.names.is_environ(right):
                self._add(node.left, node, right)

    def _bare(self, node: ast.AST) -> None:
        # `dict(os.environ)`, `env=os.environ`: the program sees every key.
        loads = isinstance(getattr(node, "ctx", None), ast.Load)
        if loads and self.names.is_environ(node) and id(node) not in self._handled:
            self._add(None, node, node)


def _subscript_key(node: ast.Subscript) -> ast.AST | None:
    index: ast.AST = node.slice
    # Python 3.8 wrapped subscripts in ast.Index; 3.9+ does not, but stay tolerant.
    return getattr(index, "value", index) if type(index).__name__ == "Index" else index


def _main_block(tree: ast.Module) -> ast.If | None:
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and _is_main_test(stmt.test):
            return stmt
    return None


def _is_main_test(test: ast.AST) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    if not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    has_name = any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
    has_main = any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)
    return has_name and has_main


def _import_time_nodes(tree: ast.Module, main: ast.If | None) -> list[ast.AST]:
    """Nodes that execute on import: module and class bodies, decorators and defaults.

    Function bodies and lambdas run later (if ever), and the main block runs only as a script.
    """
    out: list[ast.AST] = []
    stack: list[ast.AST] = [s for s in tree.body if s is not main]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend(node.decorator_list)
            stack.extend(node.args.defaults)
            stack.extend(d for d in node.args.kw_defaults if d is not None)
            continue
        if isinstance(node, ast.Lambda):
            stack.extend(node.args.defaults)
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _import_time_effects(
    tree: ast.Module, main: ast.If | None, names: _Aliases, reads: _EnvReads, path: str
) -> list[Effect]:
    nodes = _import_time_nodes(tree, main)
    at_import = {id(n) for n in nodes}
    effects = [
        Effect(path, getattr(node, "lineno", 0), "env", key)
        for key, node in reads.found
        if id(node) in at_import
    ]
    for node in nodes:
        kind = _call_effect(node, names)
        if kind is not None:
            effects.append(Effect(path, getattr(node, "lineno", 0), kind[0], kind[1]))
    return sorted(set(effects), key=lambda e: (e.file, e.line, e.kind, e.detail))


def _call_effect(node: ast.AST, names: _Aliases) -> tuple[str, str] | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Name) and func.id == "open":
        return ("open", "open()")
    if isinstance(func, ast.Attribute):
        if func.attr == "open" and isinstance(func.value, ast.Name) and func.value.id in names.io:
            return ("open", "io.open()")
        if func.attr in _FILE_METHODS:
            return ("open", f".{func.attr}()")
        if func.attr == "cwd" and names.is_path_cls(func.value):
            return ("cwd", "Path.cwd()")
    if names.is_os_attr(func, "getcwd", names.getcwd):
        return ("cwd", "os.getcwd()")
    return None


def _imports(nodes: list[ast.AST]) -> list[tuple[str, int]]:
    """Imported names as (dotted name, relative level); resolved against the repo later."""
    found: list[tuple[str, int]] = []
    for node in nodes:
        if isinstance(node, ast.Import):
            found.extend((alias.name, 0) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            found.append((base, node.level))
            for alias in node.names:
                if alias.name != "*":
                    found.append((f"{base}.{alias.name}" if base else alias.name, node.level))
    return found
