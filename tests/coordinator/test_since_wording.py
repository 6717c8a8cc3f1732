"""What `run --against` says per box: the pair's own labels never leak into the summaries, and a
gating comparison is named in the verdict even when drift across boxes blocked already."""

from __future__ import annotations

from charpin_coordinator.temporal import GATE_BIT, compare_box

from tests.coordinator.test_html_since import failing_now, night, report_since, with_tests
from tests.receipt_factory import IDS


def test_summaries_say_since_then_not_on_the_pairs_labels() -> None:
    box = compare_box("ci", failing_now(), ("r1", night()))
    summaries = {dim.name: dim.summary for dim in box.dimensions}
    assert summaries["collection"] == "test sets differ since then"
    assert not any(" on now" in s or " on before" in s for s in summaries.values()), summaries


def test_a_gating_comparison_is_named_beside_drift_across_boxes() -> None:
    # ci changed since r1 and differs from b tonight: bit 2 for both reasons, both named.
    other = night("b", **with_tests(dict.fromkeys(IDS, "passed")))
    report = report_since([failing_now(), other], {"ci": ("r1", night())}, gating=True)
    assert report.exit_code & 2
    assert GATE_BIT in report.exit_bits
    assert any(bit.startswith("2 drift") for bit in report.exit_bits), report.exit_bits
