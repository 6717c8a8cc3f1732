"""Coordinator side. `verify --reuse-base`: the base receipts of earlier verifies, kept outside
the repository (statedir.py) and authenticated with this machine's key.

    <state root>/reuse.key                       32 random bytes, 0600, made on first use
    <state root>/reuse/<repo key>/<verify id>/   0700
        record.json     base, config sha256, each box's folder and receipt sha256, when stored
        record.mac      HMAC-SHA256 (reuse.key) over record.json and every receipt's exact bytes
        base/<box>/receipt.json                  copies of the accepted base receipts

Nothing is read from the repository (a test run there could write it), and a record counts only
when its MAC checks: a planted, edited or moved record, a changed receipt copy, or a record
folder inside the repository is never used, and the caller is told why in one line.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import Any

from charpin_runner.errors import IntegrityError
from charpin_runner.receipt import MAX_RECEIPT_BYTES

from charpin_coordinator import statedir

KEY_FILE = "reuse.key"
RECORD = "record.json"
MAC = "record.mac"
RECEIPT = "receipt.json"
VERSION = 1
_KEY_BYTES = 32
_MAX_RECORD = 1 << 20
_DOMAIN = b"charpin-reuse-v1\0"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class Record:
    """One earlier verify's base receipts, authenticated: raw bytes by box label."""

    run_id: str
    folder: Path
    receipts: dict[str, bytes]


def reuse_root(repo: Path) -> Path:
    """Where the records of repo's verifies live (its key as the box caches name it)."""
    from charpin_coordinator.remote.snapshot import repo_key

    return statedir.state_root() / "reuse" / repo_key(repo)


def load_key(*, create: bool = False) -> bytes | None:
    """reuse.key (None when missing and not create). IntegrityError when it is not a private
    regular file of this user holding 32 bytes."""
    path = statedir.state_root() / KEY_FILE
    try:
        data = statedir.read_private(path, _KEY_BYTES)
    except FileNotFoundError:
        if not create:
            return None
        statedir.ensure_state_root()
        try:
            statedir.write_private(path, secrets.token_bytes(_KEY_BYTES), exclusive=True)
        except FileExistsError:
            pass  # another verify made it first: use that one
        data = statedir.read_private(path, _KEY_BYTES)
    if len(data) != _KEY_BYTES:
        raise IntegrityError(f"{path} is not a {_KEY_BYTES}-byte key; remove it to make a new one")
    return data


def store(
    repo: Path,
    run_id: str,
    base: str,
    config_sha256: str,
    receipts: Mapping[str, bytes],
    *,
    notes: list[str],
) -> Path | None:
    """Keep these accepted base receipts (raw bytes by box label) for a later --reuse-base;
    return the record's folder, or None (with a note) when it cannot be kept safely."""
    root = reuse_root(repo)
    if not receipts:
        return None
    if _inside(root, repo):
        notes.append(
            f"--reuse-base: {root} is inside the repository; base receipts are not kept there "
            "(set XDG_STATE_HOME to a folder outside it)"
        )
        return None
    if not _NAME.fullmatch(run_id):
        return None
    try:
        key = load_key(create=True)
        assert key is not None
        statedir.private_dir(root.parent)
        statedir.private_dir(root)
        labels = sorted(receipts)
        folders = _box_folders(labels)
        record = {
            "version": VERSION,
            "repo_key": root.name,
            "run_id": run_id,
            "base": base,
            "config_sha256": config_sha256,
            "stored_ns": time.time_ns(),
            "boxes": {
                label: {"folder": folders[label], "sha256": sha256(receipts[label]).hexdigest()}
                for label in labels
            },
        }
        data = json.dumps(record, indent=1, sort_keys=True).encode() + b"\n"
        part = statedir.private_dir(root / f".{run_id}.part-{secrets.token_hex(6)}")
        try:
            statedir.private_dir(part / "base")
            for label in labels:
                box = statedir.private_dir(part / "base" / folders[label])
                statedir.write_private(box / RECEIPT, receipts[label])
            statedir.write_private(part / RECORD, data)
            statedir.write_private(part / MAC, _mac(key, data, receipts).encode() + b"\n")
            final = root / run_id
            if final.is_dir() and not final.is_symlink():
                shutil.rmtree(final)  # the same verify id again: the newer base wins
            os.rename(part, final)
        finally:
            shutil.rmtree(part, ignore_errors=True)
    except (OSError, IntegrityError) as exc:
        notes.append(f"--reuse-base: base receipts not kept for later verifies: {exc}")
        return None
    return final


def candidates(
    repo: Path, base: str, config_sha256: str, hosts: Sequence[str], *, notes: list[str]
) -> Iterator[Record]:
    """The authenticated records of this base and config on exactly these boxes, newest first.
    Every record that fails its check is skipped with one note saying why."""
    root = reuse_root(repo)
    if _inside(root, repo):
        notes.append(
            f"--reuse-base: {root} is inside the repository, where a test could write; "
            "nothing there is reused"
        )
        return
    if not root.is_dir():
        return
    problem = statedir.private_problem(statedir.state_root()) or statedir.private_problem(root)
    if problem is not None:
        notes.append(f"--reuse-base: nothing is reused: {problem}")
        return
    try:
        key = load_key()
    except (OSError, IntegrityError) as exc:
        notes.append(f"--reuse-base: nothing is reused: {exc}")
        return
    checked: list[tuple[int, str, Record]] = []
    for folder in sorted(root.iterdir()):
        if folder.name.startswith("."):
            continue
        try:
            if key is None:
                raise IntegrityError(f"{statedir.state_root() / KEY_FILE} is missing")
            record, fields = _checked(folder, key)
        except (OSError, IntegrityError, ValueError) as exc:
            notes.append(f"--reuse-base: {folder} is not reused: {exc}")
            continue
        if (
            fields.get("base") == base
            and fields.get("config_sha256") == config_sha256
            and sorted(record.receipts) == sorted(hosts)
        ):
            stored = fields.get("stored_ns")
            checked.append((stored if isinstance(stored, int) else 0, record.run_id, record))
    for _, _, record in sorted(checked, key=lambda c: (c[0], c[1]), reverse=True):
        yield record


def _checked(folder: Path, key: bytes) -> tuple[Record, dict[str, Any]]:
    """The record in folder (its receipts' bytes, its fields), once its MAC and binding check."""
    if folder.is_symlink() or not folder.is_dir():
        raise IntegrityError("not a folder")
    data = statedir.read_private(folder / RECORD, _MAX_RECORD)
    mac = statedir.read_private(folder / MAC, 256).decode("ascii", "replace").strip()
    record = json.loads(data)
    if not isinstance(record, dict):
        raise IntegrityError("its record is not a JSON object")
    boxes = record.get("boxes")
    if not isinstance(boxes, dict) or not boxes:
        raise IntegrityError("its record lists no boxes")
    receipts: dict[str, bytes] = {}
    changed: list[str] = []
    for label, box in sorted(boxes.items()):
        name = box.get("folder") if isinstance(box, dict) else None
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise IntegrityError(f"its record names an unsafe folder for {label!r}")
        path = folder / "base" / name / RECEIPT
        receipts[label] = statedir.read_private(path, MAX_RECEIPT_BYTES)
        if sha256(receipts[label]).hexdigest() != box.get("sha256"):
            changed.append(str(path.relative_to(folder)))
    if not hmac.compare_digest(mac, _mac(key, data, receipts)):
        if changed:
            raise IntegrityError(f"{', '.join(changed)} changed since it was stored")
        raise IntegrityError("its HMAC does not match (not written by this machine's verify)")
    if changed:  # a MAC over other bytes than the record says: never, but never trusted either
        raise IntegrityError(f"{', '.join(changed)} does not match its record")
    if record.get("version") != VERSION or record.get("repo_key") != folder.parent.name:
        raise IntegrityError("its record belongs to another repository or version")
    if record.get("run_id") != folder.name:
        raise IntegrityError("its record was moved from another folder")
    return Record(folder.name, folder, receipts), record


def _mac(key: bytes, record: bytes, receipts: Mapping[str, bytes]) -> str:
    """HMAC-SHA256 over the record and each receipt's exact bytes, each part length-prefixed."""
    mac = hmac.new(key, _DOMAIN, sha256)
    parts = [record]
    for label in sorted(receipts):
        parts += [label.encode(), receipts[label]]
    for part in parts:
        mac.update(len(part).to_bytes(8, "big"))
        mac.update(part)
    return mac.hexdigest()


def _box_folders(labels: Sequence[str]) -> dict[str, str]:
    from charpin_coordinator.remote.results import safe_folders

    return safe_folders(labels)


def _inside(path: Path, repo: Path) -> bool:
    """Whether path is repo or anything under it (links resolved)."""
    return path.resolve().is_relative_to(repo.resolve())


__all__ = ["Record", "candidates", "load_key", "reuse_root", "store"]


def config_sha(table: dict[str, Any], capture: Sequence[str] = ()) -> str:
    """What a reusable base run must have had: the configuration, and the functions whose calls
    it captured (a base run that captured others cannot feed this verify's replays)."""
    body = table if not capture else {"config": table, "capture": sorted(capture)}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
