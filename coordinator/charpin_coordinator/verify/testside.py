"""Coordinator side; stdlib and the verify git reader only. What of a commit is "the test side":
the tests, the harness that runs them and the data they read, judged from the base.

`verify` runs the patched code with the base's test side (rule 6 of the threat model: a patch
never chooses its own judge). A file is test side only on evidence; when unsure it is production,
and judged (class C of attack report 1: a production module named `ab_test.py`, or kept in a
folder called `testing`, was restored from the base and never judged):

* the harness: every `conftest.py`; pytest's configuration files at the top (`pytest.toml`,
  `.pytest.toml`, `pytest.ini`, `.pytest.ini`, `tox.ini`) and its sections in `pyproject.toml`
  (`[tool.pytest.ini_options]`, `[tool.pytest]`) and `setup.cfg` (`[tool:pytest]`);
* test modules: a file named like the base's `python_files` (default `test_*.py`, `*_test.py`)
  that gives pytest something to collect (a `test*` function, a `Test*` class or a TestCase, as
  the base's `python_functions`/`python_classes` say); the base run's collection checks this
  afterwards (verify/judged.py `collection_disagrees`);
* the test roots: the base's `testpaths`, else folders named `test`, `tests` or `testing`;
  inside a production package only one that holds a test module (`shop/testing/` of production
  helpers is none). Their data files are test side, and so are their .py files unless the root
  lies inside a production package (`shop/tests/`): there only test modules, conftests and the
  `__init__.py` of a folder of test modules are;
* modules only the tests import, outside every production package's folder (the top-level
  package folder of any production module): no program of its own, and test machinery (it
  imports a test framework, or its name says so: `testutils.py`, `fixtures.py`).

Whatever production code imports (directly or through others) is production, whatever its name
or folder. A test module production imports, or one inside a production package that any other
module imports, is both (`TestSide.both`): verify cannot judge a
change to it and says INCOMPLETE, naming it. A patch that edits a module only the tests import
is told so as a finding (verify/judged.py): the judged run takes the base's.
"""

from __future__ import annotations

import ast
import configparser
import fnmatch
import re
import tomllib
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

ROOT_NAMES = ("test", "tests", "testing")
CONFIG_FILES = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "tox.ini")
# Where pytest's settings live in files that also hold other things.
SECTIONS = {
    "pyproject.toml": "[tool.pytest.ini_options]",
    "setup.cfg": "[tool:pytest]",
    "tox.ini": "[pytest]",
}
DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")


@dataclass(frozen=True)
class TestSide:
    """The base's test side: files (repository paths) and the settings it was found from."""

    files: frozenset[str]
    roots: tuple[str, ...]
    python_files: tuple[str, ...]
    config_file: str  # where the base's pytest settings are ("" when none)
    test_only: tuple[str, ...] = ()  # production-looking modules only tests import
    reasons: dict[str, str] = field(default_factory=dict)  # path -> why it is test side
    modules: frozenset[str] = frozenset()  # the test modules (pytest collects tests from them)
    # Files that are test modules and imported by production code: path -> why; judged as
    # production, and a patch changing one cannot be judged at all (INCOMPLETE).
    both: dict[str, str] = field(default_factory=dict)
    known: frozenset[str] = frozenset()  # every path of the commit the side was found from
    production_dirs: frozenset[str] = frozenset()  # top-level folders of production packages

    def covers(self, path: str) -> bool:
        """Whether path of this commit is on the test side. A path the commit does not have is
        judged as production unless it is a conftest: when unsure, it is judged."""
        if path in self.files or is_harness_file(path):
            return True
        if path in self.known or path.endswith(".py"):
            return False
        # A new data file under a test root is test data.
        return any(path.startswith(r.rstrip("/") + "/") for r in self.roots)


def is_harness_file(path: str) -> bool:
    """conftest.py and pytest's own configuration files, anywhere (pytest looks for its
    configuration from the folders its arguments name, upwards)."""
    name = PurePosixPath(path).name
    # tox.ini is tox's file too: only its [pytest] section is the harness (judged.py compares
    # that section, as for pyproject.toml and setup.cfg), or every envlist edit is protected.
    return name == "conftest.py" or (name in CONFIG_FILES and name != "tox.ini")


def settings(blobs: dict[str, bytes]) -> tuple[str, dict[str, Any]]:
    """The base's pytest settings as pytest finds them: (file, {key: value}); pytest.ini wins,
    then pyproject.toml, tox.ini and setup.cfg; pytest 9 reads pytest.toml and .pytest.toml
    first. blobs: top-level config files' contents."""
    for name in ("pytest.toml", ".pytest.toml"):
        if name in blobs:
            return name, _toml_pytest(blobs[name])
    for name in ("pytest.ini", ".pytest.ini"):
        if name in blobs:
            return name, _ini(blobs[name], "pytest")
    if "pyproject.toml" in blobs:
        table = pytest_table(blobs["pyproject.toml"])
        if table is not None:
            return "pyproject.toml", table
    if "tox.ini" in blobs:
        found = _ini(blobs["tox.ini"], "pytest")
        if found:
            return "tox.ini", found
    if "setup.cfg" in blobs:
        found = _ini(blobs["setup.cfg"], "tool:pytest")
        if found:
            return "setup.cfg", found
    return "", {}


def pytest_table(pyproject: bytes) -> dict[str, Any] | None:
    """pyproject.toml's pytest settings ([tool.pytest.ini_options], or pytest 9's native
    [tool.pytest]); None when it has none or does not parse."""
    try:
        data = tomllib.loads(pyproject.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError):
        return None
    tool = data.get("tool")
    pytest = tool.get("pytest") if isinstance(tool, dict) else None
    if not isinstance(pytest, dict):
        return None
    options = pytest.get("ini_options")
    if isinstance(options, dict):
        return dict(options)
    return {k: v for k, v in pytest.items() if k != "ini_options"}


def _toml_pytest(data: bytes) -> dict[str, Any]:
    """pytest.toml's [pytest] table (pytest 9)."""
    try:
        table = tomllib.loads(data.decode("utf-8")).get("pytest")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError):
        return {}
    return dict(table) if isinstance(table, dict) else {}


def merged(base: TestSide, patched: TestSide) -> TestSide:
    """The base's test side, and the files only the patched commit has as its test side says
    (the patch's new test modules): a path of the base is always judged as the base has it."""
    new = patched.known - base.known
    reasons = dict(base.reasons)
    reasons.update({p: why for p, why in patched.reasons.items() if p in new})
    return TestSide(
        files=frozenset(reasons),
        roots=base.roots,
        python_files=base.python_files,
        config_file=base.config_file,
        test_only=base.test_only,
        reasons=reasons,
        modules=base.modules | (patched.modules & new),
        both={**patched.both, **base.both},
        known=base.known | patched.known,
        production_dirs=base.production_dirs | patched.production_dirs,
    )


def section_text(name: str, data: bytes) -> str | None:
    """The pytest section of a mixed file, as comparable text (None when it has none)."""
    if name == "pyproject.toml":
        table = pytest_table(data)
        return None if table is None else repr(sorted(table.items()))
    found = _ini(data, "pytest" if name == "tox.ini" else "tool:pytest")
    return repr(sorted(found.items())) if found else None


def _ini(data: bytes, section: str) -> dict[str, Any]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(data.decode("utf-8", "replace"))
    except configparser.Error:
        return {}
    if not parser.has_section(section):
        return {}
    return {k: v for k, v in parser.items(section)}


def _lines(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, str):
        return value.split()
    return []


def find(paths: Iterable[str], blobs: dict[str, bytes]) -> TestSide:
    """The test side of a commit whose files are paths; blobs holds the contents of its top-level
    config files and of every .py file (for the import graph and the tests each file defines)."""
    every = sorted(set(paths))
    config_file, options = settings(blobs)
    testpaths = [p.strip("/") for p in _lines(options.get("testpaths")) if p.strip("/")]
    python_files = tuple(_lines(options.get("python_files"))) or DEFAULT_PYTHON_FILES
    functions = tuple(_lines(options.get("python_functions"))) or ("test",)
    classes = tuple(_lines(options.get("python_classes"))) or ("Test",)
    # Evidence, not names: a test module is a file pytest would collect tests from.
    modules = {
        p
        for p in every
        if _collectable(p, python_files) and _defines_tests(blobs.get(p, b""), functions, classes)
    }
    named = tuple(testpaths) if testpaths else _named_roots(every)
    graph = _import_graph(every, blobs)
    first = {p for p in every if _why(p, named, modules)}
    # Modules only tests import would be test side outside production packages; they do not
    # make a folder a production package (a namespace folder of test helpers).
    candidates = _test_only(every, blobs, first, graph, set())
    production_dirs = _production_dirs(every, first | candidates)
    # Inside a production package a folder is a test root on evidence only: it holds a test
    # module (`shop/testing/` of production helpers is none).
    roots = named if testpaths else tuple(
        r for r in named
        if not _inside(r, production_dirs) or any(m.startswith(r + "/") for m in modules)
    )
    reasons = {p: why for p in every if (why := _why(p, roots, modules))}
    # A .py file inside a production package is production unless it is a test module or a
    # conftest: a helper there that only the tests import today is still the package's code.
    for path in list(reasons):
        if path.endswith(".py") and reasons[path].startswith("under the test root"):
            if _inside(path, production_dirs) and not _package_of_tests(path, modules):
                del reasons[path]
    only = _test_only(every, blobs, set(reasons), graph, production_dirs)
    for path in only:
        reasons[path] = "imported only by tests"
    # Whatever production code imports is production, whatever its name or folder; and a test
    # module inside a production package that other code imports names from is that package's
    # code as much as a test (only a dynamic import could reach it otherwise).
    imported = _imported_by_production(every, set(reasons), graph)
    used = {t for source, targets in graph.items() for t in targets if t != source}
    imported |= {m for m in modules if m in used and _inside(m, production_dirs)}
    both = sorted(p for p in imported if p in modules)
    for path in imported:
        reasons.pop(path, None)
    return TestSide(
        files=frozenset(reasons),
        roots=roots,
        python_files=python_files,
        config_file=config_file,
        test_only=tuple(sorted(p for p in only if p in reasons)),
        reasons=reasons,
        modules=frozenset(p for p in modules if p in reasons),
        both={p: BOTH_WHY for p in both},
        known=frozenset(every),
        production_dirs=frozenset(production_dirs),
    )


BOTH_WHY = (
    "pytest collects tests from it and production code imports it: neither the base's copy nor "
    "the patch's can be the judge"
)


def _collectable(path: str, python_files: tuple[str, ...]) -> bool:
    name = PurePosixPath(path).name
    return path.endswith(".py") and any(fnmatch.fnmatchcase(name, p) for p in python_files)


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    """pytest's python_functions/python_classes: a prefix, or a glob when it has one."""
    return any(
        fnmatch.fnmatchcase(name, p) if any(c in p for c in "*?[") else name.startswith(p)
        for p in patterns
    )


def _defines_tests(source: bytes, functions: tuple[str, ...], classes: tuple[str, ...]) -> bool:
    """Whether a module gives pytest something to collect at its top level: a function or a
    class named as pytest collects them, a unittest TestCase, or such a name bound otherwise
    (imported, assigned). The base run's collection cross-checks this afterwards."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if _matches(node.name, functions):
                return True
        elif isinstance(node, ast.ClassDef):
            bases = [ast.unparse(b) for b in node.bases]
            if _matches(node.name, classes) or any(b.endswith("TestCase") for b in bases):
                return True
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.asname or a.name.split(".")[-1] for a in node.names]
            if any(_matches(n, functions) or _matches(n, classes) for n in names):
                return True
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if any(_matches(n, functions) or _matches(n, classes) for n in names):
                return True
    return False


def _named_roots(paths: list[str]) -> tuple[str, ...]:
    """Folders named test, tests or testing (the outermost on each path)."""
    roots: set[str] = set()
    for path in paths:
        parts = path.split("/")[:-1]
        for depth, part in enumerate(parts):
            if part in ROOT_NAMES:
                roots.add("/".join(parts[: depth + 1]))
                break
    return tuple(sorted(roots))


def _why(path: str, roots: tuple[str, ...], modules: set[str]) -> str:
    if PurePosixPath(path).name == "conftest.py":
        return "conftest"
    if is_harness_file(path):
        return "pytest configuration"
    if path in modules:
        return "a test module (pytest collects tests from it)"
    for root in roots:
        if path == root or path.startswith(root + "/"):
            return f"under the test root {root}/"
    return ""


def _top(path: str) -> str:
    """The folder of the top-level package a file belongs to ("" for a top-level module)."""
    parts = path.split("/")[:-1]
    if parts and parts[0] in ("src", "lib") and len(parts) > 1:
        return "/".join(parts[:2])
    return parts[0] if parts else ""


def _production_dirs(paths: list[str], test_side: set[str]) -> set[str]:
    """The top-level package folders that hold production Python."""
    return {
        _top(p)
        for p in paths
        if p.endswith(".py") and p not in test_side and _top(p)
    }


def _inside(path: str, dirs: set[str]) -> bool:
    return any(path.startswith(d + "/") for d in dirs)


def _package_of_tests(path: str, modules: set[str]) -> bool:
    """An `__init__.py` whose folder holds test modules: the package pytest imports them by."""
    if PurePosixPath(path).name != "__init__.py":
        return False
    folder = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
    return any(m.startswith(folder) for m in modules)


def _imported_by_production(
    paths: list[str], test_side: set[str], graph: dict[str, set[str]]
) -> set[str]:
    """Test-side files that production code imports, directly or through others (a conftest is
    the harness and stays out)."""
    production = {p for p in paths if p.endswith(".py") and p not in test_side}
    found: set[str] = set()
    todo = list(production)
    while todo:
        for target in graph.get(todo.pop(), set()):
            if target in production or target in found or PurePosixPath(target).name == "conftest.py":
                continue
            if target in test_side:
                found.add(target)
            todo.append(target)
    return found


def _module_names(path: str) -> list[str]:
    """The dotted names a .py file can be imported as: from the top, and from src/."""
    if not path.endswith(".py"):
        return []
    parts = path[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    names = [".".join(parts)] if parts else []
    if len(parts) > 1 and parts[0] in ("src", "lib"):
        names.append(".".join(parts[1:]))
    return names


def _imports(path: str, source: bytes) -> set[str]:
    """Dotted module names a file imports (relative imports resolved against its package)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return set()
    package = path.rsplit("/", 1)[0].replace("/", ".") if "/" in path else ""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = node.module or ""
            found.add(stem)
            found.update(f"{stem}.{alias.name}" for alias in node.names)
    return found


_MAIN_GUARD = re.compile(rb"^if\s+__name__\s*==\s*['\"]__main__['\"]\s*:", re.M)


def _program(source: bytes) -> bool:
    """A module that is a program of its own: a shebang, or a `__main__` guard."""
    return source.startswith(b"#!") or _MAIN_GUARD.search(source) is not None


_FRAMEWORKS = ("pytest", "_pytest", "unittest", "hypothesis", "mock", "doctest", "nose")
_HELPER_WORDS = ("test", "fixture", "conftest")


def _helper_like(path: str, source: bytes) -> bool:
    """A module that is test machinery, not code under test: it imports a test framework, or
    its name says so (`testutils.py`, `fixtures.py`). A library module its tests import is
    neither, and stays production (a patch that weakens it is judged: its calls are replayed)."""
    stem = PurePosixPath(path).stem.lower()
    if any(word in stem for word in _HELPER_WORDS):
        return True
    return any(name.split(".")[0] in _FRAMEWORKS for name in _imports(path, source))


def _import_graph(paths: list[str], blobs: dict[str, bytes]) -> dict[str, set[str]]:
    """path -> the repository files it imports."""
    by_name: dict[str, str] = {}
    for path in paths:
        for name in _module_names(path):
            by_name.setdefault(name, path)
    graph: dict[str, set[str]] = {}
    for path in paths:
        if path.endswith(".py") and path in blobs:
            for name in _imports(path, blobs[path]):
                target = by_name.get(name)
                if target is not None and target != path:
                    graph.setdefault(path, set()).add(target)
    return graph


def _test_only(
    paths: list[str],
    blobs: dict[str, bytes],
    tests: set[str],
    graph: dict[str, set[str]],
    production_dirs: set[str],
) -> set[str]:
    """Repository modules imported by test-side files and by nothing else, outside every
    production package's folder."""
    importers: dict[str, set[str]] = {}
    for path, targets in graph.items():
        for target in targets:
            importers.setdefault(target, set()).add(path)
    only: set[str] = set()
    grew = True
    while grew:
        grew = False
        for target, users in importers.items():
            if target in tests or target in only or not users:
                continue
            if _inside(target, production_dirs):
                continue  # the package's own code, whatever it is called: judged
            if PurePosixPath(target).name in ("__init__.py", "__main__.py"):
                continue  # a package is production as long as anything lives in it
            if _program(blobs.get(target, b"")):
                continue  # a script the tests import is still a program users run
            if not _helper_like(target, blobs.get(target, b"")):
                continue  # a library's modules are imported only by its tests, and judged
            if users <= tests | only:
                only.add(target)
                grew = True
    return only
