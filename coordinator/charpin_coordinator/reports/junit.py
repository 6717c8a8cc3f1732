"""Coordinator side; pure. A DriftReport as JUnit XML: one suite per box, one case per gate.

Mapping (so any CI shows the gates): PASS is a passing case; FAIL is a `<failure>` carrying the
detail and the action; INCOMPLETE is an `<error>`, because missing evidence must never read as
green (a `<skipped>` case is green in most CIs); a NOT EVALUATED box is one `<error>` case named
`evaluated` whose type is the reason's kind.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Protocol

from charpin_coordinator.report import DriftReport, NotEvaluated

# XML 1.0 cannot carry most control characters, even escaped; receipts may contain anything.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


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


def to_junit(report: DriftReport) -> bytes:
    """Return the report as a JUnit XML document (UTF-8, with declaration)."""
    labels = [box.label for box in report.boxes]
    failing = {box.label: box.failing for box in report.boxes}
    subtests = {box.label: box.failing_subtests for box in report.boxes}
    return gates_junit(labels, report.gates, report.not_evaluated, failing, subtests)


def gates_junit(
    labels: Sequence[str],
    gates: Sequence[GateRow],
    not_evaluated: Sequence[NotEvaluated],
    failing: dict[str, list[str]] | None = None,
    subtests: dict[str, dict[str, list[str]]] | None = None,
) -> bytes:
    """One suite per label holding its gates and a failing case per test that failed there
    (classname charpin.<box>.tests), one error case per box not evaluated."""
    root = ET.Element("testsuites", name="charpin-remote")
    for label in labels:
        suite = _suite(root, label, [g for g in gates if g.box == label])
        for test in (failing or {}).get(label, []):
            case = ET.SubElement(
                suite, "testcase", classname=_clean(f"charpin.{label}.tests"), name=_clean(test)
            )
            failure = ET.SubElement(
                case, "failure", type="test", message=_clean(f"{test} failed on {label}")
            )
            failed_subtests = (subtests or {}).get(label, {}).get(test)
            if failed_subtests:
                failure.text = _clean("failing subtests:\n" + "\n".join(failed_subtests))
        _count(suite)
    for missing in not_evaluated:
        suite = _suite(root, missing.label, [])
        case = ET.SubElement(
            suite, "testcase", classname=_classname(missing.label), name="evaluated"
        )
        err = ET.SubElement(
            case,
            "error",
            type=_clean(missing.kind),
            message=_clean(f"NOT EVALUATED ({missing.kind}): {missing.reason}"),
        )
        err.text = _clean(missing.reason)
        _count(suite)
    _count(root)
    tree = ET.ElementTree(root)
    ET.indent(tree)
    data: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return data + b"\n"


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


def _count(element: ET.Element) -> None:
    cases = list(element.iter("testcase"))
    element.set("tests", str(len(cases)))
    element.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    element.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    element.set("skipped", "0")


def _classname(label: str) -> str:
    return _clean(f"charpin.{label}")


def _clean(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)
