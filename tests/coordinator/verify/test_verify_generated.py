"""Generated inputs (#19 item 3), end to end through `charpin-remote verify` on the clean box: the
base's tests call the changed functions only with inputs on which base and patched agree; the
inputs generated from the annotations, the captured values and the code's constants find where
they part, shrunk, with the seed, and `verify --replay gen:...` runs that input again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main
from charpin_runner.errors import EXIT_DRIFT

from tests.conftest import git, make_repo

pytestmark = pytest.mark.slow

RUNNER_PATH = str(Path(__file__).resolve().parents[3] / "runner")

PRICING = '''"""Prices."""


def discount(amount: int) -> float:
    """Big orders get a tenth off."""
    if amount > 1000:
        return amount * 0.9
    return float(amount)


def shipping(weight):
    if weight > 20:
        return 15
    return 5
'''

TESTS = """from pricing import discount, shipping


def test_an_invoice_line_prints():
    assert f"ACME {discount(150)}".startswith("ACME")


def test_a_parcel_has_shipping():
    assert shipping(3) > 0
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


def edited(shop: Path, *changes: tuple[str, str]) -> bytes:
    """The agent's patch making each change in pricing.py (the tree is left as it was)."""
    text = (shop / "pricing.py").read_text()
    for old, new in changes:
        assert old in text, old
        text = text.replace(old, new, 1)
    (shop / "pricing.py").write_text(text)
    diff = subprocess.run(
        ["git", "-C", str(shop), "diff", "--binary"], capture_output=True, check=True
    ).stdout
    git(shop, "checkout", "-q", "--", "pricing.py")
    return diff


def verify(shop: Path, patch: bytes, *extra: str) -> tuple[int, dict[str, Any], str]:
    (shop.parent / "agent.diff").write_bytes(patch)
    out = shop.parent / "verify"
    run_id = f"v{len(list(out.glob('*'))) if out.exists() else 0}"
    argv = ["verify", "--repo", str(shop), "--patch", str(shop.parent / "agent.diff")]
    code = main([*argv, "--out", str(out), "--run-id", run_id, "--timeout", "120", *extra])
    report = json.loads((out / run_id / "verify.json").read_text())
    return code, report, run_id


def behaviour(report: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    [gate] = [g for g in report["gates"] if g["gate"] == "Behaviour"]
    return gate, [o for o in report["observations"] if o["gate"] == "Behaviour"]


BIG_ORDERS = ("return amount * 0.9", "return amount * 0.8")


def test_a_branch_the_tests_never_take_is_found_by_a_generated_input_shrunk(shop: Path) -> None:
    code, report, run_id = verify(shop, edited(shop, BIG_ORDERS))
    assert report["verdict"] == "REJECT" and code & EXIT_DRIFT
    gate, [found] = behaviour(report)
    assert (
        gate["status"] == "FAIL" and "1 generated input(s) answered differently" in gate["detail"]
    )
    assert found["item"] == "gen:pricing.py::discount#1"
    # Shrunk to the boundary: the smallest amount the changed branch takes.
    assert found["what"] == (
        "discount(1001) returned 900.9 on base, 800.8000000000001 on patched (a generated input)"
    )
    [box] = report["evidence"]
    seed = box["seed"]
    assert seed > 0
    assert any(f"seed {seed};" in line and "generated input" in line for line in found["detail"])
    assert 'input: {"args": [1001], "kwargs": {}}' in found["detail"]
    assert "reproduce: charpin-remote verify --replay gen:pricing.py::discount#1" in found["detail"]
    # The captured call discount(150) answers the same on both: only generation saw it.
    assert box["differs"] == 0 and box["same"] >= 1
    assert box["generated_differs"] == 1 and box["generated"] >= 1
    # The receipt keeps the seed and the input.
    receipt = json.loads(
        (shop.parent / "verify" / run_id / "patched/clean/receipt.json").read_text()
    )
    assert receipt["differential"]["seed"] == seed
    [made] = [g for g in receipt["differential"]["generated"] if g["verdict"] == "differs"]
    assert made["input"] == '{"args": [1001], "kwargs": {}}'


def test_an_untyped_function_is_varied_from_its_captured_values_and_constants(shop: Path) -> None:
    _, report, _ = verify(shop, edited(shop, ("if weight > 20:", "if weight >= 20:")))
    assert report["verdict"] == "REJECT"
    _, [found] = behaviour(report)
    assert found["item"] == "gen:pricing.py::shipping#1"
    assert found["what"] == "shipping(20) returned 5 on base, 15 on patched (a generated input)"


def test_an_honest_refactor_is_accepted_with_the_generated_inputs_counted(
    shop: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    patch = edited(
        shop,
        (
            "def discount(amount: int) -> float:\n"
            '    """Big orders get a tenth off."""\n'
            "    if amount > 1000:\n"
            "        return amount * 0.9\n"
            "    return float(amount)\n",
            "def _tenth_off(value: int) -> float:\n"
            "    return value * 0.9\n\n\n"
            "def discount(amount: int) -> float:\n"
            '    """Big orders get a tenth off."""\n'
            "    # 1000 and less pay full price\n"
            "    return _tenth_off(amount) if amount > 1000 else float(amount)\n",
        ),
        ("def shipping(weight):", "def shipping(weight: float) -> int:"),
    )
    code, report, _ = verify(shop, patch, "--max-changed", "2")
    # The tests never take the big-order branch: the generated inputs ran it, alike on both
    # versions, and that is the evidence that reaches the extracted helper.
    assert report["verdict"] == "ACCEPT", report["gates"]
    assert code == 0
    gate, _ = behaviour(report)
    assert "generated input(s) answer the same for 2 function(s)" in gate["detail"]
    assert "every changed line ran" in gate["detail"]
    [box] = report["evidence"]
    assert box["generated"] >= 20 and box["generated_differs"] == 0
    assert box["generated_not_compared"] == {}
    # The text report says what was compared, per box, with the seed.
    text = capsys.readouterr().out
    assert "behaviour beyond the asserts" in text
    [line] = [x for x in text.splitlines() if x.strip().startswith("clean:") and "seed" in x]
    assert f"{box['generated']} generated input(s) (0 function(s) differ)" in line
    assert f"seed {box['seed']}" in line


def test_replay_runs_the_generated_input_again_and_prints_a_test_keeping_it(
    shop: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, report, run_id = verify(shop, edited(shop, BIG_ORDERS))
    assert report["verdict"] == "REJECT"
    seed = report["evidence"][0]["seed"]
    capsys.readouterr()
    argv = ["verify", "--repo", str(shop), "--out", str(shop.parent / "verify")]
    code = main([*argv, "--replay", "gen:pricing.py::discount#1"])
    out = capsys.readouterr().out
    assert code == EXIT_DRIFT  # the two versions still answer differently
    assert "discount(1001)" in out and "returned 900.9" in out and "800.8000000000001" in out
    assert '{"args": [1001], "kwargs": {}} (a generated input)' in out
    assert f"hash seed    {seed} · verify folder" in out and run_id in out
    kept = "\n".join(line[4:] for line in out.split("(the base's answer):", 1)[1].splitlines())
    assert "assert discount(1001) == 900.9" in kept
    (shop / "tests" / "test_kept.py").write_text(kept)
    env = {**os.environ, "PYTHONPATH": str(shop)}
    pytest_argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    base = subprocess.run(
        [*pytest_argv, "tests/test_kept.py"],
        cwd=shop,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert base.returncode == 0, base.stdout


def test_the_budget_knobs_turn_generation_and_the_whole_differential_off(
    shop: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same hidden change with the generated inputs off: the replayed call agrees and no
    test reaches the changed line, so the evidence cannot decide; with no differential at all
    the pins alone judge (ACCEPT: weaker, and said so)."""
    patch = edited(shop, BIG_ORDERS)
    _, report, _ = verify(shop, patch, "--generate", "0")
    assert report["verdict"] == "INCOMPLETE"
    [box] = report["evidence"]
    assert box["generated"] == 0 and box["same"] >= 1
    assert box["unreached"] == ["pricing.py:discount lines 7"]
    capsys.readouterr()
    _, report, _ = verify(shop, patch, "--no-differential")
    assert report["verdict"] == "ACCEPT" and report["evidence"] == []
    assert "--no-differential: no change coverage" in capsys.readouterr().err


def test_a_bad_budget_is_one_line_naming_the_fix(
    shop: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for flag, value in (("--generate", "-1"), ("--generate-seconds", "0")):
        code = main(["verify", "--repo", str(shop), "--patched", "HEAD", flag, value])
        [line] = capsys.readouterr().err.splitlines()
        assert code == 64 and flag in line
        assert "e.g." in line or "0 turns them off" in line


def configured(shop: Path, table: str) -> None:
    """The base's pyproject.toml with a [tool.charpin.verify] table, committed."""
    pyproject = shop / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + f"\n[tool.charpin.verify]\n{table}\n")
    git(shop, "commit", "-q", "-am", "verify budget")


def test_the_bases_configuration_sets_the_budget_and_the_command_line_wins(shop: Path) -> None:
    configured(shop, "generate = 0\ngenerate_seconds = 1.5")
    patch = edited(shop, BIG_ORDERS)
    _, report, _ = verify(shop, patch)
    assert report["verdict"] == "INCOMPLETE"
    assert report["evidence"][0]["generated"] == 0
    _, report, _ = verify(shop, patch, "--generate", "50")
    assert report["verdict"] == "REJECT"
    assert report["evidence"][0]["generated_differs"] == 1


def test_a_bad_budget_in_the_configuration_is_one_line_naming_the_key(
    shop: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configured(shop, "generate_seconds = 0")
    (shop.parent / "agent.diff").write_bytes(edited(shop, BIG_ORDERS))
    capsys.readouterr()
    code = main(["verify", "--repo", str(shop), "--patch", str(shop.parent / "agent.diff")])
    [line] = capsys.readouterr().err.splitlines()
    assert code == 64
    assert "generate_seconds must be more than 0" in line and "tool.charpin.verify" in line
