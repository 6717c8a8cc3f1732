"""Coordinator side. The run folder `.charpin/runs/<run-id>/`, written atomically; stdlib only.

The folder is assembled under a hidden temporary name and renamed into place in one step, so a
reader never sees half a run and an existing run is never overwritten. Box folders get a safe
name derived from the alias; the alias itself stays inside the JSON (`box.json`, `drift.json`).
With `run --repeat N`, repeat k (2..N) of a box is kept as a box folder of its own inside the
record's, `<box>/repeats/<k>/` (the same four files; its box.json adds `repeat` and `run_id`), so
everything that reads `<box>/receipt.json` still reads the receipt of record.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from charpin_runner.errors import UsageError
from charpin_runner.receipt import write_atomic

from charpin_coordinator.evidence import REPEATS_FOLDER
from charpin_coordinator.remote.boxrun import BoxOutcome
from charpin_coordinator.remote.repeats import repeat_run_id

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class ReportFiles:
    """The rendered report, as bytes, to store next to the box folders."""

    drift_json: bytes
    drift_md: bytes
    drift_html: bytes | None = None  # drift.html, the self-contained page (reports/html_report.py)


def safe_folders(labels: Iterable[str]) -> dict[str, str]:
    """Map each alias to a distinct folder name made of [A-Za-z0-9._-], at most 64 characters."""
    taken: set[str] = set()
    mapping: dict[str, str] = {}
    for label in labels:
        base = _UNSAFE.sub("_", label)[:40].strip("._-") or "box"
        if base != label or base.lower() in taken:
            base = f"{base}-{hashlib.sha256(label.encode()).hexdigest()[:8]}"
        if not base[0].isalnum():
            base = "b" + base
        taken.add(base.lower())
        mapping[label] = base
    return mapping


def write_run(
    out_dir: Path, run_id: str, outcomes: Sequence[BoxOutcome], report: ReportFiles
) -> Path:
    """Write every box's files and the report into out_dir/run_id; return that folder."""
    final = out_dir / run_id
    if final.exists():
        raise UsageError(
            f"{final} already exists and runs are never overwritten; pick another "
            "--run-id or leave it out"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / f".{run_id}.partial-{secrets.token_hex(4)}"
    staging.mkdir()
    folders = safe_folders([outcome.label for outcome in outcomes])
    try:
        for outcome in outcomes:
            box = staging / folders[outcome.label]
            _write_box(box, outcome)
            if outcome.repeats:
                (box / REPEATS_FOLDER).mkdir()
            for repeat in outcome.repeats:
                ids = {"repeat": repeat.repeat, "run_id": repeat_run_id(run_id, repeat.repeat)}
                _write_box(box / REPEATS_FOLDER / str(repeat.repeat), repeat, ids)
        write_atomic(staging / "drift.json", report.drift_json)
        write_atomic(staging / "drift.md", report.drift_md)
        if report.drift_html is not None:
            write_atomic(staging / "drift.html", report.drift_html)
        os.rename(staging, final)  # fails rather than merge if the run appeared meanwhile
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def _write_box(
    folder: Path, outcome: BoxOutcome, extra: Mapping[str, object] | None = None
) -> None:
    folder.mkdir()
    if outcome.raw_receipt is not None:
        write_atomic(folder / "receipt.json", outcome.raw_receipt)
    write_atomic(folder / "stdout.log", outcome.stdout)
    write_atomic(folder / "stderr.log", outcome.stderr)
    ne = outcome.not_evaluated
    meta = {
        "label": outcome.label,
        "folder": folder.name,
        "status": "evaluated" if ne is None else "not-evaluated",
        "kind": None if ne is None else ne.kind,
        "reason": None if ne is None else ne.reason,
        "interrupted": outcome.interrupted,
        "bytes_sent": outcome.sent,
        "bytes_received": outcome.received,
        "channels": outcome.channels,
        "phase_seconds": outcome.phases,
        **(extra or {}),
    }
    write_atomic(folder / "box.json", json.dumps(meta, indent=1, sort_keys=True).encode() + b"\n")
