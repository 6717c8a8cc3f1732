"""Reports a person reads (#22): one real `charpin-remote run --hosts local,clean` of a suite with
every outcome and a test whose 30 of 45 subtests fail, then each report read as a maintainer
would read a red CI: the JUnit file a CI test tab shows, drift.html (run id, date, the boxes'
logs), the text report's subtest counts, and `compare --record` of the same receipts (a fleet).
"""

from __future__ import annotations

import contextlib
import io
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from charpin_coordinator.cli import main

from tests.conftest import make_repo
from tests.coordinator.test_html_since import Node, dom, links

RUNNER = str(Path(__file__).resolve().parents[2] / "runner")

SUITE = {
    "tests/__init__.py": "",
    "tests/test_mix.py": (
        "import unittest\n"
        "import pytest\n\n"
        "def test_pass():\n"
        "    assert 1 + 1 == 2\n\n"
        "def test_fail():\n"
        "    assert {'a': 1} == {'a': 2}, 'the totals differ'\n\n"
        "@pytest.fixture\n"
        "def broken():\n"
        "    raise RuntimeError('fixture exploded')\n\n"
        "def test_error(broken):\n"
        "    pass\n\n"
        "@pytest.mark.skip(reason='not on this box')\n"
        "def test_skip():\n"
        "    pass\n\n"
        "@pytest.mark.xfail(reason='known bug')\n"
        "def test_xfail():\n"
        "    assert False\n\n"
        "class Table(unittest.TestCase):\n"
        "    def test_many(self):\n"
        "        for i in range(45):\n"
        "            with self.subTest(i=i):\n"
        "                self.assertLess(i, 15)\n"
    ),
}
MANY = "tests/test_mix.py::Table::test_many"


@dataclass(frozen=True)
class Ran:
    repo: Path
    folder: Path
    junit: Path
    text: str


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ran]:
    root = tmp_path_factory.mktemp("read")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", RUNNER)
        mp.setenv("XDG_CACHE_HOME", str(root / "xdg-cache"))
        mp.setenv("XDG_STATE_HOME", str(root / "xdg-state"))
        for name, value in (("NAME", "charpin test"), ("EMAIL", "test@charpin.invalid")):
            mp.setenv(f"GIT_AUTHOR_{name}", value)
            mp.setenv(f"GIT_COMMITTER_{name}", value)
        repo = make_repo(root / "repo", SUITE)
        out, junit = root / "runs", root / "drift.xml"
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            argv = ["run", "--repo", str(repo), "--hosts", "local,clean", "--out", str(out)]
            code = main([*argv, "--junit", str(junit), "-q"])
        assert code == 1, said.getvalue()  # tests failed; no drift
        [folder] = list(out.iterdir())
        yield Ran(repo, folder, junit, said.getvalue())


def _suites(path: Path) -> dict[str, ET.Element]:
    return {s.get("name") or "": s for s in ET.parse(path).getroot().iter("testsuite")}


def _case(suite: ET.Element, name: str) -> ET.Element:
    found = [c for c in suite.iter("testcase") if c.get("name") == name]
    assert len(found) == 1, [c.get("name") for c in suite.iter("testcase")]
    return found[0]


@pytest.mark.slow
def test_junit_lists_every_test_of_every_box_with_its_outcome(ran: Ran) -> None:
    suites = _suites(ran.junit)
    assert set(suites) == {
        "charpin.local",
        "charpin.local.tests",
        "charpin.clean",
        "charpin.clean.tests",
    }
    # The gates stay a suite of their own: seven cases, all passing (no drift here).
    gates = suites["charpin.clean"]
    assert gates.get("tests") == "7" and gates.get("failures") == "0"
    tests = suites["charpin.clean.tests"]
    assert (tests.get("tests"), tests.get("failures"), tests.get("errors")) == ("6", "2", "1")
    assert tests.get("skipped") == "2"
    passed = _case(tests, "tests/test_mix.py::test_pass")
    assert list(passed) == [] and passed.get("file") == "tests/test_mix.py"
    assert _case(tests, "tests/test_mix.py::test_fail").find("failure") is not None
    assert _case(tests, "tests/test_mix.py::test_error").find("error") is not None
    skipped = _case(tests, "tests/test_mix.py::test_xfail").find("skipped")
    assert skipped is not None and skipped.get("message") == "xfailed"
    many = _case(tests, MANY).find("failure")
    said = (many.text or "").splitlines() if many is not None else []
    # The failure's excerpt first (#22), then the subtests that failed, one a line.
    at = said.index("failing subtests:")
    assert "AssertionError" in " ".join(said[:at]), said
    assert said[at + 1] == "(i=15)" and said[-1] == "and 10 more", said
    root = ET.parse(ran.junit).getroot()
    assert root.get("tests") == str(2 * 7 + 2 * 6) and root.get("failures") == "4"


@pytest.mark.slow
def test_the_text_report_counts_subtests_and_says_how_many_it_did_not_name(ran: Ran) -> None:
    box_line = next(line for line in ran.text.splitlines() if line.startswith("  clean: commit"))
    assert "subtests: 15 passed, 30 failed" in box_line
    [failing] = [line for line in ran.text.splitlines() if line.startswith(f"  clean: {MANY}")]
    # The receipt names the first 20 failing subtests; the report says 10 more failed.
    assert "(i=15), (i=16)" in failing and failing.endswith("(i=34) and 10 more")
    report = json.loads((ran.folder / "drift.json").read_text())
    clean = next(box for box in report["boxes"] if box["label"] == "clean")
    assert clean["subtests"] == {"passed": 15, "failed": 30}
    assert clean["failing_subtest_counts"] == {MANY: 30}


def _box_links(page: Node) -> list[str]:
    return links(page.by_id("box-table"))


@pytest.mark.slow
def test_drift_html_shows_the_run_id_the_date_and_links_each_boxs_logs(ran: Ran) -> None:
    page = dom((ran.folder / "drift.html").read_text())
    meta = page.by_id("run-meta").text
    assert ran.folder.name in meta and " UTC" in meta
    found = _box_links(page)
    for box in ("local", "clean"):
        for name in ("stdout.log", "stderr.log", "receipt.json"):
            assert f"{box}/{name}" in found
    # Relative links that resolve inside the run folder, to files that exist.
    for href in found:
        target = (ran.folder / href).resolve()
        assert target.is_file() and target.is_relative_to(ran.folder.resolve())
    stdout = (ran.folder / "clean" / "stdout.log").read_text()
    assert "test_fail" in stdout  # what the link leads to: pytest's own report


@pytest.mark.slow
def test_compare_record_of_a_fleet_writes_drift_html_and_junit(
    ran: Ran, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fleet workflows keep the compare's run folder and promise a drift.html in it."""
    monkeypatch.chdir(ran.repo)
    out, junit = tmp_path / "runs", tmp_path / "fleet.xml"
    argv = ["compare", "--record", "--out", str(out), "--history", str(tmp_path / "h.sqlite")]
    code = main([*argv, "--junit", str(junit), "--json", str(ran.folder)])
    assert code == 1
    [folder] = list(out.iterdir())
    page = dom((folder / "drift.html").read_text())
    meta = page.by_id("run-meta").text
    assert folder.name in meta and "(receipts), compared" in meta
    found = _box_links(page)
    # A fleet's receipts come without logs: the page links what the folder holds.
    assert sorted(found) == ["clean/receipt.json", "local/receipt.json"]
    assert all((folder / href).is_file() for href in found)
    suites = _suites(junit)
    assert suites["charpin.local.tests"].get("tests") == "6"
