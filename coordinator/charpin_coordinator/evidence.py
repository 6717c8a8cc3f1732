"""Coordinator side; may import msgspec. The report's evidence-only sections, never gating.

    repeats_section   `run --repeat N`: per box, the tests whose outcome differed between its
                      repeats, and the repeats that were not evaluated
    frozen_section    the ledger's frozen tests re-run on the side (`--include-frozen`, or any
                      receipt that carries a `frozen_rerun`): per box and repeat, each test's
                      outcome and whether the side run was clean
    with_evidence     a report carrying them; nothing else in the report changes (gates, drift
                      and the exit code stay those of the receipts of record)

Both read receipts the coordinator already accepted; neither decides anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec
from charpin_runner.receipt import Receipt

from charpin_coordinator.report import (
    DriftReport,
    FrozenRerunBox,
    FrozenReruns,
    NotEvaluated,
    NotEvaluatedKind,
    RepeatBox,
    RepeatMiss,
    RepeatRow,
    Repeats,
)

# A run folder keeps repeat k of a box in `<box>/repeats/<k>/` (remote/results.py).
REPEATS_FOLDER = "repeats"
ABSENT = "absent"  # the repeat ran without this test
NOT_EVALUATED = "-"  # the repeat gave no receipt
NOT_RUN = "not run"  # a frozen test the side run was asked for and did not run


@dataclass(frozen=True)
class Attempt:
    """One run of one box: repeat 1 is the receipt of record. Exactly one of receipt and
    missing is set."""

    repeat: int
    run_id: str
    receipt: Receipt | None
    missing: NotEvaluated | None = None


BoxAttempts = tuple[str, Sequence[Attempt]]


def repeats_section(count: int, boxes: Sequence[BoxAttempts]) -> Repeats:
    """Per box, the tests whose outcome (or presence) was not the same in every repeat that
    gave a receipt, and the repeats that gave none."""
    return Repeats(count=count, boxes=[_repeat_box(label, tries) for label, tries in boxes])


def _repeat_box(label: str, tries: Sequence[Attempt]) -> RepeatBox:
    ordered = [_cut_short(a) for a in sorted(tries, key=lambda a: a.repeat)]
    ran = [a.receipt for a in ordered if a.receipt is not None]
    nodeids = sorted({nodeid for receipt in ran for nodeid in receipt.outcomes})
    differing = []
    for nodeid in nodeids:
        seen = {receipt.outcomes.get(nodeid, ABSENT) for receipt in ran}
        if len(seen) > 1:
            row = [_outcome(a.receipt, nodeid) for a in ordered]
            differing.append(RepeatRow(item=nodeid, outcomes=row))
    misses = [
        RepeatMiss(repeat=a.repeat, kind=a.missing.kind, reason=a.missing.reason)
        for a in ordered
        if a.receipt is None and a.missing is not None
    ]
    return RepeatBox(
        box=label,
        run_ids=[a.run_id for a in ordered],
        evaluated=len(ran),
        differing=differing,
        not_evaluated=misses,
    )


def _cut_short(attempt: Attempt) -> Attempt:
    """A repeat whose tests did not run to the end (Ctrl-C, its deadline) is a miss, not a
    run: the tests it never reached would read as tests that vanished between repeats."""
    receipt = attempt.receipt
    if attempt.repeat == 1 or receipt is None:
        return attempt
    ended = receipt.exit.interpretation
    if ended not in ("interrupted", "timed-out"):
        return attempt
    kind: NotEvaluatedKind = "interrupted" if ended == "interrupted" else "timeout"
    why = f"{receipt.label}: {ended}: its tests did not run to the end"
    missing = NotEvaluated(label=receipt.label, kind=kind, reason=why)
    return dataclasses.replace(attempt, receipt=None, missing=missing)


def _outcome(receipt: Receipt | None, nodeid: str) -> str:
    if receipt is None:
        return NOT_EVALUATED
    return str(receipt.outcomes.get(nodeid, ABSENT))


def has_frozen_rerun(boxes: Sequence[BoxAttempts]) -> bool:
    """Whether any receipt among them carries a frozen side run."""
    return any(
        a.receipt is not None and a.receipt.frozen_rerun is not None
        for _, tries in boxes
        for a in tries
    )


def frozen_section(boxes: Sequence[BoxAttempts]) -> FrozenReruns:
    """Each receipt's frozen side run; evaluated boxes without one are named with the likely
    reason (the runner records none when the ledger freezes nothing there)."""
    found: list[FrozenRerunBox] = []
    absent: list[str] = []
    for label, tries in boxes:
        record = next((a for a in tries if a.repeat == 1), None)
        if record is not None and record.receipt is not None:
            if record.receipt.frozen_rerun is None:
                absent.append(
                    f"{label}: no frozen tests re-run (no ledger, the ledger freezes no test "
                    "here, or the run was stopped or timed out first)"
                )
        for attempt in sorted(tries, key=lambda a: a.repeat):
            side = attempt.receipt.frozen_rerun if attempt.receipt is not None else None
            if side is None:
                continue
            found.append(
                FrozenRerunBox(
                    box=label,
                    repeat=attempt.repeat,
                    run_id=attempt.run_id,
                    clean=side.clean,
                    interpretation=side.interpretation,
                    outcomes={n: str(side.outcomes.get(n, NOT_RUN)) for n in side.requested},
                    fixtures_changed=list(side.fixtures_changed),
                    reasons=list(side.reasons),
                    wall_seconds=side.wall_seconds,
                )
            )
    return FrozenReruns(boxes=found, absent=absent)


def with_evidence(
    report: DriftReport,
    *,
    repeats: Repeats | None = None,
    frozen: FrozenReruns | None = None,
) -> DriftReport:
    """report carrying the sections given; gates, drift and the exit code are left as they are."""
    changes: dict[str, object] = {}
    if repeats is not None:
        changes["repeats"] = repeats
    if frozen is not None:
        changes["frozen_reruns"] = frozen
    return msgspec.structs.replace(report, **changes) if changes else report
