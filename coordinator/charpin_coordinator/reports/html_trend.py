"""Coordinator side; imports report.py and html_base: the trend and flaky-test sections that drift.html and index.html share, and whether a box was clean (or changed) in a run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from charpin_coordinator.report import DriftReport, Since, SinceBox
from charpin_coordinator.reports.html_base import MAX_HTML_ROWS, attr, code_span, text


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
    """A test that failed in some runs of the same tree state on a box and not in others."""

    test: str
    box: str
    failed: int
    runs: int


def trend_section(trend: Mapping[str, Sequence[TrendPoint]], heading: str, note: str) -> str:
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
                f'<tr data-box="{attr(box)}"><td>{code_span(box)}</td><td>{clean} of {len(points)}'
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


def flaky_section(flaky: Sequence[FlakyTest]) -> str:
    out = [
        '<section id="flaky"><h2>Flaky tests</h2>',
        '<p class="muted">Tests that failed in some runs of one tree state on a box and passed '
        "in others: the same commit and the same uncommitted changes, so a failure an "
        "uncommitted edit explains does not count (each repeat of run --repeat is a run of its "
        "own).</p>",
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
                f'<tr><td class="id">{code_span(item.test)}</td><td>{code_span(item.box)}</td>'
                f'<td class="incomplete">{item.failed} of {item.runs} runs</td></tr>'
            )
        out.append("</tbody></table>")
    out.append("</section>")
    return "\n".join(out)


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
