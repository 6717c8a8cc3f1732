"""Coordinator side; imports report.py and the html_* modules below it (base, trend, since, evidence): a DriftReport as one self-contained page, drift.html (no script, no network)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from charpin_coordinator.report import (
    GATES,
    MAX_FAILING,
    DriftReport,
    FrozenReruns,
    Repeats,
)
from charpin_coordinator.reports import html_evidence
from charpin_coordinator.reports.common import (
    failing_subtests,
    failure_excerpt,
    outcome_counts,
    pin_drifts,
    subtest_counts,
)
from charpin_coordinator.reports.html_base import (
    MAX_HTML_ROWS,
    STATUS_CLASS,
    attr,
    code_span,
    diff_block,
    dimension_body,
    footer,
    matrix_table,
    more_note,
    page,
    status_cell,
    text,
)
from charpin_coordinator.reports.html_since import since_section, since_summary
from charpin_coordinator.reports.html_trend import (
    FlakyTest,
    TrendPoint,
    flaky_section,
    trend_section,
)


class RunPage(NamedTuple):
    """Where the page lives: the run's id, when it started (UTC, as shown), and each box's
    folder beside drift.html (box label -> folder name), whose logs and receipt it links to.
    `logs`: whether the box folders hold stdout.log and stderr.log (a fleet compare's hold the
    receipt only)."""

    run_id: str
    started: str
    folders: Mapping[str, str]
    logs: bool = True
    # box label -> pin id -> its folder under `<box>/pins-actual/` (the pins whose actual
    # outputs the receipt brought back).
    pins_actual: Mapping[str, Mapping[str, str]] = {}


def report_title(report: DriftReport) -> str:
    """The page's title: commit and exit code (what a browser tab or a history list shows)."""
    commit = (report.expected_commit or "unknown")[:12]
    return f"charpin drift · commit {commit} · exit {report.exit_code}"


def render_html(
    report: DriftReport,
    *,
    trend: Mapping[str, Sequence[TrendPoint]] | None = None,
    flaky: Sequence[FlakyTest] | None = None,
    run: RunPage | None = None,
) -> str:
    """The report as one self-contained page (drift.html). `run` adds the run id, its start and
    links to each box's logs and receipt in the run folder. `trend` (box -> runs, oldest first) and `flaky`
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
        ("pins", "Pins"),
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
        _run_line(run),
        "<nav>" + "".join(f'<a href="#{key}">{name}</a>' for key, name in sections) + "</nav>",
        _summary(report),
        _boxes(report, run),
        _gate_matrix(report),
        _blocking(report),
        _outcomes(report),
        _failing(report),
        _pins(report, run),
        _other_drift(report),
        _not_evaluated(report),
    ]
    if repeats is not None:
        body.append(html_evidence.repeats_section(repeats))
    if frozen is not None:
        body.append(html_evidence.frozen_section(frozen))
    # Next to the trend: both are this box over time, where the sections above are across boxes.
    if report.since is not None:
        body.append(since_section(report.since))
    if trend is not None:
        body.append(trend_section(trend, "Trend", "per box, one mark per run, oldest first"))
    if flaky is not None:
        body.append(flaky_section(flaky))
    body.append(footer())
    return page(report_title(report), body)


def _summary(report: DriftReport) -> str:
    clean = report.exit_code == 0
    verdict = "clean" if clean else f"exit {report.exit_code}: " + "; ".join(report.exit_bits)
    out = [
        '<section id="summary"><h2>Summary</h2>',
        f'<p><span class="verdict {"pass" if clean else "fail"}" id="verdict">{text(verdict)}'
        "</span></p>",
        "<ul>",
        f"<li>commit {code_span(report.expected_commit or 'unknown')}</li>",
        f"<li>baseline {code_span(report.baseline or 'none')}</li>",
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
        out.append(since_summary(report.since))
    if isinstance(report.repeats, Repeats):
        out.append(html_evidence.repeats_summary(report.repeats))
    if isinstance(report.frozen_reruns, FrozenReruns):
        out.append(html_evidence.frozen_summary(report.frozen_reruns))
    out.append("</ul></section>")
    return "\n".join(out)


def _run_line(run: RunPage | None) -> str:
    if run is None:
        return ""
    return (
        f'<p id="run-meta">run {code_span(run.run_id)} · started {text(run.started)}'
        ' · <a href="drift.json">drift.json</a></p>'
    )


def _links(label: str, run: RunPage | None, *, receipt: bool = True) -> str:
    """Links to the box's files in the run folder, relative to drift.html."""
    folder = None if run is None else run.folders.get(label)
    if folder is None or run is None:
        return ""
    base = urllib.parse.quote(folder, safe="")
    names = ["stdout.log", "stderr.log"] if run.logs else []
    names += ["receipt.json"] if receipt else []
    return " · ".join(f'<a href="{attr(base)}/{name}">{name}</a>' for name in names)


def _actual_links(label: str, pin: str, run: RunPage | None) -> str:
    folder = None if run is None else run.folders.get(label)
    where = None if run is None else run.pins_actual.get(label, {}).get(pin)
    if folder is None or where is None:
        return ""
    base = f"{urllib.parse.quote(folder, safe='')}/pins-actual/{urllib.parse.quote(where, safe='')}"
    files = ("stdout", "stderr", "exit_code", "about.json")
    links = " · ".join(f'<a href="{attr(base)}/{name}">{name}</a>' for name in files)
    return f'<p class="actual">actual outputs in the run folder: {links}</p>'


def _boxes(report: DriftReport, run: RunPage | None = None) -> str:
    logs = run is not None and bool(run.folders)
    out = [
        '<section id="boxes"><h2>Boxes</h2>',
        '<table id="box-table"><thead><tr><th>box</th><th>commit</th><th>result</th>'
        "<th>collected</th><th>executed</th><th>outcomes</th><th>group</th><th>python</th>"
        "<th>platform</th>" + ("<th>files</th>" if logs else "") + "</tr></thead><tbody>",
    ]
    for box in report.boxes:
        counts = outcome_counts(box)
        subtests = subtest_counts(box)
        said = text(counts) + (
            f'<br><span class="muted">{text(subtests)}</span>' if subtests else ""
        )
        root = (
            f'<br><span class="muted">{{repo}} = {code_span(box.id_root)}</span>'
            if box.id_root
            else ""
        )
        links = f"<td>{_links(box.label, run)}</td>" if logs else ""
        out.append(
            f'<tr data-box="{attr(box.label)}"><td>{code_span(box.label)}{root}</td>'
            f"<td>{code_span(box.commit[:12])}</td>"
            f"<td>{text(box.interpretation)} (exit {box.exit_status})</td>"
            f"<td>{box.collected}</td><td>{box.executed}</td><td>{said}</td>"
            f"<td>{box.group + 1}</td><td>{text(box.python)}</td><td>{text(box.platform)}</td>"
            f"{links}</tr>"
        )
    for miss in report.not_evaluated:
        links = f"<td>{_links(miss.label, run, receipt=False)}</td>" if logs else ""
        out.append(
            f'<tr data-box="{attr(miss.label)}"><td>{code_span(miss.label)}</td><td></td>'
            f'<td class="notevaluated" colspan="7">'
            f"NOT EVALUATED ({text(miss.kind)}): {text(miss.reason)}</td>{links}</tr>"
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
        row = [f'<tr data-box="{attr(box.label)}"><th scope="row">{code_span(box.label)}</th>']
        for gate in GATES:
            result = cells.get((box.label, gate))
            if result is None:
                row.append('<td class="muted">-</td>')
                continue
            row.append(
                f'<td class="{STATUS_CLASS[result.status]}" data-gate="{attr(gate)}" '
                f'title="{attr(result.detail)}">{text(result.status)}</td>'
            )
        out.append("".join(row) + "</tr>")
    for miss in report.not_evaluated:
        out.append(
            f'<tr data-box="{attr(miss.label)}"><th scope="row">{code_span(miss.label)}</th>'
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
                f"<tr><td>{text(g.gate)}</td><td>{code_span(g.box)}</td>{status_cell(g.status)}"
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
        out.append(matrix_table(dim, [box.label for box in report.boxes], "outcome-matrix"))
    out.append("</section>")
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
            "<th>failing subtests</th><th>why</th></tr></thead><tbody>"
        )
        for box in boxes:
            for test in box.failing[:MAX_HTML_ROWS]:
                excerpt = failure_excerpt(box, test)
                why = (  # each line escaped alone: the line breaks are the excerpt's own
                    f'<pre class="excerpt">{chr(10).join(text(line) for line in excerpt)}</pre>'
                    if excerpt
                    else ""
                )
                out.append(
                    f'<tr data-box="{attr(box.label)}"><td>{code_span(box.label)}</td>'
                    f'<td class="fail id">{code_span(test)}</td>'
                    f"<td>{text(failing_subtests(box, test))}</td><td>{why}</td></tr>"
                )
        out.append("</tbody></table>")
        for box in boxes:
            if len(box.failing) > MAX_HTML_ROWS:
                out.append(
                    more_note(len(box.failing) - MAX_HTML_ROWS, f"failing tests of {box.label}")
                )
            elif len(box.failing) >= MAX_FAILING:
                out.append(
                    f'<p class="more">{text(box.label)}: the report lists the first '
                    f"{MAX_FAILING} failing tests; the receipt has them all.</p>"
                )
    out.append("</section>")
    return "\n".join(out)


def _pins(report: DriftReport, run: RunPage | None = None) -> str:
    """Each pin that did not pass, per box: golden against actual, as the receipt says, and
    links to its actual outputs in the run folder."""
    out = ['<section id="pins"><h2>Pins that did not pass</h2>']
    drifted = [(box, pin, detail) for box in report.boxes for pin, detail in pin_drifts(box)]
    if not drifted:
        out.append('<p class="muted">Every replayed pin passed on every evaluated box.</p>')
    for box, pin, detail in drifted[:MAX_HTML_ROWS]:
        out.append(
            f'<h3 data-box="{attr(box.label)}" data-pin="{attr(pin)}">{code_span(box.label)}: '
            f"pin {code_span(pin)}</h3>"
        )
        out.append(diff_block("\n".join(detail)) if detail else '<p class="muted">no detail</p>')
        out.append(_actual_links(box.label, pin, run))
    out.append(more_note(len(drifted) - MAX_HTML_ROWS, "pins"))
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


def _not_evaluated(report: DriftReport) -> str:
    out = ['<section id="not-evaluated"><h2>Not evaluated</h2>']
    if not report.not_evaluated:
        out.append('<p class="muted">Every requested box was evaluated.</p>')
    else:
        out.append('<ul id="not-evaluated-list">')
        out += [
            f'<li><span class="notevaluated">{code_span(m.label)} NOT EVALUATED ({text(m.kind)})'
            f"</span>: {text(m.reason)}</li>"
            for m in report.not_evaluated
        ]
        out.append("</ul>")
    out.append("</section>")
    return "\n".join(out)
