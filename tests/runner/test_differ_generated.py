"""Generated inputs on the box (#19 item 3), through `charpin_runner.differ.replay.run` with real
workers in the real sandbox: a checkout holding the patched module, the job holding the base's,
as verify sends them. What is found is shrunk and confirmed; what the base cannot answer the same
way twice, what raises alike on both and what runs past its limit is never a finding. The
strategies (annotations, seen values, constants) are checked on their own, without workers."""

from __future__ import annotations

import base64
import itertools
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from charpin_runner import sandbox as sandbox_mod
from charpin_runner.differ import replay
from charpin_runner.differ.examples import Plan
from charpin_runner.differ.strategies import Constants, key, shrink_input
from charpin_runner.receipt import Differential, Replayed

from tests.py39 import pythons

BASE = '''"""Prices."""


def discount(amount: int) -> float:
    if amount > 1000:
        return amount * 0.9
    return float(amount)
'''


def differential(
    tmp_path: Path,
    base: str,
    patched: str,
    functions: list[str],
    python: str = sys.executable,
    **budget: Any,
) -> Differential:
    """The module m.py on both versions, generated inputs for functions, with a fixed seed."""
    repo = tmp_path / "checkout"
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "m.py").write_text(patched)
    job = {
        "calls": [],
        "not_compared": {},
        "base_files": {"m.py": base64.b64encode(base.encode()).decode()},
        "generate": {
            "functions": [f"m.py::{name}" for name in functions],
            "examples": 60,
            "seconds": 10.0,
            "total_seconds": 30.0,
            "cover": ["m.py"],
            **budget,
        },
    }
    guard = sandbox_mod.begin(sandbox_mod.Plan(mode="auto", writable=(str(repo),)))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return replay.run(repo, job, guard, python, env, seed=4242)


def generated(done: Differential, name: str) -> Replayed:
    [found] = [g for g in done.generated if g.function == f"m.py::{name}"]
    return found


@pytest.mark.parametrize("python", pythons())
def test_a_branch_no_call_takes_is_found_shrunk_with_its_input_and_seed(
    tmp_path: Path, python: str
) -> None:
    """On this Python and on the runner's 3.9 (the workers run on the box's interpreter)."""
    patched = BASE.replace("amount * 0.9", "amount * 0.8")
    done = differential(tmp_path, BASE, patched, ["discount"], python)
    found = generated(done, "discount")
    assert found.verdict == "differs", found
    assert found.id == "gen:m.py::discount#1"
    # The smallest amount past the constant 1000 the code compares with.
    assert found.input == '{"args": [1001], "kwargs": {}}'
    assert found.call == "discount(1001)"
    assert found.base == "returned 900.9" and found.patched == "returned 800.8000000000001"
    assert done.seed == 4242 and "seed 4242" in found.why


def test_the_same_seed_tries_the_same_inputs(tmp_path: Path) -> None:
    patched = BASE.replace("    return float(amount)", "    return float(amount) + (amount < -7)")
    one = generated(differential(tmp_path / "a", BASE, patched, ["discount"]), "discount")
    two = generated(differential(tmp_path / "b", BASE, patched, ["discount"]), "discount")
    assert one.verdict == "differs", one
    # Which input found it first, and what it shrank from, are the seed's.
    assert "generated input" in one.why
    assert (one.why, one.input, one.examples) == (two.why, two.input, two.examples)


def test_an_honest_refactor_answers_the_same_and_reaches_its_lines(tmp_path: Path) -> None:
    refactor = BASE.replace(
        "    if amount > 1000:\n        return amount * 0.9\n    return float(amount)\n",
        "    # a tenth off big orders\n"
        "    return amount * 0.9 if amount > 1000 else float(amount)\n",
    )
    done = differential(tmp_path, BASE, refactor, ["discount"])
    found = generated(done, "discount")
    assert found.verdict == "same", found
    assert found.examples >= 20 and "answered the same (seed 4242)" in found.why
    # The patched version's changed line ran on inputs both versions answered alike.
    assert 6 in done.reached["m.py"]


def test_a_base_that_disagrees_with_itself_is_never_a_finding(tmp_path: Path) -> None:
    base = (
        "import os\n\n\ndef token(prefix: str) -> str:\n    return prefix + os.urandom(4).hex()\n"
    )
    # Another draw of the same kind: each answer differs from the base's, and means nothing.
    patched = base.replace("os.urandom(4).hex()", "os.urandom(5).hex()[:8]")
    found = generated(differential(tmp_path, base, patched, ["token"]), "token")
    assert found.verdict == "not compared", found
    assert "the base gives a different answer each time" in found.why


def test_raising_on_both_the_same_way_is_the_same(tmp_path: Path) -> None:
    base = "def parse(text: str) -> int:\n    raise ValueError('not supported')\n"
    patched = base.replace("    raise", "    # still unsupported\n    raise")
    found = generated(differential(tmp_path, base, patched, ["parse"]), "parse")
    assert found.verdict == "same", found
    assert found.examples >= 10


def test_raising_differently_is_a_finding(tmp_path: Path) -> None:
    base = "def parse(text: str) -> int:\n    raise ValueError('not supported')\n"
    patched = base.replace("ValueError", "TypeError")
    found = generated(differential(tmp_path, base, patched, ["parse"]), "parse")
    assert found.verdict == "differs", found
    assert "ValueError" in found.base and "TypeError" in found.patched


def test_a_base_that_runs_past_its_limit_is_not_a_finding(tmp_path: Path) -> None:
    base = "def spin(n: int) -> int:\n    while True:\n        n += 1\n"
    patched = base.replace("n += 1", "n += 2")
    done = differential(tmp_path, base, patched, ["spin"], seconds=1.0, total_seconds=1.0)
    found = generated(done, "spin")
    assert found.verdict == "not compared", found
    assert "ran past" in found.why


def test_a_parameter_nothing_describes_is_not_compared_and_says_why(tmp_path: Path) -> None:
    base = "def later(callback):\n    return callback()\n"
    patched = base.replace("return callback()", "return callback() or None")
    found = generated(differential(tmp_path, base, patched, ["later"]), "later")
    # Nothing says what a callback takes: reported as not compared, never as the same.
    assert found.verdict == "not compared" and found.examples == 0
    assert "'callback' has no annotation" in found.why and "no captured call" in found.why


# -- strategies, without workers -------------------------------------------------------------


def described(params: list[dict[str, Any]], calls: list[Any] | None = None) -> dict[str, Any]:
    return {"kind": "function", "params": params, "calls": calls or []}


def test_an_annotation_makes_values_of_its_type() -> None:
    plan = Plan(
        described([{"name": "amount", "kind": "pos", "keyword": True, "schema": {"t": "int"}}]),
        Constants.read({}),
        random.Random(1),
    )
    made = list(itertools.islice(plan.inputs(), 40))
    assert made and all(isinstance(given["args"][0], int) for given in made)
    assert len({key(given) for given in made}) > 10


def test_the_codes_constants_are_tried_on_both_sides() -> None:
    consts = Constants.read({"int": [1000]}, {"int": [1000]})
    plan = Plan(
        described([{"name": "amount", "kind": "pos", "keyword": True, "schema": {"t": "int"}}]),
        consts,
        random.Random(1),
    )
    made = {given["args"][0] for given in itertools.islice(plan.inputs(), 40)}
    assert {999, 1000, 1001} <= made


def test_shrinking_moves_toward_small_and_plain_values() -> None:
    consts = Constants.read({"int": [1000]})
    given = {"args": [98765], "kwargs": {}}
    candidates = [c["args"][0] for c in shrink_input(given, consts)]
    assert candidates and all(abs(c) < 98765 for c in candidates if isinstance(c, int))
    assert json.dumps(given) == '{"args": [98765], "kwargs": {}}'  # the input is left as it was


pytestmark = pytest.mark.slow
