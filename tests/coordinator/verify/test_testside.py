"""The base's test side (verify/testside.py): what verify runs as the base has it, and what it
judges as production code. Pure: file lists and contents in, the test side out."""

from __future__ import annotations

from charpin_coordinator.verify import testside


def side(files: dict[str, str]) -> testside.TestSide:
    return testside.find(files, {k: v.encode() for k, v in files.items()})


def test_the_harness_and_the_test_roots_are_test_side() -> None:
    found = side(
        {
            "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["checks"]\n',
            "checks/test_a.py": "import shop\n",
            "checks/data/in.csv": "a,b\n",
            "conftest.py": "",
            "shop.py": "def f(): pass\n",
            "tests/test_elsewhere.py": "",
        }
    )
    assert found.roots == ("checks",)
    assert found.config_file == "pyproject.toml"
    assert {"checks/test_a.py", "checks/data/in.csv", "conftest.py"} <= found.files
    # A test file by name outside the configured roots is still a test file.
    assert found.covers("tests/test_elsewhere.py")
    assert not found.covers("shop.py")


def test_a_library_module_only_its_tests_import_is_production() -> None:
    """A library's modules are imported by its tests and nothing else: they are what a patch
    changes, and what verify judges (a false Protected paths here blocked every library)."""
    found = side(
        {
            "pricing.py": "RATE = 0.9\ndef discount(x):\n    return x * RATE\n",
            "tests/test_pricing.py": "from pricing import discount\n",
        }
    )
    assert found.test_only == ()
    assert not found.covers("pricing.py")


def test_test_machinery_only_the_tests_import_is_test_side() -> None:
    """A helper module outside the test roots that the tests import: by its name, or because it
    imports a test framework, it is part of the judge and runs as the base has it."""
    found = side(
        {
            "testutils.py": "def approx(a, b):\n    return abs(a - b) < 1e-9\n",
            "checks.py": "import pytest\ndef close(a, b):\n    assert a == pytest.approx(b)\n",
            "shop/__init__.py": "",
            "shop/prices.py": "def f(): return 1\n",
            "tests/test_shop.py": "import testutils, checks\nfrom shop import prices\n",
        }
    )
    assert found.test_only == ("checks.py", "testutils.py")
    assert found.covers("testutils.py") and found.covers("checks.py")
    assert not found.covers("shop/prices.py")


def test_a_program_the_tests_import_stays_production() -> None:
    found = side(
        {
            "test_tool.py": "",
            "testing_cli.py": "import sys\nif __name__ == '__main__':\n    print(1)\n",
            "tests/test_cli.py": "import testing_cli\n",
        }
    )
    assert found.test_only == ()
