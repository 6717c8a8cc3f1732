"""drift.html with the run history: each box's trend (its earlier runs from the history database,
then this run) and the tests failing now that passed on the same box and commit in another run,
each repeat of `--repeat` counted as a run. Real `charpin-remote run --hosts local` runs recording
into a real history database."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from charpin_coordinator.drift import build_report
from charpin_coordinator.reports.html_history import history_sections

from tests.conftest import make_repo
from tests.coordinator.test_html_report import Page
from tests.coordinator.test_html_since import dom, links
from tests.receipt_factory import make_receipt

ROOT = Path(__file__).resolve().parents[2]

# Fails on the first run, passes on the second, fails on the third: one commit, three outcomes.
FLAKY = """\
import pathlib

COUNTER = pathlib.Path({counter!r})


def test_sometimes():
    n = int(COUNTER.read_text()) + 1 if COUNTER.exists() else 1
    COUNTER.write_text(str(n))
    assert n % 2 == 0, n


def test_always():
    pass
"""


def _run(repo: Path, runs: Path, run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "runner"), str(ROOT / "coordinator")])
    env["XDG_CACHE_HOME"] = str(runs.parent / "cache")
    argv = [sys.executable, "-m", "charpin_coordinator", "run", "--repo", str(repo)]
    argv += ["--hosts", "local", "--out", str(runs), "--run-id", run_id, "-q", *extra]
    # The counter lives outside the checkout, which the sandbox's view hides (rule 2).
    argv += ["--sandbox", "off"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_drift_html_shows_the_trend_and_the_flaky_tests_from_the_history(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    repo = make_repo(tmp_path / "repo", {"tests/test_flaky.py": FLAKY.format(counter=str(counter))})
    runs = tmp_path / "runs"
    for run_id in ("r1", "r2", "r3"):
        # r3 also compares with r2 (`--against last`): its own mark in the trend says changed.
        done = _run(repo, runs, run_id, *(["--against", "last"] if run_id == "r3" else []))
        assert (runs / run_id / "drift.html").is_file(), done.stderr
    assert (repo / ".charpin" / "history.sqlite").is_file()  # recorded after each run

    first = Page((runs / "r1" / "drift.html").read_text(encoding="utf-8"))
    assert "trend" not in first.ids and "flaky" not in first.ids  # no history before r1

    last = Page((runs / "r3" / "drift.html").read_text(encoding="utf-8"))
    assert {"trend", "trend-table", "flaky", "flaky-table"} <= last.ids
    # The trend's marks (a failing test's excerpt may show control characters as spans too).
    titles = [
        str(a["title"])
        for t, a in last.tags
        if t == "span" and "title" in a and a.get("class") != "ctl"
    ]
    assert [title.split(" · ")[1] for title in titles] == ["r1", "r2", "r3"]  # oldest first
    assert titles[-1].startswith("this run · r3 · not clean")  # one box: vacuous, never clean
    assert "0 of 3" in last.all_text
    assert "tests/test_flaky.py::test_sometimes" in last.all_text
    assert "2 of 3 runs" in last.all_text  # failed on r1 and r3, passed on r2
    # Only this run knows whether the box changed since its earlier receipt: r1 and r2 from the
    # database stay unmarked, r3 (test_sometimes failing again since r2) is marked.
    marks = [a for t, a in last.tags if t == "span" and "title" in a and a.get("class") != "ctl"]
    assert [str(a["class"]).split() for a in marks] == [["fail"], ["fail"], ["fail", "changed"]]
    assert "changed since r2: 1 new failure(s)" in str(marks[-1]["title"])
    assert "since" in last.ids


def test_a_night_s_repeats_are_shown_and_counted_as_runs_of_the_flaky_test(
    tmp_path: Path,
) -> None:
    counter = tmp_path / "counter"
    repo = make_repo(tmp_path / "repo", {"tests/test_flaky.py": FLAKY.format(counter=str(counter))})
    runs = tmp_path / "runs"
    for run_id in ("r1", "r2"):
        # Each night twice in a row: test_sometimes fails in repeat 1 and passes in repeat 2.
        done = _run(repo, runs, run_id, "--repeat", "2")
        assert (runs / run_id / "drift.html").is_file(), done.stderr
    page = dom((runs / "r2" / "drift.html").read_text(encoding="utf-8"))
    assert "#repeats" in links(page) and "#frozen-reruns" not in links(page)
    rows = page.by_id("repeat-matrix").find(lambda n: n.tag == "tr")[1:]
    cells = [[td.text for td in tr.find(lambda n: n.tag == "td")] for tr in rows]
    assert cells == [["tests/test_flaky.py::test_sometimes", "failed, passed"]]
    # The trend is one mark per night (its receipt of record), repeats or not.
    trend = page.by_id("trend-table")
    marks = trend.find(lambda n: n.tag == "span" and "title" in n.attrs)
    assert [m.attrs["title"].split(" · ")[1] for m in marks] == ["r1", "r2"]
    # The flaky test: r1 failed, r1.r2 passed (from the history), r2 failed, r2.r2 passed.
    flaky = page.by_id("flaky-table").find(lambda n: n.tag == "tr")[1:]
    found = [[td.text for td in tr.find(lambda n: n.tag == "td")] for tr in flaky]
    assert found == [["tests/test_flaky.py::test_sometimes", "local", "2 of 4 runs"]]


def test_without_a_history_database_there_are_no_history_sections(tmp_path: Path) -> None:
    report = build_report([("a", make_receipt("a")), ("b", make_receipt("b"))])
    assert history_sections(None, report, "r1") == (None, None)
    assert history_sections(tmp_path / "missing.sqlite", report, "r1") == (None, None)
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"not a database at all")
    trend, flaky = history_sections(broken, report, "r1")
    # An unreadable database costs the earlier runs, never the report.
    assert trend is not None and [p.run_id for p in trend["a"]] == ["r1"]
    assert flaky == []
