"""Coordinator side. The demo's example repository, and the explanation of what a run caught.

The repository ships as package data under charpin_coordinator/demo_repo/: `repo/` is committed,
`stale/` is laid over the working tree afterwards (an edit an old local run left behind). Every
data file ends in `.tmpl`, so no tool of ours (pytest, ruff, mypy, coverage) mistakes the demo's
code and tests for our own; the suffix is dropped on copy.

explain() reads only what the run produced (the drift report and the boxes' receipts), so it
says nothing when nothing was caught.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from charpin_runner.errors import ConfigError, UsageError
from charpin_runner.pins.execute import Session
from charpin_runner.pins.model import Pin
from charpin_runner.pins.record import record_case
from charpin_runner.pins.store import load_pins, save_jsonl
from charpin_runner.receipt import Receipt

from charpin_coordinator.config import load_config
from charpin_coordinator.gates import undeclared
from charpin_coordinator.report import DriftReport

if TYPE_CHECKING:  # importlib.abc.Traversable is deprecated from 3.12 and gone in 3.14
    from importlib.resources.abc import Traversable

__all__ = ["STALE_PATHS", "DemoRepo", "build_demo_repo", "explain"]

_SUFFIX = ".tmpl"
# Names a package-data file cannot carry as they are (hatchling and git treat dotfiles specially).
_RENAMES = {"gitignore": ".gitignore"}
# A fixed identity and date: the demo commit does not depend on who runs it, or when.
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "Billing Team",
    "GIT_AUTHOR_EMAIL": "billing-team@example.invalid",
    "GIT_COMMITTER_NAME": "Billing Team",
    "GIT_COMMITTER_EMAIL": "billing-team@example.invalid",
    "GIT_AUTHOR_DATE": "2026-03-02T09:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-03-02T09:00:00+00:00",
}
# The working-tree edits laid over the commit (relative paths, as in the receipts).
STALE_PATHS = ("tests/fixtures/rates.json",)


@dataclass(frozen=True)
class DemoRepo:
    """The built example: where it is, its commit, and the files left dirty on purpose."""

    path: Path
    commit: str
    stale: tuple[str, ...]


def build_demo_repo(dest: Path, *, stale: bool = True) -> DemoRepo:
    """Write the example repository into the empty folder dest, record its pins and commit it."""
    if dest.exists() and any(dest.iterdir()):
        raise UsageError(f"{dest} is not empty; give the demo an empty or new folder")
    dest.mkdir(parents=True, exist_ok=True)
    data = resources.files("charpin_coordinator") / "demo_repo"
    _copy_tree(data / "repo", dest)
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "add", "--", ".", ":!pins.jsonl")
    _git(dest, "commit", "-q", "-m", "Invoice export with its tests and fixtures")
    # Pins are recorded against the committed program, then committed alone (the seeds' rule:
    # pins never change in the same commit as the code they pin).
    _record_pins(dest)
    _git(dest, "add", "--", "pins.jsonl")
    _git(dest, "commit", "-q", "-m", "Pin the export's process boundary")
    commit = _git(dest, "rev-parse", "HEAD")
    left: tuple[str, ...] = ()
    if stale:
        _copy_tree(data / "stale", dest)
        left = STALE_PATHS
    return DemoRepo(path=dest, commit=commit, stale=left)


def _copy_tree(source: Traversable, dest: Path) -> None:
    for item, rel in _walk(source, ()):
        name = rel[-1].removesuffix(_SUFFIX)
        target = dest.joinpath(*rel[:-1], _RENAMES.get(name, name))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(item.read_bytes())


def _walk(
    folder: Traversable, prefix: tuple[str, ...]
) -> Iterator[tuple[Traversable, tuple[str, ...]]]:
    for item in sorted(folder.iterdir(), key=lambda t: t.name):
        rel = (*prefix, item.name)
        if item.is_dir():
            yield from _walk(item, rel)
        elif item.name.endswith(_SUFFIX):
            yield item, rel


def _record_pins(repo: Path) -> None:
    config = load_config(repo).charpin.pins
    pin_set = load_pins(repo, config)
    with Session(repo, config) as session:
        recorded = [Pin(p.case, record_case(session, p.case).observation) for p in pin_set.jsonl]
    save_jsonl(pin_set.jsonl_path, recorded)


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, **_GIT_ENV}
    argv = ["git", "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", *args]
    done = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ConfigError(
            f"git {args[0]} failed in the demo repository ({done.stderr.strip()}); "
            "check that git is installed and works"
        )
    return done.stdout.strip()


def explain(report: DriftReport, receipts: Sequence[tuple[str, Receipt]]) -> list[str]:
    """Two lines saying which box ran with which uncommitted watched files, and what it changed.

    Empty when no box had an uncommitted watched file that the gates caught.
    """
    gates: dict[tuple[str, str], str] = {(g.gate, g.box): g.status for g in report.gates}
    for label, receipt in receipts:
        stale = _stale_fixtures(receipt)
        if not stale or gates.get(("Clean tree", label)) != "FAIL":
            continue
        others = [other for other, _ in receipts if other != label]
        return [
            _first_line(label, stale, others, gates),
            _second_line(report, label, stale, others, receipt),
        ]
    return []


def _stale_fixtures(receipt: Receipt) -> list[str]:
    """Uncommitted paths (before the run) that sit under a watched fixture root."""
    dirty = undeclared(receipt.tree.dirty_before, receipt.tree.outputs)
    roots = [root.rstrip("/") + "/" for root in receipt.fixtures.roots]
    return [path for path in dirty if any(path.startswith(root) for root in roots)]


def _first_line(
    label: str, stale: list[str], others: list[str], gates: dict[tuple[str, str], str]
) -> str:
    failed = [
        gate for gate in ("Clean tree", "Fixture integrity") if gates.get((gate, label)) == "FAIL"
    ]
    noun = "gate" if len(failed) == 1 else "gates"
    line = (
        f"{label} ran with an uncommitted edit to {', '.join(stale)}: "
        f"the {' and '.join(failed)} {noun} failed"
    )
    if others and "Fixture integrity" in failed:
        line += f", and its fixtures differ from {_possessive(others)} fresh checkout"
    return line + "."


def _possessive(labels: list[str]) -> str:
    return " and ".join(labels) + "'s"


def _second_line(
    report: DriftReport, label: str, stale: list[str], others: list[str], receipt: Receipt
) -> str:
    where = (
        f"On {' and '.join(others)} (a fresh checkout of the same commit "
        f"{receipt.identity.head_before[:12]})"
    )
    rows = [row for dim in report.dimensions if dim.name == "outcomes" for row in dim.matrix]
    moved = [row for row in rows if any(v != row.values.get(label) for v in row.values.values())]
    fix = f"commit or discard it (git diff -- {' '.join(stale)})."
    if not moved:
        return (
            f"{where} every test gives the same result, but {label} did not test that commit: {fix}"
        )
    row = moved[0]
    theirs = next(v for box, v in row.values.items() if box != label)
    more = f" (and {len(moved) - 1} more test(s) differ)" if len(moved) > 1 else ""
    return (
        f"{where} {row.item} {theirs}; on {label} it {row.values.get(label, 'did not run')}{more}. "
        f"The stale file, not the code, is the difference: {fix}"
    )
