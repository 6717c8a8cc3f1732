"""Coordinator side; imports the stdlib, report.py, evidence_text's titles and html_base: drift.html's evidence-only sections (Repeats of `run --repeat N`, frozen tests re-run by `--include-frozen`)."""

from __future__ import annotations

from collections.abc import Sequence

from charpin_coordinator.report import (
    FrozenRerunBox,
    FrozenReruns,
    RepeatBox,
    Repeats,
)

# The text and Markdown reports' own words and folding, so every format says the same.
from charpin_coordinator.reports.evidence_text import (
    FROZEN_TITLE,
    REPEATS_TITLE,
    folded,
    repeats_said,
)
from charpin_coordinator.reports.html_base import (
    MAX_HTML_ROWS,
    OUTCOME_CLASS,
    attr,
    code_span,
    more_note,
    text,
)

_NEVER_GATES = "Repeats never gate: gates, drift and the exit code above are repeat 1's alone."
_LEGEND = (
    "Outcomes in repeat order, repeat 1 first; absent: that repeat ran without the test; "
    "-: that repeat gave no receipt."
)


def repeats_summary(repeats: Repeats) -> str:
    """The Summary's line: how many tests differ between repeats, and where."""
    differing = len({row.item for box in repeats.boxes for row in box.differing})
    where = sum(1 for box in repeats.boxes if box.differing)
    missed = sum(len(box.not_evaluated) for box in repeats.boxes)
    parts = [
        f"{differing} test(s) differ between repeats on {where} of {len(repeats.boxes)} box(es)"
        if differing
        else "no test differs between repeats"
    ]
    if missed:
        parts.append(f"{missed} repeat(s) not evaluated")
    return (
        f'<li><a href="#repeats">Repeats</a> (--repeat {repeats.count}, never gating): '
        f"{text('; '.join(parts))}</li>"
    )


def repeats_section(repeats: Repeats) -> str:
    """Per box how many repeats gave a receipt; tests x boxes, each cell the test's outcome in
    every repeat of that box; the repeats that gave no receipt."""
    out = [
        '<section id="repeats"><h2>Repeats</h2>',
        f'<p id="repeats-gating" class="muted">--repeat {repeats.count}: '
        f"{text(REPEATS_TITLE)}. {text(_NEVER_GATES)}</p>",
        '<table id="repeat-boxes"><thead><tr><th>box</th><th>repeats evaluated</th>'
        "<th>tests that differ</th><th>receipts</th></tr></thead><tbody>",
    ]
    for box in repeats.boxes:
        css = ' class="incomplete"' if box.differing else ""
        out.append(
            f'<tr data-box="{attr(box.box)}"><td>{code_span(box.box)}</td>'
            f"<td>{box.evaluated} of {repeats.count}</td><td{css}>{len(box.differing)}</td>"
            f"<td>{', '.join(code_span(run_id) for run_id in box.run_ids)}</td></tr>"
        )
    out.append("</tbody></table>")
    if any(box.differing for box in repeats.boxes):
        out += [f'<p class="muted">{text(_LEGEND)}</p>', _repeat_matrix(repeats.boxes)]
    else:
        out.append('<p class="muted">No test ended differently between repeats on any box.</p>')
    misses = [(box.box, miss) for box in repeats.boxes for miss in box.not_evaluated]
    if misses:
        out.append('<ul id="repeat-not-evaluated">')
        out += [
            f'<li data-box="{attr(label)}"><span class="notevaluated">{code_span(label)} repeat '
            f"{miss.repeat} NOT EVALUATED ({text(miss.kind)})</span>: {text(miss.reason)}</li>"
            for label, miss in misses
        ]
        out.append("</ul>")
    out.append("</section>")
    return "\n".join(out)


def _repeat_matrix(boxes: Sequence[RepeatBox]) -> str:
    """Tests (rows) x boxes with a difference (columns); a box where the test ended the same
    way in every repeat says so."""
    shown = [box for box in boxes if box.differing]
    rows = sorted({row.item for box in shown for row in box.differing})
    by_box = {box.box: {row.item: row.outcomes for row in box.differing} for box in shown}
    out = [
        '<table id="repeat-matrix"><thead><tr><th>test</th>'
        + "".join(f'<th data-box="{attr(box.box)}">{code_span(box.box)}</th>' for box in shown)
        + "</tr></thead><tbody>"
    ]
    for item in rows[:MAX_HTML_ROWS]:
        cells = []
        for box in shown:
            outcomes = by_box[box.box].get(item)
            if outcomes is None:
                cells.append(f'<td class="muted" data-box="{attr(box.box)}">same each repeat</td>')
            else:
                cells.append(f'<td data-box="{attr(box.box)}">{_sequence(outcomes)}</td>')
        # The test's cell as a failing test's: an outcome that changes is a failure somewhere.
        out.append(f'<tr><td class="fail id">{code_span(item)}</td>{"".join(cells)}</tr>')
    out.append("</tbody></table>")
    out.append(more_note(len(rows) - MAX_HTML_ROWS, "rows"))
    return "\n".join(out)


def _sequence(outcomes: Sequence[str]) -> str:
    """`passed, failed, passed`, each outcome coloured as in the outcome matrix."""
    return ", ".join(_outcome(outcome) for outcome in outcomes)


def _outcome(outcome: str) -> str:
    css = OUTCOME_CLASS.get(outcome.split(" ", 1)[0], "muted")
    return f'<span class="{css}">{text(outcome)}</span>'


def frozen_summary(frozen: FrozenReruns) -> str:
    """The Summary's line: how many side runs were clean, and which were not."""
    clean = sum(1 for side in frozen.boxes if side.clean)
    said = f"{clean} of {len(frozen.boxes)} side run(s) clean"
    dirty: dict[str, list[int]] = {}
    for side in frozen.boxes:
        if not side.clean:
            dirty.setdefault(side.box, []).append(side.repeat)
    if dirty:
        said += "; not clean: " + ", ".join(
            label if repeats == [1] else f"{label} ({repeats_said(repeats)})"
            for label, repeats in dirty.items()
        )
    return (
        '<li><a href="#frozen-reruns">Frozen tests re-run</a> (outside the gate): '
        f"{text(said)}</li>"
    )


def frozen_section(frozen: FrozenReruns) -> str:
    """Per box and repeat: clean or not (and why), and each frozen test's outcome."""
    out = [
        '<section id="frozen-reruns"><h2>Frozen tests re-run (outside the gate)</h2>',
        '<p id="frozen-gating" class="muted">The ledger\'s frozen tests, run once more on the '
        f"side after everything gated was measured ({text(FROZEN_TITLE)}).</p>",
    ]
    if frozen.boxes:
        out.append(
            '<table id="frozen-table"><thead><tr><th>box</th><th>repeat</th><th>side run</th>'
            "<th>frozen tests</th><th>why not clean</th></tr></thead><tbody>"
        )
        # Later repeats whose side run ended exactly the same way share its row, as in the text
        # and Markdown reports (ten identical side runs of --repeat 10 are one row, not ten).
        out += [_frozen_row(side, same) for side, same in folded(frozen.boxes)]
        out.append("</tbody></table>")
    if frozen.absent:
        out.append('<ul id="frozen-absent">')
        out += [f'<li class="muted">{text(line)}</li>' for line in frozen.absent]
        out.append("</ul>")
    if not frozen.boxes and not frozen.absent:
        out.append('<p class="muted">No box gave a receipt.</p>')
    out.append("</section>")
    return "\n".join(out)


def _frozen_row(side: FrozenRerunBox, same: list[int]) -> str:
    verdict = "clean" if side.clean else "not clean"
    said = f"{verdict} ({side.interpretation}) · {side.wall_seconds:.1f} s"
    tests = list(side.outcomes.items())
    listed = "".join(
        f"<li>{code_span(nodeid)}: {_outcome(outcome)}</li>"
        for nodeid, outcome in tests[:MAX_HTML_ROWS]
    )
    why = "" if side.clean else ("; ".join(side.reasons) or "not every frozen test passed")
    moved = "".join(
        f"<li>fixture changed: {code_span(path)}</li>" for path in side.fixtures_changed
    )
    same_note = (
        f'<br><span class="muted">{text(repeats_said(same))}: the same</span>' if same else ""
    )
    return (
        f'<tr data-box="{attr(side.box)}" data-repeat="{side.repeat}">'
        f"<td>{code_span(side.box)}</td><td>{side.repeat} ({code_span(side.run_id)}){same_note}</td>"
        f'<td class="{"pass" if side.clean else "fail"}">{text(said)}</td>'
        f'<td><ul class="frozen-tests">{listed}</ul>'
        f"{more_note(len(tests) - MAX_HTML_ROWS, 'frozen tests')}</td>"
        f"<td>{text(why)}{f'<ul>{moved}</ul>' if moved else ''}</td></tr>"
    )
