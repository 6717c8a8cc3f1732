"""The probe under pytest-xdist: only the controller writes, workers apply the ledger."""

from __future__ import annotations

import json
from pathlib import Path

import charpin_runner
import pytest
import xdist  # noqa: F401  (a required test dependency: its absence must fail, never skip)
from charpin_runner.probe import ProbeData, read_probe
from charpin_runner.receipt import Deselected, Widening

RUNNER_DIR = str(Path(charpin_runner.__file__).resolve().parent.parent)
PLUGIN = ("-p", "charpin_runner.plugin", "-p", "no:cacheprovider", "-p", "xdist", "-n", "2")

SUITE = """
import pytest

def test_pass():
    pass

def test_fail():
    assert 0

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert 0

def test_skip():
    pytest.skip("not here")

def test_flaky():
    pass

def test_flaky_other():
    pass

@pytest.mark.parametrize("n", [1, 2])
def test_family(n):
    pass
"""


@pytest.fixture(autouse=True)
def _subprocess_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", RUNNER_DIR)
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


def run_probe(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, ProbeData]:
    record = pytester.path / "probe.jsonl"
    result = pytester.runpytest_subprocess(
        *PLUGIN, f"--charpin-receipt={record}", *args, timeout=180
    )
    return result, read_probe(record)


def kinds(pytester: pytest.Pytester) -> list[str]:
    lines = (pytester.path / "probe.jsonl").read_text().splitlines()
    return [json.loads(line)["kind"] for line in lines]


def test_xdist_run_has_one_writer_all_reports_and_the_ledger_applied(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_m=SUITE)
    ledger = pytester.path / "flake-ledger.json"
    entries = [
        {"id": i, "reason": "r", "owner": "o", "expires": "2099-01-01"}
        for i in ("test_m.py::test_flaky", "test_m.py::test_family")
    ]
    ledger.write_text(json.dumps({"version": 1, "entries": entries}))
    result, probe = run_probe(pytester, f"--charpin-ledger={ledger}")
    assert result.ret == 1
    found = kinds(pytester)
    assert (found.count("start"), found.count("collection"), found.count("finish")) == (1, 1, 1)
    frozen = ["test_m.py::test_family[1]", "test_m.py::test_family[2]", "test_m.py::test_flaky"]
    running = {
        "test_m.py::test_fail": "failed",
        "test_m.py::test_flaky_other": "passed",
        "test_m.py::test_pass": "passed",
        "test_m.py::test_skip": "skipped",
        "test_m.py::test_xfail": "xfailed",
    }
    assert probe.collected == sorted(frozen + list(running))
    assert probe.selected == probe.executed == sorted(running)
    assert probe.outcomes == running
    assert probe.ledger.frozen == frozen
    assert probe.ledger.deselected == [
        Deselected(frozen[0], "test_m.py::test_family"),
        Deselected(frozen[1], "test_m.py::test_family"),
        Deselected(frozen[2], "test_m.py::test_flaky"),
    ]
    assert probe.ledger.widening == [Widening("test_m.py::test_family", frozen[:2])]
    assert probe.ledger.leaked == []
    assert probe.pytest_status == 1
    assert probe.notes == []


def test_xdist_worker_rewrite_reaches_the_record(pytester: pytest.Pytester) -> None:
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
    assert result.ret == 0
    # The record keeps what pytest made of the test, and says that a hook changed it.
    assert probe.outcomes == {"test_m.py::test_ok": "passed", "test_m.py::test_bad": "failed"}
    assert probe.failing == ["test_m.py::test_bad"]
    assert probe.rewritten == ["test_m.py::test_bad"]
    assert (
        "outcome of test_m.py::test_bad (call phase) rewritten from failed to passed by another hook"
        in probe.notes
    )


def test_workers_that_collect_differently_leave_a_note(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        "import os\n"
        "def pytest_collection_modifyitems(items):\n"
        "    if os.environ.get('PYTEST_XDIST_WORKER') == 'gw1':\n"
        "        items.pop()\n"
    )
    pytester.makepyfile(test_m="def test_a(): pass\ndef test_b(): pass\n")
    _result, probe = run_probe(pytester)
    assert "xdist workers gw0 and gw1 differ in selected ids" in probe.notes
    assert probe.executed == []


def test_worker_killed_by_os_exit_shows_the_crashed_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_m="import os\ndef test_a(): pass\ndef test_b(): os._exit(3)\ndef test_c(): pass\n"
    )
    result, probe = run_probe(pytester)
    assert result.ret == 1
    assert probe.session_finished
    ids = ["test_m.py::test_a", "test_m.py::test_b", "test_m.py::test_c"]
    assert probe.selected == probe.executed == ids
    assert probe.outcomes["test_m.py::test_b"] == "failed"
    assert "test_m.py::test_b never reported its teardown (interrupted or crashed)" in probe.notes
