"""The probe: a pytest plugin that records what a run collected, selected and executed.

Runs on the box inside the project's own pytest (Python >= 3.9, pytest >= 7). Stdlib + pytest only.

Inert unless `--charpin-receipt PATH` is given (the junitxml pattern): then a Probe object is
registered and appends JSON lines to PATH (see charpin_runner.probe for the format). It applies the
flake ledger (`--charpin-ledger`) by deselecting frozen ids, never by skipping them. Under
pytest-xdist only the controller writes; workers send their collection data in `workeroutput`.
The probe never prints and never warns: the parent reads the record and tells the user.
PYTEST_DONT_REWRITE: there are no asserts here, and skipping the rewrite keeps start-up cheap.
"""

from __future__ import annotations

import datetime
import json
import os
import types
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest

from charpin_runner.errors import ConfigError

if TYPE_CHECKING:
    from charpin_runner.ledger import Ledger

_PROBE_KEY = pytest.StashKey["Probe"]()
_WORKER_KEY = "charpin"
_PHASES = ("setup", "call", "teardown")
# One encoder for the whole run: json.dumps(separators=...) builds a new one per call.
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode
_quote = json.encoder.encode_basestring_ascii


def _new_style_wrappers() -> bool:
    # pluggy < 1.1 (possible with pytest 7) only knows old-style `hookwrapper=True`.
    try:
        pytest.hookimpl(wrapper=True)
    except TypeError:
        return False
    return True


_NEW_STYLE = _new_style_wrappers()


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
        "--charpin-today",
        dest="charpin_today",
        metavar="YYYY-MM-DD",
        default=None,
        help="date used for ledger expiry (default: today, UTC).",
    )
    group.addoption(
        "--charpin-root",
        dest="charpin_root",
        metavar="DIR",
        default=None,
        help="repository root; recorded node ids are made relative to it.",
    )


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("charpin_receipt")
    if not path:
        return
    probe = Probe(config, Path(path))
    config.stash[_PROBE_KEY] = probe
    config.pluginmanager.register(probe, "charpin-probe")


def pytest_unconfigure(config: pytest.Config) -> None:
    probe = config.stash.get(_PROBE_KEY, None)
    if probe is not None:
        del config.stash[_PROBE_KEY]
        probe.close()
        config.pluginmanager.unregister(probe)


def _resolve_path(config: pytest.Config, value: str) -> Path:
    return Path(config.invocation_params.dir, value)


def _today(value: str | None) -> datetime.date:
    if value is None:
        return datetime.datetime.now(datetime.timezone.utc).date()
    try:
        return datetime.date.fromisoformat(value)
    except ValueError:
        raise pytest.UsageError(
            f"--charpin-today {value!r} is not a date; write it as YYYY-MM-DD"
        ) from None


def _id_prefix(config: pytest.Config, root: Path) -> tuple[str, list[str]]:
    # realpath on both sides: /tmp and /private/tmp (macOS) are one folder, not a sibling.
    rel = os.path.relpath(os.path.realpath(config.rootpath), os.path.realpath(root))
    if rel == ".":
        return "", []
    if rel == ".." or rel.startswith(".." + os.sep):
        note = f"pytest rootdir {config.rootpath} is outside --charpin-root {root}; ids not rebased"
        return "", [note]
    return rel.replace(os.sep, "/") + "/", []


def _posix_rel(path: str, root: Path) -> str:
    try:
        rel = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
        return rel.replace(os.sep, "/")
    except ValueError:
        return path


def _conftests(config: pytest.Config, root: Path) -> list[str]:
    found = set()
    for plugin in config.pluginmanager.get_plugins():
        file = getattr(plugin, "__file__", None)
        if isinstance(file, str) and os.path.basename(file) == "conftest.py":
            found.add(_posix_rel(file, root))
    return sorted(found)


def _plugins(config: pytest.Config) -> list[str]:
    pm = config.pluginmanager
    names = set()
    from_dists = set()
    for plugin, dist in pm.list_plugin_distinfo():
        from_dists.add(id(plugin))
        names.add(f"{dist.project_name}-{dist.version}")
    for _name, plugin in pm.list_name_plugin():
        if id(plugin) in from_dists or not isinstance(plugin, types.ModuleType):
            continue
        module = plugin.__name__
        file = getattr(plugin, "__file__", None) or ""
        if module.startswith("_pytest.") or os.path.basename(file) == "conftest.py":
            continue
        names.add(module)
    return sorted(names)


def _explained(seen: str, report: pytest.TestReport) -> bool:
    """Tell whether pytest's own xfail handling explains a change of outcome."""
    if hasattr(report, "wasxfail"):
        return (seen, report.outcome) in (("failed", "skipped"), ("passed", "passed"))
    strict_xpass = str(report.longrepr).startswith("[XPASS(strict)]")
    return seen == "passed" and report.outcome == "failed" and strict_xpass


def _outcome(phases: dict[str, pytest.TestReport]) -> str:
    setup = phases.get("setup")
    call = phases.get("call")
    teardown = phases.get("teardown")
    if setup is not None and setup.failed:
        return "error"
    for rep in (setup, call):
        if rep is not None and rep.skipped:
            return "xfailed" if hasattr(rep, "wasxfail") else "skipped"
    if call is not None and call.failed:
        return "failed"
    # xdist reports a crashed worker's test with when="???".
    if any(rep.failed for when, rep in phases.items() if when not in _PHASES):
        return "failed"
    if teardown is not None and teardown.failed:
        return "error"
    if call is not None and hasattr(call, "wasxfail"):
        return "xpassed"
    return "passed"


class Probe:
    """Per-run recorder, registered only when --charpin-receipt is given."""

    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config = config
        self.is_worker = hasattr(config, "workerinput")
        root_opt = config.getoption("charpin_root")
        self.root = _resolve_path(config, root_opt) if root_opt else config.rootpath
        self.prefix, self.notes = _id_prefix(config, self.root)
        self.today = _today(config.getoption("charpin_today"))
        self.ledger = self._load_ledger(config.getoption("charpin_ledger"))
        self.collecting = False
        self.collected: list[str] = []
        self.order: list[str] = []
        self.filtered_seen: set[str] = set()
        self.record: dict[str, Any] | None = None
        self.frozen: set[str] = set()
        self.seen: dict[tuple[str, str], str] = {}
        self.phases: dict[str, dict[str, pytest.TestReport]] = {}
        self.executed: set[str] = set()
        self.node_ids: dict[str, list[str]] = {}
        self.worker_data: dict[str, dict[str, Any]] = {}
        self.out: IO[str] | None = None
        if self.is_worker:
            self.worker_out: dict[str, Any] = {"rewritten": []}
            config.workeroutput[_WORKER_KEY] = self.worker_out  # type: ignore[attr-defined]
        else:
            self.out = self._open(_resolve_path(config, str(path)))

    def _load_ledger(self, value: str | None) -> Ledger | None:
        if not value:
            return None
        # Imported here: once installed, this module loads into every pytest run, used or not.
        from charpin_runner.ledger import load_ledger

        try:
            return load_ledger(_resolve_path(self.config, value))
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from None

    @staticmethod
    def _open(path: Path) -> IO[str]:
        try:
            # Line buffered: a run cut short by os._exit() keeps every line written so far.
            return open(path, "w", buffering=1, encoding="utf-8", newline="\n")
        except OSError as exc:
            raise pytest.UsageError(
                f"cannot write the charpin probe record {path} ({exc.strerror}); "
                "create its folder or pass another --charpin-receipt"
            ) from None

    def close(self) -> None:
        if self.out is not None:
            self.out.close()
            self.out = None

    def _emit(self, record: dict[str, Any]) -> None:
        if self.out is not None:
            self.out.write(_ENCODE(record) + "\n")

    def _id(self, nodeid: str) -> str:
        return self.prefix + nodeid

    # -- session ------------------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
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
        if self.is_worker:
            return
        if self.record is None and (self.worker_data or self.node_ids):
            self._emit_collection(self._merge_workers())
        for nodeid in sorted(self.phases):
            self._finish_test(nodeid, self.phases.pop(nodeid))
        leaked = sorted(self.frozen & self.executed)
        self._emit({"kind": "finish", "exitstatus": int(exitstatus), "leaked": leaked})

    # -- collection ---------------------------------------------------------------------------

    if _NEW_STYLE:

        @pytest.hookimpl(wrapper=True, tryfirst=True)
        def pytest_collection_modifyitems(
            self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
        ) -> Generator[None, None, None]:
            self._before_others(items)
            yield
            self._after_others(items)

    else:  # pragma: no cover - exercised only with pluggy < 1.1

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_collection_modifyitems(
            self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
        ) -> Generator[None, Any, None]:
            self._before_others(items)
            outcome = yield
            if outcome.excinfo is None:
                self._after_others(items)

    def pytest_deselected(self, items: Sequence[pytest.Item]) -> None:
        if self.collecting:
            self.filtered_seen.update(self._id(item.nodeid) for item in items)

    def _before_others(self, items: list[pytest.Item]) -> None:
        self.order = [self._id(item.nodeid) for item in items]
        self.collected = sorted(set(self.order))
        self.collecting = True

    def _after_others(self, items: list[pytest.Item]) -> None:
        self.collecting = False
        present = {self._id(item.nodeid) for item in items}
        gone = set(self.collected) - present
        filtered = sorted(gone & self.filtered_seen)
        dropped = sorted(gone - self.filtered_seen)
        notes = list(self.notes)
        added = sorted(present - set(self.collected))
        if added:
            shown = ", ".join(added[:5]) + (" ..." if len(added) > 5 else "")
            notes.append(f"{len(added)} ids were added during collection: {shown}")
        ledger = self._apply_ledger(items)
        self.record = {
            "collected": self.collected,
            "order": self.order,
            "filtered": filtered,
            "dropped": dropped,
            "selected": sorted(self._id(item.nodeid) for item in items),
            "ledger": ledger,
            "notes": notes,
        }

    def _ledger_header(self) -> dict[str, Any]:
        ledger = self.ledger
        return {
            "path": None if ledger is None else _posix_rel(ledger.path, self.root),
            "sha256": None if ledger is None else ledger.sha256,
            "entries": 0 if ledger is None else len(ledger.entries),
            "deselected": [],
            "frozen": [],
            "stale": [],
            "widening": [],
            "expired": [],
        }

    def _apply_ledger(self, items: list[pytest.Item]) -> dict[str, Any]:
        report = self._ledger_header()
        if self.ledger is None:
            return report
        from charpin_runner.ledger import resolve

        res = resolve(self.ledger, self.collected, self.today)
        self.frozen = set(res.frozen)
        keep: list[pytest.Item] = []
        removed: list[pytest.Item] = []
        for item in items:
            (removed if self._id(item.nodeid) in self.frozen else keep).append(item)
        if removed:
            items[:] = keep
            # Deselect, never skip: the frozen test leaves the run the way `--deselect` does.
            self.config.hook.pytest_deselected(items=removed)
        taken = {self._id(item.nodeid) for item in removed}
        report.update(
            deselected=[
                {"nodeid": d.nodeid, "entry": d.entry} for d in res.deselected if d.nodeid in taken
            ],
            frozen=res.frozen,
            stale=res.stale,
            widening=[{"entry": w.entry, "matches": w.matches} for w in res.widening],
            expired=res.expired,
        )
        return report

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        final = [self._id(item.nodeid) for item in session.items]
        if self.record is None:
            # Some hook raised inside collection_modifyitems: keep what pytest ended up with.
            self.collected = sorted(set(final))
            self.record = {
                "collected": self.collected,
                "order": final,
                "filtered": [],
                "dropped": [],
                "selected": sorted(set(final)),
                "ledger": self._apply_ledger([]),
                "notes": [*self.notes, "collection_modifyitems did not complete"],
            }
        self.record["late_dropped"] = sorted(set(self.record["selected"]) - set(final))
        self.record["conftests"] = _conftests(self.config, self.root)
        if self.is_worker:
            self.worker_out.update(self.record)
        else:
            self._emit_collection(self.record)

    def _emit_collection(self, record: dict[str, Any]) -> None:
        line = {"kind": "collection"}
        line.update(record)
        self._emit(line)

    # -- xdist controller ---------------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        self.node_ids[str(node.gateway.id)] = [self._id(nodeid) for nodeid in ids]

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        output = getattr(node, "workeroutput", None)
        data = output.get(_WORKER_KEY) if isinstance(output, dict) else None
        if isinstance(data, dict) and "selected" in data:
            self.worker_data[str(node.gateway.id)] = data

    def _merge_workers(self) -> dict[str, Any]:
        notes: list[str] = []
        if not self.worker_data:
            # Workers died before reporting: only the ids they announced are known.
            gateway = sorted(self.node_ids)[0]
            ids = self.node_ids[gateway]
            notes.append("no collection data came back from the xdist workers")
            record: dict[str, Any] = {
                "collected": [],
                "order": [],
                "selected": sorted(set(ids)),
                "late_dropped": [],
                "ledger": self._ledger_header(),
            }
        else:
            gateway = sorted(self.worker_data)[0]
            record = dict(self.worker_data[gateway])
        for other in sorted(self.worker_data):
            theirs = self.worker_data[other]
            for key in ("collected", "selected"):
                if theirs.get(key) != record.get(key):
                    notes.append(f"xdist workers {gateway} and {other} differ in {key} ids")
        record.pop("rewritten", None)
        for other in sorted(self.worker_data):
            for rewritten in self.worker_data[other].get("rewritten", []):
                self._emit(rewritten)
        announced = self.node_ids.get(gateway)
        if announced is not None:
            late = set(record["selected"]) - set(announced)
            record["late_dropped"] = sorted(late | set(record.get("late_dropped", [])))
        self.frozen = set(record["ledger"].get("frozen", []))
        record["notes"] = list(record.get("notes", [])) + notes
        record["workers"] = sorted(set(self.worker_data) | set(self.node_ids))
        return record

    # -- test reports -------------------------------------------------------------------------

    if _NEW_STYLE:

        @pytest.hookimpl(wrapper=True, trylast=True)
        def pytest_runtest_makereport(
            self, item: pytest.Item, call: pytest.CallInfo[None]
        ) -> Generator[None, Any, Any]:
            # Innermost wrapper: see the outcome before any other wrapper can change it.
            report = yield
            self.seen[(report.nodeid, report.when)] = report.outcome
            return report

    else:  # pragma: no cover - exercised only with pluggy < 1.1

        @pytest.hookimpl(hookwrapper=True, trylast=True)
        def pytest_runtest_makereport(
            self, item: pytest.Item, call: pytest.CallInfo[None]
        ) -> Generator[None, Any, Any]:
            outcome = yield
            if outcome.excinfo is None:
                report = outcome.get_result()
                self.seen[(report.nodeid, report.when)] = report.outcome

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Hot path: runs three times per test, so it formats its lines by hand (benchmark).
        nodeid = report.nodeid
        when = report.when
        seen = self.seen.pop((nodeid, when), None)
        if seen is not None and seen != report.outcome and not _explained(seen, report):
            self._rewritten(report, seen)
        if self.out is None:
            return  # an xdist worker: the controller records the report xdist relays
        nodeid = self.prefix + nodeid
        if when == "setup":
            # Written now, not at teardown, so a test that kills the process still shows up.
            self.executed.add(nodeid)
            self.out.write(f'{{"kind":"setup","nodeid":{_quote(nodeid)}}}\n')
            self.phases[nodeid] = {"setup": report}
        elif when == "teardown":
            phases = self.phases.pop(nodeid, {})
            phases["teardown"] = report
            self._finish_test(nodeid, phases)
        else:
            self.phases.setdefault(nodeid, {})[str(when)] = report

    def _rewritten(self, report: pytest.TestReport, seen: str) -> None:
        line = {
            "kind": "rewritten",
            "nodeid": self._id(report.nodeid),
            "when": report.when,
            "seen": seen,
            "reported": report.outcome,
        }
        if self.is_worker:
            self.worker_out["rewritten"].append(line)
        else:
            self._emit(line)

    def _finish_test(self, nodeid: str, phases: dict[str, pytest.TestReport]) -> None:
        duration = round(sum([rep.duration for rep in phases.values()]), 6)
        outcome = _outcome(phases)
        if "teardown" in phases and self.out is not None:
            self.out.write(
                f'{{"kind":"report","nodeid":{_quote(nodeid)},"outcome":"{outcome}",'
                f'"duration":{duration!r}}}\n'
            )
            return
        line = {"kind": "report", "nodeid": nodeid, "outcome": outcome, "duration": duration}
        self._emit(dict(line, incomplete=True))
