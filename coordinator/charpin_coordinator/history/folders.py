"""Coordinator side; may import msgspec and the receipt decoder. Run folders on disk -> records.

The history learns nothing a folder does not say: recording a run after it ends and `history
rebuild` both read the folder through this module, so both give the same answers. A folder is

* a run folder (`drift.json` and one folder per box with `box.json`, and `receipt.json` when
  the box was evaluated), written by `run` or by `compare --record` (which adds `compare.json`);
* a verify folder (`verify.json`, with the run folders `base/` and `patched/`), which gives two
  runs, `<verify id>/base` and `<verify id>/patched`; the patched run needs its base.

A box folder may hold `repeats/<k>/` (`run --repeat`: repeat k, laid out like a box folder, its
box.json adding `repeat` and `run_id`), and any receipt a frozen side run (`--include-frozen`);
both are kept as evidence beside the box's result (history/evidence.py), never as its result.

Receipts are decoded strictly (receipts.py); drift.json and verify.json are read leniently (only
the fields kept here), so an older or newer report still reads. Files are read without following
links and under a size cap: the folders sit in the repository, where a test on `local` can write.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import msgspec
from charpin_runner.errors import IntegrityError
from charpin_runner.receipt import MAX_RECEIPT_BYTES

from charpin_coordinator.evidence import REPEATS_FOLDER
from charpin_coordinator.history.evidence import FrozenRecord, RepeatRecord, frozen_record
from charpin_coordinator.receipts import load_receipt
from charpin_coordinator.treestate import tree_state

MAX_JSON_BYTES = MAX_RECEIPT_BYTES  # drift.json can hold a 100,000-test diff
MAX_META_BYTES = 1024 * 1024
SEARCH_DEPTH = 3
COMPARE_MARK = "compare.json"
_STAMP = re.compile(r"(\d{8}T\d{6}Z)")
_T = TypeVar("_T")


@dataclass(frozen=True)
class BoxRecord:
    """One box of one run, as the history keeps it."""

    label: str
    evaluated: bool
    reason: str = ""  # "kind: reason" for a box that was not evaluated
    commit: str = ""
    patch_sha256: str | None = None
    tree_state: str | None = None  # treestate.tree_state of the receipt; None: not evaluated
    interpretation: str = "not-evaluated"
    exit_status: int | None = None
    collected: int = 0
    executed: int = 0
    outcomes: Mapping[str, str] = field(default_factory=dict)
    gates: Sequence[tuple[str, str, str]] = ()  # (gate, status, detail)
    started_at: str | None = None
    repeats: Sequence[RepeatRecord] = ()  # `run --repeat N`: repeats 2..N, evidence only
    frozen: FrozenRecord | None = None  # the record's frozen side run (--include-frozen)

    @property
    def clean(self) -> bool:
        """Ran, the tests were ok, and every gate this box had passed."""
        return (
            self.evaluated
            and self.interpretation == "ok"
            and bool(self.gates)
            and all(status == "PASS" for _, status, _ in self.gates)
        )


@dataclass(frozen=True)
class RunRecord:
    """One run (or compare, or one side of a verify) as the history keeps it."""

    run_id: str
    kind: str  # run | compare | verify-base | verify-patched
    started_at: str  # ISO-8601 UTC, seconds
    commit: str
    exit_code: int
    folder: str
    boxes: Sequence[BoxRecord]
    verdict: str | None = None  # verify-patched: ACCEPT, REJECT or INCOMPLETE
    needs: Sequence[str] = ()  # run ids this run cannot be understood without


class _Gate(msgspec.Struct):
    gate: str
    box: str
    status: str
    detail: str = ""


class _BoxSummary(msgspec.Struct):
    label: str
    commit: str = ""


class _Drift(msgspec.Struct):
    expected_commit: str | None = None
    boxes: list[_BoxSummary] = msgspec.field(default_factory=list)
    not_evaluated: list[_BoxSummary] = msgspec.field(default_factory=list)
    gates: list[_Gate] = msgspec.field(default_factory=list)
    exit_code: int = 0


class _Verify(msgspec.Struct):
    verdict: str
    base_from: str = ""


class _BoxMeta(msgspec.Struct):
    label: str
    status: str = "evaluated"
    kind: str | None = None
    reason: str | None = None
    repeat: int = 1  # set in a repeat's box.json only
    run_id: str = ""


def is_run_folder(folder: Path) -> bool:
    return (folder / "drift.json").is_file() and not folder.is_symlink()


def is_verify_folder(folder: Path) -> bool:
    return (folder / "verify.json").is_file() and not folder.is_symlink()


def read_folder(folder: Path) -> list[RunRecord]:
    """The runs one run folder or verify folder holds; IntegrityError naming the file."""
    if is_verify_folder(folder):
        return read_verify(folder)
    if is_run_folder(folder):
        return [read_run(folder)]
    raise IntegrityError(
        f"{folder} is neither a run folder (drift.json) nor a verify folder (verify.json)"
    )


def find(dirs: Iterable[Path]) -> list[Path]:
    """Run and verify folders in dirs: each dir itself, or found below it (hidden names and
    half-written `.<id>.partial-*` folders skipped), at most SEARCH_DEPTH levels down."""
    found: list[Path] = []

    def walk(folder: Path, depth: int) -> None:
        if is_run_folder(folder) or is_verify_folder(folder):
            found.append(folder)
            return
        if depth == 0:
            return
        try:
            children = sorted(folder.iterdir())
        except OSError:
            return
        for child in children:
            if not child.name.startswith(".") and child.is_dir() and not child.is_symlink():
                walk(child, depth - 1)

    for given in dirs:
        if not given.is_dir():
            raise IntegrityError(f"{given} is not a folder; pass run folders or folders of them")
        walk(given.absolute(), SEARCH_DEPTH)
    return found


def read_run(
    folder: Path,
    *,
    run_id: str | None = None,
    kind: str | None = None,
    verdict: str | None = None,
    needs: Sequence[str] = (),
    fallback_time: str | None = None,
) -> RunRecord:
    """One run folder -> RunRecord."""
    drift = _decode(folder / "drift.json", _Drift, MAX_JSON_BYTES)
    boxes = [_read_box(box, drift, run_id or folder.name) for box in _box_folders(folder)]
    # The report's order (--hosts order); boxes it does not name (none, normally) go last.
    order = {b.label: i for i, b in enumerate([*drift.boxes, *drift.not_evaluated])}
    boxes.sort(key=lambda b: (order.get(b.label, len(order)), b.label))
    times = [b.started_at for b in boxes if b.started_at]
    started = min(times) if times else (fallback_time or _stamp_time(folder))
    commit = drift.expected_commit or next((b.commit for b in boxes if b.commit), "")
    if kind is None:
        kind = "compare" if (folder / COMPARE_MARK).is_file() else "run"
    return RunRecord(
        run_id=run_id or folder.name,
        kind=kind,
        started_at=started,
        commit=commit,
        exit_code=drift.exit_code,
        folder=str(folder.absolute()),
        boxes=boxes,
        verdict=verdict,
        needs=tuple(needs),
    )


def read_verify(folder: Path) -> list[RunRecord]:
    """A verify folder -> its base run (unless reused from an earlier verify) and patched run."""
    info = _decode(folder / "verify.json", _Verify, MAX_JSON_BYTES)
    vid = folder.name
    fallback = _stamp_time(folder)
    records: list[RunRecord] = []
    base = folder / "base"
    if is_run_folder(base):
        records.append(
            read_run(base, run_id=f"{vid}/base", kind="verify-base", fallback_time=fallback)
        )
    if info.base_from:
        needs: tuple[str, ...] = (f"{info.base_from}/base",)
    else:
        needs = (f"{vid}/base",) if records else ()
    patched = folder / "patched"
    if is_run_folder(patched):
        records.append(
            read_run(
                patched,
                run_id=f"{vid}/patched",
                kind="verify-patched",
                verdict=info.verdict,
                needs=needs,
                fallback_time=fallback,
            )
        )
    return records


def _box_folders(folder: Path) -> list[Path]:
    return sorted(
        child
        for child in folder.iterdir()
        if child.is_dir() and not child.is_symlink() and not child.name.startswith(".")
    )


def _read_box(folder: Path, drift: _Drift, run_id: str) -> BoxRecord:
    receipt_path = folder / "receipt.json"
    meta_path = folder / "box.json"
    if meta_path.exists():
        meta = _decode(meta_path, _BoxMeta, MAX_META_BYTES)
    else:  # an older folder, or a hand-made one: the receipt names the box
        meta = _BoxMeta(label="")
    repeats = _read_repeats(folder / REPEATS_FOLDER, run_id)
    if meta.status != "evaluated":
        return BoxRecord(
            label=meta.label or folder.name,
            evaluated=False,
            reason=_reason(meta),
            repeats=repeats,
        )
    raw = read_capped(receipt_path, MAX_RECEIPT_BYTES)
    receipt = load_receipt(raw, source=str(receipt_path))
    label = meta.label or receipt.label
    return BoxRecord(
        label=label,
        evaluated=True,
        commit=receipt.identity.head_before,
        patch_sha256=receipt.identity.patch_sha256,
        tree_state=tree_state(receipt),
        interpretation=receipt.exit.interpretation,
        exit_status=receipt.exit.status,
        collected=len(receipt.collection.collected),
        executed=len(receipt.collection.executed),
        outcomes=receipt.outcomes,
        gates=[(g.gate, g.status, g.detail) for g in drift.gates if g.box == label],
        started_at=iso_utc(receipt.started_at),
        repeats=repeats,
        frozen=frozen_record(receipt.frozen_rerun, 1),
    )


def _reason(meta: _BoxMeta) -> str:
    kind = meta.kind or "not-evaluated"
    return f"{kind}: {meta.reason or ''}".rstrip(": ")


def _read_repeats(folder: Path, run_id: str) -> list[RepeatRecord]:
    """`<box>/repeats/<k>/`: repeats 2..N of the box, by repeat."""
    if folder.is_symlink() or not folder.is_dir():
        return []
    found: list[RepeatRecord] = []
    for child in _box_folders(folder):
        meta = _decode(child / "box.json", _BoxMeta, MAX_META_BYTES)
        if meta.repeat < 2 or child.name != str(meta.repeat):
            raise IntegrityError(
                f"{child}: not a repeat's folder (its box.json says repeat {meta.repeat})"
            )
        # Derived, never read from box.json: a repeat's id is its run's plus `.r<k>`.
        repeat_id = f"{run_id}.r{meta.repeat}"
        if meta.status != "evaluated":
            found.append(RepeatRecord(meta.repeat, repeat_id, False, reason=_reason(meta)))
            continue
        path = child / "receipt.json"
        receipt = load_receipt(read_capped(path, MAX_RECEIPT_BYTES), source=str(path))
        if receipt.run_id != repeat_id:
            # The seal bound each repeat's receipt to this id; one that says otherwise was
            # put there by something else.
            raise IntegrityError(
                f"{path}: the receipt is run {receipt.run_id!r}, not this folder's repeat "
                f"{repeat_id!r}; rebuild without this folder or restore it"
            )
        found.append(
            RepeatRecord(
                repeat=meta.repeat,
                run_id=repeat_id,
                evaluated=True,
                commit=receipt.identity.head_before,
                patch_sha256=receipt.identity.patch_sha256,
                tree_state=tree_state(receipt),
                interpretation=receipt.exit.interpretation,
                exit_status=receipt.exit.status,
                outcomes=receipt.outcomes,
                frozen=frozen_record(receipt.frozen_rerun, meta.repeat),
            )
        )
    return sorted(found, key=lambda rep: rep.repeat)


def iso_utc(text: str) -> str | None:
    """An ISO-8601 time as `YYYY-MM-DDTHH:MM:SSZ` in UTC (sortable as text), or None."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _stamp_time(folder: Path) -> str:
    """The time in a run id (`20261201T031155Z-...`), else the folder's modification time."""
    match = _STAMP.match(folder.name)
    if match:
        moment = datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ")
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    mtime = folder.stat().st_mtime
    return datetime.fromtimestamp(mtime, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _decode(path: Path, kind: type[_T], cap: int) -> _T:
    try:
        return msgspec.json.decode(read_capped(path, cap), type=kind)
    except msgspec.DecodeError as exc:
        raise IntegrityError(f"{path}: not readable as charpin's own file: {exc}") from exc


def read_capped(path: Path, cap: int) -> bytes:
    """A regular file's bytes, without following a link, at most cap bytes (run folders sit in
    the repository, where a test on `local` can write). IntegrityError otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise IntegrityError(f"{path}: cannot read ({exc.strerror})") from exc
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise IntegrityError(f"{path}: not a regular file")
        if info.st_size > cap:
            raise IntegrityError(f"{path}: {info.st_size} bytes is over the {cap}-byte cap")
        return handle.read(cap + 1)
