"""The runner is stdlib only and runs on Python 3.9: import every module on a bare interpreter."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.py39 import PY39, needs_py39

RUNNER = Path(__file__).resolve().parents[2] / "runner"
# The probe's pytest side imports pytest by design (checked below: pytest and nothing else);
# __main__ runs the CLI on import.
PYTEST_SIDE = {
    "charpin_runner.plugin",
    *(
        f"charpin_runner.inpytest.{name}"
        for name in (
            "boot", "collection", "outcomes", "paths", "recorder", "reports", "state", "traced",
            "wrappers",
        )
    ),
}
EXEMPT = {*PYTEST_SIDE, "charpin_runner.__main__"}
# What pytest itself brings along; anything else imported by the pytest side is a leak.
PYTEST_DEPS = {"pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py"}

# Runs inside `python -I -S`: no site-packages, no PYTHONPATH, only runner/ on sys.path.
_PROBE = """
import importlib, json, sys, traceback
sys.path.insert(0, sys.argv[1])
result = {}
for name in json.loads(sys.argv[2]):
    before = set(sys.modules)
    try:
        importlib.import_module(name)
    except BaseException:
        result[name] = {"error": traceback.format_exc(limit=1)}
        continue
    result[name] = {"new": sorted(set(sys.modules) - before)}
print(json.dumps(result))
"""


def runner_modules() -> list[str]:
    names = []
    for path in sorted((RUNNER / "charpin_runner").rglob("*.py")):
        parts = list(path.relative_to(RUNNER).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if name not in EXEMPT:
            names.append(name)
    return names


def non_stdlib(python: str) -> dict[str, list[str]]:
    """Import each runner module under python; return module -> offending imports or error."""
    modules = runner_modules()
    out = subprocess.run(
        [python, "-I", "-S", "-c", _PROBE, str(RUNNER), json.dumps(modules)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    stdlib = set(sys.stdlib_module_names) | {"charpin_runner"}
    found: dict[str, list[str]] = {}
    for name, seen in json.loads(out.stdout).items():
        if "error" in seen:
            found[name] = [seen["error"]]
            continue
        bad = [m for m in seen["new"] if m.split(".")[0] not in stdlib]
        if bad:
            found[name] = bad
    return found


def test_every_runner_module_is_listed() -> None:
    modules = runner_modules()
    assert {"charpin_runner", "charpin_runner.receipt_cli", "charpin_runner.fixtures"} <= set(
        modules
    )
    assert not EXEMPT & set(modules)


def test_runner_imports_only_stdlib_on_this_python() -> None:
    assert non_stdlib(sys.executable) == {}


@needs_py39()
def test_runner_imports_only_stdlib_on_python_39() -> None:
    assert non_stdlib(str(PY39)) == {}


def test_the_probe_side_imports_only_stdlib_and_pytest() -> None:
    site = str(Path(pytest.__file__).parents[1])
    script = f"import sys; sys.path.append({site!r})\n" + _PROBE
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script, str(RUNNER), json.dumps(sorted(PYTEST_SIDE))],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    allowed = set(sys.stdlib_module_names) | {"charpin_runner"} | PYTEST_DEPS
    found = {
        name: [m for m in seen.get("new", [seen.get("error")]) if m.split(".")[0] not in allowed]
        for name, seen in json.loads(out.stdout).items()
    }
    assert {name: bad for name, bad in found.items() if bad} == {}
    inside = {
        str(p.relative_to(RUNNER).with_suffix("")).replace("/", ".")
        for p in (RUNNER / "charpin_runner" / "inpytest").glob("*.py")
    }
    # Every module of inpytest/ is either stdlib only (checked above) or listed here.
    stdlib_only = {"__init__", "channel", "tracing"}
    assert inside - PYTEST_SIDE <= {f"charpin_runner.inpytest.{name}" for name in stdlib_only}


def test_the_check_catches_a_non_stdlib_import(tmp_path: Path) -> None:
    # Guard the guard: a module importing a third-party package must be reported.
    fake = tmp_path / "runner"
    shutil.copytree(RUNNER / "charpin_runner", fake / "charpin_runner")
    (fake / "charpin_runner" / "sneaky.py").write_text("import json\nimport pytest\n")
    site = str(Path(pytest.__file__).parents[1])
    script = f"import sys; sys.path.append({site!r})\n" + _PROBE
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script, str(fake), '["charpin_runner.sneaky"]'],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    new = json.loads(out.stdout)["charpin_runner.sneaky"]["new"]
    assert "pytest" in new and "pytest" not in sys.stdlib_module_names


def _vermin() -> str | None:
    beside = Path(sys.executable).parent / "vermin"
    return str(beside) if beside.exists() else shutil.which("vermin")


@pytest.mark.skipif(_vermin() is None, reason="vermin is not installed (CI installs it)")
def test_vermin_says_python_39_is_enough() -> None:
    vermin = _vermin()
    assert vermin is not None
    out = subprocess.run(
        [vermin, "-t=3.9-", "--no-tips", "--violations", str(RUNNER / "charpin_runner")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def _imports_outside_stdlib() -> set[tuple[str, str]]:
    """(module, top-level name) of every import in runner source that is not the stdlib's."""
    import ast

    found = set()
    for module in [*runner_modules(), *EXEMPT]:
        path = RUNNER / Path(*module.split("."))
        source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "charpin_runner":
                    found.add((module, top))
    return found


def test_only_tomli_coverage_and_the_plugins_pytest_are_not_stdlib() -> None:
    # tomli is charpin-runner's dependency below 3.11 (runner/pyproject.toml), imported lazily
    # in tomlread only; coverage.py is the optional `pins cover` extra, imported lazily; pytest
    # only on the probe's pytest side. Anything else here would break a bare box.
    found = _imports_outside_stdlib()
    pytest_side = {(m, top) for m, top in found if m in PYTEST_SIDE}
    assert {top for _, top in pytest_side} == {"pytest", "_pytest"}
    assert found - pytest_side == {
        ("charpin_runner.tomlread", "tomli"),
        ("charpin_runner.pins.cover", "coverage"),
    }
