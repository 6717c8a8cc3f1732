"""Conftests that relabel a failure (as xfail, pass or "not counted") never get `ok` past the probe.

Each attack runs in a real pytest subprocess (pytester) with the probe loaded; its record is read
back and interpreted exactly as `charpin receipt` does. Pytest itself is fooled every time (exit
status 0); the record must still say `failed` for the victim and the verdict must not be `ok`.
The second half runs legitimate xfail, skip, unittest and xdist suites to show none is flagged.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import xdist  # noqa: F401  (a required test dependency: its absence must fail, never skip)
from charpin_runner.inpytest import outcomes as plugin
from charpin_runner.interpret import Ending, interpret
from charpin_runner.probe import ProbeData, read_probe
from charpin_runner.receipt import Exit

from tests.conftest import make_repo
from tests.runner.test_receipt_cmd import charpin, only_receipt

PLUGIN = ("-p", "charpin_runner.plugin", "-p", "no:cacheprovider")
XDIST = ("-p", "xdist", "-n", "2")
SUITE = "def test_ok():\n    pass\n\ndef test_bad():\n    assert 0\n"
BAD = "test_m.py::test_bad"
# The attack from the issue: zero the failure count so pytest exits 0.
ZERO_FAILURES = (
    "@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtestloop(session):\n"
    "    yield\n"
    "    session.testsfailed = 0\n"
)
RELABEL = {
    "xfail": "        report.outcome = 'skipped'\n        report.wasxfail = 'forged'\n",
    "pass": "        report.outcome = 'passed'\n        report.longrepr = None\n",
    # Outcome left alone: pytest's session does not count a failed report carrying wasxfail.
    "uncounted": "        report.wasxfail = 'forged'\n",
}
SHOWN = {"xfail": "xfailed", "pass": "passed", "uncounted": "failed+xfail"}


@pytest.fixture(autouse=True)
def _plain_pytest(monkeypatch: pytest.MonkeyPatch) -> None:
    # An outer xdist run must not make the inner pytest believe it is a worker.
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


def run_probe(pytester: pytest.Pytester, *args: str) -> tuple[int, ProbeData, Exit]:
    record = pytester.path / "probe.jsonl"
    result = pytester.runpytest_subprocess(
        *PLUGIN, f"--charpin-receipt={record}", *args, timeout=180
    )
    probe = read_probe(record)
    return int(result.ret), probe, interpret(Ending(int(result.ret)), probe)


def assert_caught(status: int, probe: ProbeData, verdict: Exit, victim: str = BAD) -> None:
    assert status == 0  # the forgery works on pytest itself
    assert probe.outcomes[victim] == "failed"  # what pytest's own machinery made of the test
    assert victim in probe.failing
    assert verdict.interpretation == "incomplete"
    assert any(victim in reason for reason in verdict.reasons), verdict.reasons


def run_attack(pytester: pytest.Pytester, conftest: str, *args: str) -> tuple[int, ProbeData, Exit]:
    """Run SUITE under conftest and check the victim is caught; return what run_probe did."""
    pytester.makeconftest(conftest)
    pytester.makepyfile(test_m=SUITE)
    status, probe, verdict = run_probe(pytester, *args)
    assert_caught(status, probe, verdict)
    return status, probe, verdict


def logreport_relabel(order: str, how: str) -> str:
    return (
        "import pytest\n"
        f"@pytest.hookimpl({order})\n"
        "def pytest_runtest_logreport(report):\n"
        "    if report.when == 'call' and report.failed:\n" + RELABEL[how] + ZERO_FAILURES
    )


@pytest.mark.parametrize("how", sorted(RELABEL))
@pytest.mark.parametrize("order", ["tryfirst=True", "trylast=True", ""])
def test_logreport_relabel_is_caught_before_or_after_the_probe(
    pytester: pytest.Pytester, order: str, how: str
) -> None:
    _, probe, verdict = run_attack(pytester, logreport_relabel(order, how))
    assert probe.rewritten == [BAD]
    # Before the probe's hook it sees the change; after it, the end-of-session check does.
    late = "" if order == "tryfirst=True" else " after the probe recorded it"
    assert f"rewritten from failed to {SHOWN[how]} by another hook{late}" in " ".join(probe.notes)
    assert f"another hook rewrote the outcome of {BAD}" in verdict.reasons


def test_zeroed_failure_count_alone_is_a_masked_failure(pytester: pytest.Pytester) -> None:
    _, probe, verdict = run_attack(pytester, "import pytest\n" + ZERO_FAILURES)
    assert probe.pytest_status == 0
    assert probe.rewritten == []
    assert verdict.reasons == [
        f"exit status 0 but 1 test(s) failed or errored ({BAD}): the exit status was masked"
    ]


def test_exit_status_zeroed_in_sessionfinish_is_caught(pytester: pytest.Pytester) -> None:
    _, probe, verdict = run_attack(
        pytester,
        "import pytest\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_sessionfinish(session):\n"
        "    session.exitstatus = 0\n",
    )
    assert probe.pytest_status == 1
    assert verdict.reasons[0].startswith("pytest finished with status 1 but the process exited")


def test_relabel_in_report_teststatus_is_caught(pytester: pytest.Pytester) -> None:
    # The terminal reporter asks this hook for the category; it may also mutate the report.
    _, probe, _ = run_attack(
        pytester,
        "import pytest\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_report_teststatus(report, config):\n"
        "    if report.when == 'call' and report.failed:\n"
        "        report.outcome = 'skipped'\n"
        "        report.wasxfail = 'forged'\n"
        "        return 'xfailed', 'x', 'XFAIL'\n" + ZERO_FAILURES,
    )
    assert probe.rewritten == [BAD]


def test_makereport_wrapper_inside_the_probes_is_caught(pytester: pytest.Pytester) -> None:
    # A conftest below the rootdir loads during collection, after the probe registered, so its
    # trylast wrapper runs inside the probe's "innermost" one: the raised exception still shows.
    pytester.mkpydir("sub")
    (pytester.path / "sub" / "conftest.py").write_text(
        "import pytest\n"
        "@pytest.hookimpl(hookwrapper=True, trylast=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n"
        "    report = outcome.get_result()\n"
        "    if report.failed:\n"
        "        report.outcome = 'skipped'\n"
        "        report.wasxfail = 'forged'\n"
    )
    (pytester.path / "sub" / "test_m.py").write_text(SUITE)
    status, probe, verdict = run_probe(pytester)
    assert_caught(status, probe, verdict, victim="sub/test_m.py::test_bad")
    assert probe.rewritten == ["sub/test_m.py::test_bad"]


def test_patched_probe_function_is_reported_as_tampering(pytester: pytest.Pytester) -> None:
    _, probe, verdict = run_attack(
        pytester,
        "import pytest\n"
        "import charpin_runner.inpytest.outcomes as probe_module\n"
        "probe_module._outcome = lambda phases: 'passed'\n" + ZERO_FAILURES,
    )
    assert probe.tampered == ["charpin_runner.inpytest.outcomes._outcome"]
    assert verdict.reasons[0] == (
        "the test run tampered with the charpin probe (charpin_runner.inpytest.outcomes._outcome); "
        "its record cannot be trusted"
    )


def test_swapped_record_handle_is_reported_as_tampering(pytester: pytest.Pytester) -> None:
    # Filters the failing report line out of what the probe writes.
    _, probe, _ = run_attack(
        pytester,
        "import pytest\n"
        "class Filter:\n"
        "    def __init__(self, out):\n"
        "        self.out = out\n"
        "    def write(self, text):\n"
        "        if '\"failed\"' not in text:\n"
        "            self.out.write(text)\n"
        "    def close(self):\n"
        "        self.out.close()\n"
        "def pytest_sessionstart(session):\n"
        "    probe = session.config.pluginmanager.get_plugin('charpin-probe')\n"
        "    probe.out = Filter(probe.out)\n" + ZERO_FAILURES,
    )
    assert probe.tampered == ["Probe.out (the record's file handle)"]
    assert probe.rewritten == [BAD]
    assert f"outcome of {BAD} rewritten from failed to no outcome" in " ".join(probe.notes)


def test_forged_report_line_appended_to_the_record_keeps_the_failure(
    pytester: pytest.Pytester,
) -> None:
    _, probe, _ = run_attack(
        pytester,
        "import atexit, json\n"
        "import pytest\n"
        "def forge(path):\n"
        "    line = {'kind': 'report', 'nodeid': 'test_m.py::test_bad', 'outcome': 'passed'}\n"
        "    with open(path, 'a') as record:\n"
        "        record.write(json.dumps(line) + chr(10))\n"
        "def pytest_configure(config):\n"
        "    atexit.register(forge, config.getoption('charpin_receipt'))\n" + ZERO_FAILURES,
    )
    # After the finish line nothing the probe writes can come: the line is tampering, ignored.
    assert probe.tampered == ["1 line written to its record after the session finished"]
    assert probe.outcomes[BAD] == "failed"


def test_a_second_report_sent_before_the_finish_cannot_turn_a_failure_green(
    pytester: pytest.Pytester,
) -> None:
    _, probe, _ = run_attack(
        pytester,
        "import json\n"
        "import pytest\n"
        "def pytest_sessionfinish(session):\n"
        "    probe = session.config.pluginmanager.get_plugin('charpin-probe')\n"
        "    line = {'kind': 'report', 'nodeid': 'test_m.py::test_bad', 'outcome': 'passed'}\n"
        "    probe.out.write(json.dumps(line) + chr(10))\n" + ZERO_FAILURES,
    )
    assert f"{BAD} was reported twice; the failure (failed) is kept" in probe.notes
    assert probe.outcomes[BAD] == "failed"


@pytest.mark.parametrize("side", ["everywhere", "controller"])
def test_xdist_relabel_is_caught(pytester: pytest.Pytester, side: str) -> None:
    guard = "os.environ.get('PYTEST_XDIST_WORKER') is None and " if side == "controller" else ""
    _, probe, _ = run_attack(
        pytester,
        "import os\n"
        "import pytest\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_runtest_logreport(report):\n"
        f"    if {guard}report.when == 'call' and report.failed:\n"
        + RELABEL["xfail"]
        + ZERO_FAILURES,
        *XDIST,
    )
    assert probe.rewritten == [BAD]


def test_charpin_receipt_does_not_accept_the_relabelled_run(tmp_path: Path) -> None:
    victim = "tests/test_many.py::test_bad"
    repo = make_repo(
        tmp_path / "repo",
        {
            "tests/conftest.py": logreport_relabel("tryfirst=True", "xfail"),
            "tests/test_many.py": SUITE,
        },
    )
    result = charpin(repo, "--no-pins")
    assert result.returncode == 2, result.stderr
    receipt = only_receipt(repo)
    assert receipt["exit"]["status"] == 0
    assert receipt["exit"]["interpretation"] != "ok"
    assert receipt["exit"]["interpretation"] == "incomplete"
    assert receipt["outcomes"][victim] == "failed"
    assert any(victim in reason for reason in receipt["exit"]["reasons"])


# -- no false alarms ---------------------------------------------------------------------------

GREEN = """
import unittest
import pytest

@pytest.mark.xfail(reason="known")
def test_xfail_mark():
    assert 0

def test_xfail_call():
    pytest.xfail("not yet")

@pytest.mark.xfail(run=False, reason="hangs")
def test_xfail_not_run():
    pass

@pytest.mark.xfail(raises=ZeroDivisionError)
def test_xfail_raises():
    1 / 0

@pytest.mark.xfail(reason="sometimes")
def test_xpass():
    pass

@pytest.mark.xfail(condition=False, reason="elsewhere")
def test_xfail_false_condition():
    pass

def test_xfail_added_at_run_time(request):
    request.node.add_marker(pytest.mark.xfail(reason="dynamic"))
    assert 0

@pytest.fixture
def failing_teardown():
    yield
    raise RuntimeError("teardown")

@pytest.mark.xfail(reason="teardown too")
def test_xfail_with_failing_teardown(failing_teardown):
    assert 0

def test_skip():
    pytest.skip("no")

@pytest.mark.skipif(True, reason="never")
def test_skipif():
    pass

def test_pass():
    pass

class TestUnit(unittest.TestCase):
    @unittest.expectedFailure
    def test_expected_failure(self):
        self.assertEqual(1, 2)

    @unittest.skip("no")
    def test_skipped(self):
        pass

    def test_skip_test(self):
        self.skipTest("later")

    def test_pass(self):
        pass
"""
GREEN_OUTCOMES = {
    "test_xfail_mark": "xfailed",
    "test_xfail_call": "xfailed",
    "test_xfail_not_run": "xfailed",
    "test_xfail_raises": "xfailed",
    "test_xpass": "xpassed",
    "test_xfail_false_condition": "passed",
    "test_xfail_added_at_run_time": "xfailed",
    "test_xfail_with_failing_teardown": "xfailed",
    "test_skip": "skipped",
    "test_skipif": "skipped",
    "test_pass": "passed",
    "TestUnit::test_expected_failure": "xfailed",
    "TestUnit::test_skipped": "skipped",
    "TestUnit::test_skip_test": "skipped",
    "TestUnit::test_pass": "passed",
}

RED = """
import unittest
import pytest

def test_fail():
    assert 0

@pytest.fixture
def failing_setup():
    raise RuntimeError("setup")

@pytest.fixture
def failing_teardown():
    yield
    raise RuntimeError("teardown")

def test_setup_error(failing_setup):
    pass

def test_teardown_error(failing_teardown):
    pass

def test_skip_then_teardown_error(failing_teardown):
    pytest.skip("skipped, but its teardown fails")

@pytest.mark.xfail(raises=KeyError)
def test_xfail_wrong_exception():
    1 / 0

@pytest.mark.xfail(strict=True, reason="must fail")
def test_strict_xpass():
    pass

class TestUnit(unittest.TestCase):
    def test_fail(self):
        self.assertEqual(1, 2)

    def test_unexpected_success(self):
        pass
    test_unexpected_success = unittest.expectedFailure(test_unexpected_success)
"""
RED_OUTCOMES = {
    "test_fail": "failed",
    "test_setup_error": "error",
    "test_teardown_error": "error",
    "test_skip_then_teardown_error": "error",
    "test_xfail_wrong_exception": "failed",
    "test_strict_xpass": "failed",
    "TestUnit::test_fail": "failed",
    "TestUnit::test_unexpected_success": "failed",
}


def _ids(outcomes: dict[str, str]) -> dict[str, str]:
    return {f"test_m.py::{name}": outcome for name, outcome in outcomes.items()}


def run_unflagged(pytester: pytest.Pytester, source: str, *args: str) -> tuple[int, ProbeData]:
    """Run source as test_m.py and check the probe raised nothing: plain ok or plain failed."""
    pytester.makepyfile(test_m=source)
    status, probe, verdict = run_probe(pytester, *args)
    assert probe.rewritten == []
    assert probe.tampered == []
    assert probe.unverified == []
    assert probe.notes == []
    assert (verdict.interpretation, verdict.reasons) == ({0: "ok", 1: "failed"}[status], [])
    return status, probe


@pytest.mark.parametrize("extra", [(), XDIST], ids=["serial", "xdist"])
@pytest.mark.parametrize(
    ("source", "outcomes", "expected_status"),
    [(GREEN, GREEN_OUTCOMES, 0), (RED, RED_OUTCOMES, 1)],
    ids=["xfails-and-skips-stay-ok", "failures-stay-plain-failed"],
)
def test_legitimate_suites_are_not_flagged(
    pytester: pytest.Pytester,
    source: str,
    outcomes: dict[str, str],
    expected_status: int,
    extra: tuple[str, ...],
) -> None:
    status, probe = run_unflagged(pytester, source, *extra)
    assert status == expected_status
    assert probe.outcomes == _ids(outcomes)
    # What failed as pytest ran it: a strict XPASS passed, only pytest's xfail handling failed it.
    assert probe.failing == sorted(
        n
        for n, o in _ids(outcomes).items()
        if o in ("failed", "error") and not n.endswith("test_strict_xpass")
    )


def test_runxfail_failures_are_plain_failures(pytester: pytest.Pytester) -> None:
    status, probe = run_unflagged(pytester, GREEN, "--runxfail")
    assert status == 1
    assert probe.outcomes["test_m.py::test_xfail_mark"] == "failed"
    assert "test_m.py::test_xfail_mark" in probe.failing


@pytest.mark.skipif(pytest.version_tuple < (9,), reason="subtests are built in from pytest 9")
def test_subtests_stay_unflagged(pytester: pytest.Pytester) -> None:
    status, probe = run_unflagged(
        pytester,
        """
import unittest
import pytest

def test_sub_fail(subtests):
    for i in range(2):
        with subtests.test(i=i):
            assert i == 0

def test_sub_xfail(subtests):
    with subtests.test(msg="later"):
        pytest.xfail("not yet")

class TestUnit(unittest.TestCase):
    def test_sub(self):
        for i in range(2):
            with self.subTest(i=i):
                self.assertEqual(i, 0)
""",
    )
    assert status == 1
    assert probe.outcomes == _ids(
        {"test_sub_fail": "failed", "test_sub_xfail": "passed", "TestUnit::test_sub": "failed"}
    )


# -- pytest's private xfail state (_pytest.skipping.xfailed_key) missing or changed -----------
# The probe predicts pytest's xfail verdict from private API; when it cannot read it, an xfail
# pytest reports is "cannot verify" (never ok, never called a rewrite), and a failure stays one.

# What _private_xfailed_key() gives on a pytest that moved the key.
LOST_KEY = "import charpin_runner.inpytest.outcomes as probe_module\nprobe_module._XFAILED_KEY = None\n"
MARKED_XFAILS = sorted(
    f"test_m.py::{name}"
    for name in (
        "test_xfail_mark",
        "test_xfail_raises",
        "test_xfail_added_at_run_time",
        "test_xfail_with_failing_teardown",
    )
)


def test_private_xfailed_key_that_moved_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    import _pytest.skipping

    assert plugin._private_xfailed_key() is _pytest.skipping.xfailed_key
    monkeypatch.setitem(sys.modules, "_pytest.skipping", types.ModuleType("_pytest.skipping"))
    assert plugin._private_xfailed_key() is None


class _OldXfail:
    """An xfail state of an unknown shape: no `raises`."""


@pytest.mark.parametrize(
    ("key", "stash"),
    [
        (None, {}),  # the key moved
        ("key", {}),  # pytest no longer fills it
        ("key", {"key": _OldXfail()}),  # its value changed shape
        ("key", {"key": types.SimpleNamespace(raises=object())}),  # an unknown `raises`
    ],
    ids=["no-key", "not-filled", "no-raises", "unknown-raises"],
)
def test_unreadable_xfail_state_is_unknown_not_a_guess(
    monkeypatch: pytest.MonkeyPatch, key: str | None, stash: dict[str, object]
) -> None:
    monkeypatch.setattr(plugin, "_XFAILED_KEY", key)
    item = types.SimpleNamespace(
        config=types.SimpleNamespace(option=types.SimpleNamespace(runxfail=False)), stash=stash
    )
    failure = types.SimpleNamespace(excinfo=types.SimpleNamespace(value=AssertionError()))
    xfail = types.SimpleNamespace(excinfo=types.SimpleNamespace(value=pytest.xfail.Exception("")))
    assert plugin._xfail_applies(item, failure) is None  # type: ignore[arg-type]
    # pytest.xfail() is public: still checked.
    assert plugin._xfail_applies(item, xfail) is True  # type: ignore[arg-type]


@pytest.mark.parametrize("extra", [(), XDIST], ids=["serial", "xdist"])
def test_lost_xfail_state_says_cannot_verify_and_nothing_else(
    pytester: pytest.Pytester, extra: tuple[str, ...]
) -> None:
    pytester.makeconftest(LOST_KEY)
    pytester.makepyfile(test_m=GREEN)
    status, probe, verdict = run_probe(pytester, *extra)
    assert status == 0
    assert probe.outcomes == _ids(GREEN_OUTCOMES)
    assert (probe.unverified, probe.failing, probe.rewritten) == (MARKED_XFAILS, [], [])
    assert verdict.interpretation == "incomplete"
    assert verdict.reasons == [
        f"cannot verify that pytest itself made {', '.join(MARKED_XFAILS[:3])} and 1 more "
        "xfailed: the probe could not read pytest's xfail state (private "
        "_pytest.skipping.xfailed_key missing or changed), so a hook may have relabelled a failure"
    ]


def test_lost_xfail_state_keeps_plain_failures_failed(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(LOST_KEY)
    status, probe = run_unflagged(pytester, RED)
    assert status == 1
    assert probe.outcomes == _ids(RED_OUTCOMES)
    assert "test_m.py::test_xfail_wrong_exception" in probe.failing


# test_bad carries an xfail mark that does not apply: pytest fails it, the conftest relabels it.
MARKED_SUITE = "import pytest\n\ndef test_ok():\n    pass\n\n" + (
    "@pytest.mark.xfail(raises=KeyError)\ndef test_bad():\n    assert 0\n"
)


@pytest.mark.parametrize("how", sorted(RELABEL))
@pytest.mark.parametrize("lost", [False, True], ids=["key", "lost-key"])
def test_relabelled_xfail_marked_failure_is_never_ok(
    pytester: pytest.Pytester, how: str, lost: bool
) -> None:
    pytester.makeconftest(logreport_relabel("tryfirst=True", how) + (LOST_KEY if lost else ""))
    pytester.makepyfile(test_m=MARKED_SUITE)
    status, probe, verdict = run_probe(pytester)
    assert status == 0
    assert verdict.interpretation == "incomplete"
    assert any(BAD in reason for reason in verdict.reasons), verdict.reasons
    if lost and how == "xfail":
        # Indistinguishable from pytest's own xfail without its state: said, not guessed.
        assert (probe.unverified, probe.rewritten) == ([BAD], [])
        assert verdict.reasons[0].startswith(f"cannot verify that pytest itself made {BAD}")
    else:
        # A raising phase never passes: whatever pytest made of it, a hook rewrote it.
        assert (probe.outcomes[BAD], probe.unverified, probe.rewritten) == ("failed", [], [BAD])
        assert probe.failing == ([] if lost else [BAD])
