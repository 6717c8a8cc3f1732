"""Scope sees every Python source and cannot be steered (#18 item 4): what Python would run is
parsed (shebang scripts, link targets), every name a module-level statement binds is a unit,
a hook or a name only mentioned is no extract, and a renamed function is no change."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from charpin_coordinator.verify.scope import python_shebang, scope

from tests.conftest import git, make_repo
from tests.coordinator.verify.test_static import MESSY, commit

REPORT = """#!/usr/bin/env python3
def header():
    return "report"


def body(rows):
    return [r * 2 for r in rows]


def footer(rows):
    return len(rows)


if __name__ == "__main__":
    print(header(), body([1]), footer([1]))
"""


def test_a_shebang_script_without_py_is_compared_like_any_module(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"bin/report": REPORT, "m.py": MESSY})
    text = REPORT.replace('"report"', '"REPORT"').replace("r * 2", "r * 3").replace(
        "len(rows)", "len(rows) + 1"
    )
    patched = commit(repo, {"bin/report": text})
    assert scope(repo, "HEAD~1", patched).changed == [
        "bin/report:body",
        "bin/report:footer",
        "bin/report:header",
    ]
    # A file that is no Python (no shebang) is not parsed at all.
    patched = commit(repo, {"notes.txt": "def x(:\n"})
    assert scope(repo, "HEAD~1", patched).changed == []


def test_a_link_is_read_as_what_it_points_at(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"m.py": MESSY, "hooks.txt": "def a():\n    return 1\n"})
    os.symlink("hooks.txt", repo / "plugin.py")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a link to text that Python would run")
    assert scope(repo, "HEAD~1", "HEAD").changed == ["plugin.py:a"]


def test_one_statement_rebinding_four_functions_is_four_changes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"m.py": MESSY})
    text = MESSY + "\nload, total, render, report = (lambda *a: None,) * 4\n"
    patched = commit(repo, {"m.py": text})
    assert scope(repo, "HEAD~1", patched).changed == [
        "m.py:load",
        "m.py:render",
        "m.py:report",
        "m.py:total",
    ]


def test_a_function_only_mentioned_or_a_hook_is_no_extract(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"m.py": MESSY})
    text = MESSY.replace(
        "    return out\n",
        "    note = 'see audit_rows and pytest_configure'\n    return out\n",
    )
    text += "\n\ndef audit_rows(rows):\n    return rows\n\n\ndef pytest_configure(config):\n    pass\n"
    patched = commit(repo, {"m.py": text})
    found = scope(repo, "HEAD~1", patched)
    assert found.helpers == []
    assert found.changed == ["m.py:audit_rows", "m.py:pytest_configure", "m.py:total"]


def test_a_private_function_renamed_with_its_only_caller_is_one_change(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"m.py": MESSY})
    text = MESSY.replace("def render(rows):", "def _format_rows(rows):").replace(
        "return render(rows)", "return _format_rows(rows)"
    )
    patched = commit(repo, {"m.py": text})
    found = scope(repo, "HEAD~1", patched)
    assert found.changed == ["m.py:report"], found


@pytest.mark.parametrize(
    ("first_line", "python"),
    [
        ("#!/usr/bin/env -S uv run --script", True),
        ("#!/usr/bin/env -S pipx run", True),
        ("#!/usr/bin/python3.12", True),
        ("#!/usr/bin/env pypy3", True),
        ("#!/opt/tools/bin/run-it", True),  # unknown, and the file reads as Python
        ("#!/bin/bash", False),
        ("#!/usr/bin/env node", False),
    ],
)
def test_a_shebang_is_python_unless_it_names_another_interpreter(
    first_line: str, python: bool
) -> None:
    assert python_shebang(REPORT.replace("#!/usr/bin/env python3", first_line).encode()) is python


def test_an_unknown_interpreter_of_no_python_is_not_python() -> None:
    assert not python_shebang(b"#!/opt/tools/run-it\nset -e; echo $((1 + 2))\n")


def test_a_type_hint_on_a_module_table_is_no_change_but_a_new_value_is(tmp_path: Path) -> None:
    # The corpus's inf-type-hints-tables: three hinted tables were three changed units.
    base = "RATES = [('DE', 19)]\nNAMES = ('a', 'b')\n\n\ndef rate(c):\n    return dict(RATES)[c]\n"
    repo = make_repo(tmp_path / "r", {"m.py": base})
    hinted = (
        "from typing import List, Tuple\n\n"
        "RATES: List[Tuple[str, int]] = [('DE', 19)]\nNAMES: Tuple[str, ...] = ('a', 'b')\n\n\n"
        "def rate(c):\n    return dict(RATES)[c]\n"
    )
    assert scope(repo, "HEAD", commit(repo, {"m.py": hinted})).changed == []
    moved = hinted.replace("19", "21")
    assert scope(repo, "HEAD~1", commit(repo, {"m.py": moved})).changed == ["m.py:RATES"]
