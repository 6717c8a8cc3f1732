"""Coordinator side; may import rich and msgspec. DriftReport -> text, Markdown, JSON.

Text uses rich tables on a terminal and plain aligned lines when piped; Markdown is fit for a PR
comment or a CI step summary; JSON is the report itself (the source of truth). Long matrices and
diffs are capped in text and Markdown (the JSON keeps everything). Receipt text is data in every
renderer: control characters are shown escaped, rich gets Text (never markup strings), Markdown
gets escaped text or code spans with a long enough fence.
"""

from __future__ import annotations

import io
import re

import msgspec
from charpin_runner.pins.compare import mark_changed_lines

from charpin_coordinator.report import GATES, Dimension, DriftReport, Since, map_strings
from charpin_coordinator.reports import evidence as render_evidence

# Receipts are untrusted: a label or node id carrying ESC or a newline must not repaint the
# terminal or forge a line in a PR comment. C0/C1 controls are shown as \xNN instead; the
# invisible direction and line-separator marks as \uNNNN (they reorder or break what is shown).
_CONTROLS: dict[int, str] = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
_CONTROLS.update(
    {c: f"\\u{c:04x}" for c in (0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))}
)
_CONTROLS.update({c: f"\\u{c:04x}" for c in (0x2028, 0x2029, 0xFEFF)})

# Markdown: HTML-significant characters become entities (so no tag reaches the renderer), the
# rest of the inline syntax is backslash-escaped (links, emphasis, code, tables, strikethrough).
_MD_ESCAPES: dict[int, str] = {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;"}
_MD_ESCAPES.update({ord(c): "\\" + c for c in "\\`*_[]|~"})
# At the start of a list item or quote these would open a block (heading, list, rule).
_MD_BLOCK_START = re.compile(r"^(?:[#+=-]|\d{1,9}[.)])")

MAX_ROWS = 50
MAX_DIFF_LINES = 200
_STYLE = {"PASS": "green", "FAIL": "bold red", "INCOMPLETE": "yellow"}


def encode_json(report: DriftReport) -> bytes:
    """The report as indented JSON (what `--json` prints and drift.json holds)."""
    return msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n"


def shown(text: str) -> str:
    """text as every display shows receipt or alias text: controls and invisible marks escaped.
    (The redactor masks a secret in this spelling too.)"""
    return text.translate(_CONTROLS)


def _diff_shown(diff: str) -> str:
    """A unified diff of node ids with its line breaks kept. An id may itself hold a newline:
    a line that does not start like a diff line (` `, `+`, `-`, `@`) continues the id before it
    and is joined back with the break escaped, so an id cannot add a free-standing line. An
    id's trailing spaces are shown (␠), or two ids that differ only there would look equal."""
    body = diff[:-1] if diff.endswith("\n") else diff
    lines: list[str] = []
    for line in body.split("\n"):
        if lines and not line.startswith((" ", "+", "-", "@")):
            lines[-1] += _CONTROLS[0x0A] + shown(line)
        else:
            lines.append(shown(line))
    return "\n".join(mark_changed_lines(lines)) + "\n"


def _displayable(report: DriftReport) -> DriftReport:
    """The report with every control character escaped (for text and Markdown only)."""
    escaped = map_strings(report, shown)
    dimensions = [
        msgspec.structs.replace(dim, diff=_diff_shown(raw.diff)) if raw.diff else dim
        for dim, raw in zip(escaped.dimensions, report.dimensions, strict=True)
    ]
    since = escaped.since
    if since is not None and report.since is not None:
        boxes = [
            msgspec.structs.replace(
                box,
                dimensions=[
                    msgspec.structs.replace(d, diff=_diff_shown(r.diff)) if r.diff else d
                    for d, r in zip(box.dimensions, raw.dimensions, strict=True)
                ],
            )
            for box, raw in zip(since.boxes, report.since.boxes, strict=True)
        ]
        since = msgspec.structs.replace(since, boxes=boxes)
    return msgspec.structs.replace(escaped, dimensions=dimensions, since=since)


def _labels(report: DriftReport) -> list[str]:
    return [box.label for box in report.boxes]


def _gate_cell(report: DriftReport, gate: str, box: str) -> str:
    for result in report.gates:
        if result.gate == gate and result.box == box:
            return result.status
    return "-"


def _header(report: DriftReport) -> str:
    commit = (report.expected_commit or "unknown")[:12]
    return (
        f"charpin drift · {len(report.boxes)} evaluated box(es) · baseline "
        f"{report.baseline or 'none'} · commit {commit}"
    )


def _box_line(report: DriftReport, index: int) -> str:
    box = report.boxes[index]
    counts = ", ".join(f"{n} {k}" for k, n in sorted(box.counts.items())) or "no outcomes"
    return (
        f"{box.label}: commit {box.commit[:12]} · {box.interpretation} (exit {box.exit_status}) · "
        f"collected {box.collected} · executed {box.executed} · {counts}"
        + (f" · ids: {{repo}} = {box.id_root}" if box.id_root else "")
    )


def _groups_lines(report: DriftReport) -> list[str]:
    lines = [f"{', '.join(g)}: identical" for g in report.groups if len(g) > 1]
    if len(report.groups) > 1:
        lines.append(f"{len(report.groups)} distinct receipts")
    return lines


def _diff_lines(diff: str) -> list[str]:
    lines = diff.splitlines()
    if len(lines) > MAX_DIFF_LINES:
        extra = len(lines) - MAX_DIFF_LINES
        lines = [*lines[:MAX_DIFF_LINES], f"... {extra} more diff lines in drift.json"]
    return lines


def _failing(report: DriftReport) -> list[str]:
    lines = []
    for result in report.gates:
        if result.status != "PASS":
            lines.append(f"{result.gate} · {result.box} · {result.status}: {result.detail}")
            lines.append(f"    action: {result.action}")
    return lines


def _footer(report: DriftReport) -> list[str]:
    lines = [f"vacuous: {reason}" for reason in report.vacuous_reasons]
    bits = "; ".join(report.exit_bits) or "clean"
    lines.append(f"exit {report.exit_code} ({bits})")
    return lines


def render_text(report: DriftReport, *, color: bool) -> str:
    """Human report: rich tables when color (a terminal), plain aligned text otherwise."""
    report = _displayable(report)
    if color:
        return _render_rich(report)
    return _render_plain(report)


def _render_plain(report: DriftReport) -> str:
    out = [_header(report), "", "boxes"]
    out += [f"  {_box_line(report, i)}" for i in range(len(report.boxes))]
    out += [f"  {line}" for line in _groups_lines(report)]
    for miss in report.not_evaluated:
        out.append(f"  {miss.label}: NOT EVALUATED ({miss.kind}): {miss.reason}")
    out += ["", "drift" if report.dimensions else "drift: none"]
    for dim in report.dimensions:
        out.extend(_plain_dimension(dim, _labels(report)))
    out += ["", "gates"]
    labels = _labels(report)
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
            _gate_cell(report, gate, lb).ljust(w) for lb, w in zip(labels, widths, strict=False)
        ]
        out.append("  " + gate.ljust(width) + "  " + "  ".join(cells))
    failing = _failing(report)
    if failing:
        out += ["", "blocking"] + [f"  {line}" for line in failing]
    tests = _failing_tests(report)
    if tests:
        out += ["", "failing tests (not drift: exit bit 1)"] + [f"  {line}" for line in tests]
    out += _since_lines(report)
    out += render_evidence.text_lines(report)
    out += ["", *_footer(report)]
    return "\n".join(line.rstrip() for line in out) + "\n"


def _failing_tests(report: DriftReport) -> list[str]:
    """Per box, the tests that failed there (the same on every box is still worth seeing)."""
    lines = []
    for box in report.boxes:
        for test in box.failing[:MAX_ROWS]:
            lines.append(f"{box.label}: {test}{_subtests_note(box.failing_subtests.get(test))}")
        if len(box.failing) > MAX_ROWS:
            lines.append(f"{box.label}: ... {len(box.failing) - MAX_ROWS} more in drift.json")
    return lines


def _subtests_note(failing: list[str] | None) -> str:
    """` · failing subtests (i=1), (i=3)` for a test whose subtests failed."""
    return f" · failing subtests {', '.join(failing)}" if failing else ""


def _plain_dimension(dim: Dimension, labels: list[str]) -> list[str]:
    tag = "" if dim.gating else " (informational)"
    out = [f"  [{dim.name}]{tag} {dim.summary}"]
    out += [f"    {d}" for d in dim.details[:MAX_ROWS]]
    if len(dim.details) > MAX_ROWS:
        out.append(f"    ... {len(dim.details) - MAX_ROWS} more in drift.json")
    if dim.diff:
        out += [f"    {line}" for line in _diff_lines(dim.diff)]
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
        width=120,
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
        counts = ", ".join(f"{n} {k}" for k, n in sorted(box.counts.items()))
        boxes.add_row(
            cell(box.label),
            cell(box.commit[:12]),
            cell(f"{box.interpretation} ({box.exit_status})"),
            cell(str(box.collected)),
            cell(str(box.executed)),
            cell(counts),
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
    for line in _groups_lines(report):
        console.print(cell(line))
    for dim in report.dimensions:
        console.print(cell(f"[{dim.name}] {dim.summary}", "bold" if dim.gating else "dim"))
        for line in _plain_dimension(dim, _labels(report))[1:]:
            console.print(cell(line))
    gates = Table(title="gates", title_justify="left")
    gates.add_column("gate")
    for label in _labels(report):
        gates.add_column(cell(label))
    for gate in GATES:
        cells = [_gate_cell(report, gate, lb) for lb in _labels(report)]
        gates.add_row(cell(gate), *(cell(c, _STYLE.get(c, "")) for c in cells))
    console.print(gates)
    for line in _failing(report):
        console.print(cell(line))
    for line in _since_lines(report)[1:]:
        console.print(cell(line))
    for line in render_evidence.text_lines(report)[1:]:
        console.print(cell(line))
    for line in _footer(report):
        console.print(cell(line, "bold"))
    return buffer.getvalue()


def render_markdown(report: DriftReport) -> str:
    """Markdown for a PR comment or `$GITHUB_STEP_SUMMARY`. Every receipt-sourced string is
    escaped (`_md`, or `_code` inside a code span), so a hostile label or node id cannot add
    HTML, a link, emphasis, a table cell or a line."""
    report = _displayable(report)
    labels = _labels(report)
    commit = (report.expected_commit or "unknown")[:12]
    out = [
        f"## charpin drift · {len(report.boxes)} evaluated box(es) · baseline "
        f"{_md(report.baseline or 'none')} · commit {_code(commit)}",
        "",
    ]
    out += [
        "| box | commit | result | collected | executed | outcomes |",
        "|---|---|---|---|---|---|",
    ]
    for box in report.boxes:
        counts = ", ".join(f"{n} {k}" for k, n in sorted(box.counts.items()))
        out.append(
            f"| {_md(box.label)} | {_code(box.commit[:12], table=True)} "
            f"| {_md(box.interpretation)} ({box.exit_status}) "
            f"| {box.collected} | {box.executed} | {_md(counts)} |"
        )
    for miss in report.not_evaluated:
        out.append(
            f"| {_md(miss.label)} | | **NOT EVALUATED** ({miss.kind}) | | | {_md(miss.reason)} |"
        )
    out += [""] + [f"- {_md(line)}" for line in _groups_lines(report)]
    out += ["", "### Gates", "", "| gate | " + " | ".join(_md(lb) for lb in labels) + " |"]
    out.append("|---|" + "---|" * len(labels))
    for gate in GATES:
        cells = [_md_status(_gate_cell(report, gate, lb)) for lb in labels]
        out.append(f"| {gate} | " + " | ".join(cells) + " |")
    failing = [g for g in report.gates if g.status != "PASS"]
    if failing:
        out += ["", "### What blocks", ""]
        for g in failing:
            out.append(f"- **{g.gate}** on {_code(g.box)} ({g.status}): {_md(g.detail)}  ")
            out.append(f"  *Action:* {_md(g.action)}")
    tests = [box for box in report.boxes if box.failing]
    if tests:
        out += ["", "### Failing tests", ""]
        for box in tests:
            shown_ids = ", ".join(
                _code(t) + _md(_subtests_note(box.failing_subtests.get(t)))
                for t in box.failing[:MAX_ROWS]
            )
            more = len(box.failing) - MAX_ROWS
            out.append(
                f"- {_code(box.label)}: {shown_ids}" + (f" and {more} more" if more > 0 else "")
            )
    if report.dimensions:
        out += ["", "### Drift", ""]
        for dim in report.dimensions:
            out.extend(_md_dimension(dim, labels))
    out += _md_since(report)
    out += render_evidence.markdown_lines(report, _md, _code)
    out += [""] + [f"> {_md(line)}" for line in _footer(report)]
    return "\n".join(out) + "\n"


def _md_dimension(dim: Dimension, labels: list[str]) -> list[str]:
    tag = "" if dim.gating else " *(informational)*"
    out = [f"#### {_md(dim.name)}{tag}: {_md(dim.summary)}", ""]
    out += [f"- {_md(d)}" for d in dim.details[:MAX_ROWS]]
    if len(dim.details) > MAX_ROWS:
        out.append(f"- … {len(dim.details) - MAX_ROWS} more in drift.json")
    if dim.diff:
        lines = _diff_lines(dim.diff)
        fence = "`" * max(3, _longest_backtick_run("\n".join(lines)) + 1)
        out += ["", f"{fence}diff", *lines, fence]
    if dim.matrix:
        out += ["", "| item | " + " | ".join(_md(lb) for lb in labels) + " |"]
        out.append("|---|" + "---|" * len(labels))
        for row in dim.matrix[:MAX_ROWS]:
            cells = " | ".join(_md(row.values.get(lb, "-")) for lb in labels)
            out.append(f"| {_code(row.item, table=True)} | {cells} |")
        if len(dim.matrix) > MAX_ROWS:
            out.append(f"\n… {len(dim.matrix) - MAX_ROWS} more rows in drift.json")
    out.append("")
    return out


def _since_title(since: Since) -> str:
    gating = "gating: --gate-against-last" if since.gating else "informational"
    return f"since (each box against its own earlier receipt, --against {since.against}; {gating})"


def _since_lines(report: DriftReport) -> list[str]:
    """`run --against`: per box, what changed since its reference run on this box."""
    if report.since is None:
        return []
    out = ["", _since_title(report.since)]
    for box in report.since.boxes:
        if box.reference is None:
            out.append(f"  {box.box}: {box.summary}")
            continue
        out.append(f"  {box.box}: since {box.reference} on this box · {box.summary}")
        if box.likely_cause:
            out.append(f"    likely cause: {box.likely_cause}")
        out += [f"    new failure: {test}" for test in box.new_failures[:MAX_ROWS]]
        for dim in box.dimensions:
            out += [f"  {line}" for line in _plain_dimension(dim, list(_SINCE_LABELS))]
    return out


def _md_since(report: DriftReport) -> list[str]:
    if report.since is None:
        return []
    title = _since_title(report.since)
    out = ["", f"### {_md('S' + title[1:])}", ""]
    for box in report.since.boxes:
        if box.reference is None:
            out += [f"#### {_md(box.box)}: {_md(box.summary)}", ""]
            continue
        out += [
            f"#### {_md(box.box)}: since {_code(box.reference)} on this box",
            "",
            f"- {_md(box.summary)}",
        ]
        if box.likely_cause:
            out.append(f"- **Likely cause:** {_md(box.likely_cause)}")
        out += [f"- new failure: {_code(test)}" for test in box.new_failures[:MAX_ROWS]]
        out.append("")
        for dim in box.dimensions:
            out.extend(
                line.replace("#### ", "##### ", 1) if line.startswith("#### ") else line
                for line in _md_dimension(dim, list(_SINCE_LABELS))
            )
    return out


_SINCE_LABELS = ("before", "now")


def _md(text: str) -> str:
    """Text for Markdown inline content (a table cell, a list item, a heading)."""
    escaped = shown(text).translate(_MD_ESCAPES)
    if _MD_BLOCK_START.match(escaped):
        escaped = "\\" + escaped if not escaped[0].isdigit() else _escape_ordinal(escaped)
    return escaped


def _escape_ordinal(text: str) -> str:
    digits = len(text) - len(text.lstrip("0123456789"))
    return f"{text[:digits]}\\{text[digits:]}"


def _longest_backtick_run(text: str) -> int:
    return max((len(run) for run in re.findall("`+", text)), default=0)


def _code(text: str, *, table: bool = False) -> str:
    """Text as a code span: inside one nothing but the closing fence is syntax, so the fence is
    longer than any backtick run in the text. In a table a `|` still ends the cell unless it is
    escaped (GFM strips that backslash again inside the span)."""
    text = shown(text)
    if table:
        text = text.replace("|", "\\|")
    if not text:
        return ""
    fence = "`" * (_longest_backtick_run(text) + 1)
    # CommonMark strips one space on each side, so padding keeps a leading backtick apart.
    if text[0] in "` " or text[-1] in "` ":
        text = f" {text} "
    return f"{fence}{text}{fence}"


def _md_status(status: str) -> str:
    return {"PASS": "✅ PASS", "FAIL": "❌ FAIL", "INCOMPLETE": "⚠️ INCOMPLETE"}.get(status, status)
