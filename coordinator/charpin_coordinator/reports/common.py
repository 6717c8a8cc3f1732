"""Coordinator side; imports msgspec and report.py: the report as JSON (the source of truth), and the lines the text and Markdown reports share (caps, gate cells, groups, the footer)."""

from __future__ import annotations

import msgspec

from charpin_coordinator.report import DriftReport, Since

MAX_ROWS = 50
MAX_DIFF_LINES = 200


def encode_json(report: DriftReport) -> bytes:
    """The report as indented JSON (what `--json` prints and drift.json holds)."""
    return msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n"


def box_labels(report: DriftReport) -> list[str]:
    return [box.label for box in report.boxes]


def gate_cell(report: DriftReport, gate: str, box: str) -> str:
    for result in report.gates:
        if result.gate == gate and result.box == box:
            return result.status
    return "-"


def groups_lines(report: DriftReport) -> list[str]:
    lines = [f"{', '.join(g)}: identical" for g in report.groups if len(g) > 1]
    if len(report.groups) > 1:
        lines.append(f"{len(report.groups)} distinct receipts")
    return lines


def capped_diff_lines(diff: str) -> list[str]:
    lines = diff.splitlines()
    if len(lines) > MAX_DIFF_LINES:
        extra = len(lines) - MAX_DIFF_LINES
        lines = [*lines[:MAX_DIFF_LINES], f"... {extra} more diff lines in drift.json"]
    return lines


def footer_lines(report: DriftReport) -> list[str]:
    lines = [f"vacuous: {reason}" for reason in report.vacuous_reasons]
    bits = "; ".join(report.exit_bits) or "clean"
    lines.append(f"exit {report.exit_code} ({bits})")
    return lines


def subtests_note(failing: list[str] | None) -> str:
    """` · failing subtests (i=1), (i=3)` for a test whose subtests failed."""
    return f" · failing subtests {', '.join(failing)}" if failing else ""


def since_title(since: Since) -> str:
    gating = "gating: --gate-against-last" if since.gating else "informational"
    return f"since (each box against its own earlier receipt, --against {since.against}; {gating})"


SINCE_LABELS = ("before", "now")
