"""The probe object charpin registers in the tests' pytest: its session hooks, and the check that
nothing changed it. Runs inside the tests' pytest; stdlib + pytest only."""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import pytest

from charpin_runner.inpytest import (
    boot,
    channel,
    collection,
    outcomes,
    paths,
    reports,
    state,
    traced,
    tracing,
)
from charpin_runner.inpytest.collection import CollectionHooks
from charpin_runner.inpytest.outcomes import _label
from charpin_runner.inpytest.paths import _conftests, _plugins
from charpin_runner.inpytest.reports import ReportHooks
from charpin_runner.inpytest.traced import TracingHooks


class Probe(CollectionHooks, ReportHooks, TracingHooks):
    """Per-run recorder, registered only when --charpin-receipt is given."""

    def __init__(self, config: pytest.Config, record: str) -> None:
        super().__init__(config, record)
        # The state objects the finish line reads, by identity (their contents are streamed).
        self._state = {name: getattr(self, name) for name in _GUARDED_STATE}

    # -- session ------------------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # Before collection imports the code under test: its module-level lines count too.
        self._start_tracing()
        if self.out is None:
            return  # an xdist worker
        start: dict[str, Any] = {
            "kind": "start",
            "pytest_version": pytest.__version__,
            "plugins": _plugins(self.config),
            "conftests": _conftests(self.config, self.root),
        }
        if self.notes:
            start["notes"] = self.notes
        self._emit(start)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self._check_watch()
        self._finish_tracing()
        tampered = self._tampered()
        if self.is_worker:
            self.worker_out["failing"] = sorted(self.failing)
            self.worker_out["unverified"] = sorted(self.unverified)
            self.worker_out["tampered"] = tampered
            return
        if tampered:
            self._emit({"kind": "tampered", "what": tampered})
        if self.record is None and (self.worker_data or self.node_ids):
            self._emit_collection(self._merge_workers())
        for nodeid in sorted(self.phases):
            self._finish_test(nodeid, self.phases.pop(nodeid))
        # In the side run, a leak is a test that ran although the ledger does not freeze it.
        leaked = sorted(
            self.executed - self.frozen if self.frozen_only else self.frozen & self.executed
        )
        self._emit(
            {
                "kind": "finish",
                "exitstatus": int(exitstatus),
                "leaked": leaked,
                "failing": sorted(self.failing),
                "unverified": sorted(self.unverified),
            }
        )

    def _check_watch(self) -> None:
        """Note every failing report that a hook relabelled after the probe recorded it."""
        for nodeid, when, shown, report in self.watch:
            now = _label(report)
            if now != shown:
                self._rewritten(nodeid, when, shown, now, after=True)
        self.watch = []

    def _tampered(self) -> list[str]:
        """Name what the code under test changed in the probe itself, by content (best effort:
        code that runs inside pytest can also change this check)."""
        found = channel.changed(PRISTINE, channel.fingerprints(guarded(self)))
        found += boot.shadowed()
        found += [
            f"Probe.{name} (replaced)"
            for name, value in self._state.items()
            if getattr(self, name, None) is not value
        ]
        if self.out is not self._file:
            found.append("Probe.out (the record's file handle)")
        elif self._file is not None and channel.identity(self._file) != self._channel:
            found.append("the record's file descriptor (it now points elsewhere)")
        return found

    # -- collection ---------------------------------------------------------------------------


# What the probe checks at the end for changes by the code under test (see Probe._tampered):
# every function and constant table the record depends on, and every method of the probe.
_MODULES = (outcomes, paths, state, collection, reports, channel, traced, tracing)
_GUARDED_STATE = ("seen", "failing", "unverified", "phases")


def guarded(probe: object) -> Iterator[tuple[str, Any]]:
    """(name, value) of everything the tamper check fingerprints: the modules' functions and
    constant tables, and every method of the probe (probe: the class or an instance)."""
    for module in _MODULES:
        for name, value in sorted(vars(module).items()):
            if isinstance(value, types.FunctionType) or (
                isinstance(value, _TABLES) and not name.startswith("__")
            ):
                yield f"{module.__name__}.{name}", value
    cls = probe if isinstance(probe, type) else type(probe)
    for klass in cls.__mro__:
        for name, value in sorted(vars(klass).items()):
            if isinstance(value, types.FunctionType):
                yield f"Probe.{name}", getattr(probe, name, None)


_TABLES = (dict, frozenset, tuple, str)


# Taken at import, before any conftest can run: the functions as these files define them.
PRISTINE = channel.fingerprints(guarded(Probe))
