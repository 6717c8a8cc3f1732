"""Coordinator side; pure. DriftReport -> Markdown fit for a PR comment or a CI step summary. Imports escape, common and evidence_text of this package."""

from __future__ import annotations

from charpin_coordinator.report import GATES, BoxSummary, Dimension, DriftReport
from charpin_coordinator.reports import evidence_text
from charpin_coordinator.reports.common import (
    MAX_DIFF_LINES,
    MAX_EXCERPT_LINES,
    MAX_ROWS,
    SINCE_LABELS,
    box_labels,
    capped_diff_lines,
    failure_excerpt,
    footer_lines,
    gate_cell,
    groups_lines,
    outcome_counts,
    pin_drifts,
    since_title,
    subtest_counts,
    subtests_note,
)
from charpin_coordinator.reports.escape import displayable, longest_backtick_run, md, md_code


def render_markdown(report: DriftReport) -> str:
    """Markdown for a PR comment or `$GITHUB_STEP_SUMMARY`. Every receipt-sourced string is
    escaped (`md`, or `md_code` inside a code span), so a hostile label or node id cannot add
    HTML, a link, emphasis, a table cell or a line."""
    report = displayable(report)
    labels = box_labels(report)
    commit = (report.expected_commit or "unknown")[:12]
    out = [
        f"## charpin drift · {len(report.boxes)} evaluated box(es) · baseline "
        f"{md(report.baseline or 'none')} · commit {md_code(commit)}",
        "",
    ]
    out += [
        "| box | commit | result | collected | executed | outcomes |",
        "|---|---|---|---|---|---|",
    ]
    for box in report.boxes:
        counts = outcome_counts(box)
        if subtest_counts(box):
            counts += f"; {subtest_counts(box)}"
        out.append(
            f"| {md(box.label)} | {md_code(box.commit[:12], table=True)} "
            f"| {md(box.interpretation)} ({box.exit_status}) "
            f"| {box.collected} | {box.executed} | {md(counts)} |"
        )
    for miss in report.not_evaluated:
        out.append(
            f"| {md(miss.label)} | | **NOT EVALUATED** ({miss.kind}) | | | {md(miss.reason)} |"
        )
    out += [""] + [f"- {md(line)}" for line in groups_lines(report)]
    out += ["", "### Gates", "", "| gate | " + " | ".join(md(lb) for lb in labels) + " |"]
    out.append("|---|" + "---|" * len(labels))
    for gate in GATES:
        cells = [_md_status(gate_cell(report, gate, lb)) for lb in labels]
        out.append(f"| {gate} | " + " | ".join(cells) + " |")
    failing = [g for g in report.gates if g.status != "PASS"]
    if failing:
        out += ["", "### What blocks", ""]
        for g in failing:
            out.append(f"- **{g.gate}** on {md_code(g.box)} ({g.status}): {md(g.detail)}  ")
            out.append(f"  *Action:* {md(g.action)}")
    tests = [box for box in report.boxes if box.failing]
    if tests:
        out += ["", "### Failing tests", ""]
        for box in tests:
            out += _md_failing(box)
    drifted = [box for box in report.boxes if box.pin_details]
    if drifted:
        out += ["", "### Pins that did not pass (golden against actual)", ""]
        for box in drifted:
            for pin, detail in pin_drifts(box):
                out.append(f"- {md_code(box.label)}: pin {md_code(pin)}")
                out += _fenced(detail[:MAX_DIFF_LINES], "diff", "  ")
    if report.dimensions:
        out += ["", "### Drift", ""]
        for dim in report.dimensions:
            out.extend(_md_dimension(dim, labels))
    out += _md_since(report)
    out += evidence_text.markdown_lines(report, md, md_code)
    out += [""] + [f"> {md(line)}" for line in footer_lines(report)]
    return "\n".join(out) + "\n"


def _md_failing(box: BoxSummary) -> list[str]:
    """A box's failing tests: one line of ids, or, when the receipt says why they failed, one
    item per test with its excerpt in a fenced block."""
    shown = box.failing[:MAX_ROWS]
    more = len(box.failing) - MAX_ROWS
    tail = f" and {more} more" if more > 0 else ""
    if not any(failure_excerpt(box, t) for t in shown):
        ids = ", ".join(md_code(t) + md(subtests_note(box, t)) for t in shown)
        return [f"- {md_code(box.label)}: {ids}{tail}"]
    out = [f"- {md_code(box.label)}:"]
    for test in shown:
        out.append(f"  - {md_code(test)}{md(subtests_note(box, test))}")
        out += _fenced(failure_excerpt(box, test, MAX_EXCERPT_LINES), "text", "    ")
    if tail:
        out.append(f"  - …{md(tail)}")
    return out


def _fenced(lines: list[str], info: str, indent: str) -> list[str]:
    """lines as a fenced block inside a list item; the fence outruns any backtick run."""
    if not lines:
        return []
    fence = "`" * max(3, longest_backtick_run("\n".join(lines)) + 1)
    return [f"{indent}{fence}{info}", *(f"{indent}{line}" for line in lines), f"{indent}{fence}"]


def _md_dimension(dim: Dimension, labels: list[str]) -> list[str]:
    tag = "" if dim.gating else " *(informational)*"
    out = [f"#### {md(dim.name)}{tag}: {md(dim.summary)}", ""]
    out += [f"- {md(d)}" for d in dim.details[:MAX_ROWS]]
    if len(dim.details) > MAX_ROWS:
        out.append(f"- … {len(dim.details) - MAX_ROWS} more in drift.json")
    if dim.diff:
        lines = capped_diff_lines(dim.diff)
        fence = "`" * max(3, longest_backtick_run("\n".join(lines)) + 1)
        out += ["", f"{fence}diff", *lines, fence]
    if dim.matrix:
        out += ["", "| item | " + " | ".join(md(lb) for lb in labels) + " |"]
        out.append("|---|" + "---|" * len(labels))
        for row in dim.matrix[:MAX_ROWS]:
            cells = " | ".join(md(row.values.get(lb, "-")) for lb in labels)
            out.append(f"| {md_code(row.item, table=True)} | {cells} |")
        if len(dim.matrix) > MAX_ROWS:
            out.append(f"\n… {len(dim.matrix) - MAX_ROWS} more rows in drift.json")
    out.append("")
    return out


def _md_since(report: DriftReport) -> list[str]:
    if report.since is None:
        return []
    title = since_title(report.since)
    out = ["", f"### {md('S' + title[1:])}", ""]
    for box in report.since.boxes:
        if box.reference is None:
            out += [f"#### {md(box.box)}: {md(box.summary)}", ""]
            continue
        out += [
            f"#### {md(box.box)}: since {md_code(box.reference)} on this box",
            "",
            f"- {md(box.summary)}",
        ]
        if box.likely_cause:
            out.append(f"- **Likely cause:** {md(box.likely_cause)}")
        out += [f"- new failure: {md_code(test)}" for test in box.new_failures[:MAX_ROWS]]
        out.append("")
        for dim in box.dimensions:
            out.extend(
                line.replace("#### ", "##### ", 1) if line.startswith("#### ") else line
                for line in _md_dimension(dim, list(SINCE_LABELS))
            )
    return out


def _md_status(status: str) -> str:
    return {"PASS": "✅ PASS", "FAIL": "❌ FAIL", "INCOMPLETE": "⚠️ INCOMPLETE"}.get(status, status)
