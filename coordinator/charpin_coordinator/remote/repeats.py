"""Coordinator side. `run --repeat N`: each box's whole pipeline N times in a row, independently.

Flake evidence is "same commit, same box, different outcomes", so each repeat is a run of its
own: a new connection, a fresh checkout, a fresh seal key. Repeat 1 is the receipt of record
(gates, drift, exit code, `--against`); repeats 2..N are evidence only. Repeat k runs under the
run id `<run id>.r<k>`: its folder on the box (kept with --keep) and the run id its seal is
bound to are its own, so no repeat can collide with another or pass for one. A --run-id that
ends that way is refused, so no later run can take a repeat's id either.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Callable

from charpin_runner.errors import UsageError
from charpin_runner.runid import check_run_id

from charpin_coordinator.remote.boxrun import BoxOutcome, BoxTarget, Phase, RunPlan, run_box
from charpin_coordinator.report import NotEvaluated, NotEvaluatedKind

MAX_REPEAT = 20
_RESERVED = re.compile(r".*\.r[0-9]+")


def check_count(count: int) -> int:
    """count, or UsageError when it is not 1..MAX_REPEAT."""
    if not 1 <= count <= MAX_REPEAT:
        raise UsageError(
            f"--repeat {count} must be between 1 and {MAX_REPEAT} (runs of each box in a row)"
        )
    return count


def repeat_run_id(run_id: str, repeat: int) -> str:
    """The run id of repeat `repeat` (1 is the run's own)."""
    return run_id if repeat == 1 else f"{run_id}.r{repeat}"


def check_ids(run_id: str, count: int) -> None:
    """A run id must not look like a repeat's, and its repeats' ids must be valid run ids."""
    if _RESERVED.fullmatch(run_id):
        raise UsageError(
            f"--run-id {run_id!r} ends like a repeat's id (.r<N> is reserved for --repeat); "
            "pick another"
        )
    if count > 1:
        longest = repeat_run_id(run_id, count)
        try:
            check_run_id(longest)
        except UsageError:
            raise UsageError(
                f"--run-id {run_id!r} is too long for --repeat {count}: its repeats' ids "
                f"({longest}) must be valid run ids too (128 characters at most)"
            ) from None


def run_repeats(
    first: BoxOutcome,
    target: BoxTarget,
    plan: RunPlan,
    count: int,
    phase_of: Callable[[int], Phase],
    stop: threading.Event,
) -> list[BoxOutcome]:
    """Repeats 2..count of one box, after `first` (the record). None runs once Ctrl-C was
    pressed, nor when the record itself was not evaluated: an unreachable or refused box would
    fail each repeat the same way, each after its own connect attempts and deadline."""
    out: list[BoxOutcome] = []
    for repeat in range(2, count + 1):
        missed = first.not_evaluated
        if stop.is_set():
            out.append(_not_run(target.label, repeat, "interrupted", "the run was interrupted"))
        elif missed is not None:
            why = f"repeat 1, the receipt of record, was not evaluated ({missed.kind})"
            out.append(_not_run(target.label, repeat, missed.kind, why))
        else:
            mine = dataclasses.replace(plan, run_id=repeat_run_id(plan.run_id, repeat))
            outcome = run_box(target, mine, phase_of(repeat), stop)
            outcome.repeat = repeat
            out.append(outcome)
    return out


def _not_run(label: str, repeat: int, kind: NotEvaluatedKind, why: str) -> BoxOutcome:
    return BoxOutcome(
        label=label,
        repeat=repeat,
        not_evaluated=NotEvaluated(label=label, kind=kind, reason=f"{label}: not run: {why}"),
        interrupted=kind == "interrupted",
    )
