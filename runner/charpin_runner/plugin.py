"""The probe: a pytest plugin that records what a run collected, selected and executed.

Runs on the box inside the project's own pytest (Python >= 3.9, pytest >= 7). Stdlib + pytest only.

Inert unless `--charpin-receipt PATH` (or `fd:N`, the pipe `charpin receipt` reads) is given (the
junitxml pattern): then a Probe object (inpytest/recorder.py) is registered and appends JSON
lines to the record (see charpin_runner.probe for the format). It applies the flake ledger
(`--charpin-ledger`) by deselecting frozen ids, never by skipping them. Under pytest-xdist only
the controller writes; workers send their collection data in `workeroutput`. The probe never
prints and never warns: the parent reads the record and tells the user. Outcomes are recorded
as pytest's own machinery (xfail handling included) made them: a report that another hook
relabels is recorded with its original outcome and noted as rewritten, and the ids pytest made
fail are sent as soon as they are known so the parent can check them against the reports.
This module holds the options and the module-level hooks; the probe's parts live in inpytest/.
PYTEST_DONT_REWRITE: there are no asserts here, and skipping the rewrite keeps start-up cheap.
"""

from __future__ import annotations

import traceback
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from charpin_runner.inpytest import channel, traced
from charpin_runner.inpytest.paths import _posix_rel
from charpin_runner.inpytest.recorder import Probe
from charpin_runner.inpytest.state import _ENCODE, COLLECT_ERROR_LINES, REPO_IN_IDS
from charpin_runner.inpytest.wrappers import NEW_STYLE

__all__ = ["REPO_IN_IDS", "Probe", "preload"]

_PROBE_KEY = pytest.StashKey[Probe]()


def preload() -> None:
    """Import now what the probe otherwise imports when it first needs it. charpin's boot
    (probehost.py) calls this before the checkout is on sys.path, so no module of the
    checkout can stand in for one the probe uses later."""
    import charpin_runner.errors
    import charpin_runner.ledger  # noqa: F401


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("charpin", "charpin probe (inert unless --charpin-receipt is given)")
    group.addoption(
        "--charpin-receipt",
        dest="charpin_receipt",
        metavar="PATH",
        default=None,
        help="write the charpin probe record (JSON lines) to PATH.",
    )
    group.addoption(
        "--charpin-ledger",
        dest="charpin_ledger",
        metavar="PATH",
        default=None,
        help="deselect the tests frozen in this flake ledger (exact node ids).",
    )
    group.addoption(
        "--charpin-frozen-only",
        dest="charpin_frozen_only",
        action="store_true",
        default=False,
        help="run only the tests the ledger freezes (charpin's side run, --include-frozen).",
    )
    group.addoption(
        "--charpin-today",
        dest="charpin_today",
        metavar="YYYY-MM-DD",
        default=None,
        help="date used for ledger expiry (default: today, UTC).",
    )
    group.addoption(
        "--charpin-cover",
        dest="charpin_cover",
        metavar="PATH",
        action="append",
        default=[],
        help="record which lines of this repository file run (repeatable; charpin verify).",
    )
    group.addoption(
        "--charpin-capture",
        dest="charpin_capture",
        metavar="PATH::QUALNAME",
        action="append",
        default=[],
        help="record the arguments of calls into this function (repeatable; charpin verify).",
    )
    group.addoption(
        "--charpin-entries",
        dest="charpin_entries",
        metavar="PATH",
        action="append",
        default=[],
        help="record the arguments of calls into the production code under this repository "
        "path made from outside it (repeatable; charpin verify).",
    )
    group.addoption(
        "--charpin-entries-skip",
        dest="charpin_entries_skip",
        metavar="PATH",
        action="append",
        default=[],
        help="a path under --charpin-entries that is not production code (repeatable).",
    )
    group.addoption(
        "--charpin-root",
        dest="charpin_root",
        metavar="DIR",
        default=None,
        help="repository root; recorded node ids are made relative to it.",
    )


if NEW_STYLE:

    @pytest.hookimpl(wrapper=True)
    def pytest_load_initial_conftests(
        early_config: pytest.Config, parser: pytest.Parser, args: list[str]
    ) -> Generator[None, None, None]:
        _trace_early(early_config)
        try:
            return (yield)
        except Exception as exc:
            _conftest_failed(early_config, exc)
            raise

else:  # pragma: no cover - exercised only with pluggy < 1.1

    @pytest.hookimpl(hookwrapper=True)
    def pytest_load_initial_conftests(
        early_config: pytest.Config, parser: pytest.Parser, args: list[str]
    ) -> Generator[None, Any, None]:
        _trace_early(early_config)
        outcome = yield
        if outcome.excinfo is not None:
            _conftest_failed(early_config, outcome.excinfo[1])


def _trace_early(early_config: pytest.Config) -> None:
    """verify's tracing starts before the initial conftests import the code under test."""
    namespace = early_config.known_args_namespace
    root = getattr(namespace, "charpin_root", None)
    if not getattr(namespace, "charpin_receipt", None) or not root:
        return
    cover = list(getattr(namespace, "charpin_cover", None) or [])
    capture = list(getattr(namespace, "charpin_capture", None) or [])
    entries = (
        list(getattr(namespace, "charpin_entries", None) or []),
        list(getattr(namespace, "charpin_entries_skip", None) or []),
    )
    where = str(Path(early_config.invocation_params.dir, root))
    traced.start_early(where, cover, capture, entries)


def _conftest_failed(early_config: pytest.Config, exc: BaseException) -> None:
    """A conftest that cannot be imported stops pytest before any session (exit 4): the probe
    never starts, so the error is written to its record here, as a collection error."""
    namespace = early_config.known_args_namespace
    path = getattr(namespace, "charpin_receipt", None)
    if not path:
        return
    cause = getattr(exc, "cause", None) or exc
    where = getattr(exc, "path", None)
    root = getattr(namespace, "charpin_root", None) or str(early_config.invocation_params.dir)
    nodeid = _posix_rel(str(where), Path(root)) if where is not None else ""
    text = "".join(traceback.format_exception_only(type(cause), cause)).strip()
    lines = text.splitlines()[-COLLECT_ERROR_LINES:]
    record = {"kind": "collect-error", "nodeid": nodeid, "text": "\n".join(lines)}
    try:
        channel.append_line(path, early_config.invocation_params.dir, _ENCODE(record))
    except OSError:
        pass  # the parent then reads pytest's usage error, as before


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("charpin_receipt")
    if not path:
        return
    probe = Probe(config, str(path))
    config.stash[_PROBE_KEY] = probe
    config.pluginmanager.register(probe, "charpin-probe")


def pytest_unconfigure(config: pytest.Config) -> None:
    probe = config.stash.get(_PROBE_KEY, None)
    if probe is not None:
        del config.stash[_PROBE_KEY]
        probe.close()
        config.pluginmanager.unregister(probe)
