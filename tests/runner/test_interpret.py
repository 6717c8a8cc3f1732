"""interpret(): exit status reconciled with the probe's evidence, as a table."""

from __future__ import annotations

from typing import Any, get_args

import pytest
from charpin_runner.interpret import EXIT_CODES, Ending, interpret
from charpin_runner.probe import ProbeData
from charpin_runner.receipt import Interpretation

IDS = ["t.py::a", "t.py::b"]


def probe(**overrides: Any) -> ProbeData:
    """A probe that saw a complete run of IDS, both passing, ending with status 0."""
    base: dict[str, Any] = {
        "started": True,
        "collection_done": True,
        "session_finished": True,
        "pytest_status": 0,
        "collected": list(IDS),
        "selected": list(IDS),
        "executed": list(IDS),
        "outcomes": dict.fromkeys(IDS, "passed"),
    }
    base.update(overrides)
    return ProbeData(**base)


FAILED = {"pytest_status": 1, "outcomes": {"t.py::a": "passed", "t.py::b": "failed"}}

TABLE: list[tuple[str, Ending, ProbeData, Interpretation, str]] = [
    ("clean pass", Ending(0), probe(), "ok", ""),
    ("a failure", Ending(1), probe(**FAILED), "failed", ""),
    ("pytest interrupted", Ending(2), probe(pytest_status=2), "interrupted", ""),
    ("internal error", Ending(3), probe(pytest_status=3), "internal-error", ""),
    ("usage error, no probe", Ending(4), ProbeData(), "usage", "never started"),
    (
        "no tests",
        Ending(5),
        probe(pytest_status=5, collected=[], selected=[], executed=[], outcomes={}),
        "no-tests",
        "",
    ),
    (
        "our timeout",
        Ending(-15, timed_out=True, timeout=2),
        probe(session_finished=False),
        "timed-out",
        "2 s deadline",
    ),
    ("parent interrupted", Ending(-15, interrupted=True), probe(), "interrupted", "SIGINT"),
    (
        "os._exit(0) mid-run",
        Ending(0),
        probe(session_finished=False, pytest_status=None, executed=IDS[:1]),
        "incomplete",
        "never finished",
    ),
    ("probe never started", Ending(0), ProbeData(), "incomplete", "never started"),
    (
        "executed short of selected",
        Ending(0),
        probe(executed=IDS[:1]),
        "incomplete",
        "1 selected test(s) never executed: t.py::b",
    ),
    (
        "executed more than selected",
        Ending(0),
        probe(executed=[*IDS, "t.py::c"]),
        "incomplete",
        "never selected: t.py::c",
    ),
    (
        "rewritten report",
        Ending(0),
        probe(rewritten=["t.py::b"], notes=["outcome of t.py::b (call phase) rewritten"]),
        "incomplete",
        "rewrote the outcome of t.py::b",
    ),
    (
        "hook dropped tests late",
        Ending(0),
        probe(late_dropped=["t.py::b"], executed=IDS[:1]),
        "incomplete",
        "removed selected tests after the ledger applied: t.py::b",
    ),
    (
        "failure under -x leaves tests unexecuted",
        Ending(1),
        probe(
            **FAILED,
            selected=[*IDS, "t.py::c"],
            notes=["selected but never executed: t.py::c"],
        ),
        "failed",
        "probe: selected but never executed: t.py::c",
    ),
    (
        "conftest dropped items silently",
        Ending(0),
        probe(collected=[*IDS, "t.py::c"], dropped=["t.py::c"]),
        "incomplete",
        "1 collected test(s) were removed during collection without being reported as "
        "deselected; report removed items through config.hook.pytest_deselected(items=...) "
        "or deselect them with -k/-m/--deselect",
    ),
    (
        "dropped items in a failing run",
        Ending(1),
        probe(**FAILED, collected=[*IDS, "t.py::c", "t.py::d"], dropped=["t.py::c", "t.py::d"]),
        "incomplete",
        "2 collected test(s) were removed",
    ),
    (
        "deselected through the hook is fine",
        Ending(0),
        probe(collected=[*IDS, "t.py::c"], filtered=["t.py::c"]),
        "ok",
        "",
    ),
    ("masked failure", Ending(0), probe(**{**FAILED, "pytest_status": 0}), "incomplete", "masked"),
    (
        "failure the probe saw, reported as a pass",
        Ending(0),
        probe(failing=["t.py::b"]),
        "incomplete",
        "exit status 0 but 1 test(s) failed or errored (t.py::b): the exit status was masked",
    ),
    (
        "xfail the probe could not verify",
        Ending(0),
        probe(unverified=["t.py::x"]),
        "incomplete",
        "cannot verify that pytest itself made t.py::x xfailed",
    ),
    (
        "probe tampered with",
        Ending(0),
        probe(tampered=["Probe.out (the record's file handle)"]),
        "incomplete",
        "the test run tampered with the charpin probe (Probe.out (the record's file handle)); "
        "its record cannot be trusted",
    ),
    (
        "probe tampered with in a failing run",
        Ending(1),
        probe(**FAILED, tampered=["charpin_runner.plugin._outcome"]),
        "incomplete",
        "tampered with the charpin probe (charpin_runner.plugin._outcome)",
    ),
    ("atexit rewrote status", Ending(0), probe(**FAILED), "incomplete", "rewritten (atexit"),
    ("atexit turned pass into 1", Ending(1), probe(), "incomplete", "status 0 but"),
    ("killed by a signal", Ending(-9), probe(session_finished=False), "incomplete", "SIGKILL"),
    ("unknown status", Ending(7), probe(pytest_status=7), "incomplete", "not a pytest exit code"),
]


@pytest.mark.parametrize(
    ("ending", "seen", "verdict", "reason"), [row[1:] for row in TABLE], ids=[r[0] for r in TABLE]
)
def test_interpretation_table(
    ending: Ending, seen: ProbeData, verdict: Interpretation, reason: str
) -> None:
    result = interpret(ending, seen)
    assert result.interpretation == verdict
    assert result.status == ending.status
    assert result.pytest_status == seen.pytest_status
    if reason:
        assert any(reason in line for line in result.reasons), result.reasons
    else:
        assert result.reasons == []


def test_every_reason_is_one_line_and_all_findings_are_listed() -> None:
    seen = probe(
        session_finished=False, executed=[], notes=["rewritten: x"], outcomes={"t.py::a": "error"}
    )
    result = interpret(Ending(0), seen)
    assert result.interpretation == "incomplete"
    assert len(result.reasons) == 4
    assert all("\n" not in line for line in result.reasons)


def test_extra_reasons_demote_ok() -> None:
    result = interpret(Ending(0), probe(), ("pins were not replayed: bad file",))
    assert (result.interpretation, result.reasons) == (
        "incomplete",
        ["pins were not replayed: bad file"],
    )


def test_exit_code_mapping_covers_every_interpretation() -> None:
    assert EXIT_CODES == {
        "ok": 0,
        "failed": 1,
        "incomplete": 2,
        "timed-out": 4,
        "no-tests": 16,
        "usage": 64,
        "interrupted": 130,
        "internal-error": 1,
        "collection-error": 1,
    }
    assert set(EXIT_CODES) == set(get_args(Interpretation))


def test_informational_notes_do_not_demote_and_repeats_are_dropped() -> None:
    leak = "frozen ids executed anyway: t.py::a"
    ok = interpret(Ending(0), probe(notes=[leak]))
    assert (ok.interpretation, ok.reasons) == ("ok", [f"probe: {leak}"])
    seen = probe(
        session_finished=False,
        notes=["the test session never finished (no finish line): it ended early"],
    )
    assert interpret(Ending(0), seen).reasons == [
        "the test session never finished: os._exit() or a crash"
    ]


def test_dropped_items_give_exactly_one_reason_line() -> None:
    seen = probe(collected=[*IDS, "t.py::c", "t.py::d"], dropped=["t.py::c", "t.py::d"])
    result = interpret(Ending(0), seen)
    assert result.interpretation == "incomplete"
    assert [line for line in result.reasons if "removed during collection" in line] == [
        "2 collected test(s) were removed during collection without being reported as "
        "deselected; report removed items through config.hook.pytest_deselected(items=...) "
        "or deselect them with -k/-m/--deselect"
    ]


def test_tampering_note_is_said_once() -> None:
    note = "the test run tampered with the charpin probe: charpin_runner.plugin._outcome"
    seen = probe(tampered=["charpin_runner.plugin._outcome"], notes=[note])
    assert interpret(Ending(0), seen).reasons == [
        "the test run tampered with the charpin probe (charpin_runner.plugin._outcome); "
        "its record cannot be trusted"
    ]


def test_a_timeout_names_the_deadline_to_a_tenth_and_blames_no_crash() -> None:
    ended = interpret(Ending(-9, timed_out=True, timeout=9.04664), probe(session_finished=False))
    assert ended.interpretation == "timed-out"
    assert ended.reasons[0] == "the test command ran past its 9 s deadline and was killed"
    assert not any("os._exit" in reason for reason in ended.reasons), ended.reasons
