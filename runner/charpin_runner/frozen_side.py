"""The frozen tests' side run of `charpin receipt --include-frozen`. Runs on boxes; stdlib only.

After the run of record is fully measured, the ledger's frozen tests run once more on their own
(the probe keeps exactly the frozen ids), measured as the run itself is: outcomes, fixtures, git
state and the protected paths. The result (FrozenRerun) is evidence for unfreezing, never gated;
a side run that moved HEAD, changed the tree or a protected path, or ran on a checkout the
measured run had changed is `tainted` and clean for no ledger entry.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from charpin_runner import fixtures, gitstate
from charpin_runner import sandbox as sandbox_mod
from charpin_runner.errors import RunError
from charpin_runner.interpret import Ending, interpret
from charpin_runner.probe import ProbeData
from charpin_runner.procgroup import StopFlag, kill_adopted
from charpin_runner.receipt import OUTCOMES, Fixtures, FrozenRerun, Outcome
from charpin_runner.testrun import run_tests

if TYPE_CHECKING:
    from charpin_runner.run_receipt import Request


# A side run needs at least this long; with less left of --timeout it is not started.
_SIDE_MIN_SECONDS = 1.0


@dataclass(frozen=True)
class Measured:
    """What the side run starts from: the measured run's probe, fixtures and git state, and
    what that run changed in the checkout (the side run then ran on a changed tree)."""

    probe: ProbeData
    fixtures: fixtures.Snapshot
    git: gitstate.GitState
    moved: list[str]


def moved_by_run(
    written: list[str], before: fixtures.Snapshot, after: fixtures.Snapshot
) -> list[str]:
    moved = fixtures.diff(before, after)
    return sorted(set(written) | set(_changed_paths(moved)))


def _changed_paths(moved: Fixtures) -> list[str]:
    return sorted(
        set(moved.added + moved.removed + moved.changed + moved.type_changed + moved.mode_changed)
    )


def frozen_rerun(
    request: Request,
    ledger: str | None,
    stop: StopFlag,
    guard: sandbox_mod.Guard,
    main: Measured,
    began: float,
) -> tuple[FrozenRerun | None, list[str]]:
    """Run the frozen tests alone (--include-frozen) and say whether they ran clean; also the
    notes the receipt of record gets about it (a side run that wrote where later runs read)."""
    requested = sorted(main.probe.ledger.frozen)
    if ledger is None or not requested:
        return None, []
    left = None
    if request.timeout is not None:
        left = request.timeout - (time.monotonic() - began)
        if left < _SIDE_MIN_SECONDS:
            reason = "not run: nothing was left of --timeout after the measured run"
            return FrozenRerun(requested, {}, "timed-out", -1, [], 0.0, False, [reason]), []
    side = run_tests(request, ledger, stop, guard, frozen_only=True, timeout=left)
    if request.kill_adopted:
        kill_adopted()
    # Measured as the run itself is: fixtures first, then git, then the protected paths.
    changed = _changed_paths(
        fixtures.diff(main.fixtures, fixtures.snapshot(request.repo, main.fixtures.roots))
    )
    git_side, git_findings = state_after(request.repo, main.git)
    escaped = sandbox_mod.finish(guard)
    ending = Ending(side.ending.status, side.ending.timed_out, stop.requested, left)
    ended = interpret(ending, side.probe)
    outcomes = {k: cast(Outcome, v) for k, v in side.probe.outcomes.items() if v in OUTCOMES}
    reasons = list(ended.reasons)
    not_passed = [nodeid for nodeid in requested if outcomes.get(nodeid) != "passed"]
    if not_passed:
        shown = ", ".join(f"{n} ({outcomes.get(n, 'not run')})" for n in not_passed[:5])
        count = len(not_passed)
        reasons.append(f"{count} frozen test{'' if count == 1 else 's'} did not pass: {shown}")
    if changed:
        reasons.append(f"the side run changed watched fixtures: {', '.join(changed[:5])}")
    tainted = _git_moves(main.git, git_side) + git_findings + escaped
    if main.moved:
        # A test of the measured run rewrote what the frozen tests then ran (a regenerated
        # golden, an edited test file): their result says nothing about the committed code.
        shown = ", ".join(main.moved[:5])
        tainted.append(f"the measured run had changed the checkout the side run used: {shown}")
    reasons += tainted
    clean = ended.interpretation == "ok" and not not_passed and not changed and not tainted
    notes = [f"after the measured run, the frozen tests' side run: {line}" for line in escaped]
    rerun = FrozenRerun(
        requested=requested,
        outcomes=dict(sorted(outcomes.items())),
        interpretation=ended.interpretation,
        status=side.ending.status,
        fixtures_changed=changed,
        wall_seconds=side.wall,
        clean=clean,
        reasons=reasons,
        tainted=tainted,
    )
    return rerun, notes


def _git_moves(before: gitstate.GitState, after: gitstate.GitState) -> list[str]:
    """What the side run did to the repository: a moved HEAD, paths it changed."""
    out = []
    if after.head != before.head:
        out.append(f"the side run moved HEAD from {before.head[:12]} to {after.head[:12]}")
    written = gitstate.written_paths(before, after)
    if written:
        out.append(f"the side run changed the working tree: {', '.join(written[:5])}")
    return out




def state_after(repo: Path, before: gitstate.GitState) -> tuple[gitstate.GitState, list[str]]:
    """Git state after a run, measured with the ignore rules in force before it, and what the
    repository's git setup says about the run; a repository the tests broke is recorded, not
    fatal."""
    try:
        after = gitstate.read_state(repo, before)
    except RunError as exc:
        broken = [f"after the run, {exc}"]
        return gitstate.unreadable(), broken + gitstate.run_findings(before, before)
    return after, gitstate.run_findings(before, after)
