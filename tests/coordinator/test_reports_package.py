"""The renderers' package, charpin_coordinator.reports: imports flow one way (no cycle, even
through a function-level import), and every module stays under 500 lines. Read from the source
with ast, so an import hidden inside a function counts as much as one at the top."""

from __future__ import annotations

import ast
from pathlib import Path

import charpin_coordinator.reports as reports

PACKAGE = "charpin_coordinator.reports"
MAX_LINES = 500


def package_imports(folder: Path, package: str) -> dict[str, set[str]]:
    """module name -> the package's modules it imports (anywhere in the file)."""
    modules = {path.stem: path for path in folder.glob("*.py") if path.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == package:
                    found |= {alias.name for alias in node.names if alias.name in modules}
                elif node.module.startswith(package + "."):
                    found.add(node.module[len(package) + 1 :].split(".")[0])
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(package + "."):
                        found.add(alias.name[len(package) + 1 :].split(".")[0])
        graph[name] = found - {name}  # a module naming itself is no cycle between modules
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as [a, b, ..., a], or [] when the graph has none."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return []


def test_the_reports_package_has_no_import_cycle() -> None:
    folder = Path(reports.__file__).parent
    graph = package_imports(folder, PACKAGE)
    assert {"html_report", "html_since", "html_evidence", "text", "markdown", "junit"} <= set(graph)
    assert find_cycle(graph) == [], "import cycle in " + PACKAGE


def test_the_cycle_check_catches_a_cycle_even_inside_a_function(tmp_path: Path) -> None:
    """The check above can fail: html_report <-> html_since as it was (a function-level import)."""
    pkg = tmp_path / "fake"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "html_report.py").write_text(
        "def render():\n    from fake.html_since import since\n    return since()\n"
    )
    (pkg / "html_since.py").write_text("from fake.html_report import render\n")
    (pkg / "html_base.py").write_text("import fake.html_base\n")  # itself: not a cycle to report
    assert find_cycle(package_imports(pkg, "fake")) == ["html_report", "html_since", "html_report"]


def test_every_module_of_the_reports_package_is_under_500_lines() -> None:
    folder = Path(reports.__file__).parent
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in folder.glob("*.py")}
    assert {name: n for name, n in sizes.items() if n >= MAX_LINES} == {}


def test_the_old_renderer_modules_are_gone() -> None:
    """One home for the renderers: nothing left at the coordinator's top level to drift apart."""
    top = Path(reports.__file__).parent.parent
    old = ["render.py", "render_evidence.py", "html_report.py", "html_since.py", "html_evidence.py"]
    old += ["html_history.py", "html_cli.py", "remote/junit.py"]
    assert [name for name in old if (top / name).exists()] == []
