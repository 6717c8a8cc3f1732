"""Coordinator side (stdlib, charpin_runner, verify.gitread): the patch's Entry points, and the
module that gathers Scope (verify.scope) and Dependencies (verify.deps)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from charpin_runner.config import CharpinConfig
from charpin_runner.inventory.build import build_inventory
from charpin_runner.inventory.model import Entry, Inventory, compare

from charpin_coordinator.verify import gitread
from charpin_coordinator.verify.deps import dependencies
from charpin_coordinator.verify.scope import MODULE, Scope, scope

# What build_inventory reads besides .py files: the packaging files at the top of the tree.
_SCRIPT_FILES = ("pyproject.toml", "setup.cfg", "setup.py")



def entry_points(repo: Path, base: str, patched: str) -> list[str]:
    """Drift of the runner's entry-point inventory from base to patched: entry points added or
    removed, environment keys (and import-time effects) that an entry point newly reads."""
    base, patched = gitread.commits(repo, base, patched)
    # The inventory is a function of the .py files and the top-level packaging files only;
    # a patch touching neither cannot move it, and most patches are small.
    if not any(_feeds_inventory(p) for c in gitread.changes(repo, base, patched) for p in c.paths):
        return []
    with tempfile.TemporaryDirectory(prefix="charpin-verify-") as tmp:
        sides = [(Path(tmp, "base"), _inventory_files(repo, base))]
        sides.append((Path(tmp, "patched"), _inventory_files(repo, patched)))
        # Blobs the two trees share (nearly all of them) are read once.
        blobs = gitread.blobs(repo, [sha for _, files in sides for sha in files.values()])
        inventories = []
        for root, files in sides:
            _write_tree(root, files, blobs)
            # Default config: pin coverage is not part of the drift, and the export has no pins.
            inventories.append(build_inventory(root, CharpinConfig()))
    return _drift(*inventories)


def _feeds_inventory(path: str) -> bool:
    return path.endswith(".py") or path in _SCRIPT_FILES


def _inventory_files(repo: Path, commit: str) -> dict[str, str]:
    """path -> blob of every regular file of commit's tree that build_inventory reads."""
    raw = gitread.git(repo, "ls-tree", "-r", "-z", "--full-tree", commit)
    out = {}
    for record in raw.split(b"\0"):
        if not record:
            continue
        meta, _, name = record.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        path = name.decode("utf-8", "surrogateescape")
        if kind == "blob" and mode in gitread.REGULAR and _feeds_inventory(path) and _safe(path):
            out[path] = sha
    return out


def _safe(path: str) -> bool:
    """A relative path that stays under the export root (git refuses others, but a crafted tree
    object can hold anything)."""
    parts = path.split("/")
    return not path.startswith("/") and all(p not in ("", ".", "..", ".git") for p in parts)


def _write_tree(root: Path, files: dict[str, str], blobs: dict[str, bytes]) -> None:
    """Regular files only, in a folder this process just made: nothing in it can be a link."""
    for path, sha in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blobs[sha])


def _drift(before: Inventory, after: Inventory) -> list[str]:
    drift = compare(before, after)
    out = [f"added entry point {_named(e)}{_reading(e)}" for e in drift.appeared]
    out += [f"removed entry point {_named(e)}" for e in drift.disappeared]
    for old, new in drift.env_changed:
        named = _named(new)
        # Reading fewer keys is no new input: only keys read now and not before widen what runs.
        out += [f"{named} reads env {k} (new)" for k in sorted(set(new.env) - set(old.env))]
        if new.dynamic_env > old.dynamic_env:
            out.append(
                f"{named} reads {new.dynamic_env} computed env key(s) (was {old.dynamic_env})"
            )
    kept = {e.key: e for e in before.entries}
    for now in after.entries:
        was = kept.get(now.key)
        if was is not None:
            out += _moved(was, now)
    return sorted(out)


def _moved(was: Entry, now: Entry) -> list[str]:
    """What compare() leaves out for an entry kept by name: its target, import-time effects."""
    out = []
    if was.target != now.target and now.kind == "console-script":
        out.append(f"console script {now.name} now runs {now.target} (was {was.target})")
    # Opening files or reading the cwd at import time is what an entry point does before
    # main(); a patch that starts doing it widens what runs. A line moving is not drift.
    before = {(f.kind, f.detail, f.file) for f in was.effects if f.kind != "env"}
    after = {(f.kind, f.detail, f.file) for f in now.effects if f.kind != "env"}
    for kind, detail, file in sorted(after - before):
        out.append(f"{_named(now)} at import: {kind} {detail} in {file} (new)")
    return out


def _named(entry: Entry) -> str:
    if entry.kind == "console-script":
        return f"console script {entry.name} ({entry.target})"
    if entry.kind == "main-module":
        return f"{entry.label} ({entry.file})"
    return entry.file


def _reading(entry: Entry) -> str:
    return f", reads env {', '.join(entry.env)}" if entry.env else ""


__all__ = ["MODULE", "Scope", "dependencies", "entry_points", "scope"]
