"""CLI glue for `charpin-remote ledger`: flake evidence from the run history (history/flaky.py).
Coordinator side, because the history lives on the coordinator; prints and picks the exit code.

    ledger suggest                 tests that passed and failed on one box at one commit, with
                                   the run ids and a proposed ledger entry (owner and expiry
                                   left for a person: the ledger refuses the entry as it is)
    ledger review                  the repository's ledger against the history: expired and
                                   near-expiry entries, never-seen entries, unfreeze candidates
                                   (from its runs, and from its frozen re-runs, `run
                                   --include-frozen`)

Both take --history PATH, --repo DIR and --json. Exit 0 (a report, not a gate); 64 for usage
(no database yet, a bad date); a malformed ledger stops with the loader's one line.
"""

from __future__ import annotations

import argparse
import datetime
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from charpin_runner.errors import UsageError

from charpin_coordinator import treestate
from charpin_coordinator.history import hooks
from charpin_coordinator.history.cli import _emit_json, _emit_text
from charpin_coordinator.history.flaky import EntryNote, Review, Suggestions, describe, percent

_EXIT_CODES = (
    "0 a report (never a gate), 64 usage or configuration error (no database yet, a bad "
    "date, a malformed ledger), 130 interrupted"
)


def add_parsers(sub: Any) -> None:
    """Register `ledger suggest` and `ledger review`."""
    ledger = sub.add_parser(
        "ledger",
        exit_codes=_EXIT_CODES,
        help="flake evidence from the run history: suggest entries, review the ledger",
        description="Flake evidence from the run history (SQLite, on the coordinator).",
    )
    subs = ledger.add_subparsers(
        dest="ledger_command", metavar="SUBCOMMAND", parser_class=type(ledger), required=True
    )
    suggest = subs.add_parser(
        "suggest",
        exit_codes=_EXIT_CODES,
        help="flaky tests (same commit and box, different outcomes) with evidence",
        description="List tests that both passed and failed on one box at one commit (and "
        "patch), with the run ids and a proposed ledger entry whose owner and expiry you fill "
        "in (as printed, the ledger loader refuses it).",
    )
    _common(suggest)
    suggest.set_defaults(handler=run_suggest)
    review = subs.add_parser(
        "review",
        exit_codes=_EXIT_CODES,
        help="the ledger against the history: expiry, never seen, unfreeze candidates",
        description="Read the repository's flake ledger ([tool.charpin] ledger) and list "
        "entries expired or near expiry, entries never seen in any recorded run, and entries "
        "whose test passed clean N times in a row when it did run.",
    )
    _common(review)
    add = review.add_argument
    add("--ledger", type=Path, metavar="PATH", help="the ledger (default [tool.charpin] ledger)")
    add("--days", type=int, default=14, metavar="N", help="near expiry: within N days (14)")
    add(
        "--clean-runs",
        type=int,
        default=10,
        metavar="N",
        help="unfreeze candidate: its latest N recorded runs passed (10)",
    )
    add("--today", metavar="YYYY-MM-DD", help="the date for expiry (default: today, UTC)")
    review.set_defaults(handler=run_review)


def _common(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--history", type=Path, metavar="PATH", help="the database (default as for `history`)")
    add("--repo", type=Path, metavar="DIR", help="repository (default: cwd's)")
    add("--json", action="store_true", help="print the answer as JSON")


def run_suggest(args: argparse.Namespace) -> int:
    from charpin_coordinator.history import flaky

    repo = hooks.repo_or_cwd(args.repo)
    found = flaky.suggest(hooks.locate(repo, args.history))
    return _emit_json(found) if args.json else _emit_text(render_suggestions(found))


def run_review(args: argparse.Namespace) -> int:
    from charpin_runner.ledger import load_ledger

    from charpin_coordinator.history import flaky

    if args.days < 0 or args.clean_runs < 1:
        raise UsageError("--days must be at least 0 and --clean-runs at least 1")
    repo = hooks.repo_or_cwd(args.repo)
    ledger = load_ledger(_ledger_path(repo, args.ledger))
    found = flaky.review(
        hooks.locate(repo, args.history),
        ledger,
        _today(args.today),
        near_days=args.days,
        clean_runs=args.clean_runs,
    )
    return _emit_json(found) if args.json else _emit_text(render_review(found))


def _ledger_path(repo: Path, given: Path | None) -> Path:
    if given is not None:
        return given.expanduser().absolute()
    from charpin_coordinator.config import load_config

    return repo / load_config(repo).charpin.ledger


def _today(text: str | None) -> datetime.date:
    if text is None:
        return datetime.datetime.now(datetime.UTC).date()
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--today {text!r} is not a date; give YYYY-MM-DD") from None


def render_suggestions(found: Suggestions) -> str:
    """`ledger suggest` as text."""
    if not found.candidates:
        return (
            f"ledger suggest: no flaky test in {found.history} (no test both passed and failed "
            "on one box at one tree state: commit, patch and uncommitted changes)\n"
        )
    lines = [
        f"ledger suggest: {len(found.candidates)} flaky candidate(s) in {found.history} "
        "(passed and failed on one box at one tree state: commit, patch and uncommitted changes)",
    ]
    for candidate in found.candidates:
        lines += ["", candidate.nodeid]
        for group in candidate.groups:
            patch = f", patch {group.patch_sha256[:12]}" if group.patch_sha256 else ""
            tree = f", {treestate.describe(group.tree_state)}" if group.tree_state else ""
            observed = percent(group.rate.failures / group.rate.runs)
            lines.append(
                f"  box {group.box}, commit {group.commit[:12]}{patch}{tree}: "
                f"{group.rate.failures} failures in {group.rate.runs} runs (observed "
                f"{observed}; {describe(group.rate).split(': ', 1)[1]})"
            )
            lines.append(f"    failed: {', '.join(group.failed)}")
            lines.append(f"    passed: {', '.join(group.passed)}")
        entry = json.dumps(
            {
                "id": candidate.proposed.id,
                "reason": candidate.proposed.reason,
                "owner": candidate.proposed.owner,
                "expires": candidate.proposed.expires,
            }
        )
        lines.append("  proposed ledger entry (fill in owner and expires; refused as it is):")
        lines.append(f"    {entry}")
    return "\n".join(lines) + "\n"


def render_review(found: Review) -> str:
    """`ledger review` as text."""
    lines = [
        f"ledger review: {found.ledger}, {found.entries} entr{'y' if found.entries == 1 else 'ies'}"
        f", today {found.today}, history {found.history}",
    ]

    def section(title: str, notes: list[EntryNote], detail: Callable[[EntryNote], str]) -> None:
        lines.append("")
        lines.append(f"{title}: {len(notes) or 'none'}")
        for note in notes:
            lines.append(f"  {note.id}  {detail(note)}")

    section(
        "expired",
        found.expired,
        lambda n: f"expired {n.expires} ({-n.days_left} day(s) ago), owner {n.owner}",
    )
    section(
        f"near expiry (within {found.near_days} days)",
        found.near_expiry,
        lambda n: f"expires {n.expires} (in {n.days_left} day(s)), owner {n.owner}",
    )
    section(
        "never seen in any recorded run",
        found.never_seen,
        lambda n: "(renamed or deleted? or no box has run it since the history began)",
    )
    section(
        f"unfreeze candidates (passed clean in its latest {found.clean_runs}+ recorded runs, "
        f"or ran clean {found.clean_runs}+ times in a row when re-run with --include-frozen)",
        found.unfreeze,
        lambda n: _unfreeze_detail(n, found.clean_runs),
    )
    return "\n".join(lines) + "\n"


def _unfreeze_detail(note: EntryNote, clean_runs: int) -> str:
    """What makes it a candidate: its runs, its re-runs, or both (one line each)."""
    out = []
    if note.reruns is not None and note.reruns.runs >= clean_runs:
        line = (
            f"ran clean {note.reruns.runs} times in a row when re-run: consider unfreezing; "
            f"{describe(note.reruns)}"
        )
        if note.reruns_overall is not None and note.reruns_overall.runs > note.reruns.runs:
            done = note.reruns_overall
            line += f"; all re-runs: {done.failures} not clean in {done.runs}"
        out.append(line)
    if (note.rate is not None and note.rate.runs >= clean_runs) or not out:
        streak = describe(note.rate) if note.rate else "no clean run"
        if note.overall is not None:
            streak += f"; all recorded runs: {describe(note.overall).split(': ', 1)[0]}"
        out.append(streak)
    return "\n    ".join(out)
