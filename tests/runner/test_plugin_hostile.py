"""Conftests that try to fool the probe: the record must show what they did, never hide it."""

from __future__ import annotations

from pathlib import Path

import charpin_runner
import pytest
from charpin_runner.probe import ProbeData, read_probe

RUNNER_DIR = str(Path(charpin_runner.__file__).resolve().parent.parent)
PLUGIN = ("-p", "charpin_runner.plugin", "-p", "no:cacheprovider")
THREE = "def test_a(): pass\ndef test_victim(): pass\ndef test_z(): pass\n"
ALL_THREE = ["test_m.py::test_a", "test_m.py::test_victim", "test_m.py::test_z"]
SURVIVORS = ["test_m.py::test_a", "test_m.py::test_z"]


def run_probe(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, ProbeData]:
    record = pytester.path / "probe.jsonl"
    result = pytester.runpytest_subprocess(
        *PLUGIN, f"--charpin-receipt={record}", *args, timeout=120
    )
    return result, read_probe(record)


@pytest.fixture(autouse=True)
def _subprocess_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", RUNNER_DIR)
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


def test_item_removed_silently_inside_collection_is_recorded_as_dropped(
    pytester: pytest.Pytester,
) -> None:
    # A plain conftest impl runs inside the probe's wrapper and never calls pytest_deselected.
    pytester.makeconftest(
        "def pytest_collection_modifyitems(items):\n"
        "    items[:] = [i for i in items if i.name != 'test_victim']\n"
    )
    pytester.makepyfile(test_m=THREE)
    result, probe = run_probe(pytester)
    assert result.ret == 0
    assert probe.collected == ALL_THREE
    assert probe.dropped == ["test_m.py::test_victim"]
    assert probe.filtered == []
    assert probe.selected == probe.executed == SURVIVORS


def test_item_dropped_by_a_later_collection_wrapper_shows_executed_differs(
    pytester: pytest.Pytester,
) -> None:
    # Registered after the probe (trylast configure) and tryfirst: its wrapper is outside ours.
    pytester.makeconftest(
        "import pytest\n"
        "class Later:\n"
        "    @pytest.hookimpl(hookwrapper=True, tryfirst=True)\n"
        "    def pytest_collection_modifyitems(self, items):\n"
        "        yield\n"
        "        items[:] = [i for i in items if i.name != 'test_victim']\n"
        "@pytest.hookimpl(trylast=True)\n"
        "def pytest_configure(config):\n"
        "    config.pluginmanager.register(Later(), 'later')\n"
    )
    pytester.makepyfile(test_m=THREE)
    result, probe = run_probe(pytester)
    assert result.ret == 0
    assert probe.selected == ALL_THREE
    assert probe.executed == SURVIVORS
    assert probe.late_dropped == ["test_m.py::test_victim"]
    assert (
        "selected ids removed by a hook after the ledger applied: test_m.py::test_victim"
        in probe.notes
    )
    assert "selected but never executed: test_m.py::test_victim" in probe.notes


def test_item_popped_in_collection_finish_shows_executed_differs(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(
        "def pytest_collection_finish(session):\n"
        "    session.items[:] = [i for i in session.items if i.name != 'test_victim']\n"
    )
    pytester.makepyfile(test_m=THREE)
    result, probe = run_probe(pytester)
    assert result.ret == 0
    assert probe.selected == ALL_THREE
    assert probe.executed == SURVIVORS
    assert probe.late_dropped == ["test_m.py::test_victim"]
    assert "selected but never executed: test_m.py::test_victim" in probe.notes


def test_outcome_flipped_by_a_makereport_wrapper_is_recorded_as_rewritten(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(
        "import pytest\n"
        "@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n"
        "    rep = outcome.get_result()\n"
        "    if rep.when == 'call' and rep.failed:\n"
        "        rep.outcome = 'passed'\n"
        "        rep.longrepr = None\n"
    )
    pytester.makepyfile(test_m="def test_ok(): pass\ndef test_bad(): assert 0\n")
    result, probe = run_probe(pytester)
    # The forgery works on pytest: it reports green.
    assert result.ret == 0
    # The record keeps what pytest made of the test, and says that a hook changed it.
    assert probe.outcomes == {"test_m.py::test_ok": "passed", "test_m.py::test_bad": "failed"}
    assert probe.failing == ["test_m.py::test_bad"]
    assert probe.rewritten == ["test_m.py::test_bad"]
    assert probe.notes == [
        "outcome of test_m.py::test_bad (call phase) rewritten from failed to passed by another hook"
    ]
    lines = (pytester.path / "probe.jsonl").read_text().splitlines()
    assert '{"kind":"rewritten","nodeid":"test_m.py::test_bad","when":"call",' in "\n".join(lines)


def test_os_exit_mid_run_leaves_no_finish_line_and_keeps_partial_reports(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_m="import os\ndef test_a(): pass\ndef test_b(): os._exit(0)\ndef test_c(): pass\n"
    )
    result, probe = run_probe(pytester)
    # The exit status lies: 0, with one test of three finished.
    assert result.ret == 0
    assert probe.started and probe.collection_done
    assert not probe.session_finished
    assert probe.pytest_status is None
    assert probe.selected == ["test_m.py::test_a", "test_m.py::test_b", "test_m.py::test_c"]
    assert probe.executed == ["test_m.py::test_a", "test_m.py::test_b"]
    assert probe.outcomes == {"test_m.py::test_a": "passed"}
    assert probe.notes == [
        "the test session never finished (no finish line): it ended early",
        "started but never reported an outcome: test_m.py::test_b",
    ]
