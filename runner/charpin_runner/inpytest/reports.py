"""The probe's report hooks: each test's phases as pytest made them, relabelling by other hooks,
subtests, one outcome line per test. Runs inside the tests' pytest; stdlib + pytest only.
The hot path (logreport) formats its lines by hand (bench_probe.py)."""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

import pytest

from charpin_runner.inpytest.outcomes import (
    _FAILING,
    _SKIP,
    _SUBTEST_IDS,
    _SUBTEST_KINDS,
    _UNSURE,
    _XFAIL_LABELS,
    _accepted,
    _outcome,
    _subtest_id,
    _xfail_applies,
)
from charpin_runner.inpytest.state import COLLECT_ERROR_LINES, ProbeState
from charpin_runner.inpytest.wrappers import NEW_STYLE

_quote = json.encoder.encode_basestring_ascii


class ReportHooks(ProbeState):
    """Test reports: predicted by the innermost makereport wrapper, checked as they arrive."""
    # -- test reports -------------------------------------------------------------------------

    if NEW_STYLE:

        @pytest.hookimpl(wrapper=True, trylast=True)
        def pytest_runtest_makereport(
            self, item: pytest.Item, call: pytest.CallInfo[None]
        ) -> Generator[None, Any, Any]:
            # Innermost wrapper: see the report before pytest's xfail handling and any other
            # wrapper can change it, and predict what pytest's own handling makes of it.
            report = yield
            if call.excinfo is None and report.outcome == "passed":
                self.seen[(report.nodeid, report.when)] = "passed"  # the common case, inline
            else:
                self._saw(item, call, report)
            return report

    else:  # pragma: no cover - exercised only with pluggy < 1.1

        @pytest.hookimpl(hookwrapper=True, trylast=True)
        def pytest_runtest_makereport(
            self, item: pytest.Item, call: pytest.CallInfo[None]
        ) -> Generator[None, Any, Any]:
            outcome = yield
            if outcome.excinfo is None:
                self._saw(item, call, outcome.get_result())

    def _saw(self, item: pytest.Item, call: pytest.CallInfo[None], report: Any) -> None:
        """Remember what pytest's own handling will make of report, and every failure."""
        outcome = report.outcome
        exc = call.excinfo
        if exc is not None and outcome != "failed" and not isinstance(exc.value, _SKIP):
            # The phase raised, yet a hook that runs inside this wrapper made it pass or skip.
            outcome = "failed"
        if outcome == "failed":
            applies = _xfail_applies(item, call)
            if applies is None:
                outcome = _UNSURE
            elif applies:
                outcome = "xfailed"
            else:
                self._mark_failing(self._id(report.nodeid))
        self.seen[(report.nodeid, report.when)] = outcome

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A file or module that failed to collect: its id and the end of its error, so the
        receipt can say what broke collection (pytest then exits 2, "interrupted")."""
        if not report.failed or self.out is None:
            return
        lines = str(report.longrepr).strip().splitlines()
        text = "\n".join(lines[-COLLECT_ERROR_LINES:])
        self._emit({"kind": "collect-error", "nodeid": self._id(report.nodeid), "text": text})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Hot path: runs three times per test, so it formats its lines by hand and reads the
        # report's node id once (a computed property in current pytest) (bench_probe.py).
        raw = report.nodeid
        nodeid = self.prefix + raw
        for root in self.roots:
            if root in nodeid:
                nodeid = self._id(raw)
                break
        raw_when = report.when
        key = (raw, raw_when)
        when = str(raw_when)
        label: str = report.outcome  # _label(report), inline on the hot path
        if hasattr(report, "wasxfail"):
            label = _XFAIL_LABELS.get(label, label)
        shown = label
        expected = self.seen.pop(key, None)
        if expected is not None and label != expected:
            label = self._compare(nodeid, when, expected, label)
        if label in _FAILING:
            self.watch.append((nodeid, when, shown, report))
        out = self.out
        if out is None:
            return  # an xdist worker: the controller records the report xdist relays
        if when == "setup":
            # Written now, not at teardown, so a test that kills the process still shows up.
            self.executed.add(nodeid)
            out.write(f'{{"kind":"setup","nodeid":{_quote(nodeid)}}}\n')
            self.phases[nodeid] = {"setup": (label, report.duration)}
            return
        phases = self.phases.pop(nodeid, {}) if when == "teardown" else None
        if phases is None:
            context = getattr(report, "context", None)
            if context is not None:
                self._subtest(nodeid, label, context, type(report).__module__)
            phases = self.phases.get(nodeid)
            if phases is None:
                phases = self.phases[nodeid] = {}
            before = phases.get(when)
            # A failure sticks: with subtests the call phase reports once per subtest, then once
            # more for the test itself.
            if before is not None and before[0] in _FAILING:
                label = before[0]
        phases[when] = (label, report.duration)
        if when == "teardown":
            self._finish_test(nodeid, phases)

    def _subtest(self, nodeid: str, label: str, context: Any, module: str) -> None:
        """Count one subtest report (unittest's subTest, pytest's `subtests` fixture) and keep
        the parameters of a failing one; the test's own outcome is decided by its phases."""
        counts = self.subtests.get(nodeid)
        if counts is None:
            counts = self.subtests[nodeid] = {"passed": 0, "failed": 0, "skipped": 0}
        kind = _SUBTEST_KINDS.get(label, "failed")
        counts[kind] += 1
        if kind == "failed":
            failing = self.subtest_failing.setdefault(nodeid, [])
            if len(failing) < _SUBTEST_IDS:
                failing.append(_subtest_id(context, module))

    def _compare(self, nodeid: str, when: str, expected: str, label: str) -> str:
        """Check a label against the prediction; return what pytest made of the test."""
        if expected == _UNSURE:
            # pytest's xfail state could not be read: its own verdict stands, failed or xfailed.
            if label == "failed":
                self._mark_failing(nodeid)
                return label
            if label == "xfailed":
                self._mark_unverified(nodeid)
                return label
            expected = "failed"
        elif _accepted(expected, label):
            return label
        self._rewritten(nodeid, when, expected, label)
        # Record what pytest made of the test, not what the other hook turned it into.
        return expected

    def _finish_test(self, nodeid: str, phases: dict[str, tuple[str, float]]) -> None:
        duration = round(sum([took for _, took in phases.values()]), 6)
        for label, _ in phases.values():
            if label != "passed":
                outcome = _outcome({when: label for when, (label, _) in phases.items()})
                break
        else:
            outcome = "passed"  # what _outcome makes of it, without building its argument
        counts = self.subtests.pop(nodeid, None)
        if counts is not None:
            line: dict[str, Any] = {"kind": "report", "nodeid": nodeid, "outcome": outcome}
            line["duration"] = duration
            line["subtests"] = dict(counts, failing=self.subtest_failing.pop(nodeid, []))
            self._emit(line if "teardown" in phases else dict(line, incomplete=True))
            return
        if "teardown" in phases and self.out is not None:
            self.out.write(
                f'{{"kind":"report","nodeid":{_quote(nodeid)},"outcome":"{outcome}",'
                f'"duration":{duration!r}}}\n'
            )
            return
        self._emit(
            {
                "kind": "report",
                "nodeid": nodeid,
                "outcome": outcome,
                "duration": duration,
                "incomplete": True,
            }
        )
