"""Coordinator side; pure. A unified diff of two sorted id lists in linear time.

difflib's matcher is quadratic in the worst case; collections of 100,000 node ids are sorted
and unique, so a merge walk finds the same edit script in one pass.
"""

from __future__ import annotations

from collections.abc import Sequence

CONTEXT = 2


def sorted_unified_diff(
    old: Sequence[str], new: Sequence[str], old_name: str, new_name: str
) -> str:
    """Return a unified diff (with hunk headers) between two sorted lists of unique ids."""
    ops = _merge(old, new)
    changed = [i for i, (tag, _) in enumerate(ops) if tag != " "]
    if not changed:
        return ""
    lines = [f"--- {old_name}\n", f"+++ {new_name}\n"]
    old_seen = new_seen = position = 0
    for start, end in _hunks(changed, len(ops)):
        for tag, _ in ops[position:start]:
            old_seen += tag != "+"
            new_seen += tag != "-"
        hunk = ops[start:end]
        old_len = sum(1 for tag, _ in hunk if tag != "+")
        new_len = sum(1 for tag, _ in hunk if tag != "-")
        lines.append(f"@@ -{_range(old_seen, old_len)} +{_range(new_seen, new_len)} @@\n")
        lines.extend(f"{tag}{item}\n" for tag, item in hunk)
        old_seen, new_seen, position = old_seen + old_len, new_seen + new_len, end
    return "".join(lines)


def _merge(old: Sequence[str], new: Sequence[str]) -> list[tuple[str, str]]:
    ops: list[tuple[str, str]] = []
    i = j = 0
    while i < len(old) and j < len(new):
        if old[i] == new[j]:
            ops.append((" ", old[i]))
            i += 1
            j += 1
        elif old[i] < new[j]:
            ops.append(("-", old[i]))
            i += 1
        else:
            ops.append(("+", new[j]))
            j += 1
    ops.extend(("-", item) for item in old[i:])
    ops.extend(("+", item) for item in new[j:])
    return _removals_first(ops)


def _removals_first(ops: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Within each run of changes put removals before additions, as unified diffs do."""
    out: list[tuple[str, str]] = []
    run: list[tuple[str, str]] = []
    for op in ops:
        if op[0] == " ":
            out.extend(sorted(run, key=lambda o: o[0] != "-"))
            run = []
            out.append(op)
        else:
            run.append(op)
    out.extend(sorted(run, key=lambda o: o[0] != "-"))
    return out


def _hunks(changed: list[int], total: int) -> list[tuple[int, int]]:
    hunks: list[tuple[int, int]] = []
    for index in changed:
        start, end = max(0, index - CONTEXT), min(total, index + CONTEXT + 1)
        if hunks and start <= hunks[-1][1]:
            hunks[-1] = (hunks[-1][0], max(hunks[-1][1], end))
        else:
            hunks.append((start, end))
    return hunks


def _range(before: int, length: int) -> str:
    first = before + 1 if length else before
    return f"{first},{length}"
