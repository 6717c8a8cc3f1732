"""The probe record: what the pytest plugin saw, as JSON lines. Runs on boxes; stdlib only.

The plugin (plugin.py) writes one JSON object per line to --charpin-receipt (the parent's pipe,
or a path); the parent (`charpin receipt`) reads it with read_record() and folds it into the
receipt.
Lines are written as the run goes (line buffered), so a run killed by os._exit() still leaves its
collection and the tests it started behind, while the missing "finish" line tells the parent the
session never ended. Line kinds, in the order they usually appear:

* start       pytest_version, plugins, conftests (those loaded before collection)
* collection  collected, order, filtered, dropped, selected, late_dropped, ledger, conftests, notes
* setup       nodeid: the test's setup phase was reported (so it counts as executed)
* report      nodeid, outcome, duration: one per test, after its teardown; subtests (passed,
              failed, skipped, failing) when the test ran subtests
* rewritten   nodeid, when, seen, reported, after (optional): another hook changed an outcome
              after pytest made it; `seen` is what pytest's own handling made of it, and `after`
              says the change came after the probe had recorded the report
* tampered    what: parts of the probe itself that the code under test replaced
* failing     nodeid: pytest made this test's report failing (xfail aside), sent at once; it
              must be reported failed or error, or a hook hid the failure
* unverified  nodeid: reported xfailed although the probe could not read pytest's xfail state
* finish      exitstatus, leaked, failing and unverified (all of them once more)

The record usually arrives through a pipe the parent drains while the run goes (recordpipe.py):
what was sent cannot be taken back, so a line after `finish` is tampering, and a second report
of a failed test cannot turn it green.

Under pytest-xdist the collection line comes after the reports (workers send it at the end).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from charpin_runner.receipt import OUTCOMES, Deselected, Subtests, Widening

# Notes name at most this many ids, so one odd run cannot produce a megabyte of notes.
_NOTE_IDS = 5
_FAILING = ("failed", "error")


@dataclass
class LedgerReport:
    """How the flake ledger applied, as the probe resolved it against the collected ids."""

    path: Optional[str] = None
    sha256: Optional[str] = None
    entries: int = 0
    deselected: list[Deselected] = field(default_factory=list)
    frozen: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    widening: list[Widening] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    leaked: list[str] = field(default_factory=list)


@dataclass
class ProbeData:
    """Everything read back from one probe file; empty lists when a line never arrived."""

    started: bool = False
    collection_done: bool = False
    session_finished: bool = False
    pytest_status: Optional[int] = None
    collected: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)
    filtered: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    selected: list[str] = field(default_factory=list)
    executed: list[str] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)
    ledger: LedgerReport = field(default_factory=LedgerReport)
    plugins: list[str] = field(default_factory=list)
    pytest_version: Optional[str] = None
    conftests: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Added by the probe work: ids whose outcome another hook rewrote (see the notes for how),
    # and selected ids that a collection hook running after the ledger removed.
    rewritten: list[str] = field(default_factory=list)
    late_dropped: list[str] = field(default_factory=list)
    # Ids the probe saw fail as pytest made their report (finish line), and what the code under
    # test replaced in the probe itself.
    failing: list[str] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)
    tampered: list[str] = field(default_factory=list)
    # The outcome ("failed" or "error", by phase) of each failure a rewritten line reports.
    hidden: dict[str, str] = field(default_factory=dict)
    # Files or modules pytest could not collect (an ImportError in a conftest, a missing
    # generated file): (node id, the first lines of the error).
    collect_errors: list[tuple[str, str]] = field(default_factory=list)
    # Per test id that ran subtests: their counts and the first failing ones.
    subtests: dict[str, Subtests] = field(default_factory=dict)
    # verify: the calls captured into the changed functions, and what ran of the changed files.
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # function, test, args
    lines: dict[str, list[int]] = field(default_factory=dict)
    not_kept: dict[str, dict[str, int]] = field(default_factory=dict)
    untraced: str = ""


def read_probe(path: Path) -> ProbeData:
    """Read a probe file; a missing or truncated file yields what could be read (never raises)."""
    data = ProbeData()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        reason = "was never written" if isinstance(exc, FileNotFoundError) else "cannot be read"
        data.notes.append(f"probe record {path.name} {reason}: the plugin did not start")
        return data
    return read_record(raw)


def read_record(raw: bytes, data: Optional[ProbeData] = None) -> ProbeData:
    """Read a probe record's bytes (from the parent's pipe, or a file); never raises.

    A record is read as the parent received it: a line can be added to it but never taken
    back, so every line that contradicts an earlier one is evidence, not an update. Lines that
    arrive after the session's finish line can only come from code running after pytest was
    done (an atexit hook): they are reported as tampering and ignored."""
    data = ProbeData() if data is None else data
    lines = raw.decode("utf-8", errors="replace").split("\n")
    late = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if data.session_finished:
            late += 1
            continue
        _read_line(data, line, number, last=number == len(lines))
    if late:
        what = f"{late} line{'' if late == 1 else 's'} written to its record after the session finished"
        data.tampered.append(what)
        data.notes.append(f"the test run tampered with the charpin probe: {what}")
    data.executed = sorted(set(data.executed))
    _explain(data)
    return data


def _read_line(data: ProbeData, line: str, number: int, last: bool) -> None:
    try:
        record = json.loads(line)
    except ValueError:
        # Every line ends in a newline when written whole; a last line without one was cut off.
        what = "truncated last line ignored" if last else f"line {number} is not JSON; ignored"
        data.notes.append(what)
        return
    kind = record.get("kind") if isinstance(record, dict) else None
    handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
    if handler is None:
        data.notes.append(f"line {number} has no known kind; ignored")
        return
    try:
        handler(data, record)
    except (TypeError, ValueError, KeyError):
        data.notes.append(f"line {number} ({kind}) is malformed; ignored")


def _strs(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError("expected a list of strings")
    return list(value)


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _read_start(data: ProbeData, record: dict[str, Any]) -> None:
    version = record.get("pytest_version")
    plugins = _strs(record.get("plugins", []))
    conftests = _strs(record.get("conftests", []))
    notes = _strs(record.get("notes", []))
    data.pytest_version = None if version is None else _str(version)
    data.started = True
    data.plugins = plugins
    data.conftests = sorted(set(data.conftests) | set(conftests))
    data.notes.extend(notes)


def _read_ledger(value: Any) -> LedgerReport:
    if not isinstance(value, dict):
        raise TypeError("ledger must be an object")
    path, sha256, entries = value.get("path"), value.get("sha256"), value.get("entries", 0)
    if not isinstance(entries, int) or isinstance(entries, bool):
        raise TypeError("entries must be an int")
    return LedgerReport(
        path=None if path is None else _str(path),
        sha256=None if sha256 is None else _str(sha256),
        entries=entries,
        deselected=[
            Deselected(_str(d["nodeid"]), _str(d["entry"])) for d in value.get("deselected", [])
        ],
        frozen=_strs(value.get("frozen", [])),
        stale=_strs(value.get("stale", [])),
        widening=[
            Widening(_str(w["entry"]), _strs(w["matches"])) for w in value.get("widening", [])
        ],
        expired=_strs(value.get("expired", [])),
    )


def _read_collection(data: ProbeData, record: dict[str, Any]) -> None:
    lists = {
        key: _strs(record.get(key, []))
        for key in ("collected", "order", "filtered", "dropped", "selected", "late_dropped")
    }
    ledger = _read_ledger(record.get("ledger", {}))
    conftests = _strs(record.get("conftests", []))
    notes = _strs(record.get("notes", []))
    data.collection_done = True
    data.collected = sorted(set(lists["collected"]))
    data.order = lists["order"]
    data.filtered = sorted(set(lists["filtered"]))
    data.dropped = sorted(set(lists["dropped"]))
    data.selected = sorted(set(lists["selected"]))
    data.late_dropped = sorted(set(lists["late_dropped"]))
    ledger.leaked = data.ledger.leaked
    data.ledger = ledger
    data.conftests = sorted(set(data.conftests) | set(conftests))
    data.notes.extend(notes)


def _read_report(data: ProbeData, record: dict[str, Any]) -> None:
    nodeid = _str(record["nodeid"])
    outcome = _str(record["outcome"])
    duration = record.get("duration", 0.0)
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}")
    if not isinstance(duration, (int, float)) or isinstance(duration, bool):
        raise TypeError("duration must be a number")
    subtests = _read_subtests(record["subtests"]) if "subtests" in record else None
    before = data.outcomes.get(nodeid)
    if before is not None:
        if before in _FAILING and outcome not in _FAILING:
            # A line appended by the code under test must not turn a failure green.
            data.notes.append(f"{nodeid} was reported twice; the failure ({before}) is kept")
            return
        data.notes.append(f"{nodeid} was reported twice; the last report is kept")
    data.outcomes[nodeid] = outcome
    data.durations[nodeid] = float(duration)
    if subtests is not None:
        data.subtests[nodeid] = subtests
    if record.get("incomplete") is True:
        data.notes.append(f"{nodeid} never reported its teardown (interrupted or crashed)")


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError("expected a count")
    return value


def _read_subtests(value: Any) -> Subtests:
    if not isinstance(value, dict):
        raise TypeError("subtests must be an object")
    return Subtests(
        passed=_count(value.get("passed", 0)),
        failed=_count(value.get("failed", 0)),
        skipped=_count(value.get("skipped", 0)),
        failing=_strs(value.get("failing", [])),
    )


def _read_setup(data: ProbeData, record: dict[str, Any]) -> None:
    data.executed.append(_str(record["nodeid"]))


def _read_rewritten(data: ProbeData, record: dict[str, Any]) -> None:
    nodeid = _str(record["nodeid"])
    seen, reported = _str(record["seen"]), _str(record["reported"])
    when = record.get("when")
    phase = f" ({when} phase)" if isinstance(when, str) else ""
    late = " after the probe recorded it" if record.get("after") is True else ""
    if nodeid not in data.rewritten:
        data.rewritten.append(nodeid)
    if seen in ("failed", "failed+xfail") and nodeid not in data.hidden:
        data.hidden[nodeid] = "error" if when in ("setup", "teardown") else "failed"
    data.notes.append(
        f"outcome of {nodeid}{phase} rewritten from {seen} to {reported} by another hook{late}"
    )


def _read_tampered(data: ProbeData, record: dict[str, Any]) -> None:
    what = _strs(record["what"])
    data.tampered.extend(what)
    data.notes.append(f"the test run tampered with the charpin probe: {_few(what)}")


def _read_finish(data: ProbeData, record: dict[str, Any]) -> None:
    status = record["exitstatus"]
    if not isinstance(status, int) or isinstance(status, bool):
        raise TypeError("exitstatus must be an int")
    leaked = _strs(record.get("leaked", []))
    failing = _strs(record.get("failing", []))
    unverified = _strs(record.get("unverified", []))
    data.session_finished = True
    data.pytest_status = status
    data.ledger.leaked = sorted(set(leaked))
    # Unions: an id sent while the run went stays, whatever the finish line says.
    data.failing = sorted(set(data.failing) | set(failing))
    data.unverified = sorted(set(data.unverified) | set(unverified))


def _read_failing(data: ProbeData, record: dict[str, Any]) -> None:
    nodeid = _str(record["nodeid"])
    if nodeid not in data.failing:
        data.failing.append(nodeid)


def _read_unverified(data: ProbeData, record: dict[str, Any]) -> None:
    nodeid = _str(record["nodeid"])
    if nodeid not in data.unverified:
        data.unverified.append(nodeid)


def _read_call(data: ProbeData, record: dict[str, Any]) -> None:
    data.calls.append((_str(record["function"]), _str(record.get("test", "")), _str(record["args"])))


def _read_coverage(data: ProbeData, record: dict[str, Any]) -> None:
    lines = record.get("lines", {})
    if not isinstance(lines, dict):
        raise TypeError("lines must be an object")
    for path, numbers in lines.items():
        if not isinstance(numbers, list) or not all(isinstance(n, int) for n in numbers):
            raise TypeError("lines must be lists of ints")
        merged = set(data.lines.get(_str(path), [])) | {n for n in numbers if n > 0}
        data.lines[path] = sorted(merged)
    dropped = record.get("dropped", {})
    if isinstance(dropped, dict):
        for function, counts in dropped.items():
            if isinstance(counts, dict):
                mine = data.not_kept.setdefault(_str(function), {})
                for why, count in counts.items():
                    mine[_str(why)] = mine.get(why, 0) + _count(count)
    unavailable = record.get("unavailable", "")
    if isinstance(unavailable, str) and unavailable:
        data.untraced = unavailable


def _read_collect_error(data: ProbeData, record: dict[str, Any]) -> None:
    data.collect_errors.append((_str(record["nodeid"]), _str(record.get("text", ""))))


_HANDLERS: dict[str, Callable[[ProbeData, dict[str, Any]], None]] = {
    "collect-error": _read_collect_error,
    "start": _read_start,
    "collection": _read_collection,
    "setup": _read_setup,
    "report": _read_report,
    "rewritten": _read_rewritten,
    "tampered": _read_tampered,
    "finish": _read_finish,
    "failing": _read_failing,
    "unverified": _read_unverified,
    "call": _read_call,
    "coverage": _read_coverage,
}


def _check_failing(data: ProbeData) -> None:
    """Every id pytest made failing must be reported failed or error: else a hook hid it."""
    for nodeid in data.failing:
        outcome = data.outcomes.get(nodeid)
        if outcome in _FAILING:
            continue
        if nodeid not in data.rewritten:
            data.rewritten.append(nodeid)
        shown = "no outcome" if outcome is None else outcome
        data.notes.append(
            f"outcome of {nodeid} rewritten from failed to {shown}: pytest reported a failure "
            "the record does not show"
        )
        # The receipt keeps what pytest made of the test (under xdist the controller only ever
        # saw the relabelled report; the worker's probe saw the failure).
        data.outcomes[nodeid] = data.hidden.get(nodeid, "failed")


def _few(ids: list[str]) -> str:
    shown = ", ".join(ids[:_NOTE_IDS])
    more = len(ids) - _NOTE_IDS
    return shown if more <= 0 else f"{shown} and {more} more"


def _explain(data: ProbeData) -> None:
    """Add a note for every way the record falls short of a complete, consistent run."""
    if not data.started:
        data.notes.append("the probe never recorded a session start")
    if data.started and not data.session_finished:
        data.notes.append("the test session never finished (no finish line): it ended early")
    unreported = sorted(set(data.executed) - set(data.outcomes))
    if unreported:
        data.notes.append(f"started but never reported an outcome: {_few(unreported)}")
    _check_failing(data)
    if not data.collection_done:
        return
    if data.late_dropped:
        ids = _few(data.late_dropped)
        data.notes.append(f"selected ids removed by a hook after the ledger applied: {ids}")
    unselected = sorted(set(data.executed) - set(data.selected))
    if unselected:
        data.notes.append(f"executed although not selected: {_few(unselected)}")
    missing = sorted(set(data.selected) - set(data.executed))
    if missing and data.session_finished:
        data.notes.append(f"selected but never executed: {_few(missing)}")
    if data.ledger.leaked:
        data.notes.append(f"frozen ids executed anyway: {_few(data.ledger.leaked)}")
