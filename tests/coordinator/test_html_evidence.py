"""drift.html's evidence-only sections (Repeats of `run --repeat N`, frozen tests re-run by
`--include-frozen`), and the history's trend and flaky tests when the history holds repeats and
frozen side runs. Reports are built by the real evidence builder from real receipts
(receipt_factory), run folders by the coordinator's own writer and recorded by the history's
recorder (history_factory); the page is parsed into a small DOM."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgspec
import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.drift import build_report
from charpin_coordinator.evidence import Attempt, frozen_section, repeats_section, with_evidence
from charpin_coordinator.history import outcome_timeline
from charpin_coordinator.history import record as history_record
from charpin_coordinator.report import DriftReport, NotEvaluated
from charpin_coordinator.reports.common import encode_json
from charpin_coordinator.reports.html_cli import load_runs
from charpin_coordinator.reports.html_history import history_sections
from charpin_coordinator.reports.html_index import derive_flaky, derive_trend
from charpin_coordinator.reports.html_report import render_html
from charpin_coordinator.reports.html_trend import FlakyTest
from charpin_runner.receipt import Receipt

from tests.coordinator.test_html_report import ALLOWED_TAGS, HOSTILE, IMG, RTL, SCRIPT, _clean
from tests.coordinator.test_html_since import Node, dom, links
from tests.history_factory import box, days_ago, run_folder
from tests.receipt_factory import IDS, frozen_rerun

FLAKY, STEADY = IDS[0], IDS[1]
FROZEN = "tests/test_mail.py::test_relay"
OTHER = "tests/test_mail.py::test_smtp"
NEW = "tests/test_c.py::test_new"
STARTED = "2026-06-01T00:00:00Z"
TIMEOUT = NotEvaluated(label="a", kind="timeout", reason="a: killed at the 60s box deadline")


def _report(*tries: tuple[str, list[Attempt]], count: int = 3, frozen: bool = False) -> DriftReport:
    """This run's report over each box's repeat 1, with the Repeats section (count > 1) and the
    frozen one (frozen) built from every attempt, as `run` builds them."""
    records = [(label, t[0].receipt) for label, t in tries]
    report = build_report([(label, r) for label, r in records if r is not None])
    boxes = list(tries)
    return with_evidence(
        report,
        repeats=repeats_section(count, boxes) if count > 1 else None,
        frozen=frozen_section(boxes) if frozen else None,
    )


def _flip() -> tuple[str, list[Attempt]]:
    """Box a: FLAKY passed, failed in repeat 2, repeat 3 timed out."""
    return (
        "a",
        [
            Attempt(1, "r1", box("a", "r1", STARTED)),
            Attempt(2, "r1.r2", box("a", "r1.r2", STARTED, failing=[FLAKY])),
            Attempt(3, "r1.r3", None, TIMEOUT),
        ],
    )


def _steady(label: str = "b") -> tuple[str, list[Attempt]]:
    tries = [
        Attempt(k, f"r1.r{k}" if k > 1 else "r1", box(label, "r1", STARTED)) for k in (1, 2, 3)
    ]
    return label, tries


def _texts(node: Node, tag: str) -> list[str]:
    return [n.text for n in node.find(lambda n: n.tag == tag)]


def _row(node: Node, box_label: str, **attrs: str) -> Node:
    return node.one(
        lambda n: (
            n.tag == "tr"
            and n.attrs.get("data-box") == box_label
            and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())
        )
    )


def _safe(source: str) -> Node:
    """The page's DOM, after checking no receipt string became markup."""
    page = dom(source)
    tags = {n.tag for n in page.walk()} - {"#document"}
    assert tags <= ALLOWED_TAGS, tags - ALLOWED_TAGS
    assert not [a for n in page.walk() for a in n.attrs if a.startswith("on")]
    assert all(n.attrs["href"].startswith("#") for n in page.walk() if "href" in n.attrs)
    return page


def test_repeats_show_each_flip_per_box_and_never_gate() -> None:
    plain = _report(_flip(), _steady(), count=1)
    report = _report(_flip(), _steady())
    page = _safe(render_html(report))
    assert "#repeats" in links(page) and "#frozen-reruns" not in links(page)
    assert page.find(lambda n: n.attrs.get("id") == "frozen-reruns") == []
    summary = page.by_id("summary").text
    assert "Repeats (--repeat 3, never gating): 1 test(s) differ between repeats on 1 of 2 box(es); 1 repeat(s) not evaluated" in summary  # fmt: skip
    # The result is the record's: the same verdict as the run without repeats.
    assert page.by_id("verdict").text == dom(render_html(plain)).by_id("verdict").text

    section = page.by_id("repeats")
    assert _texts(section, "h2") == ["Repeats"]
    gating = page.by_id("repeats-gating").text
    assert "never gating; repeat 1 is the receipt of record" in gating
    assert "Repeats never gate" in gating
    boxes = page.by_id("repeat-boxes")
    assert _texts(_row(boxes, "a"), "td") == ["a", "2 of 3", "1", "r1, r1.r2, r1.r3"]
    assert _texts(_row(boxes, "b"), "td") == ["b", "3 of 3", "0", "r1, r1.r2, r1.r3"]

    matrix = page.by_id("repeat-matrix")
    assert _texts(matrix, "th") == ["test", "a"]  # only boxes where something differed
    [row] = matrix.find(lambda n: n.tag == "tr" and n.find(lambda c: c.tag == "td"))
    test, cell = row.find(lambda n: n.tag == "td")
    assert (test.text, test.attrs["class"]) == (FLAKY, "fail id")  # as a failing row
    assert cell.text == "passed, failed, -"
    spans = cell.find(lambda n: n.tag == "span")
    assert [s.attrs["class"] for s in spans] == ["pass", "fail", "muted"]
    [miss] = _texts(page.by_id("repeat-not-evaluated"), "li")
    assert miss == "a repeat 3 NOT EVALUATED (timeout): a: killed at the 60s box deadline"


def test_a_test_that_flips_on_two_boxes_has_a_cell_per_box() -> None:
    b = (
        "b",
        [
            Attempt(1, "r1", box("b", "r1", STARTED, failing=[FLAKY])),
            Attempt(2, "r1.r2", box("b", "r1.r2", STARTED, failing=[STEADY])),
        ],
    )
    a = ("a", _flip()[1][:2])
    page = _safe(render_html(_report(a, b, count=2)))
    matrix = page.by_id("repeat-matrix")
    assert _texts(matrix, "th") == ["test", "a", "b"]
    rows = [
        [td.text for td in tr.find(lambda n: n.tag == "td")]
        for tr in matrix.find(lambda n: n.tag == "tr")[1:]
    ]
    assert rows == [
        [FLAKY, "passed, failed", "failed, passed"],
        [STEADY, "same each repeat", "passed, failed"],
    ]
    assert "2 test(s) differ between repeats on 2 of 2 box(es)" in page.by_id("summary").text
    assert page.find(lambda n: n.attrs.get("id") == "repeat-not-evaluated") == []


def test_repeats_where_nothing_differs_say_so() -> None:
    page = _safe(render_html(_report(_steady("a"), _steady())))
    section = page.by_id("repeats")
    assert "No test ended differently between repeats on any box." in section.text
    assert section.find(lambda n: n.attrs.get("id") == "repeat-matrix") == []
    assert "Repeats (--repeat 3, never gating): no test differs between repeats" in (
        page.by_id("summary").text
    )


def _side_runs() -> DriftReport:
    """a: its record's side run clean, repeat 2's not (OTHER failed, a fixture moved, a test
    not run), repeats 3 and 4 ended exactly as repeat 2; b: no side run."""
    not_clean = frozen_rerun(
        {FROZEN: "passed", OTHER: "failed"},
        requested=[FROZEN, OTHER, NEW],
        fixtures_changed=["tests/fixtures/rates.json"],
    )
    a = (
        "a",
        [
            Attempt(
                1, "r1", box("a", "r1", STARTED, frozen_rerun=frozen_rerun({FROZEN: "passed"}))
            ),
            *(
                Attempt(k, f"r1.r{k}", box("a", f"r1.r{k}", STARTED, frozen_rerun=not_clean))
                for k in (2, 3, 4)
            ),
        ],
    )
    b = ("b", [Attempt(1, "r1", box("b", "r1", STARTED))])
    return _report(a, b, count=1, frozen=True)


def test_frozen_re_runs_show_each_side_run_outside_the_gate() -> None:
    report = _side_runs()
    page = _safe(render_html(report))
    assert "#frozen-reruns" in links(page) and "#repeats" not in links(page)
    assert page.find(lambda n: n.attrs.get("id") == "repeats") == []
    summary = page.by_id("summary").text
    assert "Frozen tests re-run (outside the gate): 1 of 4 side run(s) clean; not clean: a (repeats 2-4)" in summary  # fmt: skip
    section = page.by_id("frozen-reruns")
    assert _texts(section, "h2") == ["Frozen tests re-run (outside the gate)"]
    assert "outside the gate: never changes a gate or the exit code" in (
        page.by_id("frozen-gating").text
    )
    table = page.by_id("frozen-table")
    clean = [td for td in _row(table, "a", data_repeat="1").find(lambda n: n.tag == "td")]
    assert [td.text for td in clean[:3]] == ["a", "1 (r1)", "clean (ok) · 0.5 s"]
    assert clean[2].attrs["class"] == "pass"
    assert _texts(clean[3], "li") == [f"{FROZEN}: passed"]
    assert clean[4].text == ""
    dirty = [td for td in _row(table, "a", data_repeat="2").find(lambda n: n.tag == "td")]
    # Repeats 3 and 4 ended exactly as repeat 2: its row says so, as the text report does.
    assert [td.text for td in dirty[:3]] == [
        "a",
        "2 (r1.r2)repeats 3-4: the same",
        "not clean (failed) · 0.5 s",
    ]
    assert [r.attrs["data-repeat"] for r in table.find(lambda n: n.tag == "tr")[1:]] == ["1", "2"]
    assert dirty[2].attrs["class"] == "fail"
    listed = dirty[3].find(lambda n: n.tag == "li")
    assert [li.text for li in listed] == [
        f"{NEW}: not run",
        f"{FROZEN}: passed",
        f"{OTHER}: failed",
    ]
    outcome_classes = [li.one(lambda n: n.tag == "span").attrs["class"] for li in listed]
    assert outcome_classes == ["muted", "pass", "fail"]
    assert dirty[4].text.startswith("a frozen test did not pass")
    assert "fixture changed: tests/fixtures/rates.json" in dirty[4].text
    [absent] = _texts(page.by_id("frozen-absent"), "li")
    assert absent.startswith("b: no frozen tests re-run (no ledger, the ledger freezes no test")
    # Outside the gate: the page's verdict is the one without the section.
    plain = msgspec.structs.replace(report, frozen_reruns=msgspec.UNSET)
    assert page.by_id("verdict").text == dom(render_html(plain)).by_id("verdict").text


def test_without_evidence_the_page_has_neither_section() -> None:
    report = _report(_flip(), _steady(), count=1)
    assert isinstance(report.repeats, msgspec.UnsetType)
    page = _safe(render_html(report))
    ids = {n.attrs.get("id") for n in page.walk()}
    assert not ids & {"repeats", "repeat-boxes", "repeat-matrix", "frozen-reruns", "frozen-table"}
    assert not {"#repeats", "#frozen-reruns"} & set(links(page))
    summary = page.by_id("summary").text
    assert "Repeats" not in summary and "Frozen" not in summary
    # --include-frozen with no box giving a receipt: the section, saying so.
    empty = with_evidence(build_report([]), frozen=frozen_section([]))
    section = _safe(render_html(empty)).by_id("frozen-reruns")
    assert "No box gave a receipt." in section.text


def _hostile(receipt: Receipt, reason: str) -> Receipt:
    assert receipt.frozen_rerun is not None
    side = dataclasses.replace(receipt.frozen_rerun, reasons=[reason])
    return dataclasses.replace(receipt, frozen_rerun=side)


def test_hostile_ids_labels_and_reasons_stay_text() -> None:
    label = f"box{SCRIPT}{RTL}"
    ids = [f"tests/test_x.py::test_h[{h}]" for h in HOSTILE]
    side = frozen_rerun({ids[0]: "failed", ids[2]: "passed"}, requested=[ids[0], ids[1], ids[2]])
    record = box(label, "r1", STARTED, extra=ids, frozen_rerun=side)
    again = box(label, f"r1.r2{IMG}", STARTED, extra=ids, failing=ids, frozen_rerun=side)
    missed = NotEvaluated(label=label, kind="timeout", reason=f"{SCRIPT} \u202e\x1b[31m")
    tries = [
        Attempt(1, "r1", record),
        Attempt(2, f"r1.r2{IMG}", _hostile(again, f"{IMG}\u2066")),
        Attempt(3, "r1.r3", None, missed),
    ]
    source = render_html(_report((label, tries), frozen=True))
    page = _safe(source)
    assert "\u202e" not in source and "\x1b" not in source and "\u2066" not in source
    shown = page.by_id("repeats").text + page.by_id("frozen-reruns").text
    for nodeid in ids:
        assert _clean(nodeid) in shown
    for said in (label, f"r1.r2{IMG}", f"{SCRIPT} \u202e\x1b[31m", f"{IMG}\u2066"):
        assert _clean(said) in shown, said
    # In attributes too: spelled out, never raw.
    boxes = {n.attrs["data-box"] for n in page.walk() if "data-box" in n.attrs}
    assert _clean(label) in boxes
    matrix = page.by_id("repeat-matrix")
    assert [n.attrs["data-box"] for n in matrix.find(lambda n: n.tag == "th" and n.attrs)] == [
        _clean(label)
    ]


# --- the history: trend and flaky tests with repeats and frozen side runs ------------------


@pytest.fixture
def history(tmp_path: Path) -> Path:
    """Box a, recorded:
    n0  FROZEN frozen (not in the gated run); its side runs: repeat 1 "not run", repeat 2
        "passed". FLAKY and STEADY fail.
    n1  FROZEN unfrozen, failing; FLAKY fails, passes in repeat 2, fails in repeat 3; STEADY
        fails in every repeat; a side run of repeat 1 asked for STEADY and did not run it."""
    out = tmp_path / "runs"
    t0, t1 = days_ago(3), days_ago(2)
    n0 = box(
        "a",
        "n0",
        t0,
        failing=[FLAKY, STEADY],
        frozen_rerun=frozen_rerun({}, requested=[FROZEN]),
    )
    n0r2 = box(
        "a",
        "n0.r2",
        t0,
        failing=[FLAKY, STEADY],
        frozen_rerun=frozen_rerun({FROZEN: "passed"}),
    )
    run_folder(out, "n0", [n0], repeats={"a": [n0r2]})
    n1 = box(
        "a",
        "n1",
        t1,
        failing=[FLAKY, STEADY, FROZEN],
        extra=[FROZEN],
        frozen_rerun=frozen_rerun({}, requested=[STEADY]),
    )
    n1r2 = box("a", "n1.r2", t1, failing=[STEADY, FROZEN], extra=[FROZEN])
    n1r3 = box("a", "n1.r3", t1, failing=[FLAKY, STEADY, FROZEN], extra=[FROZEN])
    run_folder(out, "n1", [n1], repeats={"a": [n1r2, n1r3]})
    db = tmp_path / "history.sqlite"
    for folder in sorted(out.iterdir()):
        history_record.record(db, [folder])
    return db


def _tonight(count: int) -> DriftReport:
    """n9 on box a: FLAKY, STEADY and FROZEN fail; in repeat 2 FLAKY passes and NEW (a test the
    history never saw) fails."""
    failing = [FLAKY, STEADY, FROZEN]
    tries = [
        Attempt(1, "n9", box("a", "n9", STARTED, failing=failing, extra=[FROZEN, NEW])),
        Attempt(
            2,
            "n9.r2",
            box("a", "n9.r2", STARTED, failing=[STEADY, FROZEN, NEW], extra=[FROZEN, NEW]),
        ),
    ][:count]
    return _report(("a", tries), count=count)


def test_the_trend_is_one_mark_per_run_whatever_the_history_holds_beside_it(
    history: Path,
) -> None:
    # The history does hold the repeats and side runs (what the counting below must sort out).
    points = outcome_timeline(history, STEADY).boxes[0].points
    assert [(p.run_id, p.repeat, p.source, p.outcome) for p in points] == [
        ("n1", 1, "run", "failed"),
        ("n1", 1, "frozen-rerun", "not run"),
        ("n1.r2", 2, "run", "failed"),
        ("n1.r3", 3, "run", "failed"),
        ("n0", 1, "run", "failed"),
        ("n0.r2", 2, "run", "failed"),
    ]
    trend, _ = history_sections(history, _tonight(2), "n9")
    assert trend is not None
    assert [p.run_id for p in trend["a"]] == ["n0", "n1", "n9"]
    page = _safe(render_html(_tonight(2), trend=trend))
    row = _row(page.by_id("trend-table"), "a")
    assert len(row.find(lambda n: n.tag == "span")) == 3


def test_flaky_counts_repeats_as_runs_and_never_frozen_side_runs(history: Path) -> None:
    _, flaky = history_sections(history, _tonight(2), "n9")
    assert flaky is not None
    assert sorted(flaky) == sorted(
        [
            # n9 failed, n9.r2 passed; n1 failed, n1.r2 passed, n1.r3 failed; n0 and n0.r2 failed
            FlakyTest(FLAKY, "a", 5, 7),
            # Tonight's repeats alone: the history has never seen it.
            FlakyTest(NEW, "a", 1, 2),
        ]
    )
    # STEADY failed in every run and repeat: its side run's "not run" is no pass. FROZEN failed
    # in every gated run: its side runs ("not run", then "passed") are outside the gate.
    page = _safe(render_html(_tonight(2), flaky=flaky))
    rows = [
        [td.text for td in tr.find(lambda n: n.tag == "td")]
        for tr in page.by_id("flaky-table").find(lambda n: n.tag == "tr")[1:]
    ]
    assert [FLAKY, "a", "5 of 7 runs"] in rows


def test_without_repeats_tonight_the_history_s_repeats_still_count(history: Path) -> None:
    _, flaky = history_sections(history, _tonight(1), "n9")
    assert flaky == [FlakyTest(FLAKY, "a", 5, 6)]


# --- the index (`history html`): run folders with repeats ---------------------------------


def _folder_with_repeats(out: Path, run_id: str, started: str) -> DriftReport:
    """A real run folder of box a with repeats 2 (FLAKY failed, NEW absent) and 3 (timed out),
    its drift.json carrying the Repeats section as `run --repeat 3` writes it."""
    record = box("a", run_id, started, extra=[NEW])
    again = box("a", f"{run_id}.r2", started, failing=[FLAKY])
    run_folder(out, run_id, [record], repeats={"a": [again, TIMEOUT]})
    tries = [
        Attempt(1, run_id, record),
        Attempt(2, f"{run_id}.r2", again),
        Attempt(3, "x", None, TIMEOUT),
    ]
    report = _report(("a", tries))
    (out / run_id / "drift.json").write_bytes(encode_json(report))
    return report


def test_the_index_reads_folders_with_repeats_and_counts_them_as_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs"
    _folder_with_repeats(out, "20260601T000000Z-n1", STARTED)
    assert (out / "20260601T000000Z-n1" / "a" / "repeats" / "2" / "receipt.json").is_file()
    runs = load_runs(out)
    assert [run.name for run in runs] == ["20260601T000000Z-n1"] and runs[0].report is not None
    assert [p.run_id for p in derive_trend(runs)["a"]] == ["20260601T000000Z-n1"]
    # One night: passed in the record, failed in repeat 2; NEW was absent from repeat 2 (no run
    # of it), repeat 3 gave no receipt.
    assert derive_flaky(runs) == [FlakyTest(FLAKY, "a", 1, 2)]
    assert main(["history", "html", str(out)]) == 0, capsys.readouterr().err
    page = dom((out / "index.html").read_text(encoding="utf-8"))  # links to the run folders
    [row] = page.by_id("flaky-table").find(lambda n: n.tag == "tr")[1:]
    assert [td.text for td in row.find(lambda n: n.tag == "td")] == [FLAKY, "a", "1 of 2 runs"]


def test_the_index_adds_repeats_to_the_other_runs_of_the_commit(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    _folder_with_repeats(out, "20260601T000000Z-n1", STARTED)
    failed = box("a", "20260602T000000Z-n2", STARTED, failing=[FLAKY, NEW], extra=[NEW])
    run_folder(out, "20260602T000000Z-n2", [failed])
    found = {f.test: f for f in derive_flaky(load_runs(out))}
    assert found[FLAKY] == FlakyTest(FLAKY, "a", 2, 3)
    # NEW passed in n1's record, was absent from its repeat 2, failed in n2: 1 of 2 runs.
    assert found[NEW] == FlakyTest(NEW, "a", 1, 2)
