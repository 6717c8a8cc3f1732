"""The probe's collection hooks: what pytest collected, what its options and the ledger took out,
and under xdist what the workers collected. Runs inside the tests' pytest; stdlib + pytest only."""

from __future__ import annotations

import hashlib
from collections.abc import Generator, Sequence
from typing import Any

import pytest

from charpin_runner.inpytest.paths import _LONG_ID, _conftests, _long_id_strategy
from charpin_runner.inpytest.state import REPO_IN_IDS, WORKER_KEY, ProbeState
from charpin_runner.inpytest.wrappers import NEW_STYLE


class CollectionHooks(ProbeState):
    """Collection, the ledger's deselection, and the xdist controller's view of its workers."""

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

    if NEW_STYLE:

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
        data = output.get(WORKER_KEY) if isinstance(output, dict) else None
        if not isinstance(data, dict):
            return
        gateway = str(node.gateway.id)
        for rewritten in data.get("rewritten", []):
            self._emit(rewritten)
        for nodeid in data.get("failing", []):
            if isinstance(nodeid, str):
                self._mark_failing(nodeid)
        for nodeid in data.get("unverified", []):
            if isinstance(nodeid, str):
                self._mark_unverified(nodeid)
        tampered = data.get("tampered")
        if tampered:
            self._emit({"kind": "tampered", "what": [f"{gateway}: {w}" for w in tampered]})
        for line in data.get("calls", []):
            if isinstance(line, dict):
                self._emit(line)
        if isinstance(data.get("coverage"), dict):
            self._emit(data["coverage"])
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
