"""The verify corpus's model: one agent-style patch per entry, what a reviewer expects verify to
say about it, and how a verify report is scored against that (tests/bench/bench_verify_corpus.py
and tests/coordinator/verify/test_verify_cheats.py both use it). Test-side code, stdlib only."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Edit = Callable[[Path], None]
MakePatch = Callable[[Path], bytes]
# What a refused patch reads as: `charpin-remote verify` exited 64 with one line naming the cause.
REFUSED = "refused"


@dataclass(frozen=True)
class Entry:
    """One patch of the corpus.

    edit: changes a checkout of the subject's base (the working tree; the patch is its diff).
    make_patch: instead of edit, builds the patch bytes itself (a format-patch, say).
    expect: ACCEPT or REJECT. For REJECT, gate is the verify gate that must FAIL and reason a
    substring of what it says (its detail, or an observation's item or text) that a reviewer
    needs to see; `also` lists other (gate, reason) pairs that are just as right (REFUSED as the
    gate: verify refused the patch with a one-line error holding reason).
    kind: honest (ACCEPT), behaviour (an honest behaviour change, REJECT), cheat (REJECT).
    """

    name: str
    subject: str
    expect: str
    kind: str
    what: str
    edit: Edit | None = None
    make_patch: MakePatch | None = None
    gate: str = ""
    reason: str = ""
    also: tuple[tuple[str, str], ...] = ()

    def patch(self, repo: Path) -> bytes:
        if self.make_patch is not None:
            return self.make_patch(repo)
        assert self.edit is not None, self.name
        return diff_of(repo, self.edit)


def git(repo: Path, *args: str, data: bytes | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args],
        input=data,
        capture_output=True,
        check=True,
    )
    return done.stdout.decode("utf-8", "replace").strip()


def diff_of(repo: Path, edit: Edit) -> bytes:
    """The diff an agent hands over for edit (git diff --binary); the tree is put back."""
    edit(repo)
    git(repo, "add", "-A")
    diff = subprocess.run(
        ["git", "-C", str(repo), "diff", "--cached", "--binary"], capture_output=True, check=True
    ).stdout
    git(repo, "reset", "-q", "--hard", "HEAD")
    git(repo, "clean", "-qfdx", "-e", ".charpin")
    return diff


def sub(repo: Path, rel: str, old: str, new: str, count: int = 1) -> None:
    """Replace old by new in rel (count times; 0: every one); old must be there."""
    path = repo / rel
    text = path.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {rel}"
    path.write_text(text.replace(old, new, count if count else -1), encoding="utf-8")


def write(repo: Path, rel: str, text: str) -> None:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def append(repo: Path, rel: str, text: str) -> None:
    path = repo / rel
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


@dataclass(frozen=True)
class Scored:
    """How verify did on one entry."""

    got: str  # ACCEPT, REJECT, INCOMPLETE, refused, error
    outcome: str  # right, missed, wrong reason, false alarm, error
    failed: list[str]  # the gates that failed
    detail: str  # what verify said that decided the outcome (or why it is an error)


def failing_gates(report: dict[str, Any]) -> list[str]:
    return sorted({g["gate"] for g in report.get("gates", []) if g["status"] == "FAIL"})


def said(report: dict[str, Any], gate: str) -> str:
    """Everything verify says under gate: failing details and observations, one line each."""
    lines = [g["detail"] for g in report.get("gates", []) if g["gate"] == gate and g["status"] == "FAIL"]
    lines += [
        f"{o['item']}: {o['what']}" for o in report.get("observations", []) if o["gate"] == gate
    ]
    return "\n".join(lines)


def score(entry: Entry, code: int, report: dict[str, Any] | None, stderr: str) -> Scored:
    """Score one verify (its exit code, its report when it wrote one, its stderr)."""
    if report is None:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {code}"
        if code == 64:
            pairs = [(entry.gate, entry.reason), *entry.also]
            ok = any(g == REFUSED and r in stderr for g, r in pairs)
            if entry.expect == "REJECT" and ok:
                return Scored(REFUSED, "right", [], last)
            outcome = "false alarm" if entry.expect == "ACCEPT" else "wrong reason"
            return Scored(REFUSED, outcome, [], last)
        return Scored("error", "error", [], last)
    verdict = report["verdict"]
    failed = failing_gates(report)
    if verdict not in ("ACCEPT", "REJECT"):
        return Scored(verdict, "error", failed, _incomplete(report))
    if entry.expect == "ACCEPT":
        if verdict == "ACCEPT":
            return Scored(verdict, "right", failed, "")
        return Scored(verdict, "false alarm", failed, _first_reason(report, failed))
    if verdict == "ACCEPT":
        return Scored(verdict, "missed", failed, "")
    for gate, reason in [(entry.gate, entry.reason), *entry.also]:
        if gate in failed and reason in said(report, gate):
            return Scored(verdict, "right", failed, _line_with(said(report, gate), reason))
    return Scored(verdict, "wrong reason", failed, _first_reason(report, failed))


def _line_with(text: str, needle: str) -> str:
    return next((line for line in text.splitlines() if needle in line), "")[:200]


def _first_reason(report: dict[str, Any], failed: list[str]) -> str:
    if not failed:
        return ""
    return f"{failed[0]}: {said(report, failed[0]).splitlines()[0][:200]}"


def _incomplete(report: dict[str, Any]) -> str:
    missing = report.get("not_evaluated") or []
    if missing:
        return str(missing[0].get("reason", ""))[:200]
    gates = [g for g in report.get("gates", []) if g["status"] == "INCOMPLETE"]
    return f"{gates[0]['gate']}: {gates[0]['detail']}"[:200] if gates else ""
