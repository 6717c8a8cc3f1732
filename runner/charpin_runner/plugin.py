"""The probe: a pytest plugin that records what a run collected, selected and executed.

Runs on the box inside the project's own pytest (Python >= 3.9, pytest >= 7). Stdlib + pytest only.

Inert unless `--charpin-receipt PATH` is given (the junitxml pattern): then a Probe object is
registered and appends JSON lines to PATH (see charpin_runner.probe for the format). It applies the
flake ledger (`--charpin-ledger`) by deselecting frozen ids, never by skipping them. Under
pytest-xdist only the controller writes; workers send their collection data in `workeroutput`.
The probe never prints and never warns: the parent reads the record and tells the user.
Outcomes are recorded as pytest's own machinery (xfail handling included) made them: a report
that another hook relabels is recorded with its original outcome and noted as rewritten, and the
ids pytest made fail go to the finish line so the parent can check them against the reports.
PYTEST_DONT_REWRITE: there are no asserts here, and skipping the rewrite keeps start-up cheap.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import traceback
import types
from collections.abc import Generator, Iterable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from charpin_runner.ledger import Ledger

# charpin_runner.receipt.REPO_IN_IDS, spelled out (a test checks they agree): importing receipt
# builds 16 dataclasses, ~7 ms in every pytest run this plugin loads into (bench_probe.py).
REPO_IN_IDS = "{repo}"

# How much of a collection error the receipt keeps: its end says what broke.
_COLLECT_ERROR_LINES = 8
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
        "--charpin-root",
        dest="charpin_root",
        metavar="DIR",
        default=None,
        help="repository root; recorded node ids are made relative to it.",
    )


if _NEW_STYLE:

    @pytest.hookimpl(wrapper=True)
    def pytest_load_initial_conftests(
        early_config: pytest.Config, parser: pytest.Parser, args: list[str]
    ) -> Generator[None, None, None]:
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
        outcome = yield
        if outcome.excinfo is not None:
            _conftest_failed(early_config, outcome.excinfo[1])


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
    lines = text.splitlines()[-_COLLECT_ERROR_LINES:]
    record = {"kind": "collect-error", "nodeid": nodeid, "text": "\n".join(lines)}
    try:
        with open(_resolve_path(early_config, path), "a", encoding="utf-8") as handle:
            handle.write(_ENCODE(record) + "\n")
    except OSError:
        pass  # the parent then reads pytest's usage error, as before


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


# pytest's limit for a string parameter used whole as its id (`parametrize_long_str_id_strategy`).
_LONG_ID = 100


def _long_id_strategy(config: pytest.Config) -> str:
    try:
        return str(config.getini("parametrize_long_str_id_strategy"))
    except ValueError:  # pytest < 9: no such setting, long strings are used whole
        return "legacy"


def _root_spellings(root: Path) -> tuple[str, ...]:
    """The repository's path as it may appear in ids: as given and resolved, longest first."""
    found = {str(root), os.path.realpath(root)}
    return tuple(sorted((r for r in found if len(r) > 1), key=len, reverse=True))


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
        # dist.project_name and dist.version each parse the METADATA file again.
        meta = dist.metadata
        names.add(f"{meta['name']}-{meta['version']}")
    for _name, plugin in pm.list_name_plugin():
        if id(plugin) in from_dists or not isinstance(plugin, types.ModuleType):
            continue
        module = plugin.__name__
        file = getattr(plugin, "__file__", None) or ""
        if module.startswith("_pytest.") or os.path.basename(file) == "conftest.py":
            continue
        names.add(module)
    return sorted(names)


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


class Probe:
    """Per-run recorder, registered only when --charpin-receipt is given."""

    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config = config
        self.is_worker = hasattr(config, "workerinput")
        root_opt = config.getoption("charpin_root")
        self.root = _resolve_path(config, root_opt) if root_opt else config.rootpath
        self.prefix, self.notes = _id_prefix(config, self.root)
        # The repository's absolute path inside a node id (tests parametrized over files) is
        # written as REPO_IN_IDS, so the same test has the same id in every checkout.
        self.roots = _root_spellings(self.root)
        # Only a whole path: /work/app must not turn /work/app2 into {repo}2.
        self.root_pattern = re.compile(
            "|".join(re.escape(root) for root in self.roots) + r"(?![\w.-])"
        )
        self.today = _today(config.getoption("charpin_today"))
        self.ledger = self._load_ledger(config.getoption("charpin_ledger"))
        # The side run of --include-frozen: the ledger's frozen ids are the only ones kept.
        self.frozen_only = bool(config.getoption("charpin_frozen_only"))
        self.collecting = False
        self.collected: list[str] = []
        self.order: list[str] = []
        self.filtered_seen: set[str] = set()
        self.record: dict[str, Any] | None = None
        self.frozen: set[str] = set()
        # Per (nodeid, phase): the label pytest's own handling gives the report, as predicted
        # by the innermost makereport wrapper; logreport compares what arrives against it.
        self.seen: dict[tuple[str, str], str] = {}
        self.phases: dict[str, dict[str, tuple[str, float]]] = {}
        # Ids whose report pytest made failing (xfail aside), whatever later hooks turn it into;
        # the finish line carries them so the parent can check every one against its report.
        self.failing: set[str] = set()
        # Ids reported xfailed whose xfail the probe could not check (see _xfail_applies).
        self.unverified: set[str] = set()
        # Reports of failing phases with the label they showed the probe, kept to see whether a
        # later hook relabels them.
        self.watch: list[tuple[str, str, str, pytest.TestReport]] = []
        self.executed: set[str] = set()
        # Subtest reports per test id (controller only): counts, and the first failing ones.
        self.subtests: dict[str, dict[str, int]] = {}
        self.subtest_failing: dict[str, list[str]] = {}
        self.node_ids: dict[str, list[str]] = {}
        self.worker_data: dict[str, dict[str, Any]] = {}
        self.out: IO[str] | None = None
        if self.is_worker:
            self.worker_out: dict[str, Any] = {
                "rewritten": [],
                "failing": [],
                "unverified": [],
                "tampered": [],
            }
            config.workeroutput[_WORKER_KEY] = self.worker_out  # type: ignore[attr-defined]
        else:
            self.out = self._open(_resolve_path(config, str(path)))
        # The hot path writes through self.out, everything else through this handle, which a
        # test that swaps self.out (to filter lines) does not reach. Best effort, as is _intact.
        self._file = self.out
        self._intact = dict(_PRISTINE)
        self._intact.update((f"Probe.{name}", getattr(self, name)) for name in _GUARDED_STATE)

    def _load_ledger(self, value: str | None) -> Ledger | None:
        if not value:
            return None
        # Imported here: once installed, this module loads into every pytest run, used or not.
        from charpin_runner.errors import ConfigError
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
        # Only the handle the probe opened: a swapped-in self.out is the test's own object.
        if self._file is not None:
            try:
                self._file.close()
            except (OSError, ValueError):
                pass  # already closed by the code under test: the missing lines show it
        self.out = self._file = None

    def _emit(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            try:
                self._file.write(_ENCODE(record) + "\n")
            except (OSError, ValueError):
                pass  # closed under us by the code under test: the missing lines show it

    def _id(self, nodeid: str) -> str:
        nodeid = self.prefix + nodeid
        if any(root in nodeid for root in self.roots):
            nodeid = self.root_pattern.sub(REPO_IN_IDS, nodeid)
        return nodeid

    def _ids(self, items: Iterable[pytest.Item]) -> list[str]:
        """_id of every item's node id, for the collection hooks that see the whole suite."""
        ids = [self.prefix + item.nodeid for item in items]
        # One search through all the ids, not one per id (bench_probe.py). A root found there
        # sends every id through the pattern, which leaves an id without the root as it is.
        joined = "\n".join(ids)
        if any(root in joined for root in self.roots):
            ids = [self.root_pattern.sub(REPO_IN_IDS, nodeid) for nodeid in ids]
        return ids

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
        self._check_watch()
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
        """Name what the code under test replaced in the probe itself (best effort)."""
        now = _integrity(self)
        found = [name for name, value in self._intact.items() if now.get(name) is not value]
        if self.out is not self._file:
            found.append("Probe.out (the record's file handle)")
        return found

    # -- collection ---------------------------------------------------------------------------

    def pytest_make_parametrize_id(
        self, config: pytest.Config, val: object, argname: str
    ) -> str | None:
        """Decide a path parameter's id by the path as `{repo}`-relative, not by its length here.

        pytest >= 9 gives a string parameter over 100 characters the id `argname0` instead of
        the string: a golden file's path would then be its id in a short checkout and `path0` in
        a long one. Only strings holding the repository's path are touched; a conftest's own
        hook runs first and wins.
        """
        if not isinstance(val, str) or not any(root in val for root in self.roots):
            return None
        shown = self.root_pattern.sub(REPO_IN_IDS, val)
        if len(shown) > _LONG_ID:
            if _long_id_strategy(config) == "sha256":
                return hashlib.sha256(shown.encode("utf-8")).hexdigest()
            return None  # pytest's own rule, as it would apply in any checkout
        if not (val.isascii() and val.isprintable()):
            return None  # pytest escapes it; the escaped root is not ours to rewrite
        return val

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
            self.filtered_seen.update(self._ids(items))

    def _before_others(self, items: list[pytest.Item]) -> None:
        self.order = self._ids(items)
        self.collected = sorted(set(self.order))
        self.collecting = True

    def _after_others(self, items: list[pytest.Item]) -> None:
        self.collecting = False
        ids = self._ids(items)
        present = set(ids)
        collected = set(self.collected)
        gone = collected - present
        filtered = sorted(gone & self.filtered_seen)
        dropped = sorted(gone - self.filtered_seen)
        notes = list(self.notes)
        added = sorted(present - collected)
        if added:
            shown = ", ".join(added[:5]) + (" ..." if len(added) > 5 else "")
            notes.append(f"{len(added)} ids were added during collection: {shown}")
        ledger = self._apply_ledger(items, ids)
        self.record = {
            "collected": self.collected,
            "order": self.order,
            "filtered": filtered,
            "dropped": dropped,
            "selected": sorted(ids),
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

    def _apply_ledger(self, items: list[pytest.Item], ids: list[str]) -> dict[str, Any]:
        """Deselect what the ledger says from items; ids are their ids, kept in step."""
        report = self._ledger_header()
        if self.ledger is None:
            return report
        from charpin_runner.ledger import resolve

        res = resolve(self.ledger, self.collected, self.today)
        self.frozen = set(res.frozen)
        keep: list[pytest.Item] = []
        kept: list[str] = []
        removed: list[pytest.Item] = []
        taken: set[str] = set()
        for item, nodeid in zip(items, ids):
            if (nodeid in self.frozen) != self.frozen_only:
                removed.append(item)
                taken.add(nodeid)
            else:
                keep.append(item)
                kept.append(nodeid)
        if removed:
            items[:] = keep
            ids[:] = kept
            # Deselect, never skip: the frozen test leaves the run the way `--deselect` does.
            self.config.hook.pytest_deselected(items=removed)
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
        final = self._ids(session.items)
        if self.record is None:
            # Some hook raised inside collection_modifyitems: keep what pytest ended up with.
            self.collected = sorted(set(final))
            self.record = {
                "collected": self.collected,
                "order": final,
                "filtered": [],
                "dropped": [],
                "selected": sorted(set(final)),
                "ledger": self._apply_ledger([], []),
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
        if not isinstance(data, dict):
            return
        gateway = str(node.gateway.id)
        for rewritten in data.get("rewritten", []):
            self._emit(rewritten)
        for key, ids in (("failing", self.failing), ("unverified", self.unverified)):
            ids.update(n for n in data.get(key, []) if isinstance(n, str))
        tampered = data.get("tampered")
        if tampered:
            self._emit({"kind": "tampered", "what": [f"{gateway}: {w}" for w in tampered]})
        if "selected" in data:
            self.worker_data[gateway] = data

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
        for key in ("rewritten", "failing", "unverified", "tampered"):
            record.pop(key, None)
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
                self.failing.add(self._id(report.nodeid))
        self.seen[(report.nodeid, report.when)] = outcome

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A file or module that failed to collect: its id and the end of its error, so the
        receipt can say what broke collection (pytest then exits 2, "interrupted")."""
        if not report.failed or self.out is None:
            return
        lines = str(report.longrepr).strip().splitlines()
        text = "\n".join(lines[-_COLLECT_ERROR_LINES:])
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
                self.failing.add(nodeid)
                return label
            if label == "xfailed":
                self.unverified.add(nodeid)
                return label
            expected = "failed"
        elif _accepted(expected, label):
            return label
        self._rewritten(nodeid, when, expected, label)
        # Record what pytest made of the test, not what the other hook turned it into.
        return expected

    def _rewritten(
        self, nodeid: str, when: str, seen: str, reported: str, after: bool = False
    ) -> None:
        line: dict[str, Any] = {
            "kind": "rewritten",
            "nodeid": nodeid,
            "when": when,
            "seen": seen,
            "reported": reported,
        }
        if after:
            line["after"] = True
        if self.is_worker:
            self.worker_out["rewritten"].append(line)
        else:
            self._emit(line)

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


# What the probe checks at the end for replacement by the code under test (see Probe._tampered).
_GUARDED = ("_label", "_accepted", "_xfail_applies", "_outcome", "_quote")
_GUARDED_ATTRS = (
    "_saw",
    "_compare",
    "_finish_test",
    "_rewritten",
    "_emit",
    "_check_watch",
    "_subtest",
)
_GUARDED_STATE = ("seen", "failing", "unverified", "phases")


def _integrity(probe: object) -> dict[str, object]:
    module = globals()
    found: dict[str, object] = {f"{__name__}.{name}": module.get(name) for name in _GUARDED}
    for name in _GUARDED_ATTRS:
        method = getattr(probe, name, None)
        found[f"Probe.{name}"] = getattr(method, "__func__", method)
    for name in _GUARDED_STATE:
        found[f"Probe.{name}"] = getattr(probe, name, None)
    return found


# Taken at import, before any conftest can run: the functions as this file defines them.
_PRISTINE = _integrity(Probe)
