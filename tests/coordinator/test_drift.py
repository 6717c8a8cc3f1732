"""Drift by dimension, grouping, the outcome matrix, and every exit bit."""

from __future__ import annotations

import difflib
import random

import pytest
from charpin_coordinator.drift import build_report
from charpin_coordinator.iddiff import sorted_unified_diff
from charpin_coordinator.report import NotEvaluated
from charpin_runner.errors import UsageError
from charpin_runner.receipt import FileState, PinResult, Pins

from tests.receipt_factory import FIXTURE, IDS, make_receipt, stale_local


def report(*receipts, **kwargs):
    return build_report([(r.label, r) for r in receipts], **kwargs)


def dims(rep):
    return {d.name: d for d in rep.dimensions}


def test_identical_receipts_are_grouped_and_clean():
    rep = report(make_receipt("ci"), make_receipt("clean-box"))
    assert rep.groups == [["ci", "clean-box"]]
    assert rep.dimensions == []
    assert rep.exit_code == 0
    assert rep.exit_bits == []


def test_outcome_drift_is_a_tests_by_boxes_matrix_of_differing_rows_only():
    flipped = {**dict.fromkeys(IDS, "passed"), IDS[1]: "failed"}
    rep = report(make_receipt("a"), make_receipt("b", outcomes=flipped), make_receipt("c"))
    outcomes = dims(rep)["outcomes"]
    assert [(row.item, row.values) for row in outcomes.matrix] == [
        (IDS[1], {"a": "passed", "b": "failed", "c": "passed"})
    ]
    assert outcomes.boxes == ["b"]
    assert rep.groups == [["a", "c"], ["b"]]


def test_collection_drift_carries_a_unified_diff_of_ids():
    fewer = {
        "collection.collected": IDS[:2],
        "collection.selected": IDS[:2],
        "collection.executed": IDS[:2],
    }
    rep = report(make_receipt("a"), make_receipt("b", **fewer))
    collection = dims(rep)["collection"]
    assert f"-{IDS[2]}\n" in collection.diff
    assert collection.diff.startswith("--- a/collected\n+++ b/collected\n@@ ")
    assert rep.exit_code & 2


def test_fixture_drift_names_the_file_and_the_uncommitted_box():
    local = stale_local()
    rep = report(make_receipt("clean"), local)
    details = dims(rep)["fixtures"].details
    assert details == [
        f"local: {FIXTURE.path} differs from clean: sha256 bbbbbbbbbbbb vs aaaaaaaaaaaa (uncommitted on local)"
    ]
    assert dims(rep)["tree"].details == [
        f"local: {FIXTURE.path} uncommitted (changed before the run)"
    ]


def test_environment_is_informational_and_does_not_set_a_bit():
    rep = report(make_receipt("a"), make_receipt("b", **{"environment.tz": "Asia/Tokyo"}))
    env = dims(rep)["environment"]
    assert env.gating is False
    assert "tz 'Asia/Tokyo' vs 'UTC'" in env.details[0]
    assert rep.exit_code == 0


def test_pins_dimension_shows_a_pin_green_on_one_box_and_red_on_another():
    def pins(status, failure=None):
        return Pins(
            "pins.jsonl", True, [PinResult("tz-report", status, 0, "1" * 64, "2" * 64, {}, failure)]
        )

    rep = report(
        make_receipt("a", pins=pins("passed")), make_receipt("tokyo", pins=pins("failed", "stdout"))
    )
    row = dims(rep)["pins"].matrix[0]
    assert row.item == "tz-report"
    assert row.values == {"a": "passed", "tokyo": "failed (stdout)"}
    assert dims(rep)["pins"].boxes == ["tokyo"]


def test_baseline_can_be_chosen_and_must_exist():
    rep = report(make_receipt("a"), make_receipt("b"), baseline="b")
    assert rep.baseline == "b"
    with pytest.raises(UsageError, match="--baseline 'zz' is not one of the evaluated boxes"):
        report(make_receipt("a"), make_receipt("b"), baseline="zz")


# -- every exit bit is produced by some case -----------------------------------------------------


def test_bit_1_tests_failed():
    failed = {
        "outcomes": {**dict.fromkeys(IDS, "passed"), IDS[0]: "failed"},
        "exit.status": 1,
        "exit.interpretation": "failed",
    }
    rep = report(make_receipt("a", **failed), make_receipt("b", **failed))
    assert rep.exit_code == 1


def test_bit_2_gate_blocked():
    rep = report(make_receipt("a"), make_receipt("b", **{"fixtures.changed": [FIXTURE.path]}))
    assert rep.exit_code == 2


def test_bit_4_box_not_evaluated():
    miss = NotEvaluated(label="c", kind="refused", reason="connection refused (127.0.0.1:1)")
    rep = report(make_receipt("a"), make_receipt("b"), not_evaluated=[miss])
    assert rep.exit_code == 4
    assert rep.not_evaluated == [miss]


def test_bit_8_receipt_integrity():
    miss = NotEvaluated(label="c", kind="receipt-refused", reason="bad receipt")
    rep = report(make_receipt("a"), make_receipt("b"), not_evaluated=[miss])
    assert rep.exit_code == 4 | 8


def test_bit_16_vacuous_one_box_or_zero_tests():
    assert report(make_receipt("a")).exit_code == 16
    empty = {
        "collection.executed": [],
        "collection.selected": [],
        "outcomes": {},
        "exit.interpretation": "no-tests",
        "exit.status": 5,
    }
    rep = report(make_receipt("a", **empty), make_receipt("b", **empty))
    assert rep.exit_code & 16
    assert any("zero tests executed" in r for r in rep.vacuous_reasons)


def test_bits_combine():
    miss = NotEvaluated(label="c", kind="timeout", reason="timed out")
    failed = {
        "outcomes": {**dict.fromkeys(IDS, "passed"), IDS[0]: "failed"},
        "exit.status": 1,
        "exit.interpretation": "failed",
    }
    rep = report(make_receipt("a", **failed), not_evaluated=[miss])
    assert rep.exit_code == 1 | 4 | 16


# -- the linear diff agrees with difflib -----------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_sorted_unified_diff_matches_difflib(seed):
    rng = random.Random(seed)
    universe = sorted(f"t{n:04d}" for n in rng.sample(range(10000), 60))
    old = sorted(rng.sample(universe, 40))
    new = sorted(rng.sample(universe, 40))
    ours = sorted_unified_diff(old, new, "old", "new")
    theirs = "".join(
        difflib.unified_diff([x + "\n" for x in old], [x + "\n" for x in new], "old", "new", n=2)
    )
    assert ours == theirs


def test_fixture_drift_is_blamed_on_a_dirty_baseline_not_on_the_clean_clone():
    local = stale_local()
    fixtures = dims(report(local, make_receipt("clean")))["fixtures"]
    assert fixtures.boxes == ["local"]
    assert fixtures.details == [
        f"local: {FIXTURE.path} differs from clean: sha256 bbbbbbbbbbbb vs aaaaaaaaaaaa (uncommitted on local)"
    ]


@pytest.mark.parametrize("interpretation", ["timed-out", "interrupted"])
def test_bit_4_for_a_box_whose_run_was_cut_short(interpretation):
    cut = {"exit.interpretation": interpretation, "exit.status": -15}
    rep = report(make_receipt("a"), make_receipt("b", **cut))
    assert rep.exit_code & 4
    assert "4 a box was not evaluated" in rep.exit_bits


def test_a_broken_first_box_is_not_the_baseline():
    hung = {
        "exit.interpretation": "timed-out",
        "exit.status": -15,
        "collection.executed": IDS[:1],
        "outcomes": {IDS[0]: "passed"},
    }
    rep = report(make_receipt("boxa", **hung), make_receipt("local"))
    assert rep.baseline == "local"
    parity = {(g.gate, g.box): g.status for g in rep.gates}
    assert parity[("Collection parity", "local")] == "PASS"
    assert parity[("Collection parity", "boxa")] == "FAIL"


def test_a_box_on_another_commit_takes_the_blame_for_differing_fixtures():
    other = FileState(FIXTURE.path, "file", 0o644, "c" * 64, None)
    old = make_receipt(
        "local",
        **{
            "identity.head_before": "0" * 40,
            "identity.head_after": "0" * 40,
            "fixtures.before": [other],
            "fixtures.after": [other],
        },
    )
    rep = report(old, make_receipt("clean"), expected_commit="1" * 40)
    statuses = {(g.gate, g.box): g.status for g in rep.gates}
    assert statuses[("Identity", "local")] == "FAIL"
    assert statuses[("Fixture integrity", "clean")] == "PASS"
    assert rep.baseline == "clean"


def test_a_set_in_another_order_is_not_collection_drift():
    """Receipts built in memory skip the decoder's canonical order: still no "-0 +0" drift."""
    reordered = {f"collection.{name}": IDS[::-1] for name in ("collected", "selected", "executed")}
    rep = report(make_receipt("a"), make_receipt("b", **reordered))
    assert "collection" not in dims(rep)
    parity = {(g.gate, g.box): g.status for g in rep.gates}
    assert parity[("Collection parity", "b")] == "PASS"


def test_collection_drift_of_unsorted_sets_counts_and_diffs_the_real_difference():
    extra = "tests/test_0.py::test_first"
    shuffled = [IDS[2], extra, IDS[0], IDS[1], IDS[0]]
    rep = report(make_receipt("a"), make_receipt("b", **{"collection.collected": shuffled}))
    collection = dims(rep)["collection"]
    assert collection.details == ["b: collected differs from a: -0 +1"]
    assert collection.diff.count(f"+{extra}\n") == 1
    assert [line[0] for line in collection.diff.splitlines()[3:]] == ["+", " ", " "]


def _with_fixture_mode(label, mode):
    import dataclasses

    base = make_receipt(label)
    state = dataclasses.replace(FIXTURE, mode=mode)
    fixtures = dataclasses.replace(base.fixtures, before=[state], after=[state])
    return dataclasses.replace(base, fixtures=fixtures)


def test_a_permission_git_does_not_keep_is_not_fixture_drift():
    """An unpacked sdist's 0666 files against a checkout's 0644 (seen on html2text): the same
    bytes; git keeps only the executable bit, and so does the comparison between boxes."""
    rep = report(_with_fixture_mode("local", 0o666), _with_fixture_mode("clean", 0o644))
    assert "fixtures" not in dims(rep)
    assert all(g.status == "PASS" for g in rep.gates if g.gate == "Fixture integrity")
    assert rep.exit_code == 0


def test_an_executable_bit_that_differs_is_named_as_such():
    rep = report(_with_fixture_mode("clean", 0o644), _with_fixture_mode("local", 0o755))
    details = "\n".join(dims(rep)["fixtures"].details)
    assert "executable" in details and "sha256" not in details, details


def test_plugin_drift_names_the_plugins():
    import dataclasses

    a = make_receipt("a")
    env = dataclasses.replace(a.environment, plugins=["pytest-xdist-3.8.0", "pytest-randomly-3.15"])
    b = dataclasses.replace(make_receipt("b"), environment=env)
    a = dataclasses.replace(a, environment=dataclasses.replace(env, plugins=["pytest-xdist-3.8.0"]))
    details = "\n".join(dims(report(a, b))["environment"].details)
    assert "pytest plugins differ: +pytest-randomly-3.15" in details, details
