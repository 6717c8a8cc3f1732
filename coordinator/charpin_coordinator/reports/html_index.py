"""Coordinator side; imports report.py, html_base and html_trend: index.html over run folders (`charpin-remote history html DIR`), with the trend and flaky tests derived from the runs."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from charpin_coordinator.report import MAX_FAILING, BoxSummary, DriftReport, Repeats
from charpin_coordinator.reports.html_base import attr, code_span, footer, page, text
from charpin_coordinator.reports.html_trend import (
    FlakyTest,
    TrendPoint,
    box_change,
    box_clean,
    flaky_section,
    trend_section,
)

_FAILS = frozenset(("failed", "error"))


@dataclass(frozen=True)
class IndexedRun:
    """One run folder for the index: its report, or the reason it could not be read."""

    name: str
    started: str
    report: DriftReport | None
    problem: str = ""
    has_html: bool = False


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
    """Tests that failed in some but not all runs of the same tree state (commit and
    uncommitted changes, treestate.py) on the same box. Each
    repeat of a run (`run --repeat`, the report's Repeats section) is a run of its own, as
    `ledger suggest` counts them; a repeat that ran without the test is no run of it. A box
    whose failing list was capped says nothing about the tests it does not list: skipped."""
    seen: dict[tuple[str, str, str | None], list[TriedRun]] = {}
    for run in runs:
        if run.report is None:
            continue
        repeats = run.report.repeats if isinstance(run.report.repeats, Repeats) else None
        for box in run.report.boxes:
            if len(box.failing) >= MAX_FAILING:
                continue
            key = (box.label, box.commit, box.tree_state)
            seen.setdefault(key, []).extend(tried_runs(box, repeats))
    found: dict[tuple[str, str], list[int]] = {}
    for (label, _commit, _state), tried in seen.items():
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
        f'<p class="muted">in {code_span(where)}</p>',
        '<nav><a href="#runs">Runs</a><a href="#trend">Trend</a><a href="#flaky">Flaky tests</a>'
        "</nav>",
        '<section id="runs"><h2>Runs</h2>',
        '<table id="run-table"><thead><tr><th>run</th><th>started</th><th>commit</th>'
        "<th>boxes</th><th>result</th><th>gates not passing</th><th>failing tests</th>"
        "<th>not evaluated</th></tr></thead><tbody>",
        *rows,
        "</tbody></table>" + ("" if runs else '<p class="muted">No run folders here.</p>'),
        "</section>",
        trend_section(
            derive_trend(runs) if trend is None else trend,
            "Trend",
            "per box, oldest run first",
        ),
        flaky_section(derive_flaky(runs) if flaky is None else flaky),
        footer(),
    ]
    return page(title, body)


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
        f"<td>{code_span((report.expected_commit or 'unknown')[:12])}</td>"
        f"<td>{len(report.boxes)} of {requested}</td>"
        f'<td class="{"pass" if clean else "fail"}">{text(result)}</td>'
        f'<td class="{"fail" if fails else "incomplete" if bad else ""}">{text(gates)}</td>'
        f"<td>{failing}</td><td>{text(missing)}</td></tr>"
    )


# --- repeats as runs, for derive_flaky -------------------------------------------------------


class TriedRun(NamedTuple):
    """One run (or repeat) of a box: the tests that failed, and those it is known not to have
    run (a repeat's `absent`; a record's report does not say)."""

    failing: frozenset[str]
    absent: frozenset[str] = frozenset()


def tried_runs(box: BoxSummary, repeats: Repeats | None) -> list[TriedRun]:
    """The box's record and each of its repeats that gave a receipt. The report lists the
    record's failing tests and the tests whose outcome differed between repeats: a failing test
    not among those failed in every repeat."""
    entry = (
        None if repeats is None else next((b for b in repeats.boxes if b.box == box.label), None)
    )
    if entry is None:
        return [TriedRun(frozenset(box.failing))]
    missed = {miss.repeat for miss in entry.not_evaluated}
    steady = frozenset(box.failing) - {row.item for row in entry.differing}
    tried = []
    for index in range(len(entry.run_ids)):
        if index + 1 in missed:
            continue
        column = {
            row.item: row.outcomes[index] for row in entry.differing if index < len(row.outcomes)
        }
        failing = steady | {item for item, outcome in column.items() if outcome in _FAILS}
        absent = frozenset(item for item, outcome in column.items() if outcome == "absent")
        tried.append(TriedRun(failing, absent))
    return tried
