"""verify/static.py on real repositories: scope, dependencies and entry points of two commits."""

from __future__ import annotations

from pathlib import Path

import pytest
from charpin_coordinator.verify.static import Scope, dependencies, entry_points, scope
from charpin_runner.errors import UsageError

from tests.conftest import git, make_repo

MESSY = '''"""Invoices."""
import json


RATE = 2


def load(path):
    with open(path) as handle:
        return json.load(handle)


def total(rows):
    out = 0
    for row in rows:
        price = row["price"] * RATE
        out += price
    return out


def render(rows):
    return ", ".join(str(r) for r in rows)


def report(rows):
    return render(rows) + str(total(rows))


def main():
    print(report(load("x.json")))
'''


def commit(repo: Path, files: dict[str, str | None], message: str = "patch") -> str:
    """Write (or delete, for None) files, commit them, and return the new commit id."""
    for rel, text in files.items():
        path = repo / rel
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"m.py": MESSY, "README.md": "hello\n"})


def edit(repo: Path, rel: str, old: str, new: str) -> str:
    text = (repo / rel).read_text()
    assert old in text, old
    return text.replace(old, new, 1)


# -- scope -------------------------------------------------------------------------------------


def test_a_pure_extract_is_one_change_and_one_helper(repo: Path) -> None:
    text = edit(
        repo,
        "m.py",
        '        price = row["price"] * RATE\n',
        "        price = _g(row)\n",
    )
    text += '\n\ndef _g(row):\n    return row["price"] * RATE\n'
    patched = commit(repo, {"m.py": text})
    assert scope(repo, "HEAD~1", patched) == Scope(["m.py:total"], ["m.py:_g"], [])


def test_extract_named_f_and_g(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"m.py": "def f(x):\n    y = x * 2\n    return y + 1\n"})
    patched = commit(
        repo, {"m.py": "def f(x):\n    return _g(x) + 1\n\n\ndef _g(x):\n    return x * 2\n"}
    )
    assert scope(repo, "HEAD~1", patched) == Scope(["m.py:f"], ["m.py:_g"], [])


def test_five_changed_functions_count_five(repo: Path) -> None:
    text = (repo / "m.py").read_text()
    for name in ("load", "total", "render", "report", "main"):
        head = text.index(f"def {name}(")
        colon = text.index(":\n", head) + 2
        text = text[:colon] + f'    """{name}."""\n' + text[colon:]
    patched = commit(repo, {"m.py": text})
    found = scope(repo, "HEAD~1", patched)
    assert found.changed == [f"m.py:{n}" for n in ("load", "main", "render", "report", "total")]
    assert found.helpers == [] and found.unparsable == []


def test_methods_nested_classes_and_a_method_extract(tmp_path: Path) -> None:
    source = (
        "class Shop:\n"
        "    TAX = 1\n\n"
        "    def price(self, x):\n        return x + self.TAX\n\n"
        "    def name(self):\n        return 'shop'\n\n"
        "    class Till:\n"
        "        def open(self):\n            return True\n"
    )
    repo = make_repo(tmp_path / "r", {"shop.py": source})
    text = source.replace("return x + self.TAX", "return self._taxed(x)")
    text = text.replace("return True", "return False")
    text = text.replace(
        "    def name(self):",
        "    def _taxed(self, x):\n        return x + self.TAX\n\n    def name(self):",
    )
    patched = commit(repo, {"shop.py": text})
    found = scope(repo, "HEAD~1", patched)
    assert found.changed == ["shop.py:Shop.Till.open", "shop.py:Shop.price"]
    assert found.helpers == ["shop.py:Shop._taxed"]
    # A class attribute is the class's own code: one unit, path:Class.
    patched = commit(repo, {"shop.py": text.replace("TAX = 1", "TAX = 2")})
    assert scope(repo, "HEAD~1", patched).changed == ["shop.py:Shop"]


def test_module_level_code_is_a_unit_per_bound_name_and_an_added_import_is_none(
    repo: Path,
) -> None:
    text = edit(repo, "m.py", "RATE = 2\n", "RATE = 3\nSEEN = []\n")
    patched = commit(repo, {"m.py": text})
    # Each name a module-level statement binds is a unit of its own (#18 item 4).
    assert scope(repo, "HEAD~1", patched) == Scope(["m.py:RATE", "m.py:SEEN"], [], [])
    text = edit(repo, "m.py", "RATE = 3\nSEEN = []\n", "RATE = 3\nSEEN = []\nprint(RATE)\n")
    patched = commit(repo, {"m.py": text})
    assert scope(repo, "HEAD~1", patched) == Scope(["m.py:<module>"], [], [])
    text = edit(repo, "m.py", "import json\n", "import json\nimport re\n")
    text = text.replace('"""Invoices."""', '"""Invoices, documented."""')
    patched = commit(repo, {"m.py": text})
    assert scope(repo, "HEAD~1", patched) == Scope([], [], [])
    # The same name bound to something else is a change: every user of json now runs other code.
    patched = commit(repo, {"m.py": text.replace("import json\n", "import simplejson as json\n")})
    assert scope(repo, "HEAD~1", patched).changed == ["m.py:<module>"]


def test_a_file_that_does_not_parse_is_unparsable(repo: Path) -> None:
    patched = commit(repo, {"m.py": MESSY.replace("def main():", "def main(:"), "n.py": "x = (\n"})
    assert scope(repo, "HEAD~1", patched) == Scope([], [], ["m.py", "n.py"])


def test_a_renamed_file_is_compared_with_its_old_content(repo: Path) -> None:
    git(repo, "mv", "m.py", "invoices.py")
    text = edit(repo, "invoices.py", "return out\n", "return round(out, 2)\n")
    patched = commit(repo, {"invoices.py": text})
    assert scope(repo, "HEAD~1", patched) == Scope(["invoices.py:total"], [], [])
    git(repo, "mv", "invoices.py", "pkg_invoices.py")
    patched = commit(repo, {})
    assert scope(repo, "HEAD~1", patched) == Scope([], [], [])


def test_new_functions_used_elsewhere_or_nowhere_count(tmp_path: Path) -> None:
    base = (
        "from util import clean\n\n\ndef load(x):\n    return clean(x)\n\n\n"
        "def save(x):\n    return x\n"
    )
    repo = make_repo(tmp_path / "r", {"m.py": base})
    # clean() now lives here and the unchanged load() calls it too: not an extract of save().
    text = base.replace("from util import clean\n", "")
    text = text.replace("return x\n", "return clean(x)\n")
    text += "\n\ndef clean(x):\n    return x.strip()\n\n\ndef unused():\n    return 1\n"
    patched = commit(repo, {"m.py": text})
    assert scope(repo, "HEAD~1", patched) == Scope(
        ["m.py:clean", "m.py:save", "m.py:unused"], [], []
    )


def test_a_helper_may_serve_several_changed_functions(repo: Path) -> None:
    text = MESSY + "\n\ndef shared(x):\n    return x\n"
    text = text.replace("return render(rows)", "return shared(render(rows))")
    text = text.replace('print(report(load("x.json")))', 'print(shared(report(load("x.json"))))')
    patched = commit(repo, {"m.py": text})
    assert scope(repo, "HEAD~1", patched) == Scope(
        ["m.py:main", "m.py:report"], ["m.py:shared"], []
    )


def test_a_helper_may_live_in_a_new_module_and_have_its_own_helper(repo: Path) -> None:
    text = edit(repo, "m.py", "import json\n", "import json\nfrom rounding import cents\n")
    text = text.replace("return out\n", "return cents(out)\n")
    helper = (
        '"""Rounding."""\n\n\ndef cents(x):\n    return _half(x) / 100\n\n\n'
        "def _half(x):\n    return round(x * 100)\n"
    )
    patched = commit(repo, {"m.py": text, "rounding.py": helper})
    assert scope(repo, "HEAD~1", patched) == Scope(
        ["m.py:total"], ["rounding.py:_half", "rounding.py:cents"], []
    )


def test_a_deleted_file_counts_each_function_and_its_module_code(repo: Path) -> None:
    patched = commit(repo, {"m.py": None})
    found = scope(repo, "HEAD~1", patched)
    assert found.changed == [
        "m.py:RATE",
        "m.py:load",
        "m.py:main",
        "m.py:render",
        "m.py:report",
        "m.py:total",
    ]


def test_an_unchanged_tree_has_empty_results(repo: Path) -> None:
    patched = commit(repo, {"README.md": "changed\n"})
    assert scope(repo, "HEAD~1", patched) == Scope([], [], [])
    assert dependencies(repo, "HEAD~1", patched) == []
    assert entry_points(repo, "HEAD~1", patched) == []
    assert scope(repo, "HEAD", "HEAD") == Scope([], [], [])


def test_a_revision_that_is_no_commit_is_a_usage_error(repo: Path) -> None:
    with pytest.raises(UsageError, match="not a commit"):
        scope(repo, "HEAD", "--output=/tmp/x")
    blob = git(repo, "rev-parse", "HEAD:README.md")
    with pytest.raises(UsageError, match="not a commit"):
        dependencies(repo, blob, "HEAD")


# -- dependencies ------------------------------------------------------------------------------

PYPROJECT = """[project]
name = "invoices"
version = "1"
dependencies = ["click>=8"]

[project.optional-dependencies]
dev = ["pytest"]
docs = ["sphinx"]

[tool.ruff]
line-length = 100
"""


def test_dependency_declarations_each_one_entry(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "r",
        {"pyproject.toml": PYPROJECT, "requirements-dev.txt": "pytest\n", "uv.lock": "v1\n"},
    )
    toml = PYPROJECT.replace('["click>=8"]', '["click>=8", "requests"]')
    toml = toml.replace('dev = ["pytest"]', 'dev = ["pytest", "hypothesis"]')
    toml = toml.replace("line-length = 100", "line-length = 120")
    toml += '\n[dependency-groups]\ntest = ["coverage"]\n'
    patched = commit(
        repo,
        {
            "pyproject.toml": toml,
            "requirements-dev.txt": "pytest\nmock\n",
            "uv.lock": "v2\n",
            "sub/constraints.txt": "x<2\n",
        },
    )
    assert dependencies(repo, "HEAD~1", patched) == [
        "pyproject.toml: [dependency-groups].test",
        "pyproject.toml: [project.optional-dependencies].dev",
        "pyproject.toml: [project].dependencies",
        "requirements-dev.txt",
        "sub/constraints.txt",
        "uv.lock",
    ]


def test_other_pyproject_tables_are_not_dependencies(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"pyproject.toml": PYPROJECT})
    toml = PYPROJECT.replace("line-length = 100", "line-length = 120")
    toml = toml.replace('"""', "'''")
    patched = commit(repo, {"pyproject.toml": toml + '\n[tool.charpin]\npins = "p.jsonl"\n'})
    assert dependencies(repo, "HEAD~1", patched) == []


def test_a_malformed_pyproject_is_an_entry_not_a_traceback(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"pyproject.toml": PYPROJECT})
    patched = commit(repo, {"pyproject.toml": PYPROJECT.replace('version = "1"', "version = ")})
    [entry] = dependencies(repo, "HEAD~1", patched)
    assert entry.startswith("pyproject.toml: does not parse on the patched side (")
    assert "line 3" in entry and "\n" not in entry


def test_build_requires_poetry_and_setup_cfg(tmp_path: Path) -> None:
    toml = (
        '[build-system]\nrequires = ["setuptools"]\n\n'
        '[tool.poetry.dependencies]\npython = "^3.11"\n'
    )
    cfg = "[metadata]\nname = x\n\n[options]\ninstall_requires =\n    click\n"
    repo = make_repo(tmp_path / "r", {"pyproject.toml": toml, "setup.cfg": cfg})
    patched = commit(
        repo,
        {
            "pyproject.toml": toml.replace('"^3.11"', '"^3.12"\nrich = "*"').replace(
                '["setuptools"]', '["setuptools>=69"]'
            ),
            "setup.cfg": cfg.replace("name = x", "name = y")
            + "\n[options.extras_require]\nfast =\n    orjson\n",
        },
    )
    assert dependencies(repo, "HEAD~1", patched) == [
        "pyproject.toml: [build-system].requires",
        "pyproject.toml: [tool.poetry.dependencies]",
        "setup.cfg: [options.extras_require].fast",
    ]
    # Re-indenting a requirement list changes no requirement.
    first = git(repo, "rev-parse", "HEAD~1")
    patched = commit(
        repo, {"setup.cfg": cfg.replace("    click", "  click"), "pyproject.toml": toml}
    )
    assert dependencies(repo, first, patched) == []


# -- entry points ------------------------------------------------------------------------------

SCRIPT = """import os
import sys

from tools import settings


def main():
    currency = os.environ.get("INVOICE_CURRENCY", "EUR")
    print(currency, settings.OUT, file=sys.stdout)


if __name__ == "__main__":
    main()
"""


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "s",
        {
            "tools/__init__.py": "",
            "tools/export.py": SCRIPT,
            "tools/settings.py": 'OUT = "out"\n',
            "lib/calc.py": "def add(a, b):\n    return a + b\n",
        },
    )


def test_a_new_env_read_in_an_entry_point_is_reported(scripts: Path) -> None:
    text = SCRIPT.replace(
        '"EUR")', 'os.environ["INVOICE_DEFAULT"])\n    debug = os.getenv("INVOICE_DEBUG")'
    )
    patched = commit(scripts, {"tools/export.py": text})
    assert entry_points(scripts, "HEAD~1", patched) == [
        "tools/export.py reads env INVOICE_DEBUG (new)",
        "tools/export.py reads env INVOICE_DEFAULT (new)",
    ]
    # The other way round the entry point reads fewer keys: no new input, nothing to review.
    assert entry_points(scripts, patched, "HEAD~1") == []


def test_a_read_in_a_module_the_entry_point_imports_is_reported(scripts: Path) -> None:
    settings = 'import os\n\nOUT = os.environ.get("INVOICE_OUT", "out")\n'
    patched = commit(scripts, {"tools/settings.py": settings})
    assert entry_points(scripts, "HEAD~1", patched) == [
        "tools/export.py reads env INVOICE_OUT (new)"
    ]


def test_entry_points_added_removed_and_console_scripts(scripts: Path) -> None:
    toml = (
        '[project]\nname = "t"\nversion = "1"\n\n[project.scripts]\nexport = "tools.export:main"\n'
    )
    new_script = 'import os\n\nif __name__ == "__main__":\n    print(os.environ["TOKEN"])\n'
    patched = commit(
        scripts, {"tools/export.py": None, "tools/sync.py": new_script, "pyproject.toml": toml}
    )
    assert entry_points(scripts, "HEAD~1", patched) == [
        "added entry point console script export (tools.export:main)",
        "added entry point tools/sync.py, reads env TOKEN",
        "removed entry point tools/export.py",
    ]
    patched = commit(scripts, {"pyproject.toml": toml.replace("export:main", "sync:main")})
    # The script now runs sync.py's module, which reads TOKEN.
    assert entry_points(scripts, "HEAD~1", patched) == [
        "console script export (tools.sync:main) reads env TOKEN (new)",
        "console script export now runs tools.sync:main (was tools.export:main)",
    ]


def test_entry_points_ignore_what_no_entry_point_reaches(scripts: Path) -> None:
    calc = 'import os\n\n\ndef add(a, b):\n    return a + b + int(os.environ["OFFSET"])\n'
    patched = commit(scripts, {"lib/calc.py": calc})
    assert entry_points(scripts, "HEAD~1", patched) == []


def test_the_export_writes_regular_files_only(scripts: Path) -> None:
    (scripts / "tools/evil.py").symlink_to("/etc/passwd")
    (scripts / "tools/loop.py").symlink_to("loop.py")
    patched = commit(scripts, {"tools/export.py": SCRIPT.replace("EUR", "USD")})
    assert entry_points(scripts, "HEAD~1", patched) == []
    assert scope(scripts, "HEAD~1", patched).changed == ["tools/export.py:main"]


def test_moved_and_new_declaration_files(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"requirements.txt": "click\n", "README.md": "x\n"})
    (repo / "requirements").mkdir()
    git(repo, "mv", "requirements.txt", "requirements/base.txt")
    sub = '[project]\nname = "sub"\nversion = "1"\ndependencies = ["rich"]\n'
    patched = commit(repo, {"services/api/pyproject.toml": sub})
    assert dependencies(repo, "HEAD~1", patched) == [
        "requirements/base.txt",
        "services/api/pyproject.toml: [project].dependencies",
    ]


def test_dependency_data_counts_unless_known_to_be_none(tmp_path: Path) -> None:
    """Deny by default (class D of attack report 1): a pyproject table not known to carry no
    dependency, and any file named like dependency, lock or environment data, count."""
    toml = PYPROJECT + '\n[tool.hatch.envs.default]\ndependencies = ["pytest"]\n'
    names = ["requirements.lock", "deploy/pins-lock.yaml", "constraints-ci.cfg", "hatch.toml"]
    repo = make_repo(tmp_path / "r", {"pyproject.toml": toml, **{n: "a\n" for n in names}})
    patched = commit(
        repo,
        {
            "pyproject.toml": toml.replace('dependencies = ["pytest"]', 'dependencies = ["evil"]')
            + '\n[tool.tox.env.ci]\ndeps = ["evil"]\n',
            **{n: "a\nevil\n" for n in names},
            "shop/requirements.py": "def f():\n    pass\n",  # Python source is Scope's
        },
    )
    assert dependencies(repo, "HEAD~1", patched) == sorted(
        [
            *names,
            "pyproject.toml: [tool.hatch.envs.default].dependencies",
            "pyproject.toml: [tool.tox.env.ci].deps",
        ]
    )
