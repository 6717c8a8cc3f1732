"""What the patched code is judged with (verify/judged.py), from two real commits: the pytest
configuration a patch adds anywhere, files it cannot place, and the options that pin every run
to the base's configuration file. No run: the judging itself."""

from __future__ import annotations

from pathlib import Path

from charpin_coordinator.verify import judged

from tests.conftest import git, make_repo
from tests.coordinator.verify.test_static import commit

BASE = {
    "pyproject.toml": '[tool.charpin]\npytest_args = ["-q"]\n',
    "shop/__init__.py": "",
    "shop/money.py": "from shop.self_test import rate\n\ndef gross(n):\n    return n * rate()\n",
    "shop/self_test.py": "def rate():\n    return 1\n\ndef test_rate():\n    pass\n",
    "tests/__init__.py": "",
    "tests/test_money.py": "from shop.money import gross\n\ndef test_g():\n    pass\n",
}


def judging(tmp_path: Path, edits: dict[str, str | None]) -> judged.Judging:
    repo = make_repo(tmp_path / "r", BASE)
    base = git(repo, "rev-parse", "HEAD")
    patched = commit(repo, edits)
    changed = tuple(sorted(edits))
    return judged.judging(repo, base, patched, changed)


def test_pytest_configuration_added_anywhere_is_protected_and_restored(tmp_path: Path) -> None:
    how = judging(
        tmp_path,
        {
            "pytest.toml": "[pytest]\n",
            "shop/pytest.ini": "[pytest]\n",
            "shop/.pytest.toml": "[pytest]\n",
            "setup.cfg": "[metadata]\nname = shop\n",
            "sub/pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-p x'\n",
        },
    )
    named = {h.split(" (", 1)[0].split(" [", 1)[0] for h in how.harness}
    assert named == {
        "pytest.toml", "shop/pytest.ini", "shop/.pytest.toml", "setup.cfg", "sub/pyproject.toml"
    }
    assert {"pytest.toml", "shop/pytest.ini", "setup.cfg", "sub/pyproject.toml"} <= set(how.restore)


def test_tox_ini_is_the_harness_only_by_its_pytest_section(tmp_path: Path) -> None:
    # The corpus's tab-tox-envlist: an envlist edit was a Protected paths false alarm.
    tox = judging(tmp_path / "envlist", {"tox.ini": "[tox]\nenvlist = py311\n"})
    assert tox.harness == []
    pytest_section = judging(tmp_path / "section", {"tox.ini": "[pytest]\naddopts = -p x\n"})
    assert pytest_section.harness == ["tox.ini [pytest] (pytest configuration)"]
    assert "tox.ini" in pytest_section.restore


def test_a_changed_test_module_production_imports_is_undecided(tmp_path: Path) -> None:
    how = judging(
        tmp_path,
        {"shop/self_test.py": "def rate():\n    return 2\n\ndef test_rate():\n    pass\n"},
    )
    assert [u.split(" (", 1)[0] for u in how.undecided] == ["shop/self_test.py"]
    assert "shop/self_test.py" not in how.restore  # judged as production, and INCOMPLETE


def test_a_binary_file_in_the_package_is_protected(tmp_path: Path) -> None:
    how = judging(tmp_path, {"shop/blob.bin": "x"})
    assert any(h.startswith("shop/blob.bin (compiled or native code") for h in how.harness)


def test_the_collection_of_the_base_run_checks_the_classification(tmp_path: Path) -> None:
    how = judging(tmp_path, {"tests/test_money.py": "def test_g():\n    assert 1\n"})
    assert how.undecided == []
    collected = ["tests/test_money.py::test_g", "shop/self_test.py::test_rate"]
    assert judged.collection_disagrees(how.side, ["tests/test_money.py"], collected) == []
    # The base collected nothing from the file taken as a test module: its change is unjudged.
    [wrong] = judged.collection_disagrees(how.side, ["tests/test_money.py"], collected[1:])
    assert wrong.startswith("tests/test_money.py (taken as a test module")
    # The base collected tests from a file judged as production: the patch would choose them.
    [wrong] = judged.collection_disagrees(
        how.side, ["shop/money.py"], [*collected, "shop/money.py::test_hidden"]
    )
    assert wrong.startswith("shop/money.py (the base run collected tests from it")


def test_every_run_reads_the_base_configuration_file(tmp_path: Path) -> None:
    assert judging(tmp_path, {"shop/money.py": "x = 1\n"}).config_file == "pyproject.toml"
    assert judged.config_args("pytest.ini", [], ["-q"]) == ["--config-file=pytest.ini"]
    assert judged.config_args("pyproject.toml", [], []) == ["--config-file=pyproject.toml"]
    assert judged.config_args("tox.ini", ["python", "-m", "pytest"], []) == ["--config-file=tox.ini"]
    # No file to read (no pyproject.toml), the base chooses its file itself, or its command is
    # no pytest: left as it is.
    assert judged.config_args("", [], []) == []
    assert judged.config_args("pytest.ini", [], ["-c", "ci/pytest.ini"]) == []
    assert judged.config_args("pytest.ini", [], ["--rootdir=."]) == []
    assert judged.config_args("pytest.ini", ["tox"], []) == []
