"""Coordinator side; stdlib, the receipt decoder and remote/results.py's folder names. A compare
kept as a run folder (`compare --record`), so that the history can be rebuilt from disk.

The folder has the shape of a run's (`<box>/receipt.json`, `<box>/box.json`, `drift.json`,
`drift.md`, `drift.html`) plus `compare.json` naming the receipt files it was made from. It is written under a
hidden name and renamed into place in one step; an existing folder is never overwritten. Each
receipt is copied as the bytes that decode to exactly the receipt the report was made from.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Sequence
from pathlib import Path

from charpin_runner.errors import IntegrityError, UsageError
from charpin_runner.receipt import MAX_RECEIPT_BYTES, Receipt, write_atomic

from charpin_coordinator.history.folders import COMPARE_MARK
from charpin_coordinator.receipts import load_receipt


def write_compare(
    out_dir: Path,
    run_id: str,
    boxes: Sequence[tuple[str, Receipt, Path]],
    drift_json: bytes,
    drift_md: bytes,
    drift_html: bytes | None = None,
) -> Path:
    """Write out_dir/run_id for the compared (label, receipt, file) triples; return it."""
    from charpin_coordinator.remote.results import safe_folders

    final = out_dir / run_id
    if final.exists():
        raise UsageError(f"{final} already exists and runs are never overwritten; pick another")
    copies = [(label, _same_bytes(path, receipt), path) for label, receipt, path in boxes]
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / f".{run_id}.partial-{secrets.token_hex(4)}"
    staging.mkdir()
    names = safe_folders([label for label, _, _ in copies])
    try:
        for label, raw, path in copies:
            folder = staging / names[label]
            folder.mkdir()
            write_atomic(folder / "receipt.json", raw)
            meta = {
                "label": label,
                "folder": folder.name,
                "status": "evaluated",
                "source": str(path),
            }
            write_atomic(folder / "box.json", _json(meta))
        write_atomic(staging / "drift.json", drift_json)
        write_atomic(staging / "drift.md", drift_md)
        if drift_html is not None:
            write_atomic(staging / "drift.html", drift_html)
        write_atomic(staging / COMPARE_MARK, _json({"receipts": [str(p) for _, _, p in copies]}))
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def _same_bytes(path: Path, receipt: Receipt) -> bytes:
    """path's bytes, which must still decode to the receipt the report was made from."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_RECEIPT_BYTES + 1)
    except OSError as exc:
        raise IntegrityError(f"{path}: cannot read receipt again: {exc.strerror}") from exc
    if load_receipt(raw, source=str(path)) != receipt:
        raise IntegrityError(f"{path} changed while it was compared; compare it again")
    return raw


def _json(value: object) -> bytes:
    return json.dumps(value, indent=1, sort_keys=True).encode() + b"\n"
