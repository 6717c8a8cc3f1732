"""Behaviour beyond the asserts (#19), end to end through `charpin-remote verify` on the clean box:
a shop whose tests call the changed functions but assert nothing about the changed values.
The base's captured calls are replayed on both versions (plain, under another hash seed, a clock
frozen in 2100, the C locale); the judged run says which changed lines ran."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main
from charpin_runner.errors import EXIT_DRIFT, EXIT_VACUOUS

from tests.conftest import git, make_repo

pytestmark = pytest.mark.slow

RUNNER_PATH = str(Path(__file__).resolve().parents[3] / "runner")

PRICING = '''"""Prices."""
import datetime
import sys
import time

RATE = 0.9


def discount(amount):
    if amount > 100:
        return amount * RATE
    return amount


def loyalty(points):
    return points // 10


def label(amount):
    return f"{discount(amount):.2f} EUR"


def tags(names):
    return ",".join(sorted(set(names)))


def batches(items):
    for item in items:
        yield [item]


def expires(year):
    return datetime.date(year, 1, 1) > datetime.date.today()
'''

TESTS = """from pricing import batches, discount, label, tags


def test_invoice_line_names_the_customer():
    line = f"ACME {discount(150)}"
    assert line.startswith("ACME")


def test_label_has_currency():
    assert label(50).endswith("EUR")


def test_tags_is_a_string():
    assert isinstance(tags(["b", "a", "c"]), str)


def test_batches_iterate():
    assert list(batches([1, 2])) != []
"""


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", RUNNER_PATH)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "shop",
        {
            "pricing.py": PRICING,
            "tests/test_pricing.py": TESTS,
            "pyproject.toml": (
                '[project]\nname = "shop"\nversion = "0"\n\n'
                '[tool.pytest.ini_options]\ntestpaths = ["tests"]\npythonpath = ["."]\n'
            ),
        },
    )


def edited(shop: Path, old: str, new: str) -> bytes:
    """The agent's patch replacing old by new in pricing.py (the tree is left as it was)."""
    text = (shop / "pricing.py").read_text()
    assert old in text, old
    (shop / "pricing.py").write_text(text.replace(old, new, 1))
    diff = subprocess.run(
        ["git", "-C", str(shop), "diff", "--binary"], capture_output=True, check=True
    ).stdout
    git(shop, "checkout", "-q", "--", "pricing.py")
    return diff


def verify(shop: Path, patch: bytes) -> tuple[int, dict[str, Any], str]:
    (shop.parent / "agent.diff").write_bytes(patch)
    out = shop.parent / "verify"
    run_id = f"v{len(list(out.glob('*'))) if out.exists() else 0}"
    argv = ["verify", "--repo", str(shop), "--patch", str(shop.parent / "agent.diff")]
    code = main([*argv, "--out", str(out), "--run-id", run_id, "--timeout", "120"])
    report = json.loads((out / run_id / "verify.json").read_text())
    return code, report, run_id


def behaviour(report: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    [gate] = [g for g in report["gates"] if g["gate"] == "Behaviour"]
    return gate, [o for o in report["observations"] if o["gate"] == "Behaviour"]


def test_a_rate_change_no_test_asserts_is_rejected_with_both_values(shop: Path) -> None:
    code, report, _ = verify(shop, edited(shop, "return amount * RATE", "return amount * 0.85"))
    assert report["verdict"] == "REJECT" and code & EXIT_DRIFT
    gate, [found] = behaviour(report)
    assert gate["status"] == "FAIL"
    assert found["item"] == "pricing.py::discount#1"
    assert found["what"] == (
        "discount(150) returned 135.0 on base, 127.5 on patched "
        "(called from tests/test_pricing.py::test_invoice_line_names_the_customer)"
    )
    assert "reproduce: charpin-remote verify --replay pricing.py::discount#1" in found["detail"]
    # The tests alone pass: only the differential saw it.
    assert [g["status"] for g in report["gates"] if g["gate"] == "Tests"] == ["PASS"]
    [box] = report["evidence"]
    assert box["differs"] == 1 and box["same"] >= 1 and box["unreached"] == []


def test_a_module_constant_change_is_seen_through_the_functions_reading_it(shop: Path) -> None:
    _, report, _ = verify(shop, edited(shop, "RATE = 0.9", "RATE = 0.85"))
    assert report["verdict"] == "REJECT"
    _, found = behaviour(report)
    assert [o["item"] for o in found] == ["pricing.py::discount#1"]


def test_an_extract_helper_refactor_is_accepted(shop: Path) -> None:
    patch = edited(
        shop,
        "    if amount > 100:\n        return amount * RATE\n    return amount\n",
        "    return _reduced(amount) if amount > 100 else amount\n\n\n"
        "def _reduced(amount):\n    return amount * RATE\n",
    )
    code, report, _ = verify(shop, patch)
    assert report["verdict"] == "ACCEPT", report["gates"]
    assert code == 0
    gate, _ = behaviour(report)
    assert "captured call(s) answer the same on both versions" in gate["detail"]
    assert report["evidence"][0]["differs"] == 0


def test_a_change_nothing_calls_is_never_accepted_and_is_named(shop: Path) -> None:
    code, report, _ = verify(shop, edited(shop, "return points // 10", "return points // 20"))
    assert report["verdict"] == "INCOMPLETE"
    assert code == EXIT_VACUOUS  # the evidence cannot decide
    gate, [gap] = behaviour(report)
    assert gate["status"] == "INCOMPLETE"
    assert gap["item"] == "pricing.py:loyalty"
    assert "pricing.py:loyalty lines 16" in gap["what"]
    assert gate["action"] == "add a pin or a test that reaches pricing.py:loyalty"
    [box] = report["evidence"]
    assert box["not_compared"] == {"pricing.py::loyalty": "the base's tests never called it"}


def test_a_time_bomb_dated_next_year_goes_off_under_the_frozen_clock(shop: Path) -> None:
    bomb = (
        "    found = sorted(set(names))\n"
        "    if time.time() > 1798761600:  # 2027-01-01\n"
        "        found = found[1:]\n"
        '    return ",".join(found)\n'
    )
    _, report, _ = verify(shop, edited(shop, '    return ",".join(sorted(set(names)))\n', bomb))
    assert report["verdict"] == "REJECT"
    _, [found] = behaviour(report)
    assert found["item"] == "pricing.py::tags#1"
    assert found["what"].endswith(", under clock frozen at 2100-01-01")
    assert "returned 'a,b,c' on base, 'b,c' on patched" in found["what"]


def test_code_that_behaves_differently_under_the_replays_hash_seed_is_rejected(
    shop: Path,
) -> None:
    """Code that looks at the environment it runs in (PYTHONHASHSEED=0 is what a replay, and
    many CI runners, set) answers right only there: another seed shows it."""
    cheat = (
        "    if sys.flags.hash_randomization:\n"
        '        return ",".join(names)\n'
        '    return ",".join(sorted(set(names)))\n'
    )
    _, report, _ = verify(shop, edited(shop, '    return ",".join(sorted(set(names)))\n', cheat))
    assert report["verdict"] == "REJECT"
    _, [found] = behaviour(report)
    assert found["item"] == "pricing.py::tags#1"
    assert ", under hash seed " in found["what"]


def test_a_function_returning_what_cannot_be_compared_is_reported_not_compared(
    shop: Path,
) -> None:
    patch = edited(shop, "        yield [item]\n", "        yield [item, item]\n")
    _, report, _ = verify(shop, patch)
    [box] = report["evidence"]
    assert box["compared"] == 0
    [(call, why)] = [(k, v) for k, v in box["not_compared"].items() if "batches" in k]
    assert call == "pricing.py::batches#1"
    assert "cannot be compared" in why and "generator" in why
    gate, _ = behaviour(report)
    assert "not compared" in gate["detail"] or report["verdict"] != "ACCEPT"
