"""Coordinator side; pure (data in, data out). Receipts -> drift by dimension -> DriftReport.

Drift is always named by dimension and item, never a bare "differs": identity, tree, collection
(unified diff of ids), outcomes (tests x boxes matrix of the differing rows), fixtures,
quarantine, pins, exit, and environment (informational only).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgspec
from charpin_runner.errors import (
    EXIT_DRIFT,
    EXIT_INTEGRITY,
    EXIT_NOT_EVALUATED,
    EXIT_TESTS_FAILED,
    EXIT_VACUOUS,
    UsageError,
)
from charpin_runner.receipt import OUTCOMES, Receipt

from charpin_coordinator import gates as gate_rules
from charpin_coordinator.dimensions import dimensions
from charpin_coordinator.report import (
    MAX_FAILING,
    BoxSummary,
    DriftReport,
    GateResult,
    NotEvaluated,
)
from charpin_coordinator.treestate import tree_state

__all__ = ["NotEvaluated", "build_report"]

Labeled = tuple[str, Receipt]
_BAD_OUTCOMES = frozenset(("failed", "error"))
_INTEGRITY_KINDS = {"receipt-refused", "snapshot-integrity"}


def build_report(
    receipts: Sequence[Labeled],
    *,
    baseline: str | None = None,
    not_evaluated: Sequence[NotEvaluated] = (),
    expected_commit: str | None = None,
) -> DriftReport:
    """Compare receipts against the baseline box and evaluate every gate for every box."""
    shipped = expected_commit or _shipped_commit(receipts)
    base = _pick_baseline(receipts, baseline, shipped)
    expected = shipped or (base[1].identity.head_before if base else None)
    groups = _groups(receipts)
    group_of = {label: i for i, members in enumerate(groups) for label in members}
    boxes = [_summary(label, r, group_of[label]) for label, r in receipts]
    found = dimensions(receipts, base, expected) if base is not None else []
    gates = gate_rules.evaluate(receipts, base, expected)
    vacuous_reasons = _vacuity(receipts, gates)
    report = DriftReport(
        baseline=base[0] if base else None,
        expected_commit=expected,
        boxes=boxes,
        not_evaluated=list(not_evaluated),
        groups=groups,
        dimensions=found,
        gates=gates,
        vacuous=bool(vacuous_reasons),
        vacuous_reasons=vacuous_reasons,
        exit_code=0,
        exit_bits=[],
    )
    code, bits = _exit_code(report, receipts)
    return msgspec.structs.replace(report, exit_code=code, exit_bits=bits)


def _pick_baseline(
    receipts: Sequence[Labeled], wanted: str | None, expected: str | None
) -> Labeled | None:
    """The box others are compared with: as asked, else the first healthy one, else the first.

    A box that ran another commit or did not finish makes a poor reference: comparing a healthy
    box against it would blame the healthy one.
    """
    if wanted is None:
        healthy = [(label, r) for label, r in receipts if gate_rules.healthy(r, expected)]
        pool = healthy or list(receipts)
        return pool[0] if pool else None
    for label, receipt in receipts:
        if label == wanted:
            return label, receipt
    labels = ", ".join(label for label, _ in receipts) or "none"
    raise UsageError(f"--baseline {wanted!r} is not one of the evaluated boxes ({labels})")


def _shipped_commit(receipts: Sequence[Labeled]) -> str | None:
    """The commit the coordinator shipped, when the receipts say so."""
    for _, receipt in receipts:
        if receipt.identity.expected_commit:
            return receipt.identity.expected_commit
    return None


def comparable(receipt: Receipt) -> tuple[object, ...]:
    """The part of a receipt that drift compares (no labels, ids, times or environment)."""
    i, e = receipt.identity, receipt.exit
    return (
        (
            i.head_before,
            i.head_after,
            i.tree_before,
            i.tree_after,
            i.expected_commit,
            i.patch_sha256,
        ),
        receipt.tree,
        receipt.collection,
        receipt.outcomes,
        receipt.subtests,
        receipt.fixtures,
        receipt.quarantine,
        receipt.pins,
        (e.status, e.interpretation, e.pytest_status),
    )


def _groups(receipts: Sequence[Labeled]) -> list[list[str]]:
    by_digest: dict[str, list[str]] = {}
    for label, receipt in receipts:
        digest = hashlib.sha256(
            msgspec.json.encode(comparable(receipt), order="sorted")
        ).hexdigest()
        by_digest.setdefault(digest, []).append(label)
    return list(by_digest.values())


def _summary(label: str, r: Receipt, group: int) -> BoxSummary:
    counts = dict.fromkeys(OUTCOMES, 0)
    for outcome in r.outcomes.values():
        counts[outcome] += 1
    failing = sorted(t for t, o in r.outcomes.items() if o in ("failed", "error"))[:MAX_FAILING]
    return BoxSummary(
        label=label,
        run_id=r.run_id,
        commit=r.identity.head_before,
        interpretation=r.exit.interpretation,
        exit_status=r.exit.status,
        collected=len(r.collection.collected),
        executed=len(r.collection.executed),
        counts={k: v for k, v in counts.items() if v},
        group=group,
        python=r.environment.python,
        id_root=r.environment.id_root,
        platform=r.environment.platform,
        failing=failing,
        failing_subtests={
            t: list(r.subtests[t].failing)
            for t in failing
            if t in r.subtests and r.subtests[t].failing
        },
        subtests=_subtest_totals(r),
        failing_subtest_counts={
            t: r.subtests[t].failed for t in failing if t in r.subtests and r.subtests[t].failed
        },
        failure_excerpts=failure_excerpts(r, failing),
        tree_state=tree_state(r),
        pin_details={p.id: list(p.detail) for p in r.pins.results if p.status != "passed"},
    )


def _subtest_totals(r: Receipt) -> dict[str, int]:
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    for sub in r.subtests.values():
        totals["passed"] += sub.passed
        totals["failed"] += sub.failed
        totals["skipped"] += sub.skipped
    return {k: v for k, v in totals.items() if v}


# What one failing test's excerpt may hold in a report (the receipt bounds it first).
MAX_EXCERPT_LINES = 60
MAX_EXCERPT_LINE = 500


def failure_excerpts(r: Receipt, failing: Sequence[str]) -> dict[str, list[str]]:
    """The one place a receipt's per-test failure excerpt is read: failing test -> its lines
    (each line its own string, so no renderer can be made to forge a line by it).

    The receipt's `failure_excerpt` (node id -> bounded text, masked on fetch); a receipt
    from an older runner carries none, and every renderer shows the test by its id alone."""
    found = r.failure_excerpt
    out = {}
    for test in failing:
        text = found.get(test)
        if isinstance(text, str) and text.strip():
            lines = text.rstrip("\n").split("\n")[-MAX_EXCERPT_LINES:]
            out[test] = [line[:MAX_EXCERPT_LINE] for line in lines]
    return out


def _vacuity(receipts: Sequence[Labeled], gates: list[GateResult]) -> list[str]:
    reasons = []
    if len(receipts) < 2:
        reasons.append(f"only {len(receipts)} evaluated box(es): drift needs two")
    for label, r in receipts:
        if not r.collection.executed:
            reasons.append(f"{label}: zero tests executed")
    for gate in gates:
        if gate.status == "INCOMPLETE":
            reasons.append(f"{gate.box}: {gate.gate} gate incomplete: {gate.detail}")
    return reasons


def _exit_code(report: DriftReport, receipts: Sequence[Labeled]) -> tuple[int, list[str]]:
    code, bits = 0, []
    if any(
        r.exit.interpretation in ("failed", "collection-error")
        or not _BAD_OUTCOMES.isdisjoint(r.outcomes.values())
        for _, r in receipts
    ):
        code |= EXIT_TESTS_FAILED
        bits.append("1 tests failed")
    if any(g.status == "FAIL" for g in report.gates) or any(d.gating for d in report.dimensions):
        code |= EXIT_DRIFT
        bits.append("2 drift or a gate blocked")
    cut_short = [lb for lb, r in receipts if r.exit.interpretation in ("timed-out", "interrupted")]
    if report.not_evaluated or cut_short:
        # A box that timed out left a receipt, but its run was not evaluated to the end.
        code |= EXIT_NOT_EVALUATED
        bits.append("4 a box was not evaluated")
    if any(n.kind in _INTEGRITY_KINDS for n in report.not_evaluated):
        code |= EXIT_INTEGRITY
        bits.append("8 snapshot or receipt integrity failure")
    if report.vacuous:
        code |= EXIT_VACUOUS
        bits.append("16 vacuous comparison")
    return code, bits
