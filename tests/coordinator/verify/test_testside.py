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
            "tests/test_elsewhere.py": "def test_x():\n    pass\n",
            "shop_test.py": "def helper():\n    pass\n",
        }
    )
    assert found.roots == ("checks",)
    assert found.config_file == "pyproject.toml"
    assert {"checks/test_a.py", "checks/data/in.csv", "conftest.py"} <= found.files
    # A test module outside the configured roots is still a test module: it defines a test.
    assert found.covers("tests/test_elsewhere.py")
    # A name alone is no evidence: shop_test.py gives pytest nothing to collect.
    assert not found.covers("shop_test.py")
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


def test_a_production_module_named_like_a_test_is_production() -> None:
    """b02: shop/ab_test.py matches `*_test.py`, holds no test, and lives in the production
    package: production, though only a test imports it."""
    found = side(
        {
            "shop/__init__.py": "",
            "shop/ab_test.py": "def bucket(u):\n    return 'A'\n",
            "tests/__init__.py": "",
            "tests/test_ab.py": "from shop.ab_test import bucket\n\ndef test_b():\n    pass\n",
        }
    )
    assert not found.covers("shop/ab_test.py")
    assert found.covers("tests/test_ab.py") and found.covers("tests/__init__.py")
    assert found.modules == frozenset({"tests/test_ab.py"})


def test_a_folder_is_a_test_root_on_evidence_and_production_imports_are_production() -> None:
    """#4b: shop/testing/ holds no test module, so it is no test root; and shop/tests/money.py
    sits under a real test root, but production imports it."""
    found = side(
        {
            "shop/__init__.py": "",
            "shop/report.py": "from shop.testing.fx import convert\nfrom shop.tests.money import c\n",
            "shop/testing/__init__.py": "",
            "shop/testing/fx.py": "def convert(a, c):\n    return a\n",
            "shop/tests/__init__.py": "",
            "shop/tests/money.py": "def c(x):\n    return x\n",
            "shop/tests/helpers.py": "def h():\n    pass\n",
            "shop/tests/data.json": "{}\n",
            "shop/tests/test_report.py": "from shop.tests.helpers import h\ndef test_r():\n    h()\n",
        }
    )
    assert found.roots == ("shop/tests",)
    assert not found.covers("shop/testing/fx.py")
    assert not found.covers("shop/tests/money.py")
    # Inside the production package, a helper only the tests import is the package's code.
    assert not found.covers("shop/tests/helpers.py")
    assert found.covers("shop/tests/test_report.py") and found.covers("shop/tests/__init__.py")
    assert found.covers("shop/tests/data.json")


def test_a_test_module_production_imports_is_both() -> None:
    found = side(
        {
            "shop/__init__.py": "",
            "shop/self_test.py": "def rate():\n    return 1\n\ndef test_rate():\n    pass\n",
            "shop/vat.py": "from shop.self_test import rate\n",
        }
    )
    assert "shop/self_test.py" in found.both
    assert not found.covers("shop/self_test.py")


def test_unittest_classes_and_configured_names_are_tests() -> None:
    found = side(
        {
            "pytest.ini": "[pytest]\npython_files = check_*.py\npython_functions = check\n",
            "check_a.py": "import unittest\nclass A(unittest.TestCase):\n    pass\n",
            "check_b.py": "def check_b():\n    pass\n",
            "check_c.py": "def test_c():\n    pass\n",
        }
    )
    assert found.config_file == "pytest.ini"
    assert found.modules == frozenset({"check_a.py", "check_b.py"})


def test_pytest_toml_wins_as_pytest_9_reads_it_first() -> None:
    found = side(
        {
            "pytest.toml": '[pytest]\ntestpaths = ["checks"]\n',
            "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
        }
    )
    assert (found.config_file, found.roots) == ("pytest.toml", ("checks",))


def test_a_named_folder_outside_every_package_keeps_its_test_data() -> None:
    """A top-level testing/ of expected data holds no test module; it is still test data (a
    patch must not rewrite what the tests compare against), and what production imports from
    it is production."""
    found = side(
        {
            "shop/__init__.py": "",
            "shop/report.py": "from testing.fx import convert\n",
            "testing/__init__.py": "",
            "testing/fx.py": "def convert(a):\n    return a\n",
            "testing/expected.json": "{}\n",
            "tests/test_report.py": "def test_r():\n    pass\n",
        }
    )
    assert found.covers("testing/expected.json")
    assert not found.covers("testing/fx.py")


def test_a_test_module_in_the_package_that_other_code_imports_is_both() -> None:
    """shop/ab_test.py defines a dummy test so it looks collected, and the tests import the
    production function it holds: it is the package's code as much as a test."""
    found = side(
        {
            "shop/__init__.py": "",
            "shop/money.py": "def f():\n    return 1\n",
            "shop/ab_test.py": "def bucket(u):\n    return 'A'\n\ndef test_dummy():\n    pass\n",
            "tests/test_ab.py": "from shop.ab_test import bucket\n\ndef test_b():\n    pass\n",
        }
    )
    assert "shop/ab_test.py" in found.both
    assert not found.covers("shop/ab_test.py")
