"""Coordinator side. The run folder `.charpin/runs/<run-id>/`, written atomically; stdlib only.

The folder is assembled under a hidden temporary name and renamed into place in one step, so a
reader never sees half a run and an existing run is never overwritten. Box folders get a safe
name derived from the alias; the alias itself stays inside the JSON (`box.json`, `drift.json`).
With `run --repeat N`, repeat k (2..N) of a box is kept as a box folder of its own inside the
record's, `<box>/repeats/<k>/` (the same four files; its box.json adds `repeat` and `run_id`), so
everything that reads `<box>/receipt.json` still reads the receipt of record. A box whose pins did
not pass also gets `<box>/pins-actual/<pin>/`: their actual outputs, as its receipt brought them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
from charpin_runner.errors import UsageError
from charpin_runner.receipt import write_atomic

from charpin_coordinator.evidence import REPEATS_FOLDER
from charpin_coordinator.remote.boxrun import BoxOutcome
from charpin_coordinator.remote.repeats import repeat_run_id

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
# A box folder's failing pins' actual outputs (from its receipt), one folder per pin.
PINS_ACTUAL = "pins-actual"


@dataclass(frozen=True)
class ReportFiles:
    """The rendered report, as bytes, to store next to the box folders."""

    drift_json: bytes
    drift_md: bytes
    drift_html: bytes | None = None  # drift.html, the self-contained page (reports/html_report.py)


def pins_actual_folders(outcome: BoxOutcome) -> dict[str, str]:
    """Pin id -> its folder under `<box>/pins-actual/`, for each pin whose receipt row carries
    actual outputs (pins that did not pass)."""
    if outcome.receipt is None:
        return {}
    return safe_folders(p.id for p in outcome.receipt.pins.results if p.actual)


def _write_pins_actual(folder: Path, outcome: BoxOutcome) -> None:
    """`<box>/pins-actual/<pin>/`: each failing pin's actual outputs as the receipt brought them
    back (stdout, stderr, out/<path> flattened to one file name, exit_code, about.json saying
    which are whole and exact). Written from the stored receipt, so masked as it is."""
    names = pins_actual_folders(outcome)
    if not names or outcome.raw_receipt is None:
        return
    stored = msgspec.json.decode(outcome.raw_receipt)
    for row in stored.get("pins", {}).get("results", []):
        name = names.get(str(row.get("id"))) if isinstance(row, dict) else None
        if name is None:
            continue
        # Masking can merge two ids: each folder is written once, from its first row.
        target = folder / name
        if target.exists():
            continue
        target.mkdir(parents=True)
        about = {}
        for part in row.get("actual") or []:
            file_name = _part_file(str(part["name"]))
            write_atomic(target / file_name, str(part["text"]).encode("utf-8", "replace"))
            about[file_name] = {
                "name": part["name"],
                "size": part["size"],
                "exact": part["exact"],
            }
        write_atomic(target / "exit_code", f"{row.get('exit_code')}\n".encode())
        write_atomic(target / "about.json", json.dumps(about, indent=1, sort_keys=True).encode())


def _part_file(name: str) -> str:
    """stdout, stderr, or an output file's `out/<path>` as one file name (no folder, so no path
    from the box can leave the pin's folder)."""
    if name in ("stdout", "stderr"):
        return name
    quoted = "out." + urllib.parse.quote(name.removeprefix("out/"), safe="")
    if len(quoted) > 200:  # a deep path: a file name every file system takes
        return "out." + hashlib.sha256(name.encode()).hexdigest()[:16]
    return quoted


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
        _write_pins_actual(folder / PINS_ACTUAL, outcome)
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
