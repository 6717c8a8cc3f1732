"""Test helper: real run and verify folders from receipt_factory receipts, written by the
coordinator's own writers (remote/results.py, the drift report), for the history's tests."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from charpin_coordinator.drift import build_report
from charpin_coordinator.remote.boxrun import BoxOutcome
from charpin_coordinator.remote.results import ReportFiles, write_run
from charpin_coordinator.report import NotEvaluated
from charpin_coordinator.reports.common import encode_json
from charpin_coordinator.reports.markdown import render_markdown
from charpin_runner.receipt import Receipt, dumps

from tests.receipt_factory import IDS, make_receipt


def days_ago(days: float, now: datetime | None = None) -> str:
    moment = (now or datetime.now(UTC)) - timedelta(days=days)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def box(
    label: str,
    run_id: str,
    started_at: str,
    *,
    failing: Sequence[str] = (),
    extra: Sequence[str] = (),
    **parts: Any,
) -> Receipt:
    """A receipt for IDS plus `extra` ids, all passing but `failing`."""
    ids = sorted([*IDS, *extra])
    outcomes = {i: ("failed" if i in failing else "passed") for i in ids}
    sets = {
        "collection.collected": ids,
        "collection.selected": ids,
        "collection.executed": ids,
        "collection.order": ids,
        "durations": dict.fromkeys(ids, 0.01),
    }
    if failing:
        parts = {"exit.status": 1, "exit.interpretation": "failed", **parts}
    return make_receipt(
        label, run_id=run_id, started_at=started_at, outcomes=outcomes, **sets, **parts
    )


def run_folder(
    out: Path,
    run_id: str,
    receipts: Sequence[Receipt],
    *,
    not_evaluated: Sequence[NotEvaluated] = (),
    repeats: Mapping[str, Sequence[Receipt | NotEvaluated]] | None = None,
) -> Path:
    """out/run_id as `charpin-remote run` writes it, for these receipts; `repeats` maps a box
    label to its repeats 2, 3, ... (`run --repeat`), each a receipt or why it gave none."""
    labeled = [(r.label, r) for r in receipts]
    report = build_report(labeled, not_evaluated=not_evaluated)
    outcomes = [BoxOutcome(label=r.label, receipt=r, raw_receipt=dumps(r)) for r in receipts]
    outcomes += [BoxOutcome(label=ne.label, not_evaluated=ne) for ne in not_evaluated]
    for outcome in outcomes:
        for k, given in enumerate((repeats or {}).get(outcome.label, ()), start=2):
            if isinstance(given, NotEvaluated):
                one = BoxOutcome(label=outcome.label, repeat=k, not_evaluated=given)
            else:
                one = BoxOutcome(
                    label=outcome.label, repeat=k, receipt=given, raw_receipt=dumps(given)
                )
            outcome.repeats.append(one)
    files = ReportFiles(drift_json=encode_json(report), drift_md=render_markdown(report).encode())
    return write_run(out, run_id, outcomes, files)


def verify_folder(
    out: Path,
    verify_id: str,
    base: Sequence[Receipt] | None,
    patched: Sequence[Receipt],
    *,
    verdict: str = "REJECT",
    base_from: str = "",
) -> Path:
    """out/verify_id as `verify` lays it out (base/, patched/, verify.json); base None when
    it was reused from the verify named by base_from."""
    folder = out / verify_id
    if base is not None:
        run_folder(folder, "base", base)
    run_folder(folder, "patched", patched)
    report = {"version": 1, "verdict": verdict, "base_from": base_from, "exit_code": 2}
    (folder / "verify.json").write_text(json.dumps(report))
    return folder
