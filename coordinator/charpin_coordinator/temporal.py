"""Coordinator side; may import msgspec. Drift over time: `charpin-remote run --against REF`.

Each box's receipt is compared with that box's own earlier receipt, found in the run folders
(the source of truth): `last` is the newest earlier run folder with a receipt for the same box
label, a run id names one run folder (a unique prefix will do), and a commit picks the newest
earlier run of that commit. The comparison is the drift builder's (drift.build_report) on the
pair (earlier, now); what both receipts share (a fixture that mutated both nights, a ledger
finding on both) is left out, so what remains is what changed on this box. A Python, pytest or
plugin change that coincides with other changes is named as the likely cause.

Gating stays cross-box: only with --gate-against-last does a box that changed set exit bit 2.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import msgspec
from charpin_runner.errors import EXIT_DRIFT, CharpinError, UsageError
from charpin_runner.receipt import MAX_RECEIPT_BYTES, Receipt

from charpin_coordinator.drift import build_report
from charpin_coordinator.gitcmd import git
from charpin_coordinator.history.folders import read_capped
from charpin_coordinator.receipts import load_receipt
from charpin_coordinator.report import Dimension, DriftReport, Since, SinceBox

LAST = "last"
BEFORE, NOW = "before", "now"
GATE_BIT = "2 changed since the reference run (--gate-against-last)"
_MAX_META = 1024 * 1024
_STAMP = re.compile(r"(\d{8}T\d{6}Z)")
# Dimensions the pair does not speak to: a new commit every night is the point, not drift.
_SKIPPED = frozenset(("identity",))
_BAD = ("failed", "error")

Labeled = tuple[str, Receipt]


@dataclass(frozen=True)
class Against:
    """What `--against` asked for, resolved: last, one run folder, or one commit."""

    asked: str
    kind: Literal["last", "run", "commit"]
    value: str  # "last", the run folder's name, or the full commit sha
    gating: bool = False


class _Box(msgspec.Struct):
    label: str
    commit: str = ""


class _Drift(msgspec.Struct):
    boxes: list[_Box] = msgspec.field(default_factory=list)


class _Meta(msgspec.Struct):
    label: str
    status: str = "evaluated"


def resolve_against(asked: str, *, repo: Path, out_dir: Path, gating: bool = False) -> Against:
    """`last`, a run folder under out_dir (its name or a unique prefix), else a commit of repo;
    UsageError naming what was tried."""
    if asked == LAST:
        return Against(asked, "last", LAST, gating)
    runs = [f.name for f in _run_folders(out_dir)]
    if asked in runs:
        return Against(asked, "run", asked, gating)
    prefixed = [name for name in runs if name.startswith(asked)]
    if len(prefixed) == 1:
        return Against(asked, "run", prefixed[0], gating)
    if len(prefixed) > 1:
        raise UsageError(
            f"--against {asked!r} matches {len(prefixed)} runs in {out_dir}; give more of the id"
        )
    try:
        commit = git(repo, "rev-parse", "--verify", "--quiet", f"{asked}^{{commit}}").strip()
    except subprocess.CalledProcessError:
        raise UsageError(
            f"--against {asked!r} is neither `last`, a run in {out_dir} nor a commit of {repo}; "
            "pass last, a run id or a commit"
        ) from None
    return Against(asked, "commit", commit, gating)


def since(receipts: Sequence[Labeled], against: Against, *, out_dir: Path, run_id: str) -> Since:
    """Every evaluated box against its own earlier receipt."""
    boxes = [
        compare_box(label, receipt, reference(out_dir, label, against, exclude=run_id))
        for label, receipt in receipts
    ]
    return Since(against=against.asked, gating=against.gating, boxes=boxes)


def with_since(report: DriftReport, found: Since) -> DriftReport:
    """report carrying found; exit bit 2 added when it gates and some box changed."""
    code, bits = report.exit_code, list(report.exit_bits)
    if found.gating and any(box.changed for box in found.boxes):
        # Said even when drift across boxes set bit 2 already: the verdict names both causes.
        bits.append(GATE_BIT)
        code |= EXIT_DRIFT
    return msgspec.structs.replace(report, since=found, exit_code=code, exit_bits=bits)


def reference(out_dir: Path, label: str, against: Against, *, exclude: str) -> Labeled | None:
    """(run id, receipt) of the earlier receipt for label, or None when there is none."""
    folders = _run_folders(out_dir)
    if against.kind == "run":
        folders = [f for f in folders if f.name == against.value]
    for folder in folders:
        if folder.name == exclude:
            continue
        try:
            drift = msgspec.json.decode(
                read_capped(folder / "drift.json", MAX_RECEIPT_BYTES), type=_Drift
            )
        except (CharpinError, msgspec.DecodeError):
            continue
        box = next((b for b in drift.boxes if b.label == label), None)
        if box is None or (against.kind == "commit" and box.commit != against.value):
            continue
        found = _receipt_of(folder, label)
        if found is not None:
            return folder.name, found
    return None


def compare_box(label: str, now: Receipt, ref: Labeled | None) -> SinceBox:
    """The drift builder on (earlier, now), what both share left out, and a likely cause."""
    if ref is None:
        return SinceBox(box=label, reference=None, summary="no earlier receipt for this box")
    run_id, before = ref
    report = build_report([(BEFORE, before), (NOW, now)], baseline=BEFORE)
    dims = [d for d in (_changes_only(d) for d in report.dimensions) if d is not None]
    changed = any(d.gating for d in dims)
    failures = _new_failures(dims)
    upgrades = _upgrades(before, now)
    cause = None
    if upgrades and changed:
        cause = "; ".join(upgrades) + " (coincides with the changes below)"
    commits = before.identity.head_before, now.identity.head_before
    what = [f"commit {commits[0][:12]} → {commits[1][:12]}" if commits[0] != commits[1] else ""]
    if failures:
        what.append(f"{len(failures)} new failure(s)")
    moved = [d.name for d in dims if d.gating]
    what.append(f"changed: {', '.join(moved)}" if moved else "no changes")
    if upgrades and not changed:
        what.append("environment: " + "; ".join(upgrades))
    return SinceBox(
        box=label,
        reference=run_id,
        reference_commit=commits[0],
        summary=" · ".join(w for w in what if w),
        changed=changed,
        new_failures=failures,
        likely_cause=cause,
        dimensions=dims,
    )


# The drift builder names the boxes a finding is on; here they are the pair's own labels, and
# "test sets differ on now" reads better as "test sets differ since then".
_ON_PAIR = re.compile(rf" on (?:{BEFORE}|{NOW})(?:, (?:{BEFORE}|{NOW}))*$")


def _changes_only(dim: Dimension) -> Dimension | None:
    """dim without what both receipts share (a finding on both nights did not change)."""
    if dim.name in _SKIPPED:
        return None
    prefix_before, prefix_now = f"{BEFORE}: ", f"{NOW}: "
    then = {d[len(prefix_before) :] for d in dim.details if d.startswith(prefix_before)}
    now = {d[len(prefix_now) :] for d in dim.details if d.startswith(prefix_now)}
    shared = then & now
    details = [
        d
        for d in dim.details
        if not (
            (d.startswith(prefix_before) and d[len(prefix_before) :] in shared)
            or (d.startswith(prefix_now) and d[len(prefix_now) :] in shared)
        )
    ]
    matrix = [row for row in dim.matrix if len(set(row.values.values())) > 1]
    if not (details or matrix or dim.diff):
        return None
    summary = _ON_PAIR.sub(" since then", dim.summary.replace("between boxes", "since then"))
    if dim.name == "environment":
        summary = "this box's environment changed (explains drift, never gates)"
    return msgspec.structs.replace(dim, summary=summary, details=details, matrix=matrix)


def _new_failures(dims: Sequence[Dimension]) -> list[str]:
    """Tests failing now that did not fail (or did not exist) before."""
    out = []
    for dim in dims:
        if dim.name != "outcomes":
            continue
        for row in dim.matrix:
            now, then = row.values.get(NOW, ""), row.values.get(BEFORE, "")
            if now.startswith(_BAD) and not then.startswith(_BAD):
                out.append(row.item)
    return out


def _upgrades(before: Receipt, now: Receipt) -> list[str]:
    """Python, pytest and plugin changes on the box, said as upgrades where they pair up."""
    b, n = before.environment, now.environment
    out = []
    if b.implementation != n.implementation:
        out.append(f"Python {b.implementation} {b.python} → {n.implementation} {n.python}")
    elif b.python != n.python:
        out.append(f"Python {b.python} → {n.python}")
    if b.pytest_version != n.pytest_version:
        out.append(f"pytest {b.pytest_version or 'none'} → {n.pytest_version or 'none'}")
    gone, came = set(b.plugins) - set(n.plugins), set(n.plugins) - set(b.plugins)
    old = {_plugin_name(p): p for p in gone}
    new = {_plugin_name(p): p for p in came}
    for name in sorted(old.keys() & new.keys()):
        out.append(f"plugin {name} {_version(old[name])} → {_version(new[name])}")
    out += [f"plugin {new[name]} added" for name in sorted(new.keys() - old.keys())]
    out += [f"plugin {old[name]} removed" for name in sorted(old.keys() - new.keys())]
    return out


def _plugin_name(plugin: str) -> str:
    """`pytest-xdist-3.5.0` -> `pytest-xdist` (a module name without a version stays)."""
    name, _, version = plugin.rpartition("-")
    return name if name and version[:1].isdigit() else plugin


def _version(plugin: str) -> str:
    name = _plugin_name(plugin)
    return plugin[len(name) + 1 :] if name != plugin else "?"


def _run_folders(out_dir: Path) -> list[Path]:
    """Run folders (drift.json, no compare.json) under out_dir, newest first: by the time in the
    run id, else by the folder's modification time."""
    try:
        children = list(out_dir.iterdir())
    except OSError:
        return []
    found = []
    for child in children:
        if child.name.startswith(".") or child.is_symlink() or not child.is_dir():
            continue
        if (child / "drift.json").is_file() and not (child / "compare.json").exists():
            found.append((_when(child), child.name, child))
    found.sort(reverse=True)
    return [folder for _, _, folder in found]


def _when(folder: Path) -> float:
    match = _STAMP.match(folder.name)
    if match:
        return datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
    return folder.stat().st_mtime


def _receipt_of(folder: Path, label: str) -> Receipt | None:
    """The receipt of the box labelled label in a run folder (decoded strictly), or None."""
    for box in sorted(folder.iterdir()):
        if box.name.startswith(".") or box.is_symlink() or not box.is_dir():
            continue
        try:
            meta = msgspec.json.decode(read_capped(box / "box.json", _MAX_META), type=_Meta)
            if meta.label != label or meta.status != "evaluated":
                continue
            path = box / "receipt.json"
            return load_receipt(read_capped(path, MAX_RECEIPT_BYTES), source=str(path))
        except (CharpinError, msgspec.DecodeError):
            continue
    return None
