"""Coordinator side; may import the history's query Structs and render.shown. The history as
text: plain aligned columns, receipt text escaped as every other display escapes it (pure
functions; the CLI prints what they return)."""

from __future__ import annotations

from collections.abc import Sequence

from charpin_coordinator.history.prune import PruneResult
from charpin_coordinator.history.query import (
    BoxCell,
    BoxDetail,
    BoxHistory,
    BoxRun,
    OutcomePoint,
    OutcomeTimeline,
    RunDetail,
    RunSummary,
)
from charpin_coordinator.reports.escape import shown

MAX_FAILING = 20


def when(started_at: str) -> str:
    """`2026-12-01T03:11:55Z` as `2026-12-01 03:11`."""
    return started_at.replace("T", " ")[:16]


def short(commit: str) -> str:
    return commit[:12] if commit else "-"


# A verify's base run is judged against the patched run, never compared across boxes: one box
# makes any drift report vacuous, so that bit says nothing about it and is left out.
BASE = "verify-base"


def result_word(verdict: str | None, bits: Sequence[str], kind: str = "run") -> str:
    """RESULT: a verify's verdict; for its base run `base` and what else its exit code says
    (`base: tests-failed`); else the exit bits, or `clean`."""
    if verdict:
        return verdict
    if kind == BASE:
        said = [bit for bit in bits if bit != "vacuous"]
        return "base: " + ",".join(said) if said else "base"
    return ",".join(bits) if bits else "clean"


def cell(box: BoxCell) -> str:
    return f"{shown(box.box)}:{_status(box.status, box.clean)}"


def _status(status: str, clean: bool) -> str:
    if clean:
        return "clean"
    if status == "ok":
        return "ok,gates"  # the tests passed, a gate did not
    return status


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell; the last column is not padded."""
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)), row[-1]])
        for row in rows
    ]


def recent(runs: Sequence[RunSummary], path: str) -> str:
    if not runs:
        return f"no runs in the history {path} yet\n"
    rows = [["TIME", "RUN", "KIND", "COMMIT", "RESULT", "BOXES"]]
    for run in runs:
        rows.append(
            [
                when(run.started_at),
                shown(run.run_id),
                run.kind,
                short(run.commit),
                result_word(run.verdict, run.bits, run.kind),
                " ".join(cell(box) for box in run.boxes),
            ]
        )
    return "\n".join(table(rows)) + "\n"


def detail(run: RunDetail) -> str:
    head = (
        f"run {shown(run.run_id)} · {run.kind} · {run.started_at} · commit {short(run.commit)} · "
        f"exit {run.exit_code} ({result_word(run.verdict, run.bits, run.kind)})"
    )
    lines = [head, f"folder {shown(run.folder)}"]
    if run.needs:
        lines.append(f"needs {', '.join(shown(n) for n in run.needs)}")
    for box in run.boxes:
        if not box.evaluated:
            lines.append(f"box {shown(box.box)}: NOT EVALUATED ({shown(box.reason)})")
            continue
        counts = " · ".join(f"{n} {name}" for name, n in box.counts.items())
        lines.append(
            f"box {shown(box.box)}: {_status(box.interpretation, box.clean)} "
            f"(exit {box.exit_status}) · commit {short(box.commit)} · {box.collected} collected "
            f"· {box.executed} executed" + (f" · {counts}" if counts else "")
        )
        if box.patch_sha256:
            lines.append(f"  patch sha256 {box.patch_sha256}")
        passed = [g.gate for g in box.gates if g.status == "PASS"]
        if passed:
            lines.append(f"  PASS {', '.join(passed)}")
        for gate in box.gates:
            if gate.status != "PASS":
                lines.append(f"  {gate.status} {gate.gate}: {shown(gate.detail)}")
        for nodeid in box.failing[:MAX_FAILING]:
            lines.append(f"  failing {shown(nodeid)}")
        if len(box.failing) > MAX_FAILING:
            lines.append(f"  ... {len(box.failing) - MAX_FAILING} more failing (--json has all)")
        lines += _evidence_lines(box)
    return "\n".join(lines) + "\n"


def _evidence_lines(box: BoxDetail) -> list[str]:
    """A box's repeats and frozen side runs: evidence, never its result."""
    lines = []
    for rep in box.repeats:
        head = f"  repeat {rep.repeat} ({shown(rep.run_id)}, evidence only): "
        if not rep.evaluated:
            lines.append(head + f"NOT EVALUATED ({shown(rep.reason)})")
            continue
        counts = "".join(f" · {n} {name}" for name, n in rep.counts.items())
        lines.append(head + f"{rep.interpretation} (exit {rep.exit_status}){counts}")
        for nodeid in rep.failing[:MAX_FAILING]:
            lines.append(f"    failing {shown(nodeid)}")
        for nodeid in rep.differs[:MAX_FAILING]:
            lines.append(f"    differs from the record: {shown(nodeid)}")
        if rep.absent:
            lines.append(f"    {rep.absent} test(s) of the record not run in this repeat")
    for side in box.frozen_reruns:
        where = "" if side.repeat == 1 else f", repeat {side.repeat}"
        verdict = "clean" if side.clean else "not clean"
        moved = f" · {side.fixtures_changed} fixture(s) changed" if side.fixtures_changed else ""
        lines.append(
            f"  frozen re-run{where} (outside the gate): {verdict} ({side.interpretation})" + moved
        )
        for nodeid, outcome in list(side.outcomes.items())[:MAX_FAILING]:
            lines.append(f"    {outcome} {shown(nodeid)}")
    return lines


def timeline(found: OutcomeTimeline) -> str:
    lines = [shown(found.nodeid)]
    for box in found.boxes:
        lines.append(f"  {shown(box.box)}")
        sided = any(p.repeat != 1 or p.source != "run" for p in box.points)
        rows = [
            [when(p.started_at), p.outcome, short(p.commit), shown(p.run_id)]
            + ([_source(p)] if sided else [])
            for p in box.points
        ]
        lines.extend(f"    {line}" for line in table(rows))
    return "\n".join(lines) + "\n"


def _source(point: OutcomePoint) -> str:
    """Which run of the box gave the outcome, when repeats or side runs are in the timeline."""
    what = "frozen re-run" if point.source != "run" else "run"
    return what if point.repeat == 1 else f"{what}, repeat {point.repeat}"


def box_history(found: BoxHistory) -> str:
    if not found.runs:
        return f"box {shown(found.box)}: no runs\n"
    rows = [["TIME", "RUN", "KIND", "COMMIT", "STATUS", "TESTS", "GATES NOT PASSED"]]
    rows.extend(_box_row(run) for run in found.runs)
    return f"box {shown(found.box)}, newest first\n" + "\n".join(table(rows)) + "\n"


def _box_row(run: BoxRun) -> list[str]:
    tests = " ".join(f"{n} {name}" for name, n in run.counts.items()) or "-"
    return [
        when(run.started_at),
        shown(run.run_id),
        run.kind,
        short(run.commit),
        _status(run.status, run.clean),
        tests,
        ", ".join(run.gates_not_passed) or "-",
    ]


def pruned(result: PruneResult) -> str:
    verb = "would remove" if result.dry_run else "removed"
    lines = [f"history: {verb} {len(result.removed)} run(s), kept {result.kept}"]
    for run_id, why in sorted(result.protected.items()):
        lines.append(f"  kept {shown(run_id)}: {why}")
    if result.dry_run:
        lines.extend(f"  remove {shown(run_id)}" for run_id in result.removed)
    return "\n".join(lines) + "\n"
