"""Coordinator side; imports msgspec and report.py: the report as JSON (the source of truth), and the lines the text and Markdown reports share (caps, gate cells, groups, the footer)."""

from __future__ import annotations

import msgspec

from charpin_coordinator.report import BoxSummary, DriftReport, Since

MAX_ROWS = 50
MAX_DIFF_LINES = 200
# A failing test's excerpt in text and Markdown (the HTML page shows it whole).
MAX_EXCERPT_LINES = 15


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


def outcome_counts(box: BoxSummary) -> str:
    """`12 passed, 1 failed`, or `no outcomes`."""
    return ", ".join(f"{n} {k}" for k, n in sorted(box.counts.items())) or "no outcomes"


def subtest_counts(box: BoxSummary) -> str:
    """`subtests: 45 passed, 30 failed` when any test of the box ran subtests, else ""."""
    counts = [
        f"{box.subtests[k]} {k}" for k in ("passed", "failed", "skipped") if k in box.subtests
    ]
    return f"subtests: {', '.join(counts)}" if counts else ""


def failing_subtests(box: BoxSummary, test: str) -> str:
    """`(i=1), (i=3) and 10 more` for a failing test's subtests: every failing one the receipt
    names, and how many more failed (the receipt names the first few; its count is complete)."""
    named = box.failing_subtests.get(test, [])
    more = box.failing_subtest_counts.get(test, len(named)) - len(named)
    if not named:
        return f"{more} failed" if more > 0 else ""
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")


def subtests_note(box: BoxSummary, test: str) -> str:
    """` · failing subtests (i=1), (i=3) and 10 more` for a test whose subtests failed."""
    said = failing_subtests(box, test)
    return f" · failing subtests {said}" if said else ""


def failure_excerpt(box: BoxSummary, test: str, cap: int = 0) -> list[str]:
    """Why the test failed, as the receipt's bounded, redacted excerpt says, one string per
    line; [] when the receipt carries none. Every renderer reads a failing test's excerpt
    through this. With cap, at most cap lines, the end kept (where pytest says what failed)."""
    lines = box.failure_excerpts.get(test, [])
    if not cap or len(lines) <= cap:
        return list(lines)
    return [f"... {len(lines) - cap + 1} earlier lines in drift.json", *lines[-(cap - 1) :]]


def pin_drifts(box: BoxSummary) -> list[tuple[str, list[str]]]:
    """(pin id, golden against actual) for each pin that did not pass on the box."""
    return sorted(box.pin_details.items())


def since_title(since: Since) -> str:
    gating = "gating: --gate-against-last" if since.gating else "informational"
    return f"since (each box against its own earlier receipt, --against {since.against}; {gating})"


SINCE_LABELS = ("before", "now")
