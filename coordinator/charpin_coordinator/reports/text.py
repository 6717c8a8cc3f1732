"""Coordinator side; may import rich. DriftReport -> text: rich tables on a terminal, plain aligned lines when piped. Imports escape, common and evidence_text of this package.

Long matrices and diffs are capped (the JSON keeps everything). rich gets Text, never markup
strings, so a label cannot become a live terminal hyperlink.
"""

from __future__ import annotations

import io

from charpin_runner import colors

from charpin_coordinator.report import GATES, Dimension, DriftReport
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
from charpin_coordinator.reports.escape import displayable

_STYLE = {"PASS": "green", "FAIL": "bold red", "INCOMPLETE": "yellow"}
FAILING_TITLE = "failing tests (not drift: exit bit 1)"
PINS_TITLE = (
    "pins that did not pass (golden against actual; a run folder keeps their actual outputs "
    "under <box>/pins-actual/)"
)


def _header(report: DriftReport) -> str:
    commit = (report.expected_commit or "unknown")[:12]
    return (
        f"charpin drift · {len(report.boxes)} evaluated box(es) · baseline "
        f"{report.baseline or 'none'} · commit {commit}"
    )


def _box_line(report: DriftReport, index: int) -> str:
    box = report.boxes[index]
    subtests = subtest_counts(box)
    return (
        f"{box.label}: commit {box.commit[:12]} · {box.interpretation} (exit {box.exit_status}) · "
        f"collected {box.collected} · executed {box.executed} · {outcome_counts(box)}"
        + (f" · {subtests}" if subtests else "")
        + (f" · ids: {{repo}} = {box.id_root}" if box.id_root else "")
    )


def _failing(report: DriftReport) -> list[str]:
    lines = []
    for result in report.gates:
        if result.status != "PASS":
            lines.append(f"{result.gate} · {result.box} · {result.status}: {result.detail}")
            lines.append(f"    action: {result.action}")
    return lines


def render_text(report: DriftReport, *, color: bool) -> str:
    """Human report: rich tables when color (a terminal), plain aligned text otherwise."""
    report = displayable(report)
    if color:
        return _render_rich(report)
    return _render_plain(report)


def _render_plain(report: DriftReport) -> str:
    out = [_header(report), "", "boxes"]
    out += [f"  {_box_line(report, i)}" for i in range(len(report.boxes))]
    out += [f"  {line}" for line in groups_lines(report)]
    for miss in report.not_evaluated:
        out.append(f"  {miss.label}: NOT EVALUATED ({miss.kind}): {miss.reason}")
    out += ["", "drift" if report.dimensions else "drift: none"]
    for dim in report.dimensions:
        out.extend(_plain_dimension(dim, box_labels(report)))
    out += ["", "gates"]
    labels = box_labels(report)
    width = max([len(g) for g in GATES] + [4])
    widths = [max(len(label), 10) for label in labels]
    out.append(
        "  "
        + "gate".ljust(width)
        + "  "
        + "  ".join(lb.ljust(w) for lb, w in zip(labels, widths, strict=False))
    )
    for gate in GATES:
        cells = [
            gate_cell(report, gate, lb).ljust(w) for lb, w in zip(labels, widths, strict=False)
        ]
        out.append("  " + gate.ljust(width) + "  " + "  ".join(cells))
    failing = _failing(report)
    if failing:
        out += ["", "blocking"] + [f"  {line}" for line in failing]
    tests = _failing_tests(report)
    if tests:
        out += ["", FAILING_TITLE] + [f"  {line}" for line in tests]
    pins = _pin_lines(report)
    if pins:
        out += ["", PINS_TITLE] + [f"  {line}" for line in pins]
    out += _since_lines(report)
    out += evidence_text.text_lines(report)
    out += ["", *footer_lines(report)]
    return "\n".join(line.rstrip() for line in out) + "\n"


def _failing_tests(report: DriftReport) -> list[str]:
    """Per box, the tests that failed there (the same on every box is still worth seeing)."""
    lines = []
    for box in report.boxes:
        for test in box.failing[:MAX_ROWS]:
            lines.append(f"{box.label}: {test}{subtests_note(box, test)}")
            lines += [f"    {line}" for line in failure_excerpt(box, test, MAX_EXCERPT_LINES)]
        if len(box.failing) > MAX_ROWS:
            lines.append(f"{box.label}: ... {len(box.failing) - MAX_ROWS} more in drift.json")
    return lines


def _pin_lines(report: DriftReport) -> list[str]:
    """Per box, each pin that did not pass, and golden against actual as the receipt says."""
    lines = []
    for box in report.boxes:
        for pin, detail in pin_drifts(box):
            lines.append(f"{box.label}: pin {pin}")
            lines += [f"    {line}" for line in detail[:MAX_DIFF_LINES]]
    return lines


def _plain_dimension(dim: Dimension, labels: list[str]) -> list[str]:
    tag = "" if dim.gating else " (informational)"
    out = [f"  [{dim.name}]{tag} {dim.summary}"]
    out += [f"    {d}" for d in dim.details[:MAX_ROWS]]
    if len(dim.details) > MAX_ROWS:
        out.append(f"    ... {len(dim.details) - MAX_ROWS} more in drift.json")
    if dim.diff:
        out += [f"    {line}" for line in capped_diff_lines(dim.diff)]
    if dim.matrix:
        rows = dim.matrix[:MAX_ROWS]
        width = max(len(row.item) for row in rows)
        cols = [max([len(lb)] + [len(row.values.get(lb, "-")) for row in rows]) for lb in labels]
        out.append(
            "    "
            + "item".ljust(width)
            + "  "
            + "  ".join(lb.ljust(w) for lb, w in zip(labels, cols, strict=False))
        )
        for row in rows:
            cells = "  ".join(
                row.values.get(lb, "-").ljust(w) for lb, w in zip(labels, cols, strict=False)
            )
            out.append(f"    {row.item.ljust(width)}  {cells}")
        if len(dim.matrix) > MAX_ROWS:
            out.append(f"    ... {len(dim.matrix) - MAX_ROWS} more rows in drift.json")
    return out


def _render_rich(report: DriftReport) -> str:
    # rich costs ~70 ms to import: only terminals pay for it, not --json, Markdown or pipes.
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # Every receipt-sourced string goes in as a Text, never as a str: rich parses a str as
    # markup, and `[link=...]` in a label would become a live OSC 8 hyperlink on the terminal.
    def cell(text: str, style: str = "") -> Text:
        return Text(text, style=style)

    buffer = io.StringIO()
    console = Console(
        file=buffer,
        force_terminal=True,
        width=colors.width(),  # the terminal's (COLUMNS first), not a fixed 120
        color_system="standard",
        highlight=False,
        markup=False,
        emoji=False,
    )
    console.print(cell(_header(report), "bold"))
    boxes = Table(title="boxes", title_justify="left")
    for column in ("box", "commit", "result", "collected", "executed", "outcomes", "group"):
        boxes.add_column(column)
    for box in report.boxes:
        counts = outcome_counts(box)
        subtests = subtest_counts(box)
        boxes.add_row(
            cell(box.label),
            cell(box.commit[:12]),
            cell(f"{box.interpretation} ({box.exit_status})"),
            cell(str(box.collected)),
            cell(str(box.executed)),
            cell(f"{counts}; {subtests}" if subtests else counts),
            cell(str(box.group + 1)),
        )
    for miss in report.not_evaluated:
        boxes.add_row(
            cell(miss.label),
            cell(""),
            cell(f"NOT EVALUATED ({miss.kind})", "bold red"),
            cell(""),
            cell(""),
            cell(miss.reason),
            cell(""),
        )
    console.print(boxes)
    for line in groups_lines(report):
        console.print(cell(line))
    for dim in report.dimensions:
        console.print(cell(f"[{dim.name}] {dim.summary}", "bold" if dim.gating else "dim"))
        for line in _plain_dimension(dim, box_labels(report))[1:]:
            console.print(cell(line))
    gates = Table(title="gates", title_justify="left")
    gates.add_column("gate")
    for label in box_labels(report):
        gates.add_column(cell(label))
    for gate in GATES:
        cells = [gate_cell(report, gate, lb) for lb in box_labels(report)]
        gates.add_row(cell(gate), *(cell(c, _STYLE.get(c, "")) for c in cells))
    console.print(gates)
    for line in _failing(report):
        console.print(cell(line))
    for title, lines in ((FAILING_TITLE, _failing_tests(report)), (PINS_TITLE, _pin_lines(report))):
        if lines:
            console.print(cell(title, "bold"))
            for line in lines:
                console.print(cell(f"  {line}"))
    for line in _since_lines(report)[1:]:
        console.print(cell(line))
    for line in evidence_text.text_lines(report)[1:]:
        console.print(cell(line))
    for line in footer_lines(report):
        console.print(cell(line, "bold"))
    return buffer.getvalue()


def _since_lines(report: DriftReport) -> list[str]:
    """`run --against`: per box, what changed since its reference run on this box."""
    if report.since is None:
        return []
    out = ["", since_title(report.since)]
    for box in report.since.boxes:
        if box.reference is None:
            out.append(f"  {box.box}: {box.summary}")
            continue
        out.append(f"  {box.box}: since {box.reference} on this box · {box.summary}")
        if box.likely_cause:
            out.append(f"    likely cause: {box.likely_cause}")
        out += [f"    new failure: {test}" for test in box.new_failures[:MAX_ROWS]]
        for dim in box.dimensions:
            out += [f"  {line}" for line in _plain_dimension(dim, list(SINCE_LABELS))]
    return out
