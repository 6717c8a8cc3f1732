"""Rule 5: the probe's record reaches the parent through a channel the test process cannot
rewrite after the fact, and tamper checks compare content.

The record is the write end of a pipe the parent drains while the run goes: a line sent cannot
be taken back, a line after the finish line is tampering, and the failing ids are sent as soon
as pytest makes them, so editing the probe's own sets at the end changes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.hostile.harness import BOX_KINDS, host_for, repo_with, run

SUITE = "def test_ok():\n    pass\n\n\ndef test_bad():\n    assert 0\n"
BAD = "tests/test_suite.py::test_bad"

# The record's descriptor as the code under test finds it: charpin's boot moved the pipe named
# by --charpin-receipt=fd:N to private descriptors, which /proc/self/fd still lists.
FIND_RECORD = """
import os, stat, sys

def _record_fd():
    for name in sorted(os.listdir('/proc/self/fd'), key=int):
        try:
            if int(name) > 2 and stat.S_ISFIFO(os.fstat(int(name)).st_mode):
                return int(name)
        except OSError:
            pass
"""

# Finds the record wherever it is (a path before; the pipe's private descriptor now), writes a
# complete, passing record over or after it, and ends the process with status 0.
ATEXIT_FORGERY = FIND_RECORD + """
import atexit, json, os, sys

def _record():
    fd = _record_fd()
    if fd is not None:
        return f'fd:{fd}'
    for arg in sys.argv:
        if arg.startswith('--charpin-receipt='):
            return arg.split('=', 1)[1]

# A descriptor of its own, taken now: the probe closes the record's when pytest is done.
_where = _record()
_copy = os.dup(int(_where[3:])) if _where and _where.startswith('fd:') else None

def _forge():
    where = _where
    ids = ['tests/test_suite.py::test_ok', 'tests/test_suite.py::test_bad']
    lines = [{'kind': 'report', 'nodeid': i, 'outcome': 'passed', 'duration': 0.0} for i in ids]
    lines.append({'kind': 'finish', 'exitstatus': 0, 'leaked': [], 'failing': [],
                  'unverified': []})
    text = ''.join(json.dumps(line) + '\\n' for line in lines)
    if _copy is not None:
        os.write(_copy, text.encode())
    else:
        with open(where, 'a') as handle:
            handle.write(text)
    os._exit(0)

atexit.register(_forge)
"""

# Edits the probe's own state in place (identities stay): the prediction it made for the
# failing report becomes "xfailed" and the id leaves its failing set; then a report hook turns
# the failure into an xfail, which pytest does not count, so the session exits 0.
STATE_EDIT = """
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == 'call' and report.failed:
        probe = item.config.pluginmanager.get_plugin('charpin-probe')
        probe.seen[(report.nodeid, 'call')] = 'xfailed'
        probe.failing.discard(report.nodeid)

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    if report.when == 'call' and report.failed:
        report.outcome = 'skipped'
        report.wasxfail = 'forged'
"""

# Points the record's file descriptor at a pipe of its own (dup2) that drops every line
# about the failing test, and puts the original back before the session ends.
FD_SWAP = FIND_RECORD + """
import os, sys, threading
import pytest

_saved = {}

def _fd():
    return _record_fd()

def _pump(read_end, out):
    with os.fdopen(read_end, 'rb') as source:
        for line in source:
            if b'test_bad' not in line:
                os.write(out, line)

@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    fd = _fd()
    _saved['fd'], _saved['copy'] = fd, os.dup(fd)
    r, w = os.pipe()
    _saved['thread'] = threading.Thread(target=_pump, args=(r, _saved['copy']), daemon=True)
    _saved['thread'].start()
    os.dup2(w, fd)
    os.close(w)

@pytest.hookimpl(hookwrapper=True)
def pytest_runtestloop(session):
    yield
    session.testsfailed = 0
    os.dup2(_saved['copy'], _saved['fd'])
"""


def _not_clean(code: int, report: dict[str, Any]) -> dict[str, Any]:
    assert report["not_evaluated"] == [], report["not_evaluated"]
    (box,) = report["boxes"]
    assert box["interpretation"] != "ok", box
    assert code != 0
    return box


@pytest.mark.slow
@pytest.mark.parametrize("kind", BOX_KINDS)
def test_an_atexit_forgery_of_the_record_cannot_undo_the_failure(
    kind: str, sshd_factory: Any, tmp_path: Path
) -> None:
    hosts, boxes, ssh_config = host_for(kind, sshd_factory, tmp_path)
    repo = repo_with(
        tmp_path / "repo",
        {"tests/conftest.py": ATEXIT_FORGERY, "tests/test_suite.py": SUITE},
        boxes,
    )
    code, report, folder = run(repo, hosts, ssh_config=ssh_config)
    box = _not_clean(code, report)
    assert box["interpretation"] == "incomplete", box
    assert BAD in box["failing"], box
    receipt = (folder / hosts / "receipt.json").read_text()
    assert "written to its record after the session finished" in receipt


@pytest.mark.slow
@pytest.mark.parametrize("kind", BOX_KINDS)
def test_emptying_the_probes_state_in_place_hides_no_failure(
    kind: str, sshd_factory: Any, tmp_path: Path
) -> None:
    hosts, boxes, ssh_config = host_for(kind, sshd_factory, tmp_path)
    repo = repo_with(
        tmp_path / "repo",
        {"tests/conftest.py": STATE_EDIT, "tests/test_suite.py": SUITE},
        boxes,
    )
    code, report, folder = run(repo, hosts, ssh_config=ssh_config)
    box = _not_clean(code, report)
    assert box["interpretation"] == "incomplete", box
    assert BAD in box["failing"], box
    receipt = (folder / hosts / "receipt.json").read_text()
    assert f"another hook rewrote the outcome of {BAD}" in receipt


@pytest.mark.slow
def test_a_descriptor_swapped_under_the_probe_is_still_no_clean_run(tmp_path: Path) -> None:
    """Another of the same class, not fixed by hand: the record filtered through a pipe of the
    test's own, the descriptor put back before the end. The probe checks the descriptor before
    every line: the first one after the swap goes through its spare copy, saying so."""
    repo = repo_with(
        tmp_path / "repo", {"tests/conftest.py": FD_SWAP, "tests/test_suite.py": SUITE}
    )
    code, report, folder = run(repo, "clean")
    box = _not_clean(code, report)
    assert box["interpretation"] == "incomplete", box
    assert BAD in box["failing"], box
    receipt = (folder / "clean" / "receipt.json").read_text()
    assert "the code under test replaced the probe's channel" in receipt
