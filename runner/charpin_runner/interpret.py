"""Read the test command's end: exit status + probe evidence → Exit. Runs on boxes; stdlib only.

Pure: no I/O. The exit status alone is not trusted (os._exit(0) mid-run, atexit hooks, a
conftest that rewrites reports); it is reconciled with what the probe saw, and every finding
that disagrees becomes one human line in `reasons` and turns the verdict into `incomplete`.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from charpin_runner.probe import ProbeData
from charpin_runner.receipt import Exit, Interpretation

# pytest's documented exit codes (pytest.ExitCode).
_PYTEST_CODES: dict[int, Interpretation] = {
    0: "ok",
    1: "failed",
    2: "interrupted",
    3: "internal-error",
    4: "usage",
    5: "no-tests",
}
# Verdicts that evidence of an unfinished or rewritten run can demote to `incomplete`.
_DEMOTABLE = ("ok", "failed", "no-tests")

# What `charpin receipt` exits with for each interpretation (design §6 meanings).
EXIT_CODES: dict[str, int] = {
    "ok": 0,
    "failed": 1,
    "incomplete": 2,
    "timed-out": 4,
    "no-tests": 16,
    "usage": 64,
    "interrupted": 130,
    "internal-error": 1,
}


@dataclass(frozen=True)
class Ending:
    """How the parent saw the child end."""

    status: int
    timed_out: bool = False
    interrupted: bool = False
    timeout: float | None = None


def interpret(ending: Ending, probe: ProbeData, extra_reasons: tuple[str, ...] = ()) -> Exit:
    """Combine the measured ending with the probe's evidence into the receipt's exit block."""
    reasons = _evidence(ending.status, probe) + list(extra_reasons)
    if ending.interrupted:
        verdict: Interpretation = "interrupted"
        reasons.insert(
            0, "charpin was interrupted (SIGINT/SIGTERM); the test process group was killed"
        )
    elif ending.timed_out:
        verdict = "timed-out"
        limit = f"{ending.timeout:g} s " if ending.timeout is not None else ""
        reasons.insert(0, f"the test command ran past its {limit}deadline and was killed")
    else:
        verdict = _PYTEST_CODES.get(ending.status, "incomplete")
        if verdict == "incomplete":
            reasons.insert(0, _odd_status(ending.status))
        elif verdict in _DEMOTABLE and reasons:
            verdict = "incomplete"
    return Exit(
        status=ending.status,
        interpretation=verdict,
        reasons=reasons,
        pytest_status=probe.pytest_status,
    )


def _evidence(status: int, probe: ProbeData) -> list[str]:
    """Every way the probe's record disagrees with a clean, complete run ending in status."""
    if not probe.started:
        return ["the test session never started: the charpin plugin did not load (is it pytest?)"]
    reasons: list[str] = []
    if not probe.session_finished:
        reasons.append("the test session never finished: os._exit() or a crash")
    elif probe.pytest_status is not None and probe.pytest_status != status:
        reasons.append(
            f"pytest finished with status {probe.pytest_status} but the process exited with "
            f"{status}: the exit status was rewritten (atexit or os._exit)"
        )
    reasons.extend(f"the probe noted: {note}" for note in probe.notes)
    if status == 0:
        reasons.extend(_unexecuted(probe))
        bad = sorted(n for n, o in probe.outcomes.items() if o in ("failed", "error"))
        if bad:
            reasons.append(
                f"exit status 0 but {len(bad)} test(s) failed or errored ({_few(bad)}): "
                "the exit status was masked"
            )
    return reasons


def _unexecuted(probe: ProbeData) -> list[str]:
    selected, executed = set(probe.selected), set(probe.executed)
    reasons: list[str] = []
    missing = sorted(selected - executed)
    if missing:
        reasons.append(f"{len(missing)} selected test(s) never executed: {_few(missing)}")
    surplus = sorted(executed - selected)
    if surplus:
        reasons.append(f"{len(surplus)} executed test(s) were never selected: {_few(surplus)}")
    return reasons


def _odd_status(status: int) -> str:
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"the test command was killed by {name}"
    return f"the test command exited with status {status}, which is not a pytest exit code"


def _few(items: list[str], limit: int = 3) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
