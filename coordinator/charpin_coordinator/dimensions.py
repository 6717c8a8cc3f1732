"""Coordinator side; pure. One function per drift dimension: receipts in, a Dimension or None.

Every finding names its box and its item (a path, a node id, a pin, a variable); boxes on another
commit are left to the identity dimension instead of being compared file by file.
"""

from __future__ import annotations

from collections.abc import Sequence

from charpin_runner.receipt import Identity, Receipt, Subtests

from charpin_coordinator import gates as gate_rules
from charpin_coordinator.gates import state_map
from charpin_coordinator.iddiff import sorted_unified_diff
from charpin_coordinator.report import Dimension, MatrixRow

Labeled = tuple[str, Receipt]


def _listed(
    name: str,
    summary: str,
    boxes: list[str],
    details: list[str],
    *,
    gating: bool = True,
    diff: str = "",
) -> Dimension | None:
    """A dimension, or None when no box moved along it."""
    if not boxes:
        return None
    return Dimension(
        name=name, gating=gating, summary=summary, boxes=boxes, details=details, diff=diff
    )


def dimensions(receipts: Sequence[Labeled], base: Labeled, expected: str | None) -> list[Dimension]:
    found = [
        _identity(receipts, expected),
        _tree(receipts),
        _collection(receipts, base),
        _outcomes(receipts, base),
        _fixtures(receipts, base),
        _quarantine(receipts, base),
        _pins(receipts, base),
        _exit(receipts, base),
        _environment(receipts, base),
    ]
    return [d for d in found if d is not None]


def _identity(receipts: Sequence[Labeled], expected: str | None) -> Dimension | None:
    details, boxes = [], []
    for label, r in receipts:
        i = r.identity
        heads = {i.head_before, i.head_after}
        if (
            len(heads) > 1
            or i.tree_before != i.tree_after
            or (expected and i.head_before != expected)
        ):
            boxes.append(label)
            details.append(f"{label}: " + ", ".join(_identity_moves(i, expected)))
    return _listed("identity", f"{len(boxes)} box(es) off the commit", boxes, details)


def _identity_moves(i: Identity, expected: str | None) -> list[str]:
    """Only what moved or differs: "head X -> X" said nothing (#10)."""
    parts = []
    for name, before, after in (
        ("head", i.head_before, i.head_after),
        ("tree", i.tree_before, i.tree_after),
    ):
        if before != after:
            parts.append(f"{name} moved during the run {_short(before)} -> {_short(after)}")
    if expected and i.head_before != expected:
        parts.append(f"ran {_short(i.head_before)}, expected {_short(expected)}")
    return parts or [f"head {_short(i.head_before)}"]


def _tree(receipts: Sequence[Labeled]) -> Dimension | None:
    details, boxes = [], []
    for label, r in receipts:
        t = r.tree
        dirty = gate_rules.users_dirt(r)
        written = gate_rules.undeclared(t.written, t.outputs)
        if not (dirty or written):
            continue
        boxes.append(label)
        for path in dirty:
            when = "during the run" if path in written else "before the run"
            details.append(f"{label}: {path} uncommitted (changed {when})")
        details.extend(f"{label}: {p} changed during the run" for p in written if p not in dirty)
    return _listed("tree", f"dirty working tree on {', '.join(boxes)}", boxes, details)


def _collection(receipts: Sequence[Labeled], base: Labeled) -> Dimension | None:
    base_label, b = base
    details, boxes, diffs = [], [], []
    for label, r in receipts:
        if label == base_label:
            continue
        for name in ("collected", "selected", "executed"):
            mine: list[str] = getattr(r.collection, name)
            theirs: list[str] = getattr(b.collection, name)
            if mine == theirs:
                continue
            mine_set, theirs_set = set(mine), set(theirs)
            missing = len(theirs_set - mine_set)
            extra = len(mine_set - theirs_set)
            if not (missing or extra):
                # Same set in another order or with a repeat: nothing was gained or lost.
                continue
            details.append(f"{label}: {name} differs from {base_label}: -{missing} +{extra}")
            if label not in boxes:
                boxes.append(label)
            if name == "collected" or name == "executed":
                diffs.append(
                    sorted_unified_diff(
                        _as_set(theirs), _as_set(mine), f"{base_label}/{name}", f"{label}/{name}"
                    )
                )
    return _listed(
        "collection", f"test sets differ on {', '.join(boxes)}", boxes, details, diff="".join(diffs)
    )


def _as_set(ids: list[str]) -> list[str]:
    """ids sorted and unique, as the linear diff needs; decoded receipts already are."""
    # dict.fromkeys keeps the order, so sorting a list that is already sorted stays linear.
    return sorted(dict.fromkeys(ids))


def _outcomes(receipts: Sequence[Labeled], base: Labeled) -> Dimension | None:
    if len(receipts) < 2:
        return None
    labels = [label for label, _ in receipts]
    maps = [r.outcomes for _, r in receipts]
    first = maps[0]
    candidates: set[str] = set()
    first_items = first.items()
    for other in maps[1:]:
        # Set difference of (id, outcome) pairs runs in C: 100,000 tests cost milliseconds.
        candidates.update(k for k, _ in other.items() - first_items)
        candidates.update(first.keys() - other.keys())
    subs = [r.subtests for _, r in receipts]
    if any(subs):
        # The same outcome with other subtests (fewer ran, another one failed) is drift too.
        candidates.update(k for sub in subs for k in sub if any(o.get(k) != sub[k] for o in subs))
    rows = []
    for nodeid in sorted(candidates):
        values = {
            label: _shown_outcome(m.get(nodeid, "not run"), sub.get(nodeid))
            for label, m, sub in zip(labels, maps, subs, strict=False)
        }
        if len(set(values.values())) > 1:
            rows.append(MatrixRow(item=nodeid, values=values))
    if not rows:
        return None
    return Dimension(
        name="outcomes",
        gating=True,
        summary=f"{len(rows)} test(s) differ between boxes",
        boxes=_odd_boxes(rows, base[0]),
        details=[],
        matrix=rows,
    )


def _shown_outcome(outcome: str, sub: Subtests | None) -> str:
    """A test's outcome, with its subtests when it ran any: `passed · subtests 12 passed`."""
    if sub is None:
        return outcome
    counts = [(sub.passed, "passed"), (sub.failed, "failed"), (sub.skipped, "skipped")]
    shown = ", ".join(f"{n} {k}" for n, k in counts if n) or "none"
    failing = f" ({', '.join(sub.failing)})" if sub.failing else ""
    return f"{outcome} · subtests {shown}{failing}"


def _odd_boxes(rows: list[MatrixRow], base_label: str) -> list[str]:
    """Boxes whose value differs from the baseline's in some row (the baseline if it alone differs)."""
    odd: set[str] = set()
    for row in rows:
        base_value = row.values.get(base_label)
        differing = {label for label, v in row.values.items() if v != base_value}
        if len(differing) == len(row.values) - 1 and len(row.values) > 2:
            differing = {base_label}
        odd |= differing
    return sorted(odd)


def _fixtures(receipts: Sequence[Labeled], base: Labeled) -> Dimension | None:
    base_label, b = base
    base_before = state_map(b.fixtures.before)
    details, boxes = [], []
    for label, r in receipts:
        f = r.fixtures
        moved = [
            *(f"{label}: {p} added during the run" for p in f.added),
            *(f"{label}: {p} removed during the run" for p in f.removed),
            *(f"{label}: {p} content changed during the run" for p in f.changed),
            *(f"{label}: {p} changed type during the run" for p in f.type_changed),
            *(f"{label}: {p} changed mode during the run" for p in f.mode_changed),
            *(f"{label}: {p} is a symlink pointing out of its root" for p in f.escaping_symlinks),
        ]
        if moved and label not in boxes:
            boxes.append(label)
        details.extend(moved)
        if label != base_label and r.identity.head_before == b.identity.head_before:
            for blamed, line in _state_diff(
                label, base_label, base_before, state_map(f.before), r, b
            ):
                if blamed not in boxes:
                    boxes.append(blamed)
                details.append(line)
    return _listed(
        "fixtures", f"watched fixtures differ or moved on {', '.join(boxes)}", boxes, details
    )


def _state_diff(
    label: str,
    base_label: str,
    base: dict[str, tuple[object, ...]],
    mine: dict[str, tuple[object, ...]],
    r: Receipt,
    b: Receipt,
) -> list[tuple[str, str]]:
    """(box to blame, detail) for each watched path that started differently on the two boxes."""
    out = []
    for path in sorted(set(base) | set(mine)):
        if base.get(path) == mine.get(path):
            continue
        where = _blame(path, r, b, label, base_label)
        blamed = (
            base_label if path in b.tree.dirty_before and path not in r.tree.dirty_before else label
        )
        if path not in mine:
            out.append((blamed, f"{label}: {path} missing (present on {base_label}){where}"))
        elif path not in base:
            out.append((blamed, f"{label}: {path} present only here (not on {base_label}){where}"))
        else:
            ours, theirs, other = mine[path], base[path], base_label
            if blamed == base_label:  # say it from the point of view of the box to blame
                ours, theirs, other = theirs, ours, label
            if ours[2] != theirs[2]:
                what = f"sha256 {_short(str(ours[2]))} vs {_short(str(theirs[2]))}"
            elif ours[0] != theirs[0]:
                what = f"a {ours[0]} vs a {theirs[0]}"
            elif ours[1] != theirs[1]:
                what = "executable here, not there" if ours[1] else "executable there, not here"
            else:
                what = f"symlink to {ours[3]!r} vs {theirs[3]!r}"
            line = f"{blamed}: {path} differs from {other}: {what}{where}"
            out.append((blamed, line))
    return out


def _blame(path: str, r: Receipt, b: Receipt, label: str, base_label: str) -> str:
    if path in r.tree.dirty_before:
        return f" (uncommitted on {label})"
    if path in b.tree.dirty_before:
        return f" (uncommitted on {base_label})"
    return ""


def _quarantine(receipts: Sequence[Labeled], base: Labeled) -> Dimension | None:
    base_label, b = base
    details, boxes = [], []
    for label, r in receipts:
        q = r.quarantine
        found = [
            *(f"{label}: frozen test executed anyway: {i}" for i in q.leaked),
            *(f"{label}: stale ledger entry (matches nothing): {i}" for i in q.stale),
            *(
                f"{label}: widening entry {w.entry} matches {len(w.matches)} ids"
                for w in q.widening
            ),
            *(f"{label}: expired ledger entry (test rejoined the run): {i}" for i in q.expired),
        ]
        if q.ledger_sha256 != b.quarantine.ledger_sha256:
            found.append(f"{label}: ledger differs from {base_label}'s")
        if found:
            boxes.append(label)
            details.extend(found)
    return _listed("quarantine", f"ledger findings on {', '.join(boxes)}", boxes, details)


def _pins(receipts: Sequence[Labeled], base: Labeled) -> Dimension | None:
    labels = [label for label, _ in receipts]
    per_box = [{p.id: p for p in r.pins.results} for _, r in receipts]
    ids = sorted(set().union(*per_box)) if per_box else []
    rows = []
    for pin_id in ids:
        values = {}
        for label, pins in zip(labels, per_box, strict=False):
            pin = pins.get(pin_id)
            if pin is None:
                values[label] = "absent"
            elif pin.status == "passed":
                values[label] = "passed"
            else:
                values[label] = f"{pin.status} ({pin.failure_class or 'unknown'})"
        hashes = {
            (p.stdout_sha256, p.stderr_sha256, p.exit_code, tuple(sorted(p.files.items())))
            for pins in per_box
            if (p := pins.get(pin_id)) is not None
        }
        if (
            len(set(values.values())) > 1
            or len(hashes) > 1
            or any(v != "passed" for v in values.values())
        ):
            rows.append(MatrixRow(item=pin_id, values=values))
    if not rows:
        return None
    failing = {label for row in rows for label, v in row.values.items() if v != "passed"}
    boxes = sorted(failing | set(_odd_boxes(rows, base[0])))
    return Dimension(
        name="pins",
        gating=True,
        summary=f"{len(rows)} pin(s) drifted or differ between boxes",
        boxes=boxes,
        details=[],
        matrix=rows,
    )


def _exit(receipts: Sequence[Labeled], base: Labeled) -> Dimension | None:
    base_label, b = base
    details, boxes = [], []
    for label, r in receipts:
        if r.exit.interpretation != b.exit.interpretation or r.exit.status != b.exit.status:
            boxes.append(label)
            details.append(
                f"{label}: exit {r.exit.status} ({r.exit.interpretation}) vs {base_label} "
                f"{b.exit.status} ({b.exit.interpretation})"
            )
    if not boxes:
        return None
    return Dimension(
        name="exit", gating=True, summary="exit status differs", boxes=boxes, details=details
    )


def _environment(receipts: Sequence[Labeled], base: Labeled) -> Dimension | None:
    base_label, b = base
    be = b.environment
    details, boxes = [], []
    for label, r in receipts:
        e = r.environment
        if label == base_label:
            continue
        diffs = [
            f"{name} {getattr(e, name)!r} vs {getattr(be, name)!r}"
            for name in ("python", "implementation", "platform", "locale", "tz", "cpu_count")
            if getattr(e, name) != getattr(be, name)
        ]
        for key in sorted(set(e.variables) | set(be.variables)):
            if e.variables.get(key) != be.variables.get(key):
                diffs.append(f"${key} {e.variables.get(key)!r} vs {be.variables.get(key)!r}")
        if e.plugins != be.plugins:
            only = sorted(set(e.plugins) - set(be.plugins))
            missing = sorted(set(be.plugins) - set(e.plugins))
            said = [f"+{name}" for name in only] + [f"-{name}" for name in missing]
            diffs.append("pytest plugins differ: " + (", ".join(said) or "same set, other order"))
        if e.conftest_sha256 != be.conftest_sha256:
            diffs.append("conftest files differ")
        if diffs:
            boxes.append(label)
            details.append(f"{label} vs {base_label}: " + "; ".join(diffs))
    return _listed(
        "environment", "boxes differ (explains drift, never gates)", boxes, details, gating=False
    )


def _short(sha: str | None) -> str:
    return (sha or "none")[:12]
