"""Coordinator side; stdlib sqlite3, msgspec, the history and charpin's ledger. Flake evidence.

A test is **flaky** when the same commit (and the same patch, if any) on the same box gave
different outcomes across recorded runs: at least one `passed` and at least one `failed` or
`error`. Only those three outcomes count; skipped, xfailed and xpassed say nothing either way,
and a run where the box did not run the test is not a run of it.

    suggest(store_path)                   flaky candidates, with the run ids as evidence and a
                                          proposed ledger entry whose owner and expiry are left
                                          to a person (placeholders the ledger loader refuses)
    review(store_path, ledger, today)     the ledger against the history: expired and
                                          near-expiry entries, entries never seen in any
                                          recorded run, and entries whose test passed clean N
                                          times in a row when it did run (unfreeze candidates)

Statistics are the exact binomial (Clopper-Pearson) one-sided 95 % upper bound on the failure
rate, computed with the standard library; `binomial_upper` says how.
"""

from __future__ import annotations

import datetime
import math
import sqlite3
from pathlib import Path

import msgspec
from charpin_runner.ledger import Ledger, family_of

from charpin_coordinator.history import store
from charpin_coordinator.history.schema import OUTCOME_CODES

CONFIDENCE = 0.95
METHOD = "exact binomial (Clopper-Pearson), one-sided 95 %"
# Placeholders the ledger loader refuses (an empty owner, a date that is not a date), so a
# proposed entry cannot be pasted into the ledger without a person choosing both.
OWNER_PLACEHOLDER = ""
EXPIRES_PLACEHOLDER = "YYYY-MM-DD"
_PASS = OUTCOME_CODES["passed"]
_FAILS = (OUTCOME_CODES["failed"], OUTCOME_CODES["error"])


class Row(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Answers of this module; `--json` prints them as they are."""


class Rate(Row):
    """k failures in n runs, and the upper bound on the failure rate."""

    failures: int
    runs: int
    upper_bound: float  # a fraction, 0..1
    confidence: float
    method: str


class Group(Row):
    """One box and commit (and patch) on which a test both passed and failed."""

    box: str
    commit: str
    patch_sha256: str | None
    rate: Rate
    failed: list[str]  # run ids, oldest first
    passed: list[str]


class ProposedEntry(Row):
    """A ledger entry in charpin's format (runner/charpin_runner/ledger.py), to be completed."""

    id: str
    reason: str
    owner: str
    expires: str


class Candidate(Row):
    nodeid: str
    groups: list[Group]
    proposed: ProposedEntry


class Suggestions(Row):
    """`ledger suggest`."""

    history: str
    candidates: list[Candidate]


class EntryNote(Row):
    """One ledger entry the review has something to say about."""

    id: str
    owner: str
    expires: str
    days_left: int  # negative once expired
    rate: Rate | None  # the clean streak (unfreeze) or None
    overall: Rate | None  # every recorded run of it, for context


class Review(Row):
    """`ledger review`."""

    ledger: str
    history: str
    today: str
    near_days: int
    clean_runs: int
    entries: int
    expired: list[EntryNote]
    near_expiry: list[EntryNote]
    never_seen: list[EntryNote]
    unfreeze: list[EntryNote]


def binomial_upper(failures: int, runs: int, confidence: float = CONFIDENCE) -> float:
    """The exact one-sided upper bound p on the failure rate: P(X <= failures | runs, p) equals
    1 - confidence (Clopper-Pearson). For 0 failures that is 1 - (1 - confidence) ** (1 / runs),
    a little under the rule of three's 3 / runs."""
    if runs < 1 or not 0 <= failures <= runs:
        raise ValueError(f"need 0 <= failures <= runs and runs >= 1, not {failures}/{runs}")
    if failures == runs:
        return 1.0
    alpha = 1.0 - confidence
    if failures == 0:
        return 1.0 - float(alpha ** (1.0 / runs))
    low, high = failures / runs, 1.0
    for _ in range(100):  # bisection; the cdf falls as p rises
        mid = (low + high) / 2
        if _cdf(failures, runs, mid) > alpha:
            low = mid
        else:
            high = mid
    return high


def _cdf(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


def rate(failures: int, runs: int) -> Rate:
    return Rate(
        failures=failures,
        runs=runs,
        upper_bound=binomial_upper(failures, runs),
        confidence=CONFIDENCE,
        method=METHOD,
    )


def suggest(store_path: Path) -> Suggestions:
    """Every test that both passed and failed on one box at one commit (and patch)."""
    with store.opened(store_path) as conn:
        rows = conn.execute(
            "SELECT test.nodeid, box.name, run_box.commit_sha, run_box.patch_sha256, "
            "run.run_id, outcome.code FROM outcome "
            "JOIN test ON test.id = outcome.test "
            "JOIN run_box ON run_box.id = outcome.run_box "
            "JOIN run ON run.id = run_box.run JOIN box ON box.id = run_box.box "
            "WHERE run_box.evaluated = 1 AND outcome.code IN (?, ?, ?) "
            "ORDER BY test.nodeid, box.name, run_box.commit_sha, run.started_at, run.run_id",
            (_PASS, *_FAILS),
        ).fetchall()
    groups: dict[tuple[str, str, str, str | None], tuple[list[str], list[str]]] = {}
    for nodeid, box, commit, patch, run_id, code in rows:
        failed, passed = groups.setdefault((nodeid, box, commit, patch), ([], []))
        (passed if int(code) == _PASS else failed).append(str(run_id))
    by_test: dict[str, list[Group]] = {}
    for (nodeid, box, commit, patch), (failed, passed) in groups.items():
        if failed and passed:
            runs = len(failed) + len(passed)
            group = Group(
                box=box,
                commit=commit,
                patch_sha256=patch,
                rate=rate(len(failed), runs),
                failed=failed,
                passed=passed,
            )
            by_test.setdefault(nodeid, []).append(group)
    candidates = [
        Candidate(nodeid=nodeid, groups=found, proposed=_proposal(nodeid, found))
        for nodeid, found in sorted(by_test.items())
    ]
    return Suggestions(history=str(store_path), candidates=candidates)


def _proposal(nodeid: str, groups: list[Group]) -> ProposedEntry:
    first = groups[0]
    where = f"box {first.box}, commit {first.commit[:12]}"
    more = f" (and {len(groups) - 1} more box/commit)" if len(groups) > 1 else ""
    reason = (
        f"flaky: {first.rate.failures} failures in {first.rate.runs} runs on {where}{more}; "
        "evidence: charpin-remote ledger suggest"
    )
    return ProposedEntry(
        id=nodeid, reason=reason, owner=OWNER_PLACEHOLDER, expires=EXPIRES_PLACEHOLDER
    )


def review(
    store_path: Path,
    ledger: Ledger,
    today: datetime.date,
    *,
    near_days: int = 14,
    clean_runs: int = 10,
) -> Review:
    """The ledger's entries against the history (see the module docstring)."""
    expired: list[EntryNote] = []
    near: list[EntryNote] = []
    never: list[EntryNote] = []
    unfreeze: list[EntryNote] = []
    with store.opened(store_path) as conn:
        for entry in ledger.entries:
            days_left = (datetime.date.fromisoformat(entry.expires) - today).days
            tests = _test_ids(conn, entry.id)
            series = _series(conn, tests) if tests else []
            streak = 0
            for failed in series:  # newest first
                if failed:
                    break
                streak += 1
            note = EntryNote(
                id=entry.id,
                owner=entry.owner,
                expires=entry.expires,
                days_left=days_left,
                rate=rate(0, streak) if streak else None,
                overall=rate(sum(series), len(series)) if series else None,
            )
            if days_left < 0:
                expired.append(note)
            elif days_left <= near_days:
                near.append(note)
            if not tests:
                never.append(note)
            elif streak >= clean_runs:
                unfreeze.append(note)
    return Review(
        ledger=ledger.path,
        history=str(store_path),
        today=today.isoformat(),
        near_days=near_days,
        clean_runs=clean_runs,
        entries=len(ledger.entries),
        expired=expired,
        near_expiry=near,
        never_seen=never,
        unfreeze=unfreeze,
    )


def _test_ids(conn: sqlite3.Connection, entry_id: str) -> list[int]:
    """The recorded tests an entry names: its exact id, or (without parameters) its family,
    matched exactly as the ledger resolves them."""
    found = [int(r[0]) for r in conn.execute("SELECT id FROM test WHERE nodeid = ?", (entry_id,))]
    if "[" not in entry_id:
        found += [
            int(test_pk)
            for test_pk, nodeid in conn.execute(
                "SELECT id, nodeid FROM test WHERE substr(nodeid, 1, ?) = ?",
                (len(entry_id) + 1, entry_id + "["),
            )
            if family_of(str(nodeid)) == entry_id
        ]
    return found


def _series(conn: sqlite3.Connection, tests: list[int]) -> list[bool]:
    """Failed-or-not per box of a run that ran the test(s), newest first; a family's run
    failed when any member failed."""
    marks = ",".join("?" * len(tests))
    rows = conn.execute(
        f"SELECT max(outcome.code IN (?, ?)) FROM outcome "  # noqa: S608 - only placeholders
        f"JOIN run_box ON run_box.id = outcome.run_box JOIN run ON run.id = run_box.run "
        f"WHERE outcome.test IN ({marks}) AND outcome.code IN (?, ?, ?) "
        f"GROUP BY run_box.id ORDER BY max(run.started_at) DESC, max(run.run_id) DESC",
        (*_FAILS, *tests, _PASS, *_FAILS),
    ).fetchall()
    return [bool(r[0]) for r in rows]


def percent(fraction: float) -> str:
    """0.0722 -> '7.2 %'."""
    return f"{fraction * 100:.1f} %"


def describe(found: Rate) -> str:
    """'0 failures in 40 runs: failure rate < 7.2 % at 95 % (exact binomial ...)'."""
    head = f"{found.failures} failure{'' if found.failures == 1 else 's'} in {found.runs} runs"
    level = f"{found.confidence * 100:.0f} %"
    return f"{head}: failure rate < {percent(found.upper_bound)} at {level} ({found.method})"
