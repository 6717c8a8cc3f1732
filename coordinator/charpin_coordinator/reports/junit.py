"""Coordinator side; pure (imports report.py, the receipt's types and common). A DriftReport as
JUnit XML, so any CI's test tab shows both the gates and the tests.

Per box, three suites: `charpin.<box>` holds one case per gate; `charpin.<box>.tests` one case
per test the box collected (passed ones too), its outcome as the receipt says; and
`charpin.<box>.pins` one case per pin replayed there.

Mapping: a gate's PASS is a passing case; FAIL is a `<failure>` carrying the detail and the
action; INCOMPLETE is an `<error>`, because missing evidence must never read as green (a
`<skipped>` case is green in most CIs). A test that failed is a `<failure>` (its excerpt and
failing subtests as the text), one that errored an `<error>`, skipped and xfailed are
`<skipped>`; a test frozen by the ledger is `<skipped>` naming the entry; a test that was
selected but never ran, or was dropped after the ledger, is an `<error>`. A pin that failed is a
`<failure>` with golden against actual, one that errored an `<error>`. A NOT EVALUATED box is one
`<error>` case named `evaluated` whose type is the reason's kind.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, Protocol

from charpin_runner.receipt import Receipt

from charpin_coordinator.report import BoxSummary, DriftReport, NotEvaluated
from charpin_coordinator.reports.common import failure_excerpt

# XML 1.0 cannot carry most control characters, even escaped; receipts may contain anything.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_SKIPPED = frozenset(("skipped", "xfailed", "frozen"))
_ERRORS = frozenset(("error", "not run", "dropped"))


class GateRow(Protocol):
    """A gate result of any report (drift or verify)."""

    @property
    def gate(self) -> str: ...
    @property
    def box(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def detail(self) -> str: ...
    @property
    def action(self) -> str: ...


class TestRow(NamedTuple):
    """One test of a box for the JUnit file: its node id, how it ended (a receipt outcome, or
    `frozen`, `not run`, `dropped`), its duration, and why, when the receipt says."""

    nodeid: str
    outcome: str
    seconds: float = 0.0
    note: str = ""


class PinRow(NamedTuple):
    """One pin of a box: passed, failed or error, its failure class, golden against actual."""

    id: str
    status: str
    failure_class: str
    detail: tuple[str, ...] = ()


class BoxCases(NamedTuple):
    """Everything a box's receipt says about its tests and pins, for to_junit."""

    tests: list[TestRow]
    pins: list[PinRow]


def _same(value: str) -> str:
    return value


def receipt_cases(receipt: Receipt, redact: Callable[[str], str] = _same) -> BoxCases:
    """Every test the receipt's box collected, in collection order, and every pin it replayed.
    `redact` masks what the receipt carries (the run's secrets) before it reaches the file."""
    col = receipt.collection
    frozen = {d.nodeid: d.entry for d in col.deselected}
    dropped = set(col.dropped)
    rows: list[TestRow] = []
    seen: set[str] = set()
    for nodeid in [*col.order, *col.collected, *receipt.outcomes]:
        if nodeid in seen:
            continue
        seen.add(nodeid)
        seconds = receipt.durations.get(nodeid, 0.0)
        if nodeid in receipt.outcomes:
            row = TestRow(nodeid, receipt.outcomes[nodeid], seconds)
        elif nodeid in frozen:
            row = TestRow(nodeid, "frozen", note=f"frozen by the flake ledger: {frozen[nodeid]}")
        elif nodeid in dropped:
            row = TestRow(nodeid, "dropped", note="dropped after the ledger by another hook")
        elif nodeid in col.selected:
            row = TestRow(nodeid, "not run", note="selected, but no outcome was recorded")
        else:
            continue  # filtered by the test command's own options (-k, -m, --deselect)
        rows.append(row._replace(nodeid=redact(row.nodeid), note=redact(row.note)))
    pins = [
        PinRow(
            redact(p.id),
            p.status,
            p.failure_class or "",
            tuple(redact(line) for line in p.detail),
        )
        for p in receipt.pins.results
    ]
    return BoxCases(rows, pins)


def to_junit(report: DriftReport, cases: Mapping[str, BoxCases] | None = None) -> bytes:
    """Return the report as a JUnit XML document (UTF-8, with declaration). `cases` (box label
    -> its receipt's tests and pins, receipt_cases) lists every test; without it a box's suite
    lists the tests the report holds: its failing ones and the pins that did not pass."""
    root = ET.Element("testsuites", name="charpin-remote")
    for box in report.boxes:
        _suite(root, box.label, [g for g in report.gates if g.box == box.label])
        given = (cases or {}).get(box.label)
        _tests_suite(root, box, given.tests if given else None)
        _pins_suite(root, box, given.pins if given else None)
    _not_evaluated(root, report.not_evaluated)
    return _document(root)


def gates_junit(
    labels: Sequence[str], gates: Sequence[GateRow], not_evaluated: Sequence[NotEvaluated]
) -> bytes:
    """One suite per label holding its gates, one error case per box not evaluated (verify)."""
    root = ET.Element("testsuites", name="charpin-remote")
    for label in labels:
        _suite(root, label, [g for g in gates if g.box == label])
    _not_evaluated(root, not_evaluated)
    return _document(root)


def _document(root: ET.Element) -> bytes:
    _count(root)
    tree = ET.ElementTree(root)
    ET.indent(tree)
    data: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return data + b"\n"


def _not_evaluated(root: ET.Element, missing: Sequence[NotEvaluated]) -> None:
    for miss in missing:
        suite = _suite(root, miss.label, [])
        case = ET.SubElement(suite, "testcase", classname=_classname(miss.label), name="evaluated")
        err = ET.SubElement(
            case,
            "error",
            type=_clean(miss.kind),
            message=_clean(f"NOT EVALUATED ({miss.kind}): {miss.reason}"),
        )
        err.text = _clean(miss.reason)
        _count(suite)


def _suite(root: ET.Element, label: str, gates: Sequence[GateRow]) -> ET.Element:
    suite = ET.SubElement(root, "testsuite", name=_clean(f"charpin.{label}"))
    for gate in gates:
        case = ET.SubElement(suite, "testcase", classname=_classname(label), name=_clean(gate.gate))
        body = _clean(f"{gate.detail}\n{gate.action}".strip())
        if gate.status == "FAIL":
            ET.SubElement(case, "failure", type="FAIL", message=_clean(gate.detail)).text = body
        elif gate.status == "INCOMPLETE":
            ET.SubElement(
                case, "error", type="INCOMPLETE", message=_clean(f"INCOMPLETE: {gate.detail}")
            ).text = body
    _count(suite)
    return suite


def _tests_suite(root: ET.Element, box: BoxSummary, rows: Sequence[TestRow] | None) -> None:
    if rows is None:  # the report alone: the failing tests it lists
        rows = [TestRow(test, "failed") for test in box.failing]
    if not rows:
        return
    classname = _clean(f"charpin.{box.label}.tests")
    suite = ET.SubElement(root, "testsuite", name=classname)
    failing = set(box.failing)
    for row in rows:
        case = ET.SubElement(suite, "testcase", classname=classname, name=_clean(row.nodeid))
        case.set("file", _clean(row.nodeid.split("::", 1)[0]))
        case.set("time", f"{max(row.seconds, 0.0):.3f}")
        if row.outcome in _SKIPPED:
            ET.SubElement(case, "skipped", message=_clean(row.note or row.outcome))
        elif row.outcome in ("failed", *_ERRORS):
            tag = "failure" if row.outcome == "failed" else "error"
            body = _why(box, row.nodeid) if row.nodeid in failing else row.note
            message = _message(box, row, body)
            element = ET.SubElement(case, tag, type=_clean(row.outcome), message=_clean(message))
            if body:
                element.text = _clean(body)
    _count(suite)


def _why(box: BoxSummary, test: str) -> str:
    """A failing test's text: its excerpt, then the subtests that failed, one a line."""
    lines = failure_excerpt(box, test)
    named = box.failing_subtests.get(test, [])
    more = box.failing_subtest_counts.get(test, len(named)) - len(named)
    if named or more > 0:
        lines = [*lines, "failing subtests:", *named]
        lines += [f"and {more} more" if named else f"{more} failed"] if more > 0 else []
    return "\n".join(lines)


def _message(box: BoxSummary, row: TestRow, body: str) -> str:
    """The one line a CI shows beside the test: the excerpt's last line (pytest ends with
    `E   AssertionError: ...`), else what happened."""
    last = next((line.strip() for line in reversed(body.splitlines()) if line.strip()), "")
    if last and row.nodeid in box.failure_excerpts:
        return last[:500]
    return row.note or f"{row.outcome} on {box.label}"


def _pins_suite(root: ET.Element, box: BoxSummary, pins: Sequence[PinRow] | None) -> None:
    if pins is None:  # the report alone: the pins that did not pass
        pins = [PinRow(pin, "failed", "", tuple(d)) for pin, d in sorted(box.pin_details.items())]
    if not pins:
        return
    classname = _clean(f"charpin.{box.label}.pins")
    suite = ET.SubElement(root, "testsuite", name=classname)
    for pin in pins:
        case = ET.SubElement(suite, "testcase", classname=classname, name=_clean(pin.id))
        if pin.status == "passed":
            continue
        tag = "error" if pin.status == "error" else "failure"
        said = f"{pin.status} ({pin.failure_class})" if pin.failure_class else pin.status
        element = ET.SubElement(case, tag, type=_clean(pin.status), message=_clean(said))
        element.text = _clean("\n".join(pin.detail))
    _count(suite)


def _count(element: ET.Element) -> None:
    cases = list(element.iter("testcase"))
    element.set("tests", str(len(cases)))
    element.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    element.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    element.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))


def _classname(label: str) -> str:
    return _clean(f"charpin.{label}")


def _clean(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)
