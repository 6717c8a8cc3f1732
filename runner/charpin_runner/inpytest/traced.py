"""The probe's part in differential evidence: it traces the changed files while the tests run
and sends what ran and the captured calls as record lines. Runs inside the tests' pytest;
stdlib + pytest only."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from charpin_runner.inpytest.state import ProbeState
from charpin_runner.inpytest.tracing import Captured, Target, Tracer
from charpin_runner.inpytest.wrappers import NEW_STYLE


def targets(values: list[str]) -> list[Target]:
    """`--charpin-capture PATH::QUALNAME[::LINE]` values as targets."""
    found = []
    for value in values:
        parts = value.split("::")
        if len(parts) >= 2 and parts[0] and parts[1]:
            line = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else 0
            found.append(Target(parts[0], parts[1], line))
    return found


# The tracer started before the initial conftests load (plugin.py), adopted by the probe.
_early: list[Tracer] = []


def start_early(
    root: str,
    cover: list[str],
    capture: list[str],
    entries: tuple[list[str], list[str]] = ([], []),
) -> None:
    """Trace from before the initial conftests import anything: a conftest that imports the
    code under test runs its module-level lines before any session starts."""
    if _early or (not cover and not capture and not entries[0]):
        return
    tracer = Tracer(root, list(cover), targets(list(capture)), lambda: "", entries=entries)
    tracer.start()
    _early.append(tracer)


class TracingHooks(ProbeState):
    """Start the tracer before collection imports anything; send what it saw at the end."""

    tracer: Tracer | None = None
    current_test = ""

    def _start_tracing(self) -> None:
        cover = list(self.config.getoption("charpin_cover") or [])
        capture = targets(list(self.config.getoption("charpin_capture") or []))
        entries = (
            list(self.config.getoption("charpin_entries") or []),
            list(self.config.getoption("charpin_entries_skip") or []),
        )
        if not cover and not capture and not entries[0]:
            return
        if _early:
            tracer = _early.pop()
            tracer.current_test = lambda: self.current_test
            if not self.is_worker:
                for call in tracer.traced.calls:  # made while the conftests loaded
                    self._emit_call(call)
                tracer.on_call = self._emit_call
            self.tracer = tracer
            return
        self.tracer = Tracer(
            str(self.root),
            cover,
            capture,
            lambda: self.current_test,
            None if self.is_worker else self._emit_call,
            entries=entries,
        )
        self.tracer.start()

    def _emit_call(self, call: Captured) -> None:
        self._emit(
            {
                "kind": "call",
                "function": call.function,
                "test": call.test,
                "args": call.args,
                "entry": call.entry,
            }
        )

    def _finish_tracing(self) -> None:
        tracer = self.tracer
        if tracer is None:
            return
        tracer.stop()
        traced = tracer.traced
        record = {
            "kind": "coverage",
            "lines": {path: sorted(lines) for path, lines in sorted(traced.lines.items())},
            "dropped": traced.dropped,
            "unavailable": tracer.unavailable,
        }
        if self.is_worker:
            self.worker_out["coverage"] = record
            self.worker_out["calls"] = [
                {
                    "kind": "call",
                    "function": c.function,
                    "test": c.test,
                    "args": c.args,
                    "entry": c.entry,
                }
                for c in traced.calls
            ]
        else:
            self._emit(record)

    if NEW_STYLE:

        @pytest.hookimpl(wrapper=True, tryfirst=True)
        def pytest_runtest_protocol(
            self, item: pytest.Item, nextitem: pytest.Item | None
        ) -> Generator[None, Any, Any]:
            self.current_test = self._id(item.nodeid)
            try:
                return (yield)
            finally:
                self.current_test = ""

    else:  # pragma: no cover - exercised only with pluggy < 1.1

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_runtest_protocol(
            self, item: pytest.Item, nextitem: pytest.Item | None
        ) -> Generator[None, Any, None]:
            self.current_test = self._id(item.nodeid)
            yield
            self.current_test = ""
