"""The probe plugin on ordinary runs: the JSON record it writes, and how quiet it stays."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import charpin_runner
import pytest
from charpin_runner.probe import ProbeData, read_probe

RUNNER_DIR = str(Path(charpin_runner.__file__).resolve().parent.parent)
PLUGIN = ("-p", "charpin_runner.plugin", "-p", "no:cacheprovider")

SUITE = """
import pytest

def test_pass():
    pass

def test_fail():
    assert 0

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert 0

@pytest.mark.xfail(reason="maybe fixed")
def test_xpass():
    pass

@pytest.mark.xfail(reason="must fail", strict=True)
def test_strict_xpass():
    pass

def test_skip():
    pytest.skip("not here")

@pytest.mark.skip(reason="never")
def test_skip_mark():
    pass

@pytest.fixture
def broken():
    raise RuntimeError("setup")

def test_setup_error(broken):
    pass

@pytest.fixture
def leaky():
    yield
    raise RuntimeError("teardown")

def test_teardown_error(leaky):
    pass
"""

SUITE_OUTCOMES = {
    "test_m.py::test_pass": "passed",
    "test_m.py::test_fail": "failed",
    "test_m.py::test_xfail": "xfailed",
    "test_m.py::test_xpass": "xpassed",
    "test_m.py::test_strict_xpass": "failed",
    "test_m.py::test_skip": "skipped",
    "test_m.py::test_skip_mark": "skipped",
    "test_m.py::test_setup_error": "error",
    "test_m.py::test_teardown_error": "error",
}


@pytest.fixture
def subprocess_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let `python -m pytest` children import charpin_runner, with no outer xdist state."""
    monkeypatch.setenv("PYTHONPATH", RUNNER_DIR)
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


def run_probe(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, ProbeData]:
    record = pytester.path / "probe.jsonl"
    result = pytester.runpytest(*PLUGIN, f"--charpin-receipt={record}", *args)
    return result, read_probe(record)


def normalised(lines: list[str]) -> list[str]:
    return [re.sub(r" in [0-9.]+s", " in Ns", line) for line in lines]


def test_plain_run_records_collection_execution_and_outcomes(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("")
    pytester.makepyfile(test_m=SUITE)
    result, probe = run_probe(pytester)
    assert result.ret == 1
    ids = sorted(SUITE_OUTCOMES)
    assert (probe.started, probe.collection_done, probe.session_finished) == (True, True, True)
    assert probe.pytest_status == 1
    assert probe.collected == ids
    assert probe.selected == ids
    assert probe.executed == ids
    assert probe.order == list(SUITE_OUTCOMES)
    assert (probe.filtered, probe.dropped, probe.late_dropped) == ([], [], [])
    assert probe.outcomes == SUITE_OUTCOMES
    assert sorted(probe.durations) == ids
    assert all(d >= 0.0 for d in probe.durations.values())
    # pytest's own xfail handling changes outcomes too; it must not look like tampering.
    assert probe.rewritten == []
    assert probe.notes == []
    assert probe.ledger.path is None and probe.ledger.leaked == []
    assert probe.pytest_version == pytest.__version__
    assert probe.conftests == ["conftest.py"]
    # charpin's own probe is not one of the project's plugins, under either of its names (#22).
    assert not [p for p in probe.plugins if p.startswith("charpin")], probe.plugins


def test_filtering_by_pytest_options_is_recorded_as_filtered(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_m="def test_fast_a(): pass\ndef test_fast_b(): pass\ndef test_slow(): pass\n"
    )
    result, probe = run_probe(pytester, "-k", "not slow", "--deselect", "test_m.py::test_fast_b")
    result.assert_outcomes(passed=1, deselected=2)
    assert probe.collected == [
        "test_m.py::test_fast_a",
        "test_m.py::test_fast_b",
        "test_m.py::test_slow",
    ]
    assert probe.filtered == ["test_m.py::test_fast_b", "test_m.py::test_slow"]
    assert probe.dropped == []
    assert probe.selected == ["test_m.py::test_fast_a"]
    assert probe.executed == ["test_m.py::test_fast_a"]
    assert probe.ledger.deselected == []


def test_conftests_loaded_during_collection_are_listed(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("")
    sub = pytester.mkpydir("sub")
    (sub / "conftest.py").write_text("")
    (sub / "test_s.py").write_text("def test_s(): pass\n")
    _result, probe = run_probe(pytester)
    assert probe.conftests == ["conftest.py", "sub/conftest.py"]
    assert probe.executed == ["sub/test_s.py::test_s"]


def test_charpin_root_rebases_ids_onto_the_repository(pytester: pytest.Pytester) -> None:
    proj = pytester.mkdir("proj")
    (proj / "pytest.ini").write_text("[pytest]\n")
    (proj / "conftest.py").write_text("")
    (proj / "test_r.py").write_text("def test_one(): pass\ndef test_two(): pass\n")
    ledger = pytester.path / "ledger.json"
    entry = {"id": "proj/test_r.py::test_two", "reason": "r", "owner": "o", "expires": "2099-01-01"}
    ledger.write_text(json.dumps({"version": 1, "entries": [entry]}))
    result, probe = run_probe(
        pytester, "proj", "--charpin-root=.", f"--charpin-ledger={ledger}", "--rootdir=proj"
    )
    result.assert_outcomes(passed=1, deselected=1)
    assert probe.collected == ["proj/test_r.py::test_one", "proj/test_r.py::test_two"]
    assert probe.executed == ["proj/test_r.py::test_one"]
    assert probe.outcomes == {"proj/test_r.py::test_one": "passed"}
    assert probe.ledger.path == "ledger.json"
    assert probe.ledger.frozen == ["proj/test_r.py::test_two"]
    assert probe.conftests == ["proj/conftest.py"]


def test_charpin_root_given_through_a_symlink_still_rebases(pytester: pytest.Pytester) -> None:
    proj = pytester.mkdir("proj")
    (proj / "pytest.ini").write_text("[pytest]\n")
    (proj / "test_r.py").write_text("def test_one(): pass\n")
    alias = pytester.path.parent / f"{pytester.path.name}-alias"
    alias.symlink_to(pytester.path, target_is_directory=True)
    _result, probe = run_probe(pytester, "proj", f"--charpin-root={alias}", "--rootdir=proj")
    assert probe.executed == ["proj/test_r.py::test_one"]
    assert probe.notes == []


def test_plugin_is_inert_without_the_receipt_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m=SUITE)
    ledger = pytester.path / "ledger.json"
    entry = {"id": "test_m.py::test_fail", "reason": "r", "owner": "o", "expires": "2099-01-01"}
    ledger.write_text(json.dumps({"version": 1, "entries": [entry]}))
    before = sorted(p.name for p in pytester.path.iterdir())
    # Without --charpin-receipt even --charpin-ledger does nothing: no file, no deselection.
    with_plugin = pytester.runpytest(*PLUGIN, "-q", "-rA", f"--charpin-ledger={ledger}")
    without = pytester.runpytest(
        "-p", "no:charpin_runner.plugin", "-p", "no:cacheprovider", "-q", "-rA"
    )
    assert sorted(p.name for p in pytester.path.iterdir()) == before
    assert normalised(with_plugin.outlines) == normalised(without.outlines)
    assert with_plugin.ret == without.ret == 1


def test_probe_is_quiet_under_warnings_as_errors(
    pytester: pytest.Pytester, subprocess_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONWARNINGS", "error")
    pytester.makepyfile(test_m="def test_a(): pass\ndef test_b(): pass\n")
    ledger = pytester.path / "ledger.json"
    entry = {"id": "test_m.py::test_gone", "reason": "r", "owner": "o", "expires": "2000-01-01"}
    ledger.write_text(json.dumps({"version": 1, "entries": [entry]}))
    record = pytester.path / "probe.jsonl"
    args = ("-W", "error", "-q", "-rA", "-p", "no:cacheprovider")
    plain = pytester.runpytest_subprocess(*args, timeout=120)
    probed = pytester.runpytest_subprocess(
        *args,
        "-p",
        "charpin_runner.plugin",
        f"--charpin-receipt={record}",
        f"--charpin-ledger={ledger}",
        timeout=120,
    )
    assert probed.ret == plain.ret == 0
    assert normalised(probed.outlines) == normalised(plain.outlines)
    assert probed.errlines == []
    probe = read_probe(record)
    assert probe.session_finished and probe.executed == ["test_m.py::test_a", "test_m.py::test_b"]
    assert probe.ledger.stale == ["test_m.py::test_gone"]
    assert probe.ledger.expired == ["test_m.py::test_gone"]


def test_works_without_xdist(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m="def test_a(): pass\n")
    result, probe = run_probe(pytester, "-p", "no:xdist")
    assert result.ret == 0
    assert probe.session_finished and probe.outcomes == {"test_m.py::test_a": "passed"}


def test_unwritable_record_path_is_one_usage_error_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m="def test_a(): pass\n")
    result = pytester.runpytest(*PLUGIN, "--charpin-receipt=missing/probe.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.startswith("ERROR:")]
    assert len(errors) == 1
    assert "cannot write the charpin probe record" in errors[0]
    assert "create its folder" in errors[0]


def test_bad_today_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m="def test_a(): pass\n")
    result = pytester.runpytest(*PLUGIN, "--charpin-receipt=p.jsonl", "--charpin-today=31/12/2026")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --charpin-today '31/12/2026' is not a date; write it as*"])


def test_read_probe_of_a_missing_file_says_the_plugin_never_started(tmp_path: Path) -> None:
    probe = read_probe(tmp_path / "absent.jsonl")
    assert (probe.started, probe.collection_done, probe.session_finished) == (False, False, False)
    assert probe.notes == ["probe record absent.jsonl was never written: the plugin did not start"]


def test_read_probe_survives_garbage_and_keeps_partial_data(tmp_path: Path) -> None:
    lines = [
        {"kind": "start", "pytest_version": "9", "plugins": [], "conftests": []},
        {"kind": "collection", "collected": ["a::t", "a::u"], "selected": ["a::t", "a::u"]},
        {"kind": "setup", "nodeid": "a::t"},
        {"kind": "report", "nodeid": "a::t", "outcome": "passed", "duration": 0.5},
        {"kind": "report", "nodeid": "a::u", "outcome": "exploded", "duration": 1},
        {"kind": "report", "nodeid": "a::v", "outcome": "passed", "duration": "slow"},
        {"kind": "mystery"},
        ["not", "an", "object"],
        {"kind": "setup", "nodeid": "a::u"},
    ]
    text = "\n".join(json.dumps(line) for line in lines)
    path = tmp_path / "probe.jsonl"
    path.write_text(text + '\nthis is not json\n{"kind": "finish", "exitst')
    probe = read_probe(path)
    assert probe.started and probe.collection_done and not probe.session_finished
    assert probe.outcomes == {"a::t": "passed"}
    assert probe.durations == {"a::t": 0.5}
    assert probe.executed == ["a::t", "a::u"]
    assert probe.notes == [
        "line 5 (report) is malformed; ignored",
        "line 6 (report) is malformed; ignored",
        "line 7 has no known kind; ignored",
        "line 8 has no known kind; ignored",
        "line 10 is not JSON; ignored",
        "truncated last line ignored",
        "the test session never finished (no finish line): it ended early",
        "started but never reported an outcome: a::u",
    ]


def test_plugin_spells_the_repository_placeholder_as_the_receipt_does() -> None:
    # plugin.py copies the constant so that loading it never imports receipt.py (start-up cost).
    from charpin_runner import plugin, receipt

    assert plugin.REPO_IN_IDS == receipt.REPO_IN_IDS


def test_ids_over_a_suite_agree_with_one_id_at_a_time() -> None:
    # _ids searches all ids for the repository at once (collection is a hot path); the result
    # must be _id's, id by id, whether or not some id holds the repository's path.
    import types

    from charpin_runner import plugin

    roots = ("/work/app",)
    probe: Any = types.SimpleNamespace(
        prefix="sub/",
        roots=roots,
        root_pattern=re.compile(re.escape(roots[0]) + r"(?![\w.-])"),
    )
    plain = ["t.py::test_a", "t.py::test_b[x]"]
    with_root = [*plain, "t.py::test_c[/work/app/data.csv]", "t.py::test_d[/work/app2/x]"]
    # Joined for the search, two ids must not make up the root between them.
    split = ["t.py::test_e[/work/", "app]"]
    for nodeids in (plain, with_root, split, []):
        items = [types.SimpleNamespace(nodeid=n) for n in nodeids]
        assert plugin.Probe._ids(probe, items) == [plugin.Probe._id(probe, n) for n in nodeids]
    assert plugin.Probe._ids(probe, [types.SimpleNamespace(nodeid=with_root[2])]) == [
        "sub/t.py::test_c[{repo}/data.csv]"
    ]
