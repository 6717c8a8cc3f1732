"""What a test report says, as the probe labels it: xfail handling, subtests, one outcome per
test. Runs inside the tests' pytest; stdlib + pytest only; pure (no I/O)."""

from __future__ import annotations

from typing import Any

import pytest

_PHASES = ("setup", "call", "teardown")


# What a report says, wasxfail included: a failed report that carries wasxfail is not counted
# by pytest's session (exit status 0) yet is still a failure, so it gets a label of its own.
_XFAIL_LABELS = {"skipped": "xfailed", "passed": "xpassed", "failed": "failed+xfail"}
_FAILING = frozenset({"failed", "failed+xfail"})
_SKIP = pytest.skip.Exception
_XFAIL = pytest.xfail.Exception
# The prediction for a failure whose xfail fate the probe cannot read: pytest decides, and an
# xfail it reports is "unverified" (the parent does not call such a run ok).
_UNSURE = "failed or xfailed"
_NOT_SET = object()


def _private_xfailed_key() -> Any:
    """pytest's stash key for its evaluated xfail marks (private API), or None if it moved."""
    try:
        from _pytest.skipping import xfailed_key
    except ImportError:
        return None
    return xfailed_key


# Exactly what pytest's own xfail handling reads, its conditions already evaluated.
_XFAILED_KEY: Any = _private_xfailed_key()


def _label(report: pytest.TestReport) -> str:
    outcome = report.outcome
    if hasattr(report, "wasxfail"):
        return _XFAIL_LABELS.get(outcome, outcome)
    return outcome


def _accepted(expected: str, label: str) -> bool:
    """Tell whether pytest's own handling after the probe's wrapper explains label."""
    # Turning anything into a failure hides nothing (strict XPASS, failed subtests, raises=).
    return label == expected or label == "failed" or (expected, label) == ("passed", "xpassed")


def _xfail_applies(item: pytest.Item, call: pytest.CallInfo[None]) -> bool | None:
    """Tell whether pytest's xfail handling turns the exception call raised into an xfail.

    None when pytest's private xfail state is missing or has an unknown shape: fail closed.
    """
    exc = call.excinfo
    if exc is None or getattr(item.config.option, "runxfail", False):
        return False
    if isinstance(exc.value, _XFAIL):
        return True  # pytest.xfail(), xfail(run=False), unittest's expectedFailure
    if _XFAILED_KEY is None:
        return None
    xfailed = item.stash.get(_XFAILED_KEY, _NOT_SET)
    if xfailed is None:
        return False
    raises = getattr(xfailed, "raises", _NOT_SET)
    if raises is None:
        return True
    if isinstance(raises, (type, tuple)):
        return isinstance(exc.value, raises)
    matches = getattr(raises, "matches", None)
    return bool(matches(exc.value)) if callable(matches) else None


# A subtest report's label, counted as one of three kinds; the receipt keeps this many failing
# subtest ids per test (the counts say how many there were).
_SUBTEST_KINDS = {
    "passed": "passed",
    "xpassed": "passed",
    "skipped": "skipped",
    "xfailed": "skipped",
}
_SUBTEST_IDS = 20


def _subtest_id(context: Any, module: str) -> str:
    """A subtest as pytest shows it: `[msg] (key=value, ...)`, or `(<subtest>)`."""
    parts = []
    msg = getattr(context, "msg", None)
    if msg is not None:
        parts.append(f"[{msg}]")
    kwargs = getattr(context, "kwargs", None)
    if isinstance(kwargs, dict) and kwargs:
        # pytest >= 9 stores the values already repr()-ed; the pytest-subtests plugin does not.
        raw = module.startswith("_pytest.")
        shown = ", ".join(f"{k}={v if raw else repr(v)}" for k, v in kwargs.items())
        parts.append(f"({shown})")
    return " ".join(parts) or "(<subtest>)"


def _outcome(phases: dict[str, str]) -> str:
    setup = phases.get("setup")
    call = phases.get("call")
    teardown = phases.get("teardown")
    if setup in _FAILING:
        return "error"
    if call in _FAILING:
        return "failed"
    # xdist reports a crashed worker's test with when="???".
    if any(label in _FAILING for when, label in phases.items() if when not in _PHASES):
        return "failed"
    # Before skips: pytest counts a failing teardown after a skip or an imperative xfail.
    if teardown in _FAILING:
        return "error"
    for label in (setup, call):
        if label == "skipped" or label == "xfailed":
            return label
    if call == "xpassed":
        return "xpassed"
    return "passed"
