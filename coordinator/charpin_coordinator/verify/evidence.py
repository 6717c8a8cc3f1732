"""Coordinator side; stdlib, verify.gitread and verify.harness only. Behaviour beyond the asserts
(#19): which of the patch's changed lines some evidence reached, the differential job for the
judged run, and the findings it brought back.

* Change coverage: a line the patch adds or changes in production code is reached when the
  statement holding it ran in the judged run (its tests; the probe traced the changed files), or
  ran in the patched version on a generated input both versions answered alike. A
  changed statement nothing ran is named, `file:function lines`, and the verdict cannot be
  ACCEPT: the tests pass because they never look.
* The job: the calls the base's tests made into the changed functions (captured in the base
  run, on every box), with the base's versions of the changed files, so the judged run can
  replay each call on both versions. The coordinator never unpickles a captured argument.
* Findings: a call whose two versions differ (result, exception, arguments, output, files; plain
  or under a perturbation) is a Behaviour failure naming the call and both results; a call or a
  function that could not be compared says why, and is never counted as the same.
* Generated inputs: the changed public functions (no part of the name starting with `_`) are
  named in the job with the budget (Generate); the box generates the inputs (differ/generated.py)
  and reports the first that the two versions answer differently, shrunk.
"""

from __future__ import annotations

import ast
import base64
import json
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from charpin_runner.receipt import Differential, Receipt

from charpin_coordinator.verify import gitread, harness
from charpin_coordinator.verify.budget import Generate
from charpin_coordinator.verify.scope import Scope

# At most this many calls per function go into the job, whatever the boxes captured.
JOB_CALLS_PER_FUNCTION = 20
# Entry calls (the tests' calls into the production code, whatever the patch changed): fewer.
JOB_ENTRY_CALLS = 5


def public(function: str) -> bool:
    """PATH::QUALNAME names a public module function or method: no part starts with `_`."""
    _, _, qualname = function.partition("::")
    return bool(qualname) and not any(
        p.startswith("_") or p == "<locals>" for p in qualname.split(".")
    )


@dataclass(frozen=True)
class Changed:
    """What the patch changed in production code, as the runs need it."""

    cover: list[str]  # files of the patched tree whose executed lines are recorded
    capture: list[str]  # PATH::QUALNAME of the changed functions as the base has them
    added: dict[str, set[int]]  # file -> lines the patch adds or changes there
    base_files: dict[str, str | None]  # file -> its base content (base64), None: new file
    # The production code whose entry calls the base run captures (top-level folders and
    # files holding production Python), and the test-side paths inside them.
    entries: list[str] = field(default_factory=list)
    entries_skip: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Found:
    """What the evidence says about one box's judged run."""

    unreached: list[str]  # changed statements no test ran, `file:function lines 3-4`
    differential: Differential | None  # the replayed calls (None: no job was sent)
    untraced: str = ""  # why the run could not trace (another tracer held the hook), or ""
    # The changed functions (PATH::QUALNAME): the replays the report lists one by one when not
    # compared; an entry call into an unchanged function that cannot be compared is only counted.
    changed: frozenset[str] = frozenset()


def production(scope: Scope) -> list[str]:
    """The production Python files the patch changes (scope's units and unparsable files)."""
    units = [*scope.changed, *scope.helpers]
    return sorted({u.rpartition(":")[0] for u in units} | set(scope.unparsable))


def found(repo: Path, judged: str, what: Changed, receipt: Receipt) -> Found:
    """The evidence of one box's judged run."""
    traced = receipt.tracing
    untraced = traced.unavailable if traced is not None else ""
    if what.cover and traced is None:
        untraced = "the box's runner does not trace (charpin 0.4 or later does)"
    return Found(
        unreached=unreached(repo, judged, what, receipt) if not untraced else [],
        differential=receipt.differential,
        untraced=untraced,
        changed=frozenset(what.capture),
    )


def changed(
    repo: Path,
    base: str,
    judged: str,
    production: Sequence[str],
    base_functions: Sequence[str],
    test_side: Callable[[str], bool] | None = None,
    changed_paths: Sequence[str] = (),
) -> Changed:
    """The patch's production changes between base and the judged commit. test_side and
    changed_paths (every path the patch changes): when the patch changes production code at
    all, the base run also captures the tests' entry calls into it (a data file, compiled code
    or module-level code changes what functions return without changing a function)."""
    tree = gitread.tree_files(repo, judged)
    base_tree = gitread.tree_files(repo, base)
    made = _changed(repo, base, judged, production, base_functions, tree, base_tree)
    elsewhere = [p for p in changed_paths if test_side is not None and not test_side(p)]
    if test_side is None or not elsewhere:
        return made
    entries, skip = entry_roots(base_tree, test_side)
    # The replay's base tree needs every production file as the base has it, not only Python.
    files = dict(made.base_files)
    wanted = {p: base_tree[p][1] for p in elsewhere if p not in files and p in base_tree}
    wanted = {p: sha for p, sha in wanted.items() if base_tree[p][0] in gitread.REGULAR}
    blobs = gitread.blobs(repo, wanted.values())
    files.update({p: base64.b64encode(blobs[sha]).decode("ascii") for p, sha in wanted.items()})
    files.update({p: None for p in elsewhere if p not in files and p not in base_tree})
    return replace(made, entries=entries, entries_skip=skip, base_files=files)


def entry_roots(
    tree: dict[str, tuple[str, str]], test_side: Callable[[str], bool]
) -> tuple[list[str], list[str]]:
    """(top-level folders and files holding production Python, test-side paths inside them)."""
    python = [p for p, (mode, _) in tree.items() if p.endswith(".py") and mode in gitread.REGULAR]
    production = [p for p in python if not test_side(p)]
    tops = sorted({p.split("/", 1)[0] + ("/" if "/" in p else "") for p in production})
    roots = [t.rstrip("/") for t in tops]
    inside = [p for p in python if test_side(p) and p.split("/", 1)[0] in roots]
    return roots, sorted(_fold(inside, test_side))


def _fold(paths: list[str], test_side: Callable[[str], bool]) -> set[str]:
    """Test-side files as few paths as can be: a folder whose every Python file is test side."""
    out: set[str] = set()
    for path in paths:
        parts = path.split("/")
        folder = path
        for depth in range(1, len(parts)):
            candidate = "/".join(parts[:depth])
            if test_side(candidate + "/"):
                folder = candidate
                break
        out.add(folder)
    return out


def _changed(
    repo: Path,
    base: str,
    judged: str,
    production: Sequence[str],
    base_functions: Sequence[str],
    tree: dict[str, tuple[str, str]],
    base_tree: dict[str, tuple[str, str]],
) -> Changed:
    cover = sorted(p for p in production if p in tree and tree[p][0] in gitread.REGULAR)
    added: dict[str, set[int]] = {}
    if cover:
        diff = gitread.git(
            repo,
            "diff", "-U0", "--no-color", "--no-ext-diff", "--no-textconv",
            "--src-prefix=a/", "--dst-prefix=b/", base, judged, "--", *cover,
        )  # fmt: skip
        added = _touched_lines(diff)
    wanted = {p: base_tree[p][1] for p in cover if p in base_tree}
    blobs = gitread.blobs(repo, wanted.values())
    base_files: dict[str, str | None] = {
        p: base64.b64encode(blobs[sha]).decode("ascii") if sha in blobs else None
        for p, sha in wanted.items()
    }
    base_files.update({p: None for p in cover if p not in base_tree})
    capture = [
        f"{path}::{qualname}"
        for path, _, qualname in (u.rpartition(":") for u in base_functions)
        if path in base_tree
    ]
    return Changed(cover=cover, capture=sorted(capture), added=added, base_files=base_files)


def job(receipts: Iterable[Receipt], what: Changed, generate: Generate | None = None) -> bytes:
    """The differential job for the judged run: every box's captured calls (the same call
    captured twice once), why a changed function has none, and the changed public functions
    that get generated inputs, with their budget."""
    calls: list[dict[str, str]] = []
    seen: set[tuple[str, str]] = set()
    counts: dict[str, int] = {}
    dropped: dict[str, dict[str, int]] = {}
    for receipt in receipts:
        traced = receipt.tracing
        if traced is None:
            continue
        for call in traced.calls:
            key = (call.function, call.args)
            most = JOB_ENTRY_CALLS if call.entry else JOB_CALLS_PER_FUNCTION
            if key in seen or counts.get(call.function, 0) >= most:
                continue
            seen.add(key)
            counts[call.function] = counts.get(call.function, 0) + 1
            calls.append(
                {"id": call.id, "function": call.function, "test": call.test, "args": call.args}
            )
        for function, why in traced.dropped.items():
            mine = dropped.setdefault(function, {})
            for reason, count in why.items():
                mine[reason] = mine.get(reason, 0) + count
    not_compared: dict[str, str] = {}
    for function in what.capture:
        if counts.get(function):
            continue
        lost = dropped.get(function, {})
        if lost.get("uncopyable"):
            said = f"its {lost['uncopyable']} call(s) had arguments that cannot be copied"
        else:
            said = "the base's tests never called it"
        not_compared[function] = said
    body: dict[str, object] = {
        "calls": calls,
        "base_files": what.base_files,
        "not_compared": not_compared,
    }
    wanted = [f for f in what.capture if public(f)]
    if generate is not None and generate.examples > 0 and wanted:
        body["generate"] = {
            "functions": wanted,
            "examples": generate.examples,
            "seconds": generate.seconds,
            "total_seconds": generate.total_seconds,
            "cover": what.cover,
        }
    return json.dumps(body, sort_keys=True).encode()


def unreached(repo: Path, judged: str, what: Changed, receipt: Receipt) -> list[str]:
    """`file:function lines ...` for each changed statement the judged run never ran."""
    traced = receipt.tracing
    if traced is None or not what.added:
        return []
    # Generated inputs both versions answered alike reach lines too (the patched side traced).
    generated = receipt.differential.reached if receipt.differential is not None else {}
    tree = gitread.tree_files(repo, judged)
    shas = {p: tree[p][1] for p in what.added if p in tree}
    blobs = gitread.blobs(repo, shas.values())
    out: list[str] = []
    for path, lines in sorted(what.added.items()):
        source = blobs.get(shas.get(path, ""), b"")
        ran = set(traced.lines.get(path, [])) | set(generated.get(path, []))
        gaps: dict[str, list[int]] = {}
        for unit, first, numbers in _changed_statements(source, lines):
            if first not in ran:
                gaps.setdefault(unit, []).extend(numbers)
        for unit, numbers in sorted(gaps.items()):
            out.append(f"{path}:{unit} lines {_ranges(sorted(set(numbers)))}")
    return out


def _touched_lines(diff: bytes) -> dict[str, set[int]]:
    """The lines a change touches, removal-only hunks included (harness.added_lines)."""
    return harness.added_lines(diff, removals=True)


def _changed_statements(source: bytes, lines: set[int]) -> list[tuple[str, int, list[int]]]:
    """(function qualname, the statement's first line, the changed lines it holds) for the
    innermost statement of each changed line (comments and blank lines belong to theirs)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    spans: list[tuple[int, int, str]] = []  # (first, last, unit)

    def walk(body: list[ast.stmt], unit: str) -> None:
        for node in body:
            last = getattr(node, "end_lineno", node.lineno) or node.lineno
            spans.append((node.lineno, last, unit))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{unit}.{node.name}" if unit != "<module>" else node.name
                walk(_body_without_docstring(node), inner)
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    child = getattr(node, field, None)
                    if isinstance(child, list):
                        walk([c for c in child if isinstance(c, ast.stmt)], unit)
                    for handler in child or [] if field == "handlers" else []:
                        walk(getattr(handler, "body", []), unit)

    walk(_body_without_docstring(tree), "<module>")
    found: dict[tuple[str, int], list[int]] = {}
    for line in sorted(lines):
        holding = [s for s in spans if s[0] <= line <= s[1]]
        if not holding:
            continue
        first, _, unit = min(holding, key=lambda s: (s[1] - s[0], -s[0]))
        found.setdefault((unit, first), []).append(line)
    return [(unit, first, numbers) for (unit, first), numbers in sorted(found.items())]


def _body_without_docstring(node: ast.AST) -> list[ast.stmt]:
    body = list(getattr(node, "body", []))
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            return body[1:]
    return body


def _ranges(numbers: list[int]) -> str:
    out: list[str] = []
    start = prev = numbers[0]
    for n in numbers[1:]:
        if n == prev + 1:
            prev = n
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = n
    out.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(out)
