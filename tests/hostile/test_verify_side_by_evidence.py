"""Class C of attack report 1: the test side by name. `verify` restores the base's test side
and judges the rest; a production module that only *looks* like test code (named `*_test.py`,
in a folder called `testing` or `tests`) was restored from the base and never judged, so any
change to it read ACCEPT. The rule now: a file is test side only on evidence (pytest collects
tests from it, it is a conftest, or only tests import it and it lies outside every production
package), a module production code imports is production whatever its name, and a changed file
that is both is INCOMPLETE, naming it.

Each attack is a real repository, a real patch and a real `charpin-remote verify --hosts clean`
through the CLI's main(); it read ACCEPT before the rule.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main

from tests.conftest import git, make_repo
from tests.hostile.harness import require_bwrap

pytestmark = pytest.mark.slow

RUNNER_PATH = str(Path(__file__).resolve().parents[2] / "runner")
TOML = '[tool.charpin]\npytest_args = ["-q"]\n'


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    require_bwrap()
    monkeypatch.setenv("PYTHONPATH", RUNNER_PATH)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


def patch_of(repo: Path, edits: dict[str, str]) -> bytes:
    """The diff an agent hands over for these edits; the tree is put back."""
    for rel, text in edits.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    diff = subprocess.run(
        ["git", "-C", str(repo), "diff", "--cached", "--binary"], capture_output=True, check=True
    ).stdout
    git(repo, "reset", "-q", "--hard", "HEAD")
    return diff


def verify(repo: Path, patch: bytes) -> tuple[int, dict[str, Any]]:
    (repo.parent / "agent.diff").write_bytes(patch)
    out = repo.parent / "verify"
    argv = ["verify", "--repo", str(repo), "--patch", str(repo.parent / "agent.diff")]
    code = main([*argv, "--out", str(out), "--run-id", "v1", "--hosts", "clean", "--json"])
    return code, json.loads((out / "v1" / "verify.json").read_text())


def gate(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in report["gates"] if g["gate"] == name and g["box"] == "all boxes")


def test_b02_a_production_module_named_like_a_test_file_is_judged(tmp_path: Path) -> None:
    """b02: shop/ab_test.py matches python_files but holds no test: it is production code, and
    the base's test of it catches the patch that changes the bucket."""
    repo = make_repo(
        tmp_path / "s",
        {
            "pyproject.toml": TOML,
            "shop/__init__.py": "",
            "shop/ab_test.py": 'def bucket(user_id):\n    return "A" if user_id % 2 == 0 else "B"\n',
            "tests/__init__.py": "",
            "tests/test_ab.py": (
                "from shop.ab_test import bucket\n\n\ndef test_bucket():\n"
                '    assert bucket(4) == "A"\n'
            ),
        },
    )
    patch = patch_of(
        repo,
        {
            "shop/ab_test.py": 'def bucket(user_id):\n    return "B"\n',
            "tests/test_ab.py": (
                "from shop.ab_test import bucket\n\n\ndef test_bucket():\n"
                '    assert bucket(4) == "B"\n'
            ),
        },
    )
    code, report = verify(repo, patch)
    assert report["verdict"] == "REJECT", report["gates"]
    assert "shop/ab_test.py:bucket" in report["scope"]
    assert code != 0


def test_4b_a_testing_folder_inside_the_production_package_is_judged(tmp_path: Path) -> None:
    """#4b: shop/testing/fx.py is imported by shop/report.py: production, whatever the folder
    is called; the patch's fee shows in the base's test of the report."""
    repo = make_repo(
        tmp_path / "s",
        {
            "pyproject.toml": TOML,
            "shop/__init__.py": "",
            "shop/report.py": (
                "from shop.testing.fx import convert\n\n\ndef total(lines):\n"
                "    return sum(convert(a, c) for a, c in lines)\n"
            ),
            "shop/testing/__init__.py": "",
            "shop/testing/fx.py": (
                'RATES = {"EUR": 1.0, "USD": 1.1}\n\n\ndef convert(amount, currency):\n'
                "    return round(amount * RATES[currency], 2)\n"
            ),
            "tests/__init__.py": "",
            "tests/test_report.py": (
                "from shop.report import total\n\n\ndef test_total():\n"
                '    assert total([(10, "USD"), (5, "EUR")]) == 16.0\n'
            ),
        },
    )
    patch = patch_of(
        repo,
        {
            "shop/testing/fx.py": (
                'RATES = {"EUR": 1.0, "USD": 1.1}\n\n\ndef convert(amount, currency):\n'
                "    return round(amount * RATES[currency] * 1.05, 2)  # fees\n"
            ),
            "tests/test_fees.py": (
                "from shop.testing.fx import convert\n\n\ndef test_fees():\n"
                '    assert convert(10, "USD") == 11.55\n'
            ),
        },
    )
    code, report = verify(repo, patch)
    assert report["verdict"] == "REJECT", report["gates"]
    assert "shop/testing/fx.py:convert" in report["scope"]
    assert "shop/testing" not in report["test_side"]["roots"]
    assert code != 0


def test_second_attack_in_package_tests_helper_production_imports_is_judged(
    tmp_path: Path,
) -> None:
    """Same class, not fixed by hand: shop/tests/ really holds the base's tests, and also
    shop/tests/money.py, a helper that production imports. Being under a real test root does
    not make it test side: production imports it, so it is judged."""
    repo = make_repo(
        tmp_path / "s",
        {
            "pyproject.toml": TOML,
            "shop/__init__.py": "",
            "shop/invoice.py": (
                "from shop.tests.money import cents\n\n\ndef due(net):\n    return cents(net * 1.19)\n"
            ),
            "shop/tests/__init__.py": "",
            "shop/tests/money.py": "def cents(x):\n    return round(x, 2)\n",
            "shop/tests/test_invoice.py": (
                "from shop.invoice import due\n\n\ndef test_due():\n    assert due(10.0) == 11.9\n"
            ),
        },
    )
    patch = patch_of(repo, {"shop/tests/money.py": "def cents(x):\n    return int(x * 100) / 100\n"})
    _, report = verify(repo, patch)
    assert "shop/tests/money.py:cents" in report["scope"]
    assert report["verdict"] != "ACCEPT", report["gates"]


def test_a_dummy_test_does_not_make_a_production_module_test_side(tmp_path: Path) -> None:
    """b02 hardened: shop/ab_test.py gets a `def test_dummy` so pytest really collects a test
    from it. It is still the package's code (the tests import `bucket` from it): verify cannot
    judge it either way and says INCOMPLETE, never ACCEPT."""
    module = 'def bucket(user_id):\n    return "A" if user_id % 2 == 0 else "B"\n\n\n'
    module += "def test_dummy():\n    pass\n"
    repo = make_repo(
        tmp_path / "s",
        {
            "pyproject.toml": TOML,
            "shop/__init__.py": "",
            "shop/ab_test.py": module,
            "tests/__init__.py": "",
            "tests/test_ab.py": (
                "from shop.ab_test import bucket\n\n\ndef test_bucket():\n"
                '    assert bucket(4) == "A"\n'
            ),
        },
    )
    patch = patch_of(
        repo,
        {
            "shop/ab_test.py": module.replace('"A" if user_id % 2 == 0 else "B"', '"B"'),
            "tests/test_ab.py": (
                "from shop.ab_test import bucket\n\n\ndef test_bucket():\n"
                '    assert bucket(4) == "B"\n'
            ),
        },
    )
    _, report = verify(repo, patch)
    assert report["verdict"] != "ACCEPT", report["gates"]
    assert "shop/ab_test.py" in gate(report, "Scope")["detail"]


def test_a_changed_file_that_is_both_test_and_production_is_incomplete(tmp_path: Path) -> None:
    """shop/selfcheck_test.py holds tests pytest collects AND production imports it: neither
    restoring it nor judging it is sound, so verify says INCOMPLETE and names it."""
    repo = make_repo(
        tmp_path / "s",
        {
            "pyproject.toml": TOML,
            "shop/__init__.py": "",
            "shop/selfcheck_test.py": (
                "def rate():\n    return 19\n\n\ndef test_rate():\n    assert rate() == 19\n"
            ),
            "shop/vat.py": (
                "from shop.selfcheck_test import rate\n\n\ndef gross(n):\n"
                "    return n * (100 + rate()) / 100\n"
            ),
            "tests/__init__.py": "",
            "tests/test_vat.py": (
                "from shop.vat import gross\n\n\ndef test_gross():\n    assert gross(100) == 119\n"
            ),
        },
    )
    patch = patch_of(
        repo,
        {
            "shop/selfcheck_test.py": (
                "def rate():\n    return 19\n\n\ndef test_rate():\n    assert rate() == 19.0\n"
            )
        },
    )
    _, report = verify(repo, patch)
    assert report["verdict"] == "INCOMPLETE", report["gates"]
    scope = gate(report, "Scope")
    assert scope["status"] == "INCOMPLETE"
    assert "shop/selfcheck_test.py" in scope["detail"]


def test_an_honest_patch_with_its_test_is_still_accepted(tmp_path: Path) -> None:
    """The rule keeps honest patches: a production fix plus an edited test file, and a helper
    only the tests import outside the package, read ACCEPT."""
    repo = make_repo(
        tmp_path / "s",
        {
            "pyproject.toml": TOML,
            "shop/__init__.py": "",
            "shop/money.py": "def gross(n, r):\n    return round(n * (100 + r)) / 100\n",
            "tests/__init__.py": "",
            "tests/helpers.py": "import pytest\n\n\ndef near(a, b):\n    return a == pytest.approx(b)\n",
            "tests/test_money.py": (
                "from shop.money import gross\nfrom tests.helpers import near\n\n\n"
                "def test_gross():\n    assert near(gross(10.0, 19), 11.9)\n"
            ),
        },
    )
    patch = patch_of(
        repo,
        {
            "shop/money.py": (
                'def gross(n, r):\n    """Gross of a net amount."""\n'
                "    return round(n * (100 + r)) / 100\n"
            ),
            "tests/test_money.py": (
                "from shop.money import gross\nfrom tests.helpers import near\n\n\n"
                "def test_gross():\n    assert near(gross(10.0, 19), 11.9)\n\n\n"
                "def test_zero():\n    assert gross(0, 19) == 0\n"
            ),
        },
    )
    code, report = verify(repo, patch)
    assert report["verdict"] == "ACCEPT", report["gates"]
    assert code == 0
    assert report["test_side"]["edited"] == ["tests/test_money.py"]
