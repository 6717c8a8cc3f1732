"""Coordinator side; imports msgspec and report.py. The report's evidence-only sections (Repeats,
frozen re-runs) as text and Markdown lines, for text.py and markdown.py. Pure functions over a
report whose strings escape.displayable has already escaped; Markdown escaping is passed in."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from charpin_coordinator.report import DriftReport, FrozenRerunBox, RepeatBox, RepeatMiss

MAX_ROWS = 50
REPEATS_TITLE = "evidence only, never gating; repeat 1 is the receipt of record"
FROZEN_TITLE = "outside the gate: never changes a gate or the exit code"

Escape = Callable[[str], str]


def text_lines(report: DriftReport) -> list[str]:
    """The plain-text sections (each starts with an empty line), or none."""
    out: list[str] = []
    repeats = report.repeats
    if not isinstance(repeats, msgspec.UnsetType):
        out += ["", f"repeats (--repeat {repeats.count}: {REPEATS_TITLE})"]
        for box in repeats.boxes:
            out.append(f"  {box.box}: {_box_summary(box, repeats.count)}")
            for row in box.differing[:MAX_ROWS]:
                out.append(f"    {row.item}  {box.box}: {', '.join(row.outcomes)}")
            if len(box.differing) > MAX_ROWS:
                out.append(f"    ... {len(box.differing) - MAX_ROWS} more in drift.json")
            for miss in box.not_evaluated:
                head, why = _miss(box.box, miss)
                out.append(f"    repeat {miss.repeat} {head}: {why}")
    frozen = report.frozen_reruns
    if not isinstance(frozen, msgspec.UnsetType):
        out += ["", f"frozen tests re-run ({FROZEN_TITLE})"]
        for side, same in folded(frozen.boxes):
            out.append(f"  {_where(side)}: {_verdict(side)}")
            if side.repeat == 1 or not side.clean:
                rows = list(side.outcomes.items())
                out += [f"    {nodeid}  {outcome}" for nodeid, outcome in rows[:MAX_ROWS]]
                if len(rows) > MAX_ROWS:
                    out.append(f"    ... {len(rows) - MAX_ROWS} more in drift.json")
            if same:
                out.append(f"  {side.box}, {repeats_said(same)}: the same as repeat {side.repeat}")
        out += [f"  {line}" for line in frozen.absent]
        if not frozen.boxes and not frozen.absent:
            out.append("  no box gave a receipt")
    return out


def markdown_lines(report: DriftReport, md: Escape, code: Callable[..., str]) -> list[str]:
    """The Markdown sections; md escapes inline text, code makes a code span (table=True in a
    table cell)."""
    out: list[str] = []
    repeats = report.repeats
    if not isinstance(repeats, msgspec.UnsetType):
        out += ["", "### Repeats", "", f"*--repeat {repeats.count}: {REPEATS_TITLE}.*", ""]
        for box in repeats.boxes:
            out += [f"#### {md(box.box)}: {md(_box_summary(box, repeats.count))}", ""]
            if box.differing:
                heads = " | ".join(f"repeat {k}" for k in range(1, len(box.run_ids) + 1))
                out += [f"| test | {heads} |", "|---|" + "---|" * len(box.run_ids)]
                for row in box.differing[:MAX_ROWS]:
                    cells = " | ".join(md(o) for o in row.outcomes)
                    out.append(f"| {code(row.item, table=True)} | {cells} |")
                if len(box.differing) > MAX_ROWS:
                    out.append(f"\n… {len(box.differing) - MAX_ROWS} more rows in drift.json")
                out.append("")
            for miss in box.not_evaluated:
                out.append(
                    f"- repeat {miss.repeat} **{_miss(box.box, miss)[0]}**: "
                    f"{md(_miss(box.box, miss)[1])}"
                )
            if box.not_evaluated:
                out.append("")
    frozen = report.frozen_reruns
    if not isinstance(frozen, msgspec.UnsetType):
        out += ["", "### Frozen tests re-run (outside the gate)", "", f"*{FROZEN_TITLE}.*", ""]
        for side, same in folded(frozen.boxes):
            where = code(side.box) + (f", repeat {side.repeat}" if side.repeat > 1 else "")
            verdict = "**clean**" if side.clean else "**not clean**"
            out.append(f"- {where}: {verdict} {md(_details(side))}")
            if side.repeat == 1 or not side.clean:
                rows = list(side.outcomes.items())[:MAX_ROWS]
                out += [f"  - {code(nodeid)}: {md(outcome)}" for nodeid, outcome in rows]
            if same:
                out.append(
                    f"- {code(side.box)}, {repeats_said(same)}: the same as repeat {side.repeat}"
                )
        out += [f"- {md(line)}" for line in frozen.absent]
    return out


def _miss(label: str, miss: RepeatMiss) -> tuple[str, str]:
    """(heading, why) for a repeat with no receipt: one never started says "not run"."""
    never = f"{label}: not run: "
    if miss.reason.startswith(never):
        return "not run", miss.reason[len(never) :]
    return f"NOT EVALUATED ({miss.kind})", miss.reason


def _box_summary(box: RepeatBox, count: int) -> str:
    if box.differing:
        differ = f"{len(box.differing)} test(s) differ between repeats"
    elif box.evaluated < 2:
        differ = "nothing to compare"
    else:
        differ = "no test differs between repeats"
    return f"{box.evaluated} of {count} repeats evaluated · {differ}"


def folded(boxes: list[FrozenRerunBox]) -> list[tuple[FrozenRerunBox, list[int]]]:
    """Each side run shown, with the later repeats of its box that ended exactly the same way
    (ten identical side runs of --repeat 10 are one entry, not ten)."""
    out: list[tuple[FrozenRerunBox, list[int]]] = []
    for side in boxes:
        if out and out[-1][0].box == side.box and _same(out[-1][0], side):
            out[-1][1].append(side.repeat)
        else:
            out.append((side, []))
    return out


def _same(a: FrozenRerunBox, b: FrozenRerunBox) -> bool:
    return (a.clean, a.interpretation, a.outcomes, a.fixtures_changed, a.reasons) == (
        b.clean,
        b.interpretation,
        b.outcomes,
        b.fixtures_changed,
        b.reasons,
    )


def repeats_said(numbers: list[int]) -> str:
    if len(numbers) == 1:
        return f"repeat {numbers[0]}"
    if numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"repeats {numbers[0]}-{numbers[-1]}"
    return "repeats " + ", ".join(str(n) for n in numbers)


def _where(side: FrozenRerunBox) -> str:
    return side.box if side.repeat == 1 else f"{side.box}, repeat {side.repeat}"


def _verdict(side: FrozenRerunBox) -> str:
    """`clean (ok) · 2 frozen test(s) · 0.4 s`, or `not clean (failed) · ...: why`."""
    return f"{'clean' if side.clean else 'not clean'} {_details(side)}"


def _details(side: FrozenRerunBox) -> str:
    count = f"({side.interpretation}) · {len(side.outcomes)} frozen test(s) · "
    count += f"{side.wall_seconds:.1f} s"
    if side.clean:
        return count
    return f"{count}: {'; '.join(side.reasons) or 'not every frozen test passed'}"
