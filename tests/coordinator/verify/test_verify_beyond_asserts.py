"""Behaviour beyond the asserts (#19), end to end through `charpin-remote verify` on the clean box:
a shop whose tests call the changed functions but assert nothing about the changed values.
The base's captured calls are replayed on both versions (plain, under another hash seed, a clock
frozen in 2100, the C locale); the judged run says which changed lines ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
    """Code that recognises the environment it is judged in (PYTHONHASHSEED=0 is what a replay,
    and many CI runners, set) answers right only there: another seed shows it. Two forms: one
    the Harness awareness gate also names (sys.flags), and one it cannot see (a hash compared
    with its value under seed 0); the differential catches both."""
    seed_zero = subprocess.run(
        [sys.executable, "-c", "print(hash('charpin'))"],
        env={**os.environ, "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    honest = '    return ",".join(sorted(set(names)))\n'
    for test, condition in (
        ("flags", "sys.flags.hash_randomization"),
        ("hash", f"hash('charpin') != {seed_zero}"),
    ):
        cheat = f'    if {condition}:\n        return ",".join(names)\n' + honest
        _, report, _ = verify(shop, edited(shop, honest, cheat))
        assert report["verdict"] == "REJECT", test
        gate, [found] = behaviour(report)
        assert gate["status"] == "FAIL" and found["item"] == "pricing.py::tags#1", test
        assert ", under hash seed " in found["what"], test
    aware = [g["status"] for g in report["gates"] if g["gate"] == "Harness awareness"]
    assert aware == ["PASS"]  # the second form: only the differential saw it


def test_a_function_returning_what_cannot_be_compared_is_reported_not_compared(
    shop: Path,
) -> None:
    patch = edited(shop, "        yield [item]\n", "        yield [item, item]\n")
    _, report, _ = verify(shop, patch)
    [box] = report["evidence"]
    # What is compared are the tests' entry calls into the other functions of pricing.py.
    assert box["compared"] >= 1
    [(call, why)] = [(k, v) for k, v in box["not_compared"].items() if "batches" in k]
    assert call == "pricing.py::batches#1"
    assert "cannot be compared" in why and "generator" in why
    gate, _ = behaviour(report)
    assert "not compared" in gate["detail"] or report["verdict"] != "ACCEPT"


def test_replay_repeats_a_finding_here_and_prints_a_test_that_keeps_the_case(
    shop: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, report, run_id = verify(shop, edited(shop, "return amount * RATE", "return amount * 0.85"))
    assert report["verdict"] == "REJECT"
    capsys.readouterr()
    argv = ["verify", "--repo", str(shop), "--out", str(shop.parent / "verify")]
    code = main([*argv, "--replay", "pricing.py::discount#1"])
    out = capsys.readouterr().out
    assert code == EXIT_DRIFT  # the two versions still answer differently
    assert "discount(150)" in out and "returned 135.0" in out and "returned 127.5" in out
    assert f"verify folder {shop.parent / 'verify' / run_id}".split()[-1] in out
    test = out.split("keep the case as a test (the base's answer):", 1)[1]
    kept = "\n".join(line[4:] for line in test.splitlines())
    assert "assert discount(150) == 135.0" in kept
    # The test it prints is a real one: green on the base, red on the patched code.
    (shop / "tests" / "test_kept.py").write_text(kept)
    base = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_kept.py"],
        cwd=shop,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(shop)},
        check=False,
    )
    assert base.returncode == 0, base.stdout
    (shop / "pricing.py").write_text(PRICING.replace("return amount * RATE", "return amount * 0.85"))
    patched = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_kept.py"],
        cwd=shop,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(shop)},
        check=False,
    )
    assert patched.returncode == 1 and "127.5" in patched.stdout


def test_replay_of_an_unknown_call_is_one_line_naming_the_fix(
    shop: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    code = main(["verify", "--repo", str(shop), "--replay", "pricing.py::discount#9"])
    err = capsys.readouterr().err
    assert code == 64
    [line] = err.splitlines()
    assert "pricing.py::discount#9" in line and "--run-id" in line


TOOL = """import sys


def shout(word):
    return word.upper() + "!"


def main():
    print(shout(sys.argv[1] if len(sys.argv) > 1 else "hi"))


if __name__ == "__main__":
    main()
"""


def test_a_change_only_a_pin_reaches_counts_as_reached(tmp_path: Path) -> None:
    """The pins are evidence of change coverage too: their Python targets record the lines they
    run. A refactor only a pin reaches is accepted; without the pin it would be INCOMPLETE."""
    repo = make_repo(
        tmp_path / "tool",
        {
            "tool.py": TOOL,
            "tests/test_other.py": "def test_nothing():\n    assert True\n",
            "pyproject.toml": '[project]\nname = "tool"\nversion = "0"\n',
        },
    )
    recorded = subprocess.run(
        [sys.executable, "-m", "charpin_runner", "pins", "record", "--id", "shout", "--", "tool.py", "hello"],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": RUNNER_PATH},
        check=False,
    )
    assert recorded.returncode == 0, recorded.stderr
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "pins")
    honest = TOOL.replace('return word.upper() + "!"', 'return (word + "!").upper()')
    (repo / "tool.py").write_text(honest)
    diff = subprocess.run(["git", "-C", str(repo), "diff"], capture_output=True, check=True).stdout
    git(repo, "checkout", "-q", "--", "tool.py")
    code, report, _ = verify(repo, diff)
    assert report["verdict"] == "ACCEPT" and code == 0, report["gates"]
    gate, _ = behaviour(report)
    assert "every changed line ran" in gate["detail"] and "1 pin(s)" in gate["detail"]
    # The same change with the pin gone: nothing reaches it.
    git(repo, "rm", "-q", "pins.jsonl")
    git(repo, "commit", "-q", "-m", "no pins")
    _, report, _ = verify(repo, diff)
    assert report["verdict"] == "INCOMPLETE"
    assert behaviour(report)[1][0]["item"] == "tool.py:shout"
