"""Coordinator side; imports the stdlib, report.py and html_base: drift.html's "Since" section (each box against its own earlier receipt, `run --against`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from charpin_coordinator.report import Dimension, Since, SinceBox
from charpin_coordinator.reports.html_base import (
    MAX_HTML_ROWS,
    attr,
    code_span,
    dimension_body,
    id_diff_lines,
    more_note,
    text,
)

# temporal.py's labels for the pair (earlier receipt, this run's). Repeated here, not imported:
# this module reads report.py only, and temporal.py pulls in the drift builder and git.
_BEFORE, _NOW = "before", "now"
_BAD = ("failed", "error")
_NOT_RUN = "not run"
# Dimensions the box's block says kind by kind; any other is shown whole, as Other drift does.
_SAID_BY_KIND = frozenset(("outcomes", "collection", "fixtures", "environment"))
_DIM_NAMES = {
    "tree": "Working tree",
    "quarantine": "Ledger (quarantine)",
    "pins": "Pins",
    "exit": "Exit status",
    "collection": "Selection and execution",
}


def _since_heading(since: Since) -> str:
    """What the boxes were compared with, as a heading: one run when they share it."""
    refs = {box.reference for box in since.boxes if box.reference is not None}
    if len(refs) == 1:
        return f"Since run {next(iter(refs))}"
    if since.against == "last":
        return "Since each box's last run" if refs else "Since the last run"
    return f"Since {since.against}"


def since_summary(since: Since) -> str:
    compared = [box for box in since.boxes if box.reference is not None]
    changed = sum(1 for box in compared if box.changed)
    parts = [f"{changed} of {len(compared)} compared box(es) changed"]
    if len(compared) < len(since.boxes):
        parts.append(f"{len(since.boxes) - len(compared)} with no earlier receipt")
    parts.append("gating (--gate-against-last)" if since.gating else "informational")
    return f'<li><a href="#since">{text(_since_heading(since))}</a>: {text(", ".join(parts))}</li>'


def since_section(since: Since) -> str:
    if since.gating:
        gate = (
            '<p id="since-gating"><strong>Gating</strong> (--gate-against-last): a box that '
            "changed since its earlier receipt sets exit bit 2.</p>"
        )
    else:
        gate = (
            '<p id="since-gating" class="muted">Informational: gating stays cross-box '
            "(with --gate-against-last a change here would set exit bit 2).</p>"
        )
    out = [
        f'<section id="since"><h2>{text(_since_heading(since))}</h2>',
        f"<p>Each box against its own earlier receipt ({code_span('--against ' + since.against)}):"
        " what changed on that box since then.</p>",
        gate,
        '<table id="since-table"><thead><tr><th>box</th><th>compared with</th>'
        "<th>commit then</th><th>since then</th><th>gate</th></tr></thead><tbody>",
    ]
    details = []
    for index, box in enumerate(since.boxes):
        out.append(_since_row(index, box, since.gating))
        if box.reference is not None and (box.dimensions or box.new_failures or box.likely_cause):
            details.append(_since_box(index, box))
    out.append("</tbody></table>")
    if not since.boxes:
        out.append('<p class="muted">No box was evaluated, so none was compared.</p>')
    out += details
    out.append("</section>")
    return "\n".join(out)


def _since_row(index: int, box: SinceBox, gating: bool) -> str:
    def head(state: str) -> str:
        return f'<tr data-box="{attr(box.box)}" data-since="{state}"><td>{code_span(box.box)}</td>'

    if box.reference is None:
        return head("none") + (
            f'<td colspan="4" class="muted">nothing to compare with: {text(box.summary)}</td></tr>'
        )
    commit = box.reference_commit or ""
    commit_cell = (
        f'<td title="{attr(commit)}">{code_span(commit[:12])}</td>' if commit else "<td>-</td>"
    )
    state = "changed" if box.changed else "unchanged"
    summary = text(box.summary)
    if box.dimensions or box.new_failures or box.likely_cause:
        summary = f'<a href="#since-box-{index}">{summary}</a>'
    if box.likely_cause:
        summary += f"<br>likely cause: {text(box.likely_cause)}"
    if gating:
        gate = '<td class="fail">exit bit 2</td>' if box.changed else '<td class="pass">PASS</td>'
    else:
        gate = '<td class="muted">informational</td>'
    return head(state) + (
        f"<td>{code_span(box.reference)}</td>{commit_cell}"
        f'<td class="{"fail" if box.changed else "pass"}">{summary}</td>{gate}</tr>'
    )


def _since_box(index: int, box: SinceBox) -> str:
    """One compared box: the likely cause, then each kind of change as its own list."""
    changed = " changed" if box.changed else ""
    commit = (
        f" (commit {code_span((box.reference_commit or '')[:12])})" if box.reference_commit else ""
    )
    out = [
        f'<div class="since-box{changed}" id="since-box-{index}" data-box="{attr(box.box)}">',
        f"<h3>{code_span(box.box)} since {code_span(box.reference or '')}{commit}</h3>",
        f"<p>{text(box.summary)}</p>",
    ]
    if box.likely_cause:
        out.append(
            f'<p><span class="cause incomplete" data-kind="likely-cause">Likely cause: '
            f"{text(box.likely_cause)}</span></p>"
        )
    dims = {dim.name: dim for dim in box.dimensions}
    moves = _collected_moves(dims["collection"].diff) if "collection" in dims else None
    vanished, appeared = moves or ([], [])
    fixed, other = _outcome_changes(dims.get("outcomes"), box.new_failures, vanished + appeared)
    out += _kind("new-failures", "New failures", map(code_span, box.new_failures))
    out += _kind(
        "vanished", "Tests that vanished", map(code_span, vanished), "collected then, not now"
    )
    out += _kind(
        "appeared", "Tests that appeared", map(code_span, appeared), "collected now, not then"
    )
    out += _kind("fixed", "No longer failing", fixed)
    out += _kind("outcomes", "Other outcome changes", other, "then → now")
    fixtures = dims.get("fixtures")
    if fixtures is not None:
        started, stopped, rest = _fixture_changes(fixtures.details)
        out += _kind("fixtures-started", "Fixtures that started mutating", map(text, started))
        out += _kind("fixtures-stopped", "Fixtures that stopped mutating", map(text, stopped))
        out += _kind("fixtures-other", "Other fixture changes", map(text, rest))
    environment = dims.get("environment")
    if environment is not None:
        out += _kind(
            "environment",
            "Environment changes",
            map(text, environment.details),
            "informational: explains drift, never gates",
        )
    for number, dim in enumerate(box.dimensions):
        if dim.name in _SAID_BY_KIND and not (dim.name == "collection" and moves is None):
            continue
        out += _since_dimension(index, number, dim)
    out.append("</div>")
    return "\n".join(out)


def _kind(key: str, heading: str, items: Iterable[str], hint: str = "") -> list[str]:
    """One kind of change as a list; items are HTML already escaped. Nothing when empty."""
    shown = list(items)
    if not shown:
        return []
    said = f' <span class="muted">· {text(hint)}</span>' if hint else ""
    return [
        f"<h4>{text(heading)} ({len(shown)}){said}</h4>",
        f'<ul data-kind="{key}">',
        *(f"<li>{item}</li>" for item in shown[:MAX_HTML_ROWS]),
        "</ul>",
        more_note(len(shown) - MAX_HTML_ROWS, heading.lower()),
    ]


def _collected_moves(diff: str) -> tuple[list[str], list[str]] | None:
    """(vanished, appeared) from the `collected` part of the collection diff (temporal.py diffs
    before/collected against now/collected), or None when the collected sets are the same."""
    lines = id_diff_lines(diff)
    header = (f"--- {_BEFORE}/collected", f"+++ {_NOW}/collected")
    section, found = "", False
    vanished: list[str] = []
    appeared: list[str] = []
    at = 0
    while at < len(lines):
        line = lines[at]
        following = lines[at + 1] if at + 1 < len(lines) else ""
        if line.startswith("--- ") and following.startswith("+++ "):
            # A file header (a node id starts with its path, never with "-- "): the next part.
            section = "collected" if (line, following) == header else "other"
            found = found or section == "collected"
            at += 2
            continue
        if section == "collected" and line.startswith("-"):
            vanished.append(line[1:])
        elif section == "collected" and line.startswith("+"):
            appeared.append(line[1:])
        at += 1
    return (vanished, appeared) if found else None


def _outcome_changes(
    dim: Dimension | None, new_failures: Sequence[str], moved: Sequence[str]
) -> tuple[list[str], list[str]]:
    """(no longer failing, other changes) from the outcomes matrix, as escaped HTML; the new
    failures and the tests that vanished or appeared have their own lists."""
    if dim is None:
        return [], []
    said = set(new_failures) | set(moved)
    fixed, other = [], []
    for row in dim.matrix:
        if row.item in said:
            continue
        then, now = row.values.get(_BEFORE, _NOT_RUN), row.values.get(_NOW, _NOT_RUN)
        shown = f"{code_span(row.item)}: {text(then)} → {text(now)}"
        if then.startswith(_BAD) and not now.startswith(_BAD) and now != _NOT_RUN:
            fixed.append(shown)
        else:
            other.append(shown)
    return fixed, other


def _fixture_changes(details: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    """(started mutating, stopped mutating, the rest) from the fixtures dimension's details:
    a move during this run only, during the earlier run only, and what differed at the start."""
    started, stopped, rest = [], [], []
    for detail in details:
        during = detail.endswith(" during the run")
        if during and detail.startswith(f"{_NOW}: "):
            started.append(detail[len(_NOW) + 2 :])
        elif during and detail.startswith(f"{_BEFORE}: "):
            stopped.append(detail[len(_BEFORE) + 2 :])
        else:
            rest.append(detail)
    return started, stopped, rest


def _since_dimension(index: int, number: int, dim: Dimension) -> list[str]:
    """A dimension with no list of its own (tree, ledger, pins, exit): as Other drift shows it,
    with the pair's labels (before, now) for columns."""
    # The name only: the builder's summaries speak of boxes ("dirty working tree on now").
    tag = "" if dim.gating else " (informational)"
    table = f"since-{index}-matrix-{number}"
    kind = f' data-kind="{attr(dim.name)}"'
    return [
        f"<h4>{text(_DIM_NAMES.get(dim.name, dim.name) + tag)}</h4>",
        *dimension_body(dim, [_BEFORE, _NOW], table, kind),
    ]
