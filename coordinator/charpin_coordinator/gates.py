"""Coordinator side; pure. The gate table (design §5): PASS, FAIL or INCOMPLETE per gate per box.

Gates fail closed on absence of evidence: a watched root that is missing, no collected tests,
or a comparison with only one box is INCOMPLETE, never PASS. Absence by configuration is not
missing evidence: with no fixture roots watched Fixture integrity passes and says so ("no
fixture roots watched"), as Quarantine does with no ledger and Pin replay with no pins. The
box's own exit interpretation is not trusted: completeness is recomputed here from the sets
the receipt carries.

A receipt imported from another harness's record (`charpin import evidence`, Receipt.imported)
lists the fields it lacks. A gate whose verdict rests on a lacking field (GATE_NEEDS) is
INCOMPLETE, never PASS: a FAIL found on the evidence the record does hold still stands, and a
gate that compares boxes is judged on the box alone when either side lacks what it compares.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Sequence

from charpin_runner.receipt import FileState, Imported, Receipt

from charpin_coordinator.report import GateName, GateResult, GateStatus

Labeled = tuple[str, Receipt]
Verdict = tuple[GateStatus, str]

ACTIONS: dict[GateName, str] = {
    "Identity": "re-run on the commit under review: this receipt is stale or the patch was rebased",
    "Clean tree": "commit, discard or declare (outputs = [...]) the listed files, then re-run",
    "Fixture integrity": "restore the fixtures (git checkout -- PATH) and find what writes them",
    "Collection parity": "find why tests appeared or vanished on this box (skips, imports, "
    "missing dependencies) before trusting its run",
    "Quarantine": "renew or remove expired and stale ledger entries, split widening ones into "
    "exact ids, and stop the frozen test from running",
    "Completeness": "the run did not account for its tests: look for os._exit, crashes or hooks "
    "that drop items, then re-run",
    "Pin replay": "read golden against actual in the report (the run folder keeps each failing "
    "pin's actual outputs under <box>/pins-actual/ID/; `charpin pins check` on a checkout of that "
    "commit gives them whole); if the change is intended, update the pin in a commit of its own",
}


# Completeness failed because a path later runs read changed during the run (the sandbox
# finding): the action is about that path, not about dropped tests.
WROTE_INTO_ACTION = (
    "find what wrote the named path during the run (a test, a pin, or on `local` anything else "
    "editing that folder meanwhile); a box cache named there was removed and rebuilds on the "
    "next run; then re-run"
)


# Clean tree failed on build and packaging leftovers only (`pip install -e .` in the working
# tree leaves `src/pkg.egg-info/`): the fix is the repository's .gitignore, not the run.
ARTIFACTS_ACTION = (
    "these are build leftovers (from `pip install -e .`, a build or a test cache): add them to "
    "the repository's .gitignore (or remove them), then re-run"
)
_ARTIFACT = re.compile(
    r"(\A|/)([^/]+\.egg-info|__pycache__|\.pytest_cache|\.mypy_cache|\.ruff_cache|\.eggs|"
    r"\.tox|\.nox|build|dist)(/|\Z)|\.py[co]\Z"
)


def _only_artifacts(r: Receipt) -> bool:
    paths = users_dirt(r) + undeclared(r.tree.written, r.tree.outputs)
    return bool(paths) and all(_ARTIFACT.search(p) for p in paths)


# What to do when a gate could not be evaluated: the evidence is missing, not bad.
INCOMPLETE_ACTIONS: dict[GateName, str] = {
    "Identity": "run in a git checkout so the receipt can name its commit",
    "Clean tree": "re-run; the tree state could not be read",
    "Fixture integrity": "declare existing fixture roots in [tool.charpin] watch",
    "Collection parity": "compare at least two boxes that collected tests",
    "Quarantine": "re-run; the ledger could not be read",
    "Completeness": "if the run was cut short, re-run with a longer --timeout or without "
    "interrupting it; if it selected no tests, check testpaths, -k/-m and the ledger: a suite "
    "that selects no tests proves nothing",
    "Pin replay": "replay the pins on every box (do not pass --no-pins to some of them)",
}


_BAD = frozenset(("failed", "error"))

# The receipt fields each gate's verdict rests on (dotted; "pins" is the whole block).
GATE_NEEDS: dict[GateName, tuple[str, ...]] = {
    "Identity": (
        "identity.head_before",
        "identity.head_after",
        "identity.tree_before",
        "identity.tree_after",
    ),
    "Clean tree": ("tree.dirty_after", "tree.written"),
    "Fixture integrity": (
        "fixtures.roots",
        "fixtures.before",
        "fixtures.after",
        "fixtures.type_changed",
        "fixtures.mode_changed",
    ),
    "Collection parity": ("collection.collected", "collection.executed"),
    "Quarantine": (
        "quarantine.ledger_sha256",
        "quarantine.frozen",
        "quarantine.leaked",
        "quarantine.stale",
        "quarantine.widening",
        "quarantine.expired",
    ),
    "Completeness": (
        "collection.selected",
        "collection.executed",
        "collection.session_finished",
        "exit.status",
        "outcomes",
    ),
    "Pin replay": ("pins",),
}
# Gates that compare a box with the baseline: what the baseline lacks counts too.
_CROSS_BOX: frozenset[GateName] = frozenset(
    ("Fixture integrity", "Collection parity", "Quarantine")
)


def undeclared(paths: Sequence[str], outputs: Sequence[str]) -> list[str]:
    """Paths not covered by the declared output globs (a glob ending in / covers a folder)."""
    out = []
    for path in paths:
        if any(_covers(glob, path) for glob in outputs):
            continue
        out.append(path)
    return out


def _covers(glob: str, path: str) -> bool:
    if glob.endswith("/"):
        return path.startswith(glob)
    return fnmatch.fnmatchcase(path, glob)


def evaluate(
    receipts: Sequence[Labeled], base: Labeled | None, expected: str | None
) -> list[GateResult]:
    """Every gate for every box, in table order."""
    rules: list[tuple[GateName, _Rule]] = [
        ("Identity", lambda label, r, rs, b: _identity(r, expected)),
        ("Clean tree", lambda label, r, rs, b: _clean_tree(r)),
        ("Fixture integrity", _fixtures),
        ("Collection parity", lambda label, r, rs, b: _parity(label, r, b, rs)),
        ("Quarantine", lambda label, r, rs, b: _quarantine(label, r, b)),
        ("Completeness", lambda label, r, rs, b: _completeness(r)),
        ("Pin replay", lambda label, r, rs, b: _pins(label, r, rs)),
    ]
    results = []
    for gate, rule in rules:
        for label, receipt in receipts:
            status, detail = rule(label, receipt, receipts, base)
            action = {"PASS": "", "FAIL": ACTIONS[gate], "INCOMPLETE": INCOMPLETE_ACTIONS[gate]}[
                status
            ]
            if status == "FAIL" and gate == "Completeness" and "wrote into" in detail:
                action = WROTE_INTO_ACTION
            if status == "FAIL" and gate == "Clean tree" and _only_artifacts(receipt):
                action = ARTIFACTS_ACTION
            lacking = _lacking(gate, label, receipt, base)
            if lacking is not None:
                status, detail, action = _judge_imported(
                    gate, rule, (label, receipt), lacking, status, detail, action
                )
            results.append(
                GateResult(gate=gate, box=label, status=status, detail=detail, action=action)
            )
    return results


_Rule = Callable[[str, Receipt, Sequence[Labeled], "Labeled | None"], Verdict]


def missing_fields(gate: GateName, r: Receipt) -> list[str]:
    """The fields gate needs that an imported receipt lacks (empty for a measured receipt)."""
    if r.imported is None:
        return []
    return [
        lack
        for lack in r.imported.lacks
        if any(
            lack == need or need.startswith(lack + ".") or lack.startswith(need + ".")
            for need in GATE_NEEDS[gate]
        )
    ]


def _lacking(
    gate: GateName, label: str, r: Receipt, base: Labeled | None
) -> tuple[list[str], list[str], str, Imported | None] | None:
    """(own lacks, the baseline's lacks, the baseline's label, the record that lacks them), or
    None when neither side lacks anything this gate needs."""
    own = missing_fields(gate, r)
    theirs: list[str] = []
    if gate in _CROSS_BOX and base is not None and base[0] != label:
        theirs = missing_fields(gate, base[1])
    if not own and not theirs:
        return None
    record = r.imported if own else (base[1].imported if base is not None else None)
    return own, theirs, base[0] if base is not None else "", record


def _judge_imported(
    gate: GateName,
    rule: _Rule,
    box: Labeled,
    lacking: tuple[list[str], list[str], str, Imported | None],
    status: GateStatus,
    detail: str,
    action: str,
) -> tuple[GateStatus, str, str]:
    """A gate's verdict when it rests on fields an imported receipt lacks: a FAIL found on the
    evidence held stands (a cross-box gate judged on this box alone), anything else is
    INCOMPLETE with the missing fields named."""
    own, theirs, base_label, record = lacking
    label, receipt = box
    if gate in _CROSS_BOX:
        status, detail = rule(label, receipt, [box], None)
    what = record.format if record is not None else "an imported record"
    parts = []
    if own:
        parts.append(f"imported from {what}, which lacks {_list(own)}")
    if theirs:
        parts.append(
            f"the baseline {base_label} was imported from {what}, which lacks {_list(theirs)}"
        )
    note = "; ".join(parts)
    if status == "FAIL":
        return "FAIL", f"{detail} ({note})", ACTIONS[gate]
    return (
        "INCOMPLETE",
        note,
        "run `charpin receipt` (or `charpin-remote run`) on that box for a measured receipt: "
        "an imported record cannot pass a gate whose evidence it does not hold",
    )


def healthy(r: Receipt, expected: str | None) -> bool:
    """Whether a receipt can serve as the baseline: right commit, stable tree, a finished run."""
    return _identity(r, expected)[0] == "PASS" and _completeness(r)[0] == "PASS"


def _identity(r: Receipt, expected: str | None) -> Verdict:
    i = r.identity
    if not i.head_before or not i.tree_before:
        return "INCOMPLETE", "the receipt has no commit (not run in a git checkout?)"
    problems = []
    if i.head_before != i.head_after:
        problems.append(f"HEAD moved during the run: {i.head_before[:12]} -> {i.head_after[:12]}")
    if i.tree_before != i.tree_after:
        problems.append(f"tree moved during the run: {i.tree_before[:12]} -> {i.tree_after[:12]}")
    if expected and i.head_before != expected:
        problems.append(f"ran {i.head_before[:12]}, not the commit under review {expected[:12]}")
    if problems:
        return "FAIL", "; ".join(problems)
    return "PASS", f"ran {i.head_before[:12]}"


def users_dirt(r: Receipt) -> list[str]:
    """Uncommitted paths after the run, less what `prepare` wrote that the run left alone."""
    t = r.tree
    if not t.prepared:
        return undeclared(t.dirty_after, t.outputs)
    prepared, written = set(t.prepared), set(t.written)
    kept = [p for p in t.dirty_after if p not in prepared or p in written]
    return undeclared(kept, t.outputs)


def _clean_tree(r: Receipt) -> Verdict:
    dirty = users_dirt(r)
    written = undeclared(r.tree.written, r.tree.outputs)
    if not dirty and not written:
        return "PASS", "no undeclared changes"
    parts = []
    before = [p for p in dirty if p not in written]
    if before:
        parts.append("uncommitted before the run: " + _list(before))
    if written:
        parts.append("written during the run: " + _list(written))
    return "FAIL", "; ".join(parts)


def state_map(states: list[FileState]) -> dict[str, tuple[object, ...]]:
    """Path -> (kind, executable, sha256, target): what two boxes' fixture states are compared
    on. Of the mode only what git keeps counts (the executable bit): a checkout's 0644 against
    an unpacked archive's 0666 is the umask, not a fixture that moved; a chmod during the run
    is still the receipt's own `mode_changed`."""
    return {s.path: (s.kind, bool(s.mode & 0o111), s.sha256, s.target) for s in states}


def _fixtures(label: str, r: Receipt, receipts: Sequence[Labeled], base: Labeled | None) -> Verdict:
    f = r.fixtures
    if not f.roots:
        return "PASS", "no fixture roots watched (set [tool.charpin] watch to watch some)"
    if f.missing_roots:
        return "INCOMPLETE", "watched root(s) missing: " + _list(f.missing_roots)
    moved = sorted(
        {*f.added, *f.removed, *f.changed, *f.type_changed, *f.mode_changed, *f.escaping_symlinks}
    )
    blamed = _blamed_paths(label, r, receipts, base)
    if moved or blamed:
        parts = []
        if moved:
            parts.append("moved during the run: " + _list(moved))
        if f.escaping_symlinks:
            parts.append("symlinks out of the root: " + _list(f.escaping_symlinks))
        if blamed:
            parts.append("differs from another box before the run: " + _list(blamed))
        return "FAIL", "; ".join(parts)
    count = len(f.before)
    return "PASS", f"{count} watched file(s) unchanged"


def _blamed_paths(
    label: str, r: Receipt, receipts: Sequence[Labeled], base: Labeled | None
) -> list[str]:
    """Watched paths whose starting state differs from another box's, attributed to this box.

    A difference is this box's fault when the path is uncommitted here; the other box's when it
    is uncommitted there; otherwise it is blamed on the box that is not the baseline.
    """
    base_label = base[0] if base else None
    mine = state_map(r.fixtures.before)
    blamed: set[str] = set()
    for other_label, other in receipts:
        if other_label == label or other.identity.head_before != r.identity.head_before:
            # Boxes on different commits differ for a reason the Identity gate already names.
            continue
        theirs = state_map(other.fixtures.before)
        for path in set(mine) | set(theirs):
            if mine.get(path) == theirs.get(path):
                continue
            if path in r.tree.dirty_before or (
                path not in other.tree.dirty_before and label != base_label
            ):
                blamed.add(path)
    return sorted(blamed)


def _parity(label: str, r: Receipt, base: Labeled | None, receipts: Sequence[Labeled]) -> Verdict:
    if not r.collection.collected:
        return "INCOMPLETE", "zero tests collected"
    if len(receipts) < 2 or base is None:
        return "INCOMPLETE", "parity needs at least two evaluated boxes"
    base_label, b = base
    # Blame follows the evidence (#10): tests that differ between boxes only because of files
    # uncommitted (or written) on one box fail that box's gate, not the other's.
    own = sorted(_own_differences(label, r, receipts))
    if own:
        return (
            "FAIL",
            f"tests differ from other boxes because of uncommitted files here: {_list(own)}",
        )
    if label == base_label:
        return "PASS", "baseline"
    problems = []
    for name in ("collected", "executed"):
        mine, theirs = set(getattr(r.collection, name)), set(getattr(b.collection, name))
        differing = {t for t in mine ^ theirs if _test_file(t) not in _dirty(b)}
        if differing:
            missing, extra = len(differing & theirs), len(differing & mine)
            problems.append(f"{name}: {missing} missing, {extra} extra vs {base_label}")
    if problems:
        return "FAIL", "; ".join(problems)
    return "PASS", f"same {len(r.collection.collected)} collected as {base_label}"


def _own_differences(label: str, r: Receipt, receipts: Sequence[Labeled]) -> set[str]:
    """Test files uncommitted or written on this box whose tests differ from another box's.

    Only tests in those files are compared (a test's file decides, so filtering first gives the
    same answer as filtering the symmetric difference): a clean box costs nothing, and a fleet of
    N boxes is not N x N full-set differences."""
    dirty = _dirty(r)
    found: set[str] = set()
    if not dirty:
        return found
    for name in ("collected", "executed"):
        mine = {t for t in getattr(r.collection, name) if _test_file(t) in dirty}
        for other_label, other in receipts:
            if other_label == label:
                continue
            theirs = {t for t in getattr(other.collection, name) if _test_file(t) in dirty}
            found.update(_test_file(t) for t in mine ^ theirs)
    return found


def _test_file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _dirty(r: Receipt) -> set[str]:
    """Paths uncommitted before the run or written during it on this box."""
    return set(r.tree.dirty_before) | set(r.tree.written)


def _quarantine(label: str, r: Receipt, base: Labeled | None) -> Verdict:
    q = r.quarantine
    problems = []
    if q.leaked:
        problems.append("frozen test(s) executed: " + _list(q.leaked))
    if q.stale:
        problems.append("stale entries: " + _list(q.stale))
    if q.widening:
        problems.append("widening entries: " + _list([w.entry for w in q.widening]))
    if q.expired:
        problems.append("expired entries: " + _list(q.expired))
    if base is not None and q.ledger_sha256 != base[1].quarantine.ledger_sha256:
        problems.append(f"ledger differs from {base[0]}'s")
    if problems:
        return "FAIL", "; ".join(problems)
    if q.ledger_path is None:
        return "PASS", "no ledger"
    return "PASS", f"{len(q.frozen)} frozen test(s) deselected, none leaked"


def _completeness(r: Receipt) -> Verdict:
    c, e = r.collection, r.exit
    if e.interpretation in ("timed-out", "interrupted"):
        return "INCOMPLETE", f"the run was {e.interpretation}"
    if e.interpretation == "collection-error":
        # The suite did not load: a red run to fix on this box, not one to wait longer for.
        found = "; ".join(e.reasons[:3]) or "pytest could not collect the tests"
        return "FAIL", f"{found}; fix it (the whole error is in the box's stderr.log) and re-run"
    if e.interpretation == "no-tests" or not c.executed:
        return "INCOMPLETE", "zero tests executed"
    problems = []
    if not c.session_finished:
        problems.append("the test session never finished")
    if c.executed != c.selected and set(c.executed) != set(c.selected):
        missing = sorted(set(c.selected) - set(c.executed))
        extra = sorted(set(c.executed) - set(c.selected))
        problems.append(
            f"executed != selected ({len(missing)} selected not run"
            + (f": {_list(missing)}" if missing else "")
            + f", {len(extra)} run unselected)"
        )
    if e.status == 0 and not _BAD.isdisjoint(r.outcomes.values()):
        problems.append("exit 0 despite failed tests")
    if e.interpretation == "incomplete":
        problems.extend(e.reasons or ["the box marked the run incomplete"])
    if problems:
        return "FAIL", "; ".join(dict.fromkeys(problems))
    return "PASS", f"exit {e.status} ({e.interpretation}) matches {len(c.executed)} executed"


def _pins(label: str, r: Receipt, receipts: Sequence[Labeled]) -> Verdict:
    others = [o for lbl, o in receipts if lbl != label]
    if not r.pins.replayed:
        if any(o.pins.replayed for o in others):
            return "INCOMPLETE", "pins were not replayed here but were on another box"
        return "PASS", "no pins declared"
    failing = [p.id for p in r.pins.results if p.status != "passed"]
    if failing:
        return "FAIL", "drifted pins: " + _list(failing)
    mine = {p.id for p in r.pins.results}
    for other_label, o in ((lbl, o) for lbl, o in receipts if lbl != label):
        if o.pins.replayed and {p.id for p in o.pins.results} != mine:
            return "FAIL", f"pin set differs from {other_label}'s"
    return "PASS", f"{len(mine)} pin(s) replayed byte for byte"


def _list(items: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" (+{len(items) - limit} more)" if len(items) > limit else "")
