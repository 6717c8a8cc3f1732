"""The verify gates, pure: each one made to PASS, FAIL and (where it can) INCOMPLETE."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest
from charpin_coordinator.verify import gates
from charpin_coordinator.verify.report import WHOLE_PATCH
from charpin_runner.receipt import ActualOutput, Deselected, PinResult, Pins

from tests.receipt_factory import IDS, change, make_receipt


def pins(*results: tuple[str, str, str | None]) -> Pins:
    return Pins(
        "pins.jsonl",
        True,
        [
            PinResult(pid, status, 0, "", "", {}, kind, ["-old", "+new"] if kind else [])
            for pid, status, kind in results
        ],
    )


def status(found: list, gate: str, box: str = "clean") -> str:
    [row] = [g for g in found if g.gate == gate and g.box == box]
    return str(row.status)


def test_identical_runs_pass_every_box_gate() -> None:
    base = make_receipt("clean")
    found, seen = gates.box_gates("clean", base, base)
    assert [g.status for g in found] == ["PASS"] * 4 and seen == []
    assert gates.verdict(found, 1) == "ACCEPT"


def test_a_red_base_judges_nothing_about_the_box() -> None:
    base = make_receipt("clean")
    red = change(base, exit=dataclasses.replace(base.exit, interpretation="failed", status=1))
    found, seen = gates.box_gates("clean", red, base)
    assert {g.gate: g.status for g in found} == {
        "Base health": "INCOMPLETE",
        "Behaviour": "INCOMPLETE",
        "Tests": "INCOMPLETE",
        "Quarantine": "INCOMPLETE",
    }
    assert seen == [] and gates.verdict(found, 1) == "INCOMPLETE"


def test_a_pin_red_on_base_is_a_red_base() -> None:
    base = change(make_receipt("clean"), pins=pins(("p1", "failed", "stdout")))
    found, _ = gates.box_gates("clean", base, base)
    assert status(found, "Base health") == "INCOMPLETE"


def test_a_pin_green_on_base_and_red_on_patched_fails_behaviour_with_its_action() -> None:
    base = change(make_receipt("clean"), pins=pins(("p1", "passed", None)))
    after = change(base, pins=pins(("p1", "failed", "file-content")))
    found, seen = gates.box_gates("clean", base, after)
    assert status(found, "Behaviour") == "FAIL"
    [drift] = seen
    assert drift.item == "p1" and drift.detail == ["-old", "+new"]
    assert "a one-cent drift is a failed extract" in drift.action


@pytest.mark.parametrize(
    ("stderr", "action"),
    [
        ("usage: tool [-h]\n", "the program now exits 2 without a traceback; stop and see why"),
        ("Traceback (most recent call last):\n  ...\nKeyError: 'x'\n", "inspect the traceback"),
    ],
)
def test_an_exit_code_drift_says_traceback_only_when_there_is_one(stderr: str, action: str) -> None:
    base = change(make_receipt("clean"), pins=pins(("p1", "passed", None)))
    red = PinResult("p1", "failed", 2, "", "", {}, "exit-code", ["-exit 0", "+exit 2"])
    red = replace(red, actual=[ActualOutput("stderr", stderr, len(stderr), True)])
    after = change(base, pins=Pins("pins.jsonl", True, [red]))
    _, [drift] = gates.box_gates("clean", base, after)
    assert action in drift.action


def test_a_changed_pin_set_fails_behaviour() -> None:
    base = change(make_receipt("clean"), pins=pins(("p1", "passed", None)))
    after = change(base, pins=pins(("p1", "passed", None), ("p2", "passed", None)))
    found, seen = gates.box_gates("clean", base, after)
    assert status(found, "Behaviour") == "FAIL" and seen[0].item == "<pins>"


def test_tests_gone_newly_failing_and_new_failing_fail_the_tests_gate() -> None:
    base = make_receipt("clean")
    new = "tests/test_c.py::test_new"
    collected = [IDS[1], IDS[2], new]
    after = change(
        base,
        collection=dataclasses.replace(base.collection, collected=collected, executed=collected),
        outcomes={IDS[1]: "failed", IDS[2]: "passed", new: "error"},
    )
    found, seen = gates.box_gates("clean", base, after)
    assert status(found, "Tests") == "FAIL"
    assert {o.item: o.what for o in seen} == {
        IDS[0]: "passed → not collected",
        IDS[1]: "passed → failed",
        new: "new test, error",
    }


def test_an_incomplete_patched_run_fails_the_tests_gate() -> None:
    base = make_receipt("clean")
    after = change(base, exit=dataclasses.replace(base.exit, interpretation="timed-out"))
    found, seen = gates.box_gates("clean", base, after)
    assert status(found, "Tests") == "FAIL" and seen[0].what == "the patched run is timed-out"


def test_the_patched_runs_own_failed_gates_count_against_it() -> None:
    base = make_receipt("clean")
    found, seen = gates.box_gates("clean", base, base, [("Fixture integrity", "changed: x")])
    assert status(found, "Tests") == "FAIL"
    assert seen[0].what == "the patched run failed its Fixture integrity gate: changed: x"


def test_deselecting_more_than_base_fails_quarantine() -> None:
    base = make_receipt("clean")
    out = [Deselected(nodeid=IDS[0], entry=IDS[0])]
    after = change(base, collection=dataclasses.replace(base.collection, deselected=out))
    found, _ = gates.box_gates("clean", base, after)
    assert status(found, "Quarantine") == "FAIL"


def test_patch_gates_fail_on_protected_paths_entry_points_dependencies_and_scope() -> None:
    facts = gates.PatchFacts(
        protected=["pins.jsonl"],
        entry_points=["export.py reads env X (new)"],
        dependencies=["pyproject.toml: [project].dependencies"],
        scope=["a.py:f", "a.py:g"],
    )
    found, seen = gates.patch_gates(facts)
    assert {g.gate: g.status for g in found} == {
        "Protected paths": "FAIL",
        "Entry points": "FAIL",
        "Dependencies": "FAIL",
        "Scope": "FAIL",
        "Harness awareness": "PASS",
    }
    assert all(g.box == WHOLE_PATCH for g in found) and len(seen) == 5
    clean, _ = gates.patch_gates(gates.PatchFacts(scope=["a.py:f"], helpers=["a.py:_g"]))
    assert {g.status for g in clean} == {"PASS"}
    assert gates.verdict(found, 1) == "REJECT"


def test_no_evaluated_box_is_incomplete_never_accept() -> None:
    found, _ = gates.patch_gates(gates.PatchFacts())
    assert gates.verdict(found, 0) == "INCOMPLETE"


def test_a_test_that_fails_by_its_subtests_names_them() -> None:
    from charpin_runner.receipt import Subtests

    base = make_receipt("clean")
    after = change(
        base,
        outcomes={**base.outcomes, IDS[0]: "failed"},
        subtests={IDS[0]: Subtests(passed=5, failed=1, skipped=0, failing=["(n=0)"])},
    )
    _, seen = gates.box_gates("clean", base, after)
    assert [o.what for o in seen] == ["passed → failed (failing subtests: (n=0))"]


@pytest.mark.parametrize(
    ("outcome", "shown"),
    [
        ("skipped", "passed → skipped"),
        ("xfailed", "passed → xfailed"),
        ("xpassed", "passed → xpassed"),
    ],
)
def test_a_base_pass_that_becomes_anything_but_a_pass_fails_the_tests_gate(
    outcome: str, shown: str
) -> None:
    """#18 item 1, strict outcomes (PASS_TO_PASS): skipped, xfailed, xpassed all fail."""
    base = make_receipt("clean")
    after = change(base, outcomes={**base.outcomes, IDS[0]: outcome})
    found, seen = gates.box_gates("clean", base, after)
    assert {g.gate: g.status for g in found}["Tests"] == "FAIL"
    assert [(o.item, o.what) for o in seen] == [(IDS[0], shown)]


def test_a_base_pass_filtered_deselected_or_not_run_is_named_for_what_became_of_it() -> None:
    base = make_receipt("clean")
    outcomes = {k: v for k, v in base.outcomes.items() if k not in IDS[:3]}
    col = base.collection
    after = change(
        base,
        outcomes=outcomes,
        collection=replace(
            col,
            filtered=[IDS[0]],
            deselected=[Deselected(IDS[1], IDS[1])],
            executed=[t for t in col.executed if t not in IDS[:3]],
        ),
    )
    _, seen = gates.box_gates("clean", base, after)
    assert {o.item: o.what for o in seen if o.gate == "Tests"} == {
        IDS[0]: "passed → deselected (-k, -m, --deselect)",
        IDS[1]: "passed → deselected by the ledger",
        IDS[2]: "passed → not executed",
    }


def test_the_patchs_own_tests_that_fail_fail_the_tests_gate() -> None:
    base = make_receipt("clean")
    own = change(base, outcomes={"tests/test_new.py::test_new": "failed"})
    found, seen = gates.box_gates("clean", base, base, own=own)
    assert {g.gate: g.status for g in found}["Tests"] == "FAIL"
    assert [(o.item, o.what) for o in seen] == [
        ("tests/test_new.py::test_new", "the patch's own test: failed")
    ]
