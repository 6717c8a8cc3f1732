"""A failing test is shown with why it failed (#22): the receipt carries a bounded excerpt per
failing test (its `E` lines and where), and the text, Markdown, HTML and JUnit reports of
`charpin-remote run` show it, with the coordinator's secrets masked in it."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from charpin_coordinator.cli import main

from tests.conftest import make_repo

RUNNER = str(Path(__file__).resolve().parents[2] / "runner")
SECRET = "hunter2-excerpt-token-93"
TESTS = (
    "import os\n\n\n"
    "def test_total():\n"
    "    total = 11\n"
    "    assert total == 12, 'the total moved'\n\n\n"
    "def test_token():\n"
    "    assert os.environ.get('APP_TOKEN') == 'other', os.environ.get('APP_TOKEN')\n\n\n"
    "def test_fine():\n"
    "    pass\n"
)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", RUNNER)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("APP_TOKEN", SECRET)


def test_a_failing_test_is_shown_with_why_in_every_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = make_repo(tmp_path / "repo", {"tests/test_total.py": TESTS})
    out = tmp_path / "runs"
    junit = tmp_path / "junit.xml"
    argv = ["run", "--repo", str(repo), "--hosts", "local", "--out", str(out), "--run-id", "r1"]
    code = main([*argv, "--junit", str(junit), "--sandbox", "off"])
    text, err = capsys.readouterr()
    assert code & 1, err  # a test failed (and one box is vacuous)
    receipt = json.loads((out / "r1" / "local" / "receipt.json").read_text())
    excerpts = receipt["failure_excerpt"]
    assert sorted(excerpts) == [
        "tests/test_total.py::test_token",
        "tests/test_total.py::test_total",
    ]
    total = excerpts["tests/test_total.py::test_total"]
    assert "E       AssertionError: the total moved" in total
    assert "tests/test_total.py:6: AssertionError" in total
    assert len(total.splitlines()) <= 12
    # The secret a test printed into its failure is masked before anything keeps it.
    every = [
        (out / "r1" / "local" / "receipt.json").read_text(),
        (out / "r1" / "drift.md").read_text(),
        (out / "r1" / "drift.html").read_text(),
        junit.read_text(),
        text,
    ]
    assert all(SECRET not in shown for shown in every)
    # (Whether the tests see the coordinator's APP_TOKEN at all is rule 6's matter: either way
    # the excerpt names the failing assert.)
    assert "AssertionError" in excerpts["tests/test_total.py::test_token"]
    # Each report shows the assertion message beside the failing test.
    for shown in every[1:]:
        assert "the total moved" in shown
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    [failure] = [c.find("failure") for n, c in cases.items() if n and n.endswith("test_total")]
    assert failure is not None and "the total moved" in (failure.text or "")
