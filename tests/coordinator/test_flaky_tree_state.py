"""Flake evidence counts runs of one tree state only (#22): a test that failed exactly while an
uncommitted fixture edit was present is explained by the edit, not flaky. Real `charpin-remote
run --hosts local` nights on a real repository, then `ledger suggest` and drift.html's flaky list.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from charpin_coordinator.cli import main

from tests.conftest import make_repo
from tests.coordinator.test_html_since import dom

RUNNER = str(Path(__file__).resolve().parents[2] / "runner")
VAT = "tests/test_rates.py::test_vat"
FLIP = "tests/test_flip.py::test_flip"

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", RUNNER)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def _repo(root: Path) -> Path:
    return make_repo(
        root,
        {
            ".gitignore": "tests/.flip\n",
            "tests/__init__.py": "",
            "tests/fixtures/rates.json": '{"vat": "0.20"}\n',
            "tests/test_rates.py": (
                "import json, pathlib\n"
                "def test_vat():\n"
                "    p = pathlib.Path(__file__).parent / 'fixtures' / 'rates.json'\n"
                "    assert json.loads(p.read_text())['vat'] == '0.20'\n"
            ),
            # Really flaky: fails every other run of one and the same tree (an ignored marker
            # file is no part of the tree state, as it is no part of the dirty digest).
            "tests/test_flip.py": (
                "import pathlib\n"
                "def test_flip():\n"
                "    mark = pathlib.Path(__file__).parent / '.flip'\n"
                "    if mark.exists():\n"
                "        mark.unlink()\n"
                "        return\n"
                "    mark.write_text('x')\n"
                "    assert False, 'odd run'\n"
            ),
        },
    )


def _night(repo: Path, run_id: str) -> None:
    code = main(["run", "--repo", str(repo), "--hosts", "local", "--run-id", run_id, "-q", "--json"])
    assert not code & (4 | 8 | 64), code  # every box evaluated (a dirty tree may block a gate)


def test_failures_an_uncommitted_fixture_edit_explains_are_not_flake_evidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = _repo(tmp_path / "repo")
    fixture = repo / "tests/fixtures/rates.json"
    for night in ("n1", "n2", "n3"):  # a clean tree: vat passes, flip fails, passes, fails
        _night(repo, night)
    fixture.write_text('{"vat": "0.21"}\n')  # an uncommitted edit: vat fails while it is there
    _night(repo, "n4")  # flip passes
    _night(repo, "n5")  # flip fails
    capsys.readouterr()

    assert main(["ledger", "suggest", "--repo", str(repo), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    by_test = {c["nodeid"]: c["groups"] for c in found["candidates"]}
    # vat passed on every clean night and failed on every dirty one: not flaky (it was listed
    # "2 failures in 5 runs" when runs of one commit counted, whatever the tree held).
    assert set(by_test) == {FLIP}
    states = {g["tree_state"]: (g["rate"]["failures"], g["rate"]["runs"]) for g in by_test[FLIP]}
    assert states.pop("") == (2, 3)  # the clean tree
    [(dirty, counted)] = states.items()  # and the one dirty tree state
    assert counted == (1, 2) and len(dirty) == 64

    assert main(["ledger", "suggest", "--repo", str(repo)]) == 0
    text = capsys.readouterr().out
    assert f"dirty tree {dirty[:12]}" in text and "one tree state" in text

    # drift.html's flaky list, made from the same history on the last night (both tests failed
    # then), agrees; so does the index over the run folders.
    runs = repo / ".charpin/runs"
    for page_path in (runs / "n5/drift.html", runs / "index.html"):
        if page_path.name == "index.html":
            assert main(["history", "html", str(runs)]) == 0
        page = dom(page_path.read_text())
        rows = [r.text for r in page.by_id("flaky-table").find(lambda n: n.tag == "tr")[1:]]
        assert any(FLIP in row for row in rows), (page_path, rows)
        assert not any(VAT in row for row in rows), (page_path, rows)
