"""Read the test command's end: exit status + probe evidence → Exit. Runs on boxes; stdlib only.

Pure: no I/O. The exit status alone is not trusted (os._exit(0) mid-run, atexit hooks, a
conftest that rewrites reports); it is reconciled with what the probe saw, and every finding
that contradicts it becomes one human line in `reasons` and turns ok/failed/no-tests into
`incomplete`. The probe's other notes (a leaked frozen test, -x stopping early) follow as
informational lines that do not change the verdict.
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
    # The suite could not be collected: the tests did not run, but the box did its job (not
    # "interrupted", which would read as a box that was not evaluated).
    "collection-error": 1,
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
    findings = _findings(ending.status, probe) + list(extra_reasons)
    if ending.interrupted:
        verdict: Interpretation = "interrupted"
        findings.insert(
            0, "charpin was interrupted (SIGINT/SIGTERM); the test process group was killed"
        )
    elif ending.timed_out:
        verdict = "timed-out"
        # What was left of the box's deadline, to a tenth: "9.04664 s" reads as a typo.
        limit = f"{round(ending.timeout, 1):g} s " if ending.timeout is not None else ""
        # Killed at the deadline, the session could not finish: no os._exit() or crash to blame.
        findings = [f for f in findings if f != _NEVER_FINISHED]
        findings.insert(0, f"the test command ran past its {limit}deadline and was killed")
    elif ending.status in (2, 4) and probe.collect_errors:
        # 2: test files pytest could not collect; 4: a conftest that failed to import (pytest
        # calls that a usage error, but it is the project's code that broke).
        verdict = "collection-error"
        if not probe.started:
            findings = [f for f in findings if f != _NEVER_STARTED]
        findings[:0] = _collect_errors(probe)
    else:
        verdict = _PYTEST_CODES.get(ending.status, "incomplete")
        if verdict == "incomplete":
            findings.insert(0, _odd_status(ending.status))
        elif verdict in _DEMOTABLE and findings:
            verdict = "incomplete"
    return Exit(
        status=ending.status,
        interpretation=verdict,
        reasons=findings + _notes(probe, findings),
        pytest_status=probe.pytest_status,
    )


def _collect_errors(probe: ProbeData, shown: int = 5) -> list[str]:
    """One line per file pytest could not collect: its id and the error's last line."""
    lines = []
    for nodeid, text in probe.collect_errors[:shown]:
        last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "no detail")
        lines.append(f"collection error in {nodeid or '(the session)'}: {last}")
    more = len(probe.collect_errors) - shown
    if more > 0:
        lines.append(f"... and {more} more collection error(s); see stderr.log")
    return lines


def _findings(status: int, probe: ProbeData) -> list[str]:
    """Every way the probe's record contradicts a clean, complete run ending in status."""
    if not probe.started:
        return [_NEVER_STARTED]
    reasons: list[str] = []
    if not probe.session_finished:
        reasons.append(_NEVER_FINISHED)
    elif probe.pytest_status is not None and probe.pytest_status != status:
        reasons.append(
            f"pytest finished with status {probe.pytest_status} but the process exited with "
            f"{status}: the exit status was rewritten (atexit or os._exit)"
        )
    if probe.tampered:
        reasons.append(
            f"the test run tampered with the charpin probe ({_few(probe.tampered)}); "
            "its record cannot be trusted"
        )
    if probe.unverified:
        reasons.append(
            f"cannot verify that pytest itself made {_few(probe.unverified)} xfailed: the probe "
            "could not read pytest's xfail state (private _pytest.skipping.xfailed_key missing "
            "or changed), so a hook may have relabelled a failure"
        )
    if probe.rewritten:
        reasons.append(f"another hook rewrote the outcome of {_few(sorted(probe.rewritten))}")
    if probe.dropped:
        reasons.append(_dropped(len(probe.dropped)))
    if probe.late_dropped:
        reasons.append(
            f"a hook removed selected tests after the ledger applied: {_few(probe.late_dropped)}"
        )
    if status == 0:
        reasons.extend(_unexecuted(probe))
        # The probe's own list counts too: a failure it saw stays one, whatever was reported.
        bad = sorted(
            {n for n, o in probe.outcomes.items() if o in ("failed", "error")} | set(probe.failing)
        )
        if bad:
            reasons.append(
                f"exit status 0 but {len(bad)} test(s) failed or errored ({_few(bad)}): "
                "the exit status was masked"
            )
    return reasons


_NEVER_STARTED = "the test session never started: the charpin plugin did not load (is it pytest?)"
_NEVER_FINISHED = "the test session never finished: os._exit() or a crash"
# Probe notes that say again what one of our findings (by its first words) already says.
_SAID_BY: dict[str, tuple[str, ...]] = {
    "the test session never started": ("the probe never recorded", "probe record "),
    "the test session never finished": ("the test session never finished",),
    "another hook rewrote": ("outcome of ",),
    "the test run tampered": ("the test run tampered",),
    "a hook removed selected": ("selected ids removed by a hook",),
}
_SAID_BY_COUNT: dict[str, tuple[str, ...]] = {
    "selected test(s) never executed": ("selected but never executed",),
    "executed test(s) were never selected": ("executed although not selected",),
}


def _notes(probe: ProbeData, findings: list[str]) -> list[str]:
    """The probe's own notes (informational), minus those a finding already states."""
    covered: list[str] = []
    for finding in findings:
        for start, prefixes in _SAID_BY.items():
            if finding.startswith(start):
                covered.extend(prefixes)
        for middle, prefixes in _SAID_BY_COUNT.items():
            if middle in finding:
                covered.extend(prefixes)
    return [f"probe: {n}" for n in probe.notes if not n.startswith(tuple(covered))]


def _dropped(count: int) -> str:
    # Silently vanished items look exactly like tests that do not exist, so a green run over
    # them proves nothing: say how many, and how to make the removal visible.
    return (
        f"{count} collected test(s) were removed during collection without being reported "
        "as deselected; report removed items through "
        "config.hook.pytest_deselected(items=...) or deselect them with -k/-m/--deselect"
    )


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
