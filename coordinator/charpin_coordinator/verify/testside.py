"""Coordinator side; stdlib and the verify git reader only. What of a commit is "the test side":
the tests, the harness that runs them and the data they read, judged from the base.

`verify` runs the patched code with the base's test side (rule 6 of the threat model: a patch
never chooses its own judge). The test side of the base commit is, deny by default:

* the harness: every `conftest.py`; pytest's configuration files at the top (`pytest.ini`,
  `.pytest.ini`, `tox.ini`) and its sections in `pyproject.toml` (`[tool.pytest.ini_options]`,
  `[tool.pytest]`) and `setup.cfg` (`[tool:pytest]`);
* the test roots: the base's `testpaths` when its pytest configuration sets them, else every
  folder named `test`, `tests` or `testing`; everything under a test root is test side (its
  data files too);
* test files anywhere: names matching the base's `python_files` (default `test_*.py`,
  `*_test.py`);
* modules only the tests import: a module of the repository outside the test roots that some
  test-side file imports and no other file does (directly, or through other such modules),
  that is no program of its own (no `if __name__ == "__main__":`, no shebang, not
  `__main__.py`), and that is test machinery: it imports a test framework (pytest, unittest,
  hypothesis, mock) or its name says so (`testutils.py`, `fixtures.py`). A library's own
  modules are imported only by its tests too; they are production, and judged.

Everything else is production code: the patch's change there is what is judged. A patch that
edits a module only the tests import is told so as a finding (verify/judged.py): the judged run
takes the base's, so that change would never be judged.
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
CONFIG_FILES = ("pytest.ini", ".pytest.ini", "tox.ini")
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

    def covers(self, path: str) -> bool:
        """Whether path (of either commit) is on the test side: a base test-side file, under a
        test root, a test file by name, or a conftest."""
        if path in self.files or is_harness_file(path):
            return True
        if any(path == r or path.startswith(r.rstrip("/") + "/") for r in self.roots):
            return True
        name = PurePosixPath(path).name
        return path.endswith(".py") and any(fnmatch.fnmatchcase(name, p) for p in self.python_files)


def is_harness_file(path: str) -> bool:
    """conftest.py anywhere, and pytest's own configuration files at the top."""
    return PurePosixPath(path).name == "conftest.py" or path in CONFIG_FILES


def settings(blobs: dict[str, bytes]) -> tuple[str, dict[str, Any]]:
    """The base's pytest settings as pytest finds them: (file, {key: value}); pytest.ini wins,
    then pyproject.toml, tox.ini and setup.cfg. blobs: top-level config files' contents."""
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
    config files and of every .py file (for the import graph)."""
    every = sorted(set(paths))
    config_file, options = settings(blobs)
    testpaths = [p.strip("/") for p in _lines(options.get("testpaths")) if p.strip("/")]
    roots = tuple(testpaths) if testpaths else _named_roots(every)
    python_files = tuple(_lines(options.get("python_files"))) or DEFAULT_PYTHON_FILES
    reasons: dict[str, str] = {}
    for path in every:
        why = _why(path, roots, python_files)
        if why:
            reasons[path] = why
    only = _test_only(every, blobs, set(reasons))
    for path in only:
        reasons[path] = "imported only by tests"
    return TestSide(
        files=frozenset(reasons),
        roots=roots,
        python_files=python_files,
        config_file=config_file,
        test_only=tuple(sorted(only)),
        reasons=reasons,
    )


def _named_roots(paths: list[str]) -> tuple[str, ...]:
    roots: set[str] = set()
    for path in paths:
        parts = path.split("/")[:-1]
        for depth, part in enumerate(parts):
            if part in ROOT_NAMES:
                roots.add("/".join(parts[: depth + 1]))
                break
    return tuple(sorted(roots))


def _why(path: str, roots: tuple[str, ...], python_files: tuple[str, ...]) -> str:
    if PurePosixPath(path).name == "conftest.py":
        return "conftest"
    if path in CONFIG_FILES:
        return "pytest configuration"
    for root in roots:
        if path == root or path.startswith(root + "/"):
            return f"under the test root {root}/"
    name = PurePosixPath(path).name
    if path.endswith(".py") and any(fnmatch.fnmatchcase(name, p) for p in python_files):
        return "a test file by name"
    return ""


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


def _test_only(paths: list[str], blobs: dict[str, bytes], tests: set[str]) -> set[str]:
    """Repository modules imported by test-side files and by nothing else."""
    by_name: dict[str, str] = {}
    for path in paths:
        for name in _module_names(path):
            by_name.setdefault(name, path)
    importers: dict[str, set[str]] = {}
    for path in paths:
        if path.endswith(".py") and path in blobs:
            for name in _imports(path, blobs[path]):
                target = by_name.get(name)
                if target is not None and target != path:
                    importers.setdefault(target, set()).add(path)
    only: set[str] = set()
    grew = True
    while grew:
        grew = False
        for target, users in importers.items():
            if target in tests or target in only or not users:
                continue
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
