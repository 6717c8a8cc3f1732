"""Every gate has a case that makes it FAIL, one that makes it PASS, and its INCOMPLETE cases."""

from __future__ import annotations

import pytest
from charpin_coordinator.gates import evaluate, undeclared
from charpin_runner.receipt import Deselected, PinResult, Pins, Widening

from tests.receipt_factory import HEAD, IDS, make_receipt, stale_local

OTHER = "9" * 40


def gate(receipts, name, box, expected=None):
    labeled = [(r.label, r) for r in receipts]
    results = evaluate(labeled, labeled[0], expected)
    [found] = [g for g in results if g.gate == name and g.box == box]
    return found


def two(**changes):
    return [make_receipt("base"), make_receipt("box", **changes)]


def test_every_gate_passes_on_identical_clean_receipts():
    receipts = two()
    results = evaluate([(r.label, r) for r in receipts], ("base", receipts[0]), HEAD)
    assert {(g.gate, g.box): g.status for g in results} == {
        (name, box): "PASS"
        for name in (
            "Identity",
            "Clean tree",
            "Fixture integrity",
            "Collection parity",
            "Quarantine",
            "Completeness",
            "Pin replay",
        )
        for box in ("base", "box")
    }
    assert all(g.action == "" for g in results)


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"identity.head_after": OTHER}, "HEAD moved during the run"),
        ({"identity.tree_after": OTHER}, "tree moved during the run"),
        (
            {"identity.head_before": OTHER, "identity.head_after": OTHER},
            "not the commit under review",
        ),
    ],
)
def test_identity_fails(changes, needle):
    result = gate(two(**changes), "Identity", "box", expected=HEAD)
    assert result.status == "FAIL"
    assert needle in result.detail
    assert "re-run on the commit under review" in result.action


def test_identity_incomplete_without_a_commit():
    result = gate(two(**{"identity.head_before": ""}), "Identity", "box")
    assert result.status == "INCOMPLETE"


def test_clean_tree_fails_on_uncommitted_and_written_files():
    receipts = two(
        **{
            "tree.dirty_before": ["notes.txt"],
            "tree.dirty_after": ["notes.txt", "scratch.log"],
            "tree.written": ["scratch.log"],
        }
    )
    result = gate(receipts, "Clean tree", "box")
    assert result.status == "FAIL"
    assert "uncommitted before the run: notes.txt" in result.detail
    assert "written during the run: scratch.log" in result.detail


def test_clean_tree_on_build_leftovers_only_says_to_ignore_them():
    leftovers = ["src/pkg.egg-info/PKG-INFO", "src/pkg/__pycache__/a.cpython-311.pyc", "x.pyc"]
    receipts = two(**{"tree.dirty_before": leftovers, "tree.dirty_after": leftovers})
    result = gate(receipts, "Clean tree", "box")
    assert result.status == "FAIL" and ".gitignore" in result.action
    # One file of the user's among them: the usual action, the run's tree is really dirty.
    mixed = [*leftovers, "src/pkg/core.py"]
    receipts = two(**{"tree.dirty_before": mixed, "tree.dirty_after": mixed})
    result = gate(receipts, "Clean tree", "box")
    assert result.status == "FAIL" and ".gitignore" not in result.action
    assert (
        "build" not in gate(two(**{"tree.dirty_after": ["builder.py"]}), "Clean tree", "box").action
    )


def test_clean_tree_passes_when_changes_are_declared_outputs():
    receipts = two(
        **{
            "tree.dirty_after": ["out/report.csv", "build.log"],
            "tree.written": ["out/report.csv", "build.log"],
            "tree.outputs": ["out/", "*.log"],
        }
    )
    assert gate(receipts, "Clean tree", "box").status == "PASS"


def test_undeclared_matches_folders_and_globs_only():
    assert undeclared(["out/a", "outside/b", "x.log"], ["out/", "*.log"]) == ["outside/b"]


@pytest.mark.parametrize(
    "field", ["added", "removed", "changed", "type_changed", "mode_changed", "escaping_symlinks"]
)
def test_fixture_integrity_fails_on_each_kind_of_move(field):
    result = gate(
        two(**{f"fixtures.{field}": ["tests/fixtures/rates.json"]}), "Fixture integrity", "box"
    )
    assert result.status == "FAIL"
    assert "tests/fixtures/rates.json" in result.detail


def test_fixture_difference_before_the_run_is_blamed_on_the_dirty_box():
    local = stale_local()
    clean = make_receipt("clean")
    labeled = [("local", local), ("clean", clean)]
    results = {(g.gate, g.box): g for g in evaluate(labeled, labeled[0], HEAD)}
    assert results[("Fixture integrity", "local")].status == "FAIL"
    assert (
        "differs from another box before the run" in results[("Fixture integrity", "local")].detail
    )
    # The clean clone is not blamed even though it differs from the (dirty) baseline.
    assert results[("Fixture integrity", "clean")].status == "PASS"


def test_fixture_integrity_incomplete_when_a_declared_root_is_missing():
    receipts = two(**{"fixtures.missing_roots": ["tests/fixtures"]})
    result = gate(receipts, "Fixture integrity", "box")
    assert result.status == "INCOMPLETE"
    assert result.detail == "watched root(s) missing: tests/fixtures"
    assert result.action == "declare existing fixture roots in [tool.charpin] watch"


def test_fixture_integrity_passes_when_nothing_is_watched_and_says_so():
    nothing = {"fixtures.roots": [], "fixtures.before": [], "fixtures.after": []}
    result = gate(
        [make_receipt("base", **nothing), make_receipt("box", **nothing)],
        "Fixture integrity",
        "box",
    )
    assert result.status == "PASS"
    assert "no fixture roots watched" in result.detail


def test_collection_parity_fails_when_a_test_vanishes():
    receipts = two(
        **{
            "collection.collected": IDS[:2],
            "collection.executed": IDS[:2],
            "collection.selected": IDS[:2],
        }
    )
    result = gate(receipts, "Collection parity", "box")
    assert result.status == "FAIL"
    assert "collected: 1 missing, 0 extra vs base" in result.detail


def test_collection_parity_incomplete_for_one_box_or_nothing_collected():
    [single] = [make_receipt("only")]
    assert gate([single], "Collection parity", "only").status == "INCOMPLETE"
    empty = two(**{"collection.collected": []})
    assert gate(empty, "Collection parity", "box").status == "INCOMPLETE"


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"quarantine.leaked": [IDS[0]]}, "frozen test(s) executed"),
        ({"quarantine.stale": ["tests/test_a.py::gone"]}, "stale entries"),
        ({"quarantine.widening": [Widening("tests/test_a.py::t", ["a", "b"])]}, "widening entries"),
        ({"quarantine.expired": [IDS[1]]}, "expired entries"),
        ({"quarantine.ledger_sha256": "f" * 64}, "ledger differs from base's"),
    ],
)
def test_quarantine_fails(changes, needle):
    result = gate(two(**changes), "Quarantine", "box")
    assert result.status == "FAIL"
    assert needle in result.detail


def test_quarantine_passes_with_frozen_tests_deselected():
    ledger = {
        "quarantine.ledger_path": "flake-ledger.json",
        "quarantine.ledger_sha256": "e" * 64,
        "quarantine.frozen": [IDS[2]],
        "collection.deselected": [Deselected(IDS[2], IDS[2])],
    }
    receipts = [make_receipt("base", **ledger), make_receipt("box", **ledger)]
    result = gate(receipts, "Quarantine", "box")
    assert result.status == "PASS"
    assert "1 frozen test(s) deselected" in result.detail


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"collection.executed": IDS[:1]}, "executed != selected"),
        ({"collection.session_finished": False}, "never finished"),
        ({"outcomes": {**dict.fromkeys(IDS, "passed"), IDS[0]: "failed"}}, "exit 0 despite failed"),
    ],
)
def test_completeness_fails_even_when_the_box_says_ok(changes, needle):
    result = gate(two(**changes), "Completeness", "box")
    assert result.status == "FAIL"
    assert needle in result.detail


@pytest.mark.parametrize("interpretation", ["timed-out", "interrupted", "no-tests"])
def test_completeness_incomplete(interpretation):
    result = gate(two(**{"exit.interpretation": interpretation}), "Completeness", "box")
    assert result.status == "INCOMPLETE"
    assert "os._exit" not in result.action


def _pins(status="passed", failure=None, ids=("p1",)):
    return Pins(
        "pins.jsonl", True, [PinResult(i, status, 0, "1" * 64, "2" * 64, {}, failure) for i in ids]
    )


def test_pin_replay_fails_on_a_red_pin_and_passes_on_green():
    green = [make_receipt("base", pins=_pins()), make_receipt("box", pins=_pins())]
    assert gate(green, "Pin replay", "box").status == "PASS"
    red = [make_receipt("base", pins=_pins()), make_receipt("box", pins=_pins("failed", "stdout"))]
    result = gate(red, "Pin replay", "box")
    assert result.status == "FAIL"
    assert "drifted pins: p1" in result.detail


def test_pin_replay_fails_when_pin_sets_differ_and_is_incomplete_when_skipped():
    differ = [make_receipt("base", pins=_pins()), make_receipt("box", pins=_pins(ids=("p1", "p2")))]
    assert gate(differ, "Pin replay", "box").status == "FAIL"
    skipped = [make_receipt("base", pins=_pins()), make_receipt("box")]
    assert gate(skipped, "Pin replay", "box").status == "INCOMPLETE"
