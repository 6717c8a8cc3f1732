"""JUnit XML from a drift report: parsed back, one suite per box, one case per gate."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from charpin_coordinator.report import BoxSummary, DriftReport, GateResult, NotEvaluated
from charpin_coordinator.reports.junit import to_junit


def _box(label: str) -> BoxSummary:
    return BoxSummary(
        label=label,
        run_id="r",
        commit="c" * 40,
        interpretation="ok",
        exit_status=0,
        collected=1,
        executed=1,
        counts={"passed": 1},
        group=0,
        python="3.11",
        platform="linux",
    )


def _report() -> DriftReport:
    weird = "we ird'$;<box>&"
    gates = [
        GateResult(gate="Identity", box="ci", status="PASS", detail="ok", action=""),
        GateResult(
            gate="Fixture integrity",
            box="ci",
            status="FAIL",
            detail="changed: tests/fixtures/a.json \x00<&>",
            action="restore it",
        ),
        GateResult(
            gate="Completeness",
            box=weird,
            status="INCOMPLETE",
            detail="no session finish",
            action="look at stderr",
        ),
    ]
    return DriftReport(
        baseline="ci",
        expected_commit="c" * 40,
        boxes=[_box("ci"), _box(weird)],
        not_evaluated=[
            NotEvaluated(label="down", kind="refused", reason="down: connection refused")
        ],
        groups=[["ci"], [weird]],
        dimensions=[],
        gates=gates,
        vacuous=False,
        vacuous_reasons=[],
        exit_code=6,
        exit_bits=[],
    )


def test_every_box_is_a_suite_and_every_gate_a_case() -> None:
    root = ET.fromstring(to_junit(_report()))
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"charpin.ci", "charpin.we ird'$;<box>&", "charpin.down"}
    ci = suites["charpin.ci"]
    cases = {c.get("name"): c for c in ci.iter("testcase")}
    assert cases["Identity"].find("failure") is None
    failure = cases["Fixture integrity"].find("failure")
    assert failure is not None and "restore it" in (failure.text or "")
    assert "\x00" not in (failure.get("message") or "")
    assert ci.get("tests") == "2" and ci.get("failures") == "1"


def test_incomplete_is_an_error_and_not_evaluated_one_error_case() -> None:
    root = ET.fromstring(to_junit(_report()))
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    weird = suites["charpin.we ird'$;<box>&"].find("testcase")
    assert weird is not None and weird.get("classname") == "charpin.we ird'$;<box>&"
    error = weird.find("error")
    assert error is not None and error.get("type") == "INCOMPLETE"
    down = list(suites["charpin.down"].iter("testcase"))
    assert len(down) == 1 and down[0].get("name") == "evaluated"
    assert down[0].find("error").get("type") == "refused"  # type: ignore[union-attr]
    assert root.get("errors") == "2" and root.get("failures") == "1"
