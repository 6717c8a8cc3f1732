"""Coordinator side; stdlib sqlite3, msgspec, the history and charpin's ledger. Flake evidence.

A test is **flaky** when the same tree state on the same box gave different outcomes across
recorded runs: at least one `passed` and at least one `failed` or `error`. The same tree state is
the same commit, the same patch (if any) and the same uncommitted changes and untracked files at
the start of the run (treestate.py): a test that failed exactly while an uncommitted fixture edit
was present is explained by the edit, not evidence of flakiness. Only those three outcomes count; skipped, xfailed and xpassed say nothing either way,
and a run where the box did not run the test is not a run of it. Each repeat of `run --repeat N`
is a run of its own (evidence: its receipt id, `<run id>.r<k>`), so a test that flips within one
night's repeats on one box is a candidate.

A frozen test's **re-runs** (`run --include-frozen`: the ledger's frozen tests run on the side)
are the evidence for unfreezing it. A re-run is clean for an entry when each of its tests
passed there, the side run changed no watched fixture and it ended `ok`, or `failed` only
because another frozen test failed (its own outcome says it passed).

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
# How a side run may end and still be clean for an entry whose tests all passed in it: `failed`
# then means another frozen test failed.
_CLEAN_ENDINGS = ("ok", "failed")
_NEVER_RAN = ("timed-out", "interrupted")


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
    """One box and tree state (commit, patch, uncommitted changes) on which a test both passed
    and failed."""

    box: str
    commit: str
    patch_sha256: str | None
    rate: Rate
    failed: list[str]  # run ids, oldest first
    passed: list[str]
    # "" a clean working tree, else the digest of its uncommitted changes; None: recorded
    # before the history kept it (schema v4).
    tree_state: str | None = None


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
    # Its frozen re-runs (--include-frozen): the clean streak, newest first, and all of them
    # (failures: re-runs that were not clean for it).
    reruns: Rate | None = None
    reruns_overall: Rate | None = None


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


# Every passed, failed or error outcome, of the tests in temp.flake_suspect, of a box's receipt
# of record (repeat 1) or of one of its evaluated repeats, with the receipt's id: (test, box,
# commit, patch, tree state, receipt id, time, run id, repeat, code). Parameters: the three
# codes, twice.
_EVIDENCE = (
    "SELECT outcome.test AS test, run_box.box AS box, run_box.commit_sha AS commit_sha, "
    "run_box.patch_sha256 AS patch, run_box.tree_state AS tree_state, run.run_id AS receipt, "
    "run.started_at AS started, "
    "run.run_id AS run_id, 1 AS rep, outcome.code AS code FROM temp.flake_suspect s "
    "JOIN outcome ON outcome.test = s.test "
    "JOIN run_box ON run_box.id = outcome.run_box JOIN run ON run.id = run_box.run "
    "WHERE run_box.evaluated = 1 AND outcome.code IN (?, ?, ?) "
    "UNION ALL "
    "SELECT r.test, run_box.box, rb.commit_sha, rb.patch_sha256, rb.tree_state, rb.run_id, "
    "run.started_at, run.run_id, r.repeat, r.code FROM temp.flake_suspect s "
    "JOIN repeat_outcome r ON r.test = s.test "
    "JOIN repeat_box rb ON rb.run_box = r.run_box AND rb.repeat = r.repeat "
    "JOIN run_box ON run_box.id = r.run_box JOIN run ON run.id = run_box.run "
    "WHERE rb.evaluated = 1 AND r.code IN (?, ?, ?)"
)


def suggest(store_path: Path) -> Suggestions:
    """Every test that both passed and failed on one box at one commit (and patch), counting
    each repeat of a run as a run."""
    with store.opened(store_path) as conn:
        # Only a test that ever failed can be a candidate: found through the partial indexes
        # of failing outcomes (their condition written out, or SQLite will not use them), so
        # the passing rows read are those tests' only, not a year of every test's.
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS flake_suspect (test INTEGER PRIMARY KEY)")
        conn.execute("DELETE FROM temp.flake_suspect")
        conn.execute(
            "INSERT INTO temp.flake_suspect (test) "
            "SELECT test FROM outcome WHERE code IN (1, 2) "
            "UNION SELECT test FROM repeat_outcome WHERE code IN (1, 2)"
        )
        rows = conn.execute(
            f"SELECT test.nodeid, box.name, e.commit_sha, e.patch, e.tree_state, "  # noqa: S608
            f"e.receipt, e.code FROM ({_EVIDENCE}) e "
            "JOIN test ON test.id = e.test JOIN box ON box.id = e.box "
            "ORDER BY test.nodeid, box.name, e.commit_sha, e.started, e.run_id, e.rep",
            (_PASS, *_FAILS, _PASS, *_FAILS),
        ).fetchall()
    # One group per tree state: runs of another state are no evidence about this one.
    groups: dict[tuple[str, str, str, str | None, str | None], tuple[list[str], list[str]]] = {}
    for nodeid, box, commit, patch, state, run_id, code in rows:
        failed, passed = groups.setdefault((nodeid, box, commit, patch, state), ([], []))
        (passed if int(code) == _PASS else failed).append(str(run_id))
    by_test: dict[str, list[Group]] = {}
    for (nodeid, box, commit, patch, state), (failed, passed) in groups.items():
        if failed and passed:
            runs = len(failed) + len(passed)
            group = Group(
                box=box,
                commit=commit,
                patch_sha256=patch,
                rate=rate(len(failed), runs),
                failed=failed,
                passed=passed,
                tree_state=state,
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
            reruns = _rerun_series(conn, tests) if tests else []
            streak, rerun_streak = _streak(series), _streak(reruns)
            note = EntryNote(
                id=entry.id,
                owner=entry.owner,
                expires=entry.expires,
                days_left=days_left,
                rate=rate(0, streak) if streak else None,
                overall=rate(sum(series), len(series)) if series else None,
                reruns=rate(0, rerun_streak) if rerun_streak else None,
                reruns_overall=rate(sum(reruns), len(reruns)) if reruns else None,
            )
            if days_left < 0:
                expired.append(note)
            elif days_left <= near_days:
                near.append(note)
            if not tests:
                never.append(note)
            elif max(streak, rerun_streak) >= clean_runs:
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


def _streak(series: list[bool]) -> int:
    """How many runs, newest first, went by before the first failure."""
    streak = 0
    for failed in series:
        if failed:
            break
        streak += 1
    return streak


def _series(conn: sqlite3.Connection, tests: list[int]) -> list[bool]:
    """Failed-or-not per box of a run (and per repeat) that ran the test(s), newest first; a
    family's run failed when any member failed."""
    marks = ",".join("?" * len(tests))
    rows = conn.execute(
        f"SELECT max(e.code IN (?, ?)) FROM ("  # noqa: S608 - only placeholders
        f"SELECT o.run_box AS rb, 1 AS rep, o.code AS code FROM outcome o "
        f"WHERE o.test IN ({marks}) AND o.code IN (?, ?, ?) "
        f"UNION ALL SELECT r.run_box, r.repeat, r.code FROM repeat_outcome r "
        f"JOIN repeat_box b ON b.run_box = r.run_box AND b.repeat = r.repeat "
        f"WHERE r.test IN ({marks}) AND r.code IN (?, ?, ?) AND b.evaluated = 1) e "
        f"JOIN run_box ON run_box.id = e.rb JOIN run ON run.id = run_box.run "
        f"GROUP BY e.rb, e.rep "
        f"ORDER BY max(run.started_at) DESC, max(run.run_id) DESC, e.rep DESC",
        (*_FAILS, *tests, _PASS, *_FAILS, *tests, _PASS, *_FAILS),
    ).fetchall()
    return [bool(r[0]) for r in rows]


def _rerun_series(conn: sqlite3.Connection, tests: list[int]) -> list[bool]:
    """Not-clean-or-clean per frozen side run that was asked for the test(s), newest first
    (see the module docstring for when a re-run is clean for an entry)."""
    marks = ",".join("?" * len(tests))
    rows = conn.execute(
        f"SELECT min(coalesce(f.code = ?, 0)), count(f.code), fr.interpretation, "  # noqa: S608
        "fr.fixtures_changed, fr.tainted FROM frozen_outcome f "
        f"JOIN frozen_rerun fr ON fr.run_box = f.run_box AND fr.repeat = f.repeat "
        f"JOIN run_box ON run_box.id = f.run_box JOIN run ON run.id = run_box.run "
        f"WHERE f.test IN ({marks}) GROUP BY f.run_box, f.repeat "
        f"ORDER BY max(run.started_at) DESC, max(run.run_id) DESC, f.repeat DESC",
        (_PASS, *tests),
    ).fetchall()
    return [
        not (passed and interpretation in _CLEAN_ENDINGS and not changed and not tainted)
        for passed, ran, interpretation, changed, tainted in rows
        # A side run stopped before any of the entry's tests ran (no time left, Ctrl-C) says
        # nothing about them: it neither extends nor breaks the streak.
        if ran or interpretation not in _NEVER_RAN
    ]


def percent(fraction: float) -> str:
    """0.0722 -> '7.2 %'."""
    return f"{fraction * 100:.1f} %"


def describe(found: Rate) -> str:
    """'0 failures in 40 runs: failure rate < 7.2 % at 95 % (exact binomial ...)'."""
    head = f"{found.failures} failure{'' if found.failures == 1 else 's'} in {found.runs} runs"
    level = f"{found.confidence * 100:.0f} %"
    return f"{head}: failure rate < {percent(found.upper_bound)} at {level} ({found.method})"
