"""Receipts imported from another harness's record (Receipt.imported, `charpin import evidence`):
a gate that needs a field the record lacks is INCOMPLETE, never PASS; a FAIL found on the
evidence the record holds stands; a measured box compared with an imported baseline is not
failed by the baseline's placeholders."""

from __future__ import annotations

from charpin_coordinator.gates import GATE_NEEDS, evaluate, missing_fields
from charpin_runner.receipt import FileState, Imported

from tests.receipt_factory import FIXTURE, make_receipt

EVERY_GATE = tuple(GATE_NEEDS)


def imported(label: str, lacks: list[str], **parts: object):
    record = Imported(source=f"{label}.json", format="a test record", lacks=lacks)
    return make_receipt(label, imported=record, **parts)


def verdicts(receipts, base_index=0):
    labeled = [(r.label, r) for r in receipts]
    return {(g.gate, g.box): g for g in evaluate(labeled, labeled[base_index], None)}


def test_a_record_that_lacks_everything_passes_nothing():
    lacks = sorted({need for needs in GATE_NEEDS.values() for need in needs})
    results = verdicts([imported("a", lacks), imported("b", lacks)])
    assert {g.status for g in results.values()} == {"INCOMPLETE"}
    detail = results[("Pin replay", "b")].detail
    assert detail == "imported from a test record, which lacks pins"
    assert "charpin receipt" in results[("Pin replay", "b")].action


def test_only_the_gates_that_need_a_lacking_field_change():
    results = verdicts([imported("a", ["collection.executed"]), make_receipt("b")])
    assert results[("Completeness", "a")].status == "INCOMPLETE"
    assert results[("Collection parity", "a")].status == "INCOMPLETE"
    assert results[("Identity", "a")].status == "PASS"
    assert results[("Pin replay", "a")].status == "PASS"
    # The measured box is compared with a baseline that lacks what parity compares.
    assert results[("Collection parity", "b")].status == "INCOMPLETE"
    assert "the baseline a was imported" in results[("Collection parity", "b")].detail


def test_a_failure_on_the_evidence_held_still_fails():
    moved = FileState(FIXTURE.path, "file", 0o644, "b" * 64, None)
    lacks = ["fixtures.roots", "fixtures.mode_changed", "tree.written"]
    box = imported(
        "a",
        lacks,
        **{"fixtures.after": [moved], "fixtures.changed": [FIXTURE.path]},
        **{"tree.dirty_after": ["notes.txt"]},
    )
    results = verdicts([box, make_receipt("b")])
    fixture = results[("Fixture integrity", "a")]
    assert fixture.status == "FAIL"
    assert "moved during the run" in fixture.detail and "lacks fixtures.roots" in fixture.detail
    assert results[("Clean tree", "a")].status == "FAIL"


def test_a_measured_box_is_judged_alone_when_the_baseline_lacks_the_evidence():
    moved = FileState(FIXTURE.path, "file", 0o644, "b" * 64, None)
    base = imported("base", ["fixtures.mode_changed"])
    box = make_receipt("box", **{"fixtures.after": [moved], "fixtures.changed": [FIXTURE.path]})
    results = verdicts([base, box])
    assert results[("Fixture integrity", "box")].status == "FAIL"  # its own evidence
    assert results[("Fixture integrity", "base")].status == "INCOMPLETE"


def test_missing_fields_matches_whole_blocks_and_subfields():
    record = imported("a", ["pins", "environment", "identity.tree_before"])
    assert missing_fields("Pin replay", record) == ["pins"]
    assert missing_fields("Identity", record) == ["identity.tree_before"]
    assert missing_fields("Completeness", record) == []
    assert missing_fields("Pin replay", make_receipt("m")) == []
    assert set(EVERY_GATE) == {
        "Identity",
        "Clean tree",
        "Fixture integrity",
        "Collection parity",
        "Quarantine",
        "Completeness",
        "Pin replay",
    }
