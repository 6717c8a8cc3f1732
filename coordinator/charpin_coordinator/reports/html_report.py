"""Coordinator side (home or CI); imports only the stdlib, charpin_runner's version and report.py: a DriftReport, and an index of run folders, as self-contained HTML pages (no script, no network)."""

from __future__ import annotations

import html
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from charpin_runner import __version__

from charpin_coordinator.report import (
    GATES,
    MAX_FAILING,
    Dimension,
    DriftReport,
    FrozenReruns,
    Repeats,
    Since,
    SinceBox,
)

# Receipt text is data. Everything a receipt, a label or a file name can carry is escaped with
# html.escape (so no tag, attribute or entity reaches the page), and what would be invisible or
# would reorder the text around it is shown as a visible marker instead: C0/C1 controls, the
# bidi embeddings, overrides and isolates (U+202E would turn `gpj.exe` into `exe.jpg`),
# zero-width and invisible format characters, line and paragraph separators, the BOM, Unicode
# tags, and lone surrogates (which could not even be encoded).
_INVISIBLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    "\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb"
    "\ufffe\uffff\ud800-\udfff\U000e0000-\U000e0fff]"
)

# Past these a section says how many more rows drift.json holds (a page stays readable).
MAX_HTML_ROWS = 1000
MAX_HTML_DIFF_LINES = 2000

_STATUS_CLASS = {"PASS": "pass", "FAIL": "fail", "INCOMPLETE": "incomplete"}
_OUTCOME_CLASS = {
    "passed": "pass",
    "failed": "fail",
    "error": "fail",
    "xpassed": "incomplete",
    "skipped": "muted",
    "xfailed": "muted",
    "not": "muted",  # "not run"
}

# No script may run and nothing may be fetched: a second line of defence behind the escaping.
_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
    "form-action 'none'"
)

_STYLE = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
  max-width: 1200px; padding: 1rem 1.5rem 3rem; color: #1f2328; background: #fff; }
h1 { font-size: 1.5rem; margin: .2rem 0 .6rem; }
h2 { font-size: 1.15rem; margin: 2rem 0 .5rem; border-bottom: 1px solid #d0d7de;
  padding-bottom: .2rem; }
h3 { font-size: 1rem; margin: 1.2rem 0 .4rem; }
nav a { margin-right: .9rem; }
table { border-collapse: collapse; margin: .4rem 0; }
th, td { border: 1px solid #d0d7de; padding: .25rem .5rem; text-align: left;
  vertical-align: top; unicode-bidi: isolate; }
th { background: #f6f8fa; font-weight: 600; }
code, pre { font: 12.5px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  unicode-bidi: isolate; direction: ltr; }
td.id code { word-break: break-all; }
pre { background: #f6f8fa; padding: .6rem; overflow-x: auto; border: 1px solid #d0d7de; }
.pass { background: #dafbe1; color: #116329; }
.fail { background: #ffebe9; color: #a40e26; font-weight: 600; }
.incomplete { background: #fff8c5; color: #7d4e00; font-weight: 600; }
.notevaluated { background: #ffebe9; color: #a40e26; font-weight: 600; }
.muted { color: #57606a; }
.verdict { display: inline-block; padding: .2rem .6rem; border-radius: 4px; font-weight: 600; }
.ctl { font: 11px ui-monospace, monospace; background: #fff1a8; color: #7c2d12;
  border: 1px solid #d4a72c; border-radius: 3px; padding: 0 2px; margin: 0 1px; }
.diff .add { color: #116329; } .diff .del { color: #a40e26; } .diff .hunk { color: #8250df; }
.trend span { display: inline-block; min-width: 1.3em; text-align: center; margin: 1px;
  border-radius: 3px; }
.trend span.changed { outline: 2px solid #8250df; outline-offset: -2px; }
h4 { font-size: .95rem; margin: .8rem 0 .3rem; }
.since-box { margin: .6rem 0 1.4rem; padding-left: .8rem; border-left: 3px solid #d0d7de; }
.since-box.changed { border-left-color: #cf222e; }
.cause { display: inline-block; padding: .2rem .5rem; border-radius: 4px; }
#since-table a { color: inherit; }
ul { margin: .3rem 0; padding-left: 1.3rem; }
.more { font-style: italic; color: #57606a; }
footer { margin-top: 2.5rem; color: #57606a; font-size: 12px; }
"""


class TrendPoint(NamedTuple):
    """One night of one box, as the history gives it: clean (every gate PASS, no failing test)
    or not. `note` says why not, when known. `changed`: whether the box changed since its own
    earlier receipt (`run --against`), None when that night did not compare; `since` says
    with what and how."""

    run_id: str
    started_at: str
    clean: bool
    note: str = ""
    changed: bool | None = None
    since: str = ""


class FlakyTest(NamedTuple):
    """A test that failed in some runs of the same commit on a box and not in others."""

    test: str
    box: str
    failed: int
    runs: int


@dataclass(frozen=True)
class IndexedRun:
    """One run folder for the index: its report, or the reason it could not be read."""

    name: str
    started: str
    report: DriftReport | None
    problem: str = ""
    has_html: bool = False


def text(value: str) -> str:
    """value as HTML text: escaped, with invisible and reordering characters shown visibly."""
    return _INVISIBLE.sub(_marker, html.escape(value, quote=True))


def attr(value: str) -> str:
    """value for a quoted attribute: escaped, invisible characters written as \\uNNNN text."""
    return html.escape(_INVISIBLE.sub(lambda m: _spelled(m.group()), value), quote=True)


def _spelled(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _marker(match: re.Match[str]) -> str:
    char = match.group()
    return f'<span class="ctl" title="U+{ord(char):04X}">{_spelled(char)}</span>'


def _code(value: str) -> str:
    return f"<code>{text(value)}</code>" if value else ""


def _status(status: str) -> str:
    return f'<td class="{_STATUS_CLASS.get(status, "muted")}">{text(status)}</td>'


def _more(count: int, what: str) -> str:
    return f'<p class="more">… {count} more {text(what)} in drift.json</p>' if count > 0 else ""


def _page(title: str, body: Iterable[str]) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en" dir="ltr">',
            "<head>",
            '<meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
            '<meta name="referrer" content="no-referrer">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{attr(title)}</title>",  # no markup inside a title: markers as text
            f"<style>{_STYLE}</style>",
            "</head>",
            "<body>",
            *body,
            "</body>",
            "</html>",
            "",
        ]
    )


def report_title(report: DriftReport) -> str:
    """The page's title: commit and exit code (what a browser tab or a history list shows)."""
    commit = (report.expected_commit or "unknown")[:12]
    return f"charpin drift · commit {commit} · exit {report.exit_code}"


def render_html(
    report: DriftReport,
    *,
    trend: Mapping[str, Sequence[TrendPoint]] | None = None,
    flaky: Sequence[FlakyTest] | None = None,
) -> str:
    """The report as one self-contained page (drift.html). `trend` (box -> runs, oldest first) and `flaky`
    come from the run history when there is one; each adds its section only when given. A report
    made with `run --against` (report.since) adds the "Since" section: each box against its own
    earlier receipt; one with repeats or frozen side runs (report.repeats, .frozen_reruns) adds
    the Repeats and "Frozen tests re-run" sections, evidence that never gates."""
    sections = [
        ("summary", "Summary"),
        ("boxes", "Boxes"),
        ("gates", "Gates"),
        ("blocking", "What blocks"),
        ("outcomes", "Tests × boxes"),
        ("failing", "Failing tests"),
        ("drift", "Other drift"),
        ("not-evaluated", "Not evaluated"),
    ]
    # Evidence beside the result (`run --repeat N`, `--include-frozen`): UNSET when not asked for.
    repeats = report.repeats if isinstance(report.repeats, Repeats) else None
    frozen = report.frozen_reruns if isinstance(report.frozen_reruns, FrozenReruns) else None
    if repeats is not None:
        sections.append(("repeats", "Repeats"))
    if frozen is not None:
        sections.append(("frozen-reruns", "Frozen re-runs"))
    if report.since is not None:
        sections.append(("since", "Since"))
    if trend is not None:
        sections.append(("trend", "Trend"))
    if flaky is not None:
        sections.append(("flaky", "Flaky tests"))
    body = [
        f"<h1>{text(report_title(report))}</h1>",
        "<nav>" + "".join(f'<a href="#{key}">{name}</a>' for key, name in sections) + "</nav>",
        _summary(report),
        _boxes(report),
        _gate_matrix(report),
        _blocking(report),
        _outcomes(report),
        _failing(report),
        _other_drift(report),
        _not_evaluated(report),
    ]
    if repeats is not None or frozen is not None:
        # Imported here: only a page made with --repeat or --include-frozen has the sections.
        from charpin_coordinator.reports import html_evidence

        if repeats is not None:
            body.append(html_evidence.repeats_section(repeats))
        if frozen is not None:
            body.append(html_evidence.frozen_section(frozen))
    # Next to the trend: both are this box over time, where the sections above are across boxes.
    if report.since is not None:
        # Imported here: only a page made with --against has the section.
        from charpin_coordinator.reports.html_since import since_section

        body.append(since_section(report.since))
    if trend is not None:
        body.append(_trend(trend, "Trend", "per box, one mark per run, oldest first"))
    if flaky is not None:
        body.append(_flaky(flaky))
    body.append(_footer())
    return _page(report_title(report), body)


def _summary(report: DriftReport) -> str:
    clean = report.exit_code == 0
    verdict = "clean" if clean else f"exit {report.exit_code}: " + "; ".join(report.exit_bits)
    out = [
        '<section id="summary"><h2>Summary</h2>',
        f'<p><span class="verdict {"pass" if clean else "fail"}" id="verdict">{text(verdict)}'
        "</span></p>",
        "<ul>",
        f"<li>commit {_code(report.expected_commit or 'unknown')}</li>",
        f"<li>baseline {_code(report.baseline or 'none')}</li>",
        f"<li>{len(report.boxes)} evaluated box(es), {len(report.not_evaluated)} not evaluated</li>",
    ]
    out += [
        f"<li>{text(', '.join(group))}: identical</li>" for group in report.groups if len(group) > 1
    ]
    if len(report.groups) > 1:
        out.append(f"<li>{len(report.groups)} distinct receipts</li>")
    out += [
        f'<li class="incomplete">vacuous: {text(reason)}</li>' for reason in report.vacuous_reasons
    ]
    if report.since is not None:
        from charpin_coordinator.reports.html_since import since_summary

        out.append(since_summary(report.since))
    if isinstance(report.repeats, Repeats):
        from charpin_coordinator.reports.html_evidence import repeats_summary

        out.append(repeats_summary(report.repeats))
    if isinstance(report.frozen_reruns, FrozenReruns):
        from charpin_coordinator.reports.html_evidence import frozen_summary

        out.append(frozen_summary(report.frozen_reruns))
    out.append("</ul></section>")
    return "\n".join(out)


def _boxes(report: DriftReport) -> str:
    out = [
        '<section id="boxes"><h2>Boxes</h2>',
        '<table id="box-table"><thead><tr><th>box</th><th>commit</th><th>result</th>'
        "<th>collected</th><th>executed</th><th>outcomes</th><th>group</th><th>python</th>"
        "<th>platform</th></tr></thead><tbody>",
    ]
    for box in report.boxes:
        counts = ", ".join(f"{n} {k}" for k, n in sorted(box.counts.items())) or "no outcomes"
        root = (
            f'<br><span class="muted">{{repo}} = {_code(box.id_root)}</span>' if box.id_root else ""
        )
        out.append(
            f"<tr><td>{_code(box.label)}{root}</td><td>{_code(box.commit[:12])}</td>"
            f"<td>{text(box.interpretation)} (exit {box.exit_status})</td>"
            f"<td>{box.collected}</td><td>{box.executed}</td><td>{text(counts)}</td>"
            f"<td>{box.group + 1}</td><td>{text(box.python)}</td><td>{text(box.platform)}</td></tr>"
        )
    for miss in report.not_evaluated:
        out.append(
            f'<tr><td>{_code(miss.label)}</td><td></td><td class="notevaluated" colspan="7">'
            f"NOT EVALUATED ({text(miss.kind)}): {text(miss.reason)}</td></tr>"
        )
    out.append("</tbody></table></section>")
    return "\n".join(out)


def _gate_matrix(report: DriftReport) -> str:
    """Boxes x gates; a box that was not evaluated is one row saying so across every gate."""
    cells = {(g.box, g.gate): g for g in report.gates}
    out = [
        '<section id="gates"><h2>Gates</h2>',
        '<table id="gate-matrix"><thead><tr><th>box</th>'
        + "".join(f'<th scope="col">{text(gate)}</th>' for gate in GATES)
        + "</tr></thead><tbody>",
    ]
    for box in report.boxes:
        row = [f'<tr data-box="{attr(box.label)}"><th scope="row">{_code(box.label)}</th>']
        for gate in GATES:
            result = cells.get((box.label, gate))
            if result is None:
                row.append('<td class="muted">-</td>')
                continue
            row.append(
                f'<td class="{_STATUS_CLASS[result.status]}" data-gate="{attr(gate)}" '
                f'title="{attr(result.detail)}">{text(result.status)}</td>'
            )
        out.append("".join(row) + "</tr>")
    for miss in report.not_evaluated:
        out.append(
            f'<tr data-box="{attr(miss.label)}"><th scope="row">{_code(miss.label)}</th>'
            f'<td class="notevaluated" colspan="{len(GATES)}">NOT EVALUATED '
            f"({text(miss.kind)})</td></tr>"
        )
    out.append("</tbody></table></section>")
    return "\n".join(out)


def _blocking(report: DriftReport) -> str:
    failing = [g for g in report.gates if g.status != "PASS"]
    out = ['<section id="blocking"><h2>What blocks</h2>']
    if not failing:
        out.append('<p class="muted">Nothing: every gate passed on every evaluated box.</p>')
    else:
        out.append(
            '<table id="blocking-table"><thead><tr><th>gate</th><th>box</th><th>status</th>'
            "<th>detail</th><th>action</th></tr></thead><tbody>"
        )
        for g in failing:
            out.append(
                f"<tr><td>{text(g.gate)}</td><td>{_code(g.box)}</td>{_status(g.status)}"
                f"<td>{text(g.detail)}</td><td>{text(g.action)}</td></tr>"
            )
        out.append("</tbody></table>")
    out.append("</section>")
    return "\n".join(out)


def _outcomes(report: DriftReport) -> str:
    dim = next((d for d in report.dimensions if d.name == "outcomes"), None)
    out = ['<section id="outcomes"><h2>Tests × boxes that differ</h2>']
    if dim is None or not dim.matrix:
        out.append('<p class="muted">Every test ended the same way on every box.</p>')
    else:
        out.append(f"<p>{text(dim.summary)}</p>")
        out.append(_matrix(dim, [box.label for box in report.boxes], "outcome-matrix"))
    out.append("</section>")
    return "\n".join(out)


def _matrix(dim: Dimension, labels: Sequence[str], table_id: str) -> str:
    out = [
        f'<table id="{table_id}"><thead><tr><th>{"test" if dim.name == "outcomes" else "item"}</th>'
        + "".join(f"<th>{_code(label)}</th>" for label in labels)
        + "</tr></thead><tbody>"
    ]
    for row in dim.matrix[:MAX_HTML_ROWS]:
        cells = []
        for label in labels:
            value = row.values.get(label, "-")
            css = _OUTCOME_CLASS.get(value.split(" ", 1)[0], "")
            cells.append(
                f'<td class="{css}">{text(value)}</td>' if css else f"<td>{text(value)}</td>"
            )
        out.append(f'<tr><td class="id">{_code(row.item)}</td>{"".join(cells)}</tr>')
    out.append("</tbody></table>")
    out.append(_more(len(dim.matrix) - MAX_HTML_ROWS, "rows"))
    return "\n".join(out)


def _failing(report: DriftReport) -> str:
    boxes = [box for box in report.boxes if box.failing]
    out = ['<section id="failing"><h2>Failing tests</h2>']
    if not boxes:
        out.append('<p class="muted">No test failed on any evaluated box.</p>')
    else:
        out.append(
            '<p class="muted">Failing tests are not drift: exit bit 1 carries them.</p>'
            '<table id="failing-tests"><thead><tr><th>box</th><th>test</th>'
            "<th>failing subtests</th></tr></thead><tbody>"
        )
        for box in boxes:
            for test in box.failing[:MAX_HTML_ROWS]:
                subtests = ", ".join(box.failing_subtests.get(test, []))
                out.append(
                    f'<tr data-box="{attr(box.label)}"><td>{_code(box.label)}</td>'
                    f'<td class="fail id">{_code(test)}</td><td>{text(subtests)}</td></tr>'
                )
        out.append("</tbody></table>")
        for box in boxes:
            if len(box.failing) > MAX_HTML_ROWS:
                out.append(_more(len(box.failing) - MAX_HTML_ROWS, f"failing tests of {box.label}"))
            elif len(box.failing) >= MAX_FAILING:
                out.append(
                    f'<p class="more">{text(box.label)}: the report lists the first '
                    f"{MAX_FAILING} failing tests; the receipt has them all.</p>"
                )
    out.append("</section>")
    return "\n".join(out)


def _other_drift(report: DriftReport) -> str:
    labels = [box.label for box in report.boxes]
    dims = [d for d in report.dimensions if d.name != "outcomes"]
    out = ['<section id="drift"><h2>Other drift</h2>']
    if not dims:
        out.append('<p class="muted">None.</p>')
    for index, dim in enumerate(dims):
        tag = "" if dim.gating else ' <span class="muted">(informational)</span>'
        out.append(f'<h3 id="drift-{index}">{text(dim.name)}{tag}: {text(dim.summary)}</h3>')
        out += dimension_body(dim, labels, f"matrix-{index}")
    out.append("</section>")
    return "\n".join(out)


def dimension_body(
    dim: Dimension, labels: Sequence[str], table_id: str, list_attrs: str = ""
) -> list[str]:
    """A dimension's details, diff and matrix, each capped (drift.json keeps everything)."""
    out = []
    if dim.details:
        out.append(f"<ul{list_attrs}>")
        out += [f"<li>{text(d)}</li>" for d in dim.details[:MAX_HTML_ROWS]]
        out.append("</ul>")
        out.append(_more(len(dim.details) - MAX_HTML_ROWS, "details"))
    if dim.diff:
        out.append(_diff(dim.diff))
    if dim.matrix:
        out.append(_matrix(dim, labels, table_id))
    return out


def _diff_lines(diff: str) -> list[str]:
    """A unified diff of ids, one entry per diff line. A line that does not start like a diff
    line continues an id that held a newline: it is joined back (shown later as a marker)."""
    body = diff[:-1] if diff.endswith("\n") else diff
    lines: list[str] = []
    for line in body.split("\n"):
        if lines and not line.startswith((" ", "+", "-", "@")):
            lines[-1] += "\n" + line
        else:
            lines.append(line)
    return lines


def _diff(diff: str) -> str:
    """A unified diff of ids, one line per line, an id's own newline shown as a marker."""
    lines = _diff_lines(diff)
    shown = []
    for line in lines[:MAX_HTML_DIFF_LINES]:
        css = {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "")
        shown.append(f'<span class="{css}">{text(line)}</span>' if css else text(line))
    extra = _more(len(lines) - MAX_HTML_DIFF_LINES, "diff lines")
    return '<pre class="diff">' + "\n".join(shown) + "</pre>" + extra


def _not_evaluated(report: DriftReport) -> str:
    out = ['<section id="not-evaluated"><h2>Not evaluated</h2>']
    if not report.not_evaluated:
        out.append('<p class="muted">Every requested box was evaluated.</p>')
    else:
        out.append('<ul id="not-evaluated-list">')
        out += [
            f'<li><span class="notevaluated">{_code(m.label)} NOT EVALUATED ({text(m.kind)})'
            f"</span>: {text(m.reason)}</li>"
            for m in report.not_evaluated
        ]
        out.append("</ul>")
    out.append("</section>")
    return "\n".join(out)


def _trend(trend: Mapping[str, Sequence[TrendPoint]], heading: str, note: str) -> str:
    compared = any(p.changed is not None for points in trend.values() for p in points)
    out = [
        f'<section id="trend"><h2>{text(heading)}</h2>',
        f'<p class="muted">{text(note)}: ✓ clean (every gate PASS, no failing test), '
        "✗ not clean (hover for the run and why)"
        + (
            "; Δ (ringed) the box changed since its earlier receipt, on the nights that "
            "compared with one (run --against)"
            if compared
            else ""
        )
        + ".</p>",
    ]
    if not any(trend.values()):
        out.append('<p class="muted">No nights recorded yet.</p>')
    else:
        out.append(
            '<table id="trend-table"><thead><tr><th>box</th><th>clean</th><th>runs</th>'
            "</tr></thead><tbody>"
        )
        for box, points in sorted(trend.items()):
            marks = "".join(_mark(p) for p in points[-MAX_HTML_ROWS:])
            clean = sum(1 for p in points if p.clean)
            out.append(
                f'<tr data-box="{attr(box)}"><td>{_code(box)}</td><td>{clean} of {len(points)}'
                f'</td><td class="trend">{marks}</td></tr>'
            )
        out.append("</tbody></table>")
    out.append("</section>")
    return "\n".join(out)


def _mark(point: TrendPoint) -> str:
    css = "pass" if point.clean else "fail"
    glyph = "✓" if point.clean else "✗"
    if point.changed:
        css, glyph = f"{css} changed", f"{glyph}Δ"  # not by colour alone: Δ reads in print too
    return f'<span class="{css}" title="{attr(_point_title(point))}">{glyph}</span>'


def _point_title(point: TrendPoint) -> str:
    state = "clean" if point.clean else "not clean"
    note = f": {point.note}" if point.note else ""
    since = ""
    if point.changed is not None:
        since = f" · {'changed' if point.changed else 'no change'} {point.since}".rstrip()
    return f"{point.started_at} · {point.run_id} · {state}{note}{since}"


def _flaky(flaky: Sequence[FlakyTest]) -> str:
    out = [
        '<section id="flaky"><h2>Flaky tests</h2>',
        '<p class="muted">Tests that failed in some runs of one commit on a box and passed in '
        "others (each repeat of run --repeat is a run of its own).</p>",
    ]
    if not flaky:
        out.append('<p class="muted">None found.</p>')
    else:
        out.append(
            '<table id="flaky-table"><thead><tr><th>test</th><th>box</th><th>failed</th>'
            "</tr></thead><tbody>"
        )
        for item in flaky[:MAX_HTML_ROWS]:
            out.append(
                f'<tr><td class="id">{_code(item.test)}</td><td>{_code(item.box)}</td>'
                f'<td class="incomplete">{item.failed} of {item.runs} runs</td></tr>'
            )
        out.append("</tbody></table>")
    out.append("</section>")
    return "\n".join(out)


def _footer() -> str:
    return (
        f"<footer>charpin-remote {text(__version__)} · one file, no script, nothing fetched; "
        "drift.json holds everything.</footer>"
    )


# --- the index over run folders (`charpin-remote history html DIR`) ---------------------------


def box_clean(report: DriftReport, box: str) -> tuple[bool, str]:
    """Whether a box was clean in a run (evaluated, every gate PASS, no failing test), and why
    not."""
    miss = next((m for m in report.not_evaluated if m.label == box), None)
    if miss is not None:
        return False, f"not evaluated ({miss.kind})"
    bad = [g.gate for g in report.gates if g.box == box and g.status != "PASS"]
    summary = next((b for b in report.boxes if b.label == box), None)
    failing = len(summary.failing) if summary is not None else 0
    reasons = []
    if bad:
        reasons.append("gates not passing: " + ", ".join(bad))
    if failing:
        reasons.append(f"{failing} failing test(s)")
    return not reasons, "; ".join(reasons)


def box_change(report: DriftReport, box: str) -> tuple[bool | None, str]:
    """Whether a box changed since its own earlier receipt in a run made with --against, and
    since what (`since RUN: summary`); (None, "") when that run did not compare the box."""
    entry = None if report.since is None else _since_entry(report.since, box)
    if entry is None or entry.reference is None:
        return None, ""
    return entry.changed, f"since {entry.reference}: {entry.summary}"


def _since_entry(since: Since, box: str) -> SinceBox | None:
    return next((entry for entry in since.boxes if entry.box == box), None)


def derive_trend(runs: Sequence[IndexedRun]) -> dict[str, list[TrendPoint]]:
    """Per box, one point per run that names it, oldest first (runs come newest first)."""
    trend: dict[str, list[TrendPoint]] = {}
    for run in reversed(runs):
        if run.report is None:
            continue
        labels = [b.label for b in run.report.boxes] + [m.label for m in run.report.not_evaluated]
        for label in dict.fromkeys(labels):
            clean, why = box_clean(run.report, label)
            changed, since = box_change(run.report, label)
            point = TrendPoint(run.name, run.started, clean, why, changed, since)
            trend.setdefault(label, []).append(point)
    return trend


def derive_flaky(runs: Sequence[IndexedRun]) -> list[FlakyTest]:
    """Tests that failed in some but not all runs of the same commit on the same box. Each
    repeat of a run (`run --repeat`, the report's Repeats section) is a run of its own, as
    `ledger suggest` counts them; a repeat that ran without the test is no run of it. A box
    whose failing list was capped says nothing about the tests it does not list: skipped."""
    # Imported here: html_evidence builds on this module's helpers.
    from charpin_coordinator.reports.html_evidence import TriedRun, tried_runs

    seen: dict[tuple[str, str], list[TriedRun]] = {}
    for run in runs:
        if run.report is None:
            continue
        repeats = run.report.repeats if isinstance(run.report.repeats, Repeats) else None
        for box in run.report.boxes:
            if len(box.failing) >= MAX_FAILING:
                continue
            seen.setdefault((box.label, box.commit), []).extend(tried_runs(box, repeats))
    found: dict[tuple[str, str], list[int]] = {}
    for (label, _commit), tried in seen.items():
        for test in set().union(*(t.failing for t in tried)):
            ran = [t for t in tried if test not in t.absent]
            failed = sum(1 for t in ran if test in t.failing)
            if failed < len(ran):
                counts = found.setdefault((test, label), [0, 0])
                counts[0] += failed
                counts[1] += len(ran)
    return [
        FlakyTest(test, box, failed, total)
        for (test, box), (failed, total) in sorted(found.items(), key=lambda kv: (-kv[1][0], kv[0]))
    ]


def render_index(
    runs: Sequence[IndexedRun],
    *,
    where: str,
    trend: Mapping[str, Sequence[TrendPoint]] | None = None,
    flaky: Sequence[FlakyTest] | None = None,
) -> str:
    """index.html over run folders (newest first): one row per run linking to its report, the
    per-box trend and the flaky tests (derived from the runs unless the history gives them)."""
    title = f"charpin runs · {len(runs)} run(s)"
    rows = []
    for run in runs:
        rows.append(_index_row(run))
    body = [
        f"<h1>{text(title)}</h1>",
        f'<p class="muted">in {_code(where)}</p>',
        '<nav><a href="#runs">Runs</a><a href="#trend">Trend</a><a href="#flaky">Flaky tests</a>'
        "</nav>",
        '<section id="runs"><h2>Runs</h2>',
        '<table id="run-table"><thead><tr><th>run</th><th>started</th><th>commit</th>'
        "<th>boxes</th><th>result</th><th>gates not passing</th><th>failing tests</th>"
        "<th>not evaluated</th></tr></thead><tbody>",
        *rows,
        "</tbody></table>" + ("" if runs else '<p class="muted">No run folders here.</p>'),
        "</section>",
        _trend(
            derive_trend(runs) if trend is None else trend,
            "Trend",
            "per box, oldest run first",
        ),
        _flaky(derive_flaky(runs) if flaky is None else flaky),
        _footer(),
    ]
    return _page(title, body)


def _index_row(run: IndexedRun) -> str:
    folder = urllib.parse.quote(run.name, safe="")
    report = run.report
    target = "drift.html" if run.has_html else "drift.json"
    link = f'<a href="{attr(folder)}/{target}">{text(run.name)}</a>'
    if report is None:
        return (
            f'<tr data-run="{attr(run.name)}"><td>{link}</td><td>{text(run.started)}</td>'
            f'<td colspan="6" class="incomplete">{text(run.problem)}</td></tr>'
        )
    clean = report.exit_code == 0
    result = "clean" if clean else f"exit {report.exit_code}: " + "; ".join(report.exit_bits)
    bad = [g for g in report.gates if g.status != "PASS"]
    fails = sum(1 for g in bad if g.status == "FAIL")
    parts = [
        f"{fails} FAIL" if fails else "",
        f"{len(bad) - fails} INCOMPLETE" if len(bad) > fails else "",
    ]
    gates = ", ".join(p for p in parts if p) or "none"
    failing = sum(len(b.failing) for b in report.boxes)
    missing = ", ".join(f"{m.label} ({m.kind})" for m in report.not_evaluated)
    requested = len(report.boxes) + len(report.not_evaluated)
    return (
        f'<tr data-run="{attr(run.name)}"><td>{link}</td><td>{text(run.started)}</td>'
        f"<td>{_code((report.expected_commit or 'unknown')[:12])}</td>"
        f"<td>{len(report.boxes)} of {requested}</td>"
        f'<td class="{"pass" if clean else "fail"}">{text(result)}</td>'
        f'<td class="{"fail" if fails else "incomplete" if bad else ""}">{text(gates)}</td>'
        f"<td>{failing}</td><td>{text(missing)}</td></tr>"
    )
