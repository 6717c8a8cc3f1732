"""The probe's state through one run and the way it writes its record. Runs inside the tests'
pytest; stdlib + pytest only."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest

from charpin_runner.inpytest import channel
from charpin_runner.inpytest.paths import (
    _id_prefix,
    _posix_rel,
    _resolve_path,
    _root_spellings,
    _today,
)

if TYPE_CHECKING:
    from charpin_runner.ledger import Ledger

# charpin_runner.receipt.REPO_IN_IDS, spelled out (a test checks they agree): importing receipt
# builds 16 dataclasses, ~7 ms in every pytest run this plugin loads into (bench_probe.py).
REPO_IN_IDS = "{repo}"
WORKER_KEY = "charpin"
# How much of a collection error the receipt keeps: its end says what broke.
COLLECT_ERROR_LINES = 8
# A failing test's excerpt: its `E` lines (the assertion message) and the report's last line
# (where it failed), at most this many lines of at most EXCERPT_LINE characters.
EXCERPT_LINES = 12
EXCERPT_LINE = 300
# One encoder for the whole run: json.dumps(separators=...) builds a new one per call.
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


class ProbeState:
    """What the probe keeps through a run, and how it writes its record."""

    def __init__(self, config: pytest.Config, record: str) -> None:
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
        # Ids whose failure excerpt was written (the first failing phase's only).
        self.excerpted: set[str] = set()
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
            config.workeroutput[WORKER_KEY] = self.worker_out  # type: ignore[attr-defined]
        else:
            self.out = self._open(record, config.invocation_params.dir)
        # The hot path writes through self.out, everything else through this handle, which a
        # test that swaps self.out (to filter lines) does not reach.
        self._file = self.out
        self._channel = channel.identity(self._file)

    def _load_ledger(self, value: str | None) -> Ledger | None:
        if not value:
            return None
        # Imported here: once installed, the plugin loads into every pytest run, used or not
        # (charpin's own runs import it before the checkout is on sys.path: plugin.preload()).
        from charpin_runner.errors import ConfigError
        from charpin_runner.ledger import load_ledger

        try:
            return load_ledger(_resolve_path(self.config, value))
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from None

    @staticmethod
    def _open(record: str, base: Path) -> IO[str]:
        try:
            return channel.open_record(record, base)
        except OSError as exc:
            raise pytest.UsageError(
                f"cannot write the charpin probe record {record} ({exc.strerror or exc}); "
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

    def _mark_failing(self, nodeid: str) -> None:
        """An id whose report pytest made failing: sent at once, so that editing the probe's
        sets later cannot take it back."""
        if nodeid not in self.failing:
            self.failing.add(nodeid)
            if not self.is_worker:
                self._emit({"kind": "failing", "nodeid": nodeid})

    def _mark_unverified(self, nodeid: str) -> None:
        if nodeid not in self.unverified:
            self.unverified.add(nodeid)
            if not self.is_worker:
                self._emit({"kind": "unverified", "nodeid": nodeid})

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
