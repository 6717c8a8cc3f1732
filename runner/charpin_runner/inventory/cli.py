"""CLI glue for `charpin inventory`. Runs on any box; stdlib only. May print; library may not."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from charpin_runner.errors import EXIT_CLEAN, EXIT_DRIFT, ConfigError
from charpin_runner.inventory.build import build_inventory, load_config
from charpin_runner.inventory.model import (
    Drift,
    Entry,
    Inventory,
    compare,
    dump_inventory,
    load_inventory,
)
from charpin_runner.receipt import write_atomic

_FIX = "run `charpin inventory --write` and commit the file"


def add_parsers(sub: Any) -> None:
    """Register `charpin inventory`."""
    parser = sub.add_parser(
        "inventory",
        exit_codes=(
            "0 listed, written or matching, 2 --check found drift, 64 usage or "
            "configuration error, 130 interrupted"
        ),
        help="list entry points, env reads and import-time side effects",
        description=(
            "List what the repository can run (main blocks, __main__.py, console scripts), the "
            "env keys each entry reads and import-time effects. Exit 2 on --check drift."
        ),
    )
    parser.add_argument("--repo", default=".", help="repository root (default: .)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="freeze it in the inventory file")
    mode.add_argument("--check", action="store_true", help="exit 2 when it drifted from the file")
    mode.add_argument("--json", action="store_true", help="print the inventory as JSON")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    repo = Path(args.repo).resolve()
    if not repo.is_dir():
        raise ConfigError(f"--repo {args.repo}: not a folder; pass the repository root")
    cfg, notes = load_config(repo)
    current = build_inventory(repo, cfg)
    current = Inventory(current.entries, sorted(current.notes + notes))
    frozen_path = repo / cfg.inventory
    if args.json:
        sys.stdout.write(dump_inventory(current).decode("utf-8"))
        return EXIT_CLEAN
    if args.write:
        write_atomic(frozen_path, dump_inventory(current), overwrite=True)
        print(f"charpin inventory: wrote {cfg.inventory} ({_summary(current)})")
        return EXIT_CLEAN
    if args.check:
        return _check(frozen_path, cfg.inventory, current)
    print(render_table(current))
    return EXIT_CLEAN


def _check(frozen_path: Path, label: str, current: Inventory) -> int:
    try:
        data = frozen_path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{label} is missing; {_FIX}") from None
    except OSError as exc:
        raise ConfigError(f"{label} cannot be read ({exc.strerror}); {_FIX}") from None
    drift = compare(load_inventory(data, label), current)
    if drift.clean:
        print(f"charpin inventory: matches {label} ({_summary(current)})")
        _print_unpinned(current)
        return EXIT_CLEAN
    print(render_drift(drift, label))
    _print_unpinned(current)
    return EXIT_DRIFT


def _summary(inventory: Inventory) -> str:
    unpinned = sum(1 for e in inventory.entries if not e.pinned)
    return f"{len(inventory.entries)} entry points, {unpinned} without a pin"


def _print_unpinned(inventory: Inventory) -> None:
    names = [e.label for e in inventory.entries if not e.pinned]
    if names:
        print("no pin: " + ", ".join(names))


_MAX_KEYS = 8  # the table stays readable; --json has every key


def _env_cell(entry: Entry) -> str:
    keys = list(entry.env)
    if len(keys) > _MAX_KEYS:
        keys = [*keys[: _MAX_KEYS - 1], f"(+{len(keys) - _MAX_KEYS + 1} more)"]
    if entry.dynamic_env:
        keys.append(f"<dynamic>x{entry.dynamic_env}")
    return ", ".join(keys) or "-"


def render_table(inventory: Inventory) -> str:
    """Entry, where it is declared, env keys, pinned yes/no; then effects and notes."""
    rows = [("ENTRY", "KIND", "FILE:LINE", "ENV KEYS", "PINNED")]
    rows += [
        (e.label, e.kind, f"{e.file}:{e.line}", _env_cell(e), "yes" if e.pinned else "no")
        for e in inventory.entries
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r[:4], widths)) + "  " + r[4] for r in rows]
    effects = sorted(
        {f for e in inventory.entries for f in e.effects}, key=lambda f: (f.file, f.line)
    )
    if effects:
        lines.append("")
        lines.append("import-time effects:")
        lines += [f"  {f.file}:{f.line}  {f.kind}  {f.detail}" for f in effects]
    if inventory.notes:
        lines.append("")
        lines.append("notes:")
        lines += [f"  {n}" for n in inventory.notes]
    lines.append("")
    lines.append(_summary(inventory))
    return "\n".join(lines)


def render_drift(drift: Drift, label: str) -> str:
    """One line per appeared (+), disappeared (-) and env-changed (~) entry, then the fix."""
    lines = [f"charpin inventory: drift against {label}"]
    lines += [f"  + {e.kind} {e.label} ({e.file}:{e.line})" for e in drift.appeared]
    lines += [f"  - {e.kind} {e.label} ({e.file}:{e.line})" for e in drift.disappeared]
    for old, new in drift.env_changed:
        added = sorted(set(new.env) - set(old.env))
        removed = sorted(set(old.env) - set(new.env))
        words = [f"+{k}" for k in added] + [f"-{k}" for k in removed]
        if old.dynamic_env != new.dynamic_env:
            words.append(f"<dynamic> {old.dynamic_env}->{new.dynamic_env}")
        lines.append(f"  ~ {new.kind} {new.label} env: {' '.join(words)}")
    lines.append(f"fix: review the change, then {_FIX}")
    return "\n".join(lines)
