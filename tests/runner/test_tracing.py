"""`charpin receipt --cover/--capture` (#19): the probe traces the changed files while the tests
run (lines that ran) and captures the arguments of calls into the changed functions, within a
budget; what it cannot copy is counted; when another tracer takes over it says so. Real
subprocess runs of the real plugin in real repositories."""

from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_repo
from tests.runner.test_receipt_cmd import charpin

PRICING = """RATE = 0.9


def discount(amount):
    if amount > 100:
        return amount * RATE
    return amount


def total(items):
    return sum(items)


def never(x):
    return x
"""

TESTS = """import threading

from pricing import discount, total


def test_discount():
    assert discount(150) > 0


def test_many():
    for n in range(30):
        discount(n)


def test_total_of_a_generator():
    assert total(x for x in [1, 2]) == 3


def test_total_with_a_lock():
    try:
        total(threading.Lock())
    except TypeError:
        pass
"""


def receipt(repo: Path, *args: str) -> dict[str, Any]:
    out = repo.parent / "receipt.json"
    done = charpin(repo, "-o", str(out), "--sandbox", "off", *args)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(out.read_text())
    return data


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "shop",
        {
            "pricing.py": PRICING,
            "tests/test_pricing.py": TESTS,
            "pyproject.toml": '[tool.pytest.ini_options]\npythonpath = ["."]\n',
        },
    )


def test_the_lines_that_ran_and_the_calls_into_a_changed_function(shop: Path) -> None:
    found = receipt(shop, "--cover", "pricing.py", "--capture", "pricing.py::discount")
    traced = found["tracing"]
    assert traced["unavailable"] == ""
    lines = set(traced["lines"]["pricing.py"])
    assert {1, 4, 5, 6, 7, 10, 11, 14} <= lines  # module level (the defs) and both branches
    assert 15 not in lines  # never() is never called
    calls = traced["calls"]
    first = calls[0]
    assert first["id"] == "pricing.py::discount#1"
    assert first["test"] == "tests/test_pricing.py::test_discount"
    assert pickle.loads(base64.b64decode(first["args"])) == ([150], {})
    # The budget: 20 calls a function are kept, the rest counted.
    assert len(calls) == 20
    assert traced["dropped"] == {"pricing.py::discount": {"budget": 11}}


def test_arguments_that_cannot_be_copied_are_counted_never_dropped_silently(shop: Path) -> None:
    found = receipt(shop, "--capture", "pricing.py::total")
    traced = found["tracing"]
    assert traced["calls"] == []
    assert traced["dropped"] == {"pricing.py::total": {"uncopyable": 2}}


def test_module_lines_run_while_a_conftest_imports_the_code_count(shop: Path) -> None:
    """The initial conftests load before any session starts: tracing starts before them."""
    (shop / "tests" / "conftest.py").write_text("import pricing  # noqa: F401\n")
    _commit(shop)
    found = receipt(shop, "--cover", "pricing.py")
    assert {1, 4, 10, 14} <= set(found["tracing"]["lines"]["pricing.py"])


def test_a_tracer_that_takes_over_is_said_never_read_as_unreached(shop: Path) -> None:
    (shop / "tests" / "conftest.py").write_text(
        "import sys\n\n\ndef pytest_sessionstart(session):\n    sys.settrace(lambda *a: None)\n"
    )
    _commit(shop)
    found = receipt(shop, "--cover", "pricing.py")
    assert "replaced charpin's" in found["tracing"]["unavailable"]


def test_without_cover_or_capture_the_receipt_has_no_tracing(shop: Path) -> None:
    assert receipt(shop)["tracing"] is None


def _commit(repo: Path) -> None:
    from tests.conftest import git

    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "more")
