"""drift.html and the run index: every section, escaping of receipt text, history sections, the
run folder's drift.html and `charpin-remote history html DIR` (without a browser; the pages in a
real browser are tests/coordinator/test_html_browser.py)."""

from __future__ import annotations

import html.parser
import os
from pathlib import Path

import msgspec
import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.drift import build_report
from charpin_coordinator.remote import results
from charpin_coordinator.report import GATES, DriftReport, NotEvaluated
from charpin_coordinator.reports.common import encode_json
from charpin_coordinator.reports.html_base import attr, text
from charpin_coordinator.reports.html_index import (
    IndexedRun,
    derive_flaky,
    derive_trend,
    render_index,
)
from charpin_coordinator.reports.html_report import render_html
from charpin_coordinator.reports.html_trend import FlakyTest, TrendPoint
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.receipt_factory import IDS, make_receipt

SCRIPT = "<script>document.title='pwned'</script>"
IMG = "<img src=x onerror=\"document.title='img'\">"
RTL = "rtl\u202egpj.exe"
HOSTILE = [SCRIPT, IMG, RTL, "a\x1b[31mred\nline", "quote\"'&amp;", "zero\u200bwidth\u2066isolate"]

# Everything the renderer itself writes; a receipt string must never add to this.
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4", "nav", "a",
    "section", "div", "p", "ul", "li", "table", "thead", "tbody", "tr", "th", "td", "code",
    "span", "strong", "br", "pre", "footer",
}  # fmt: skip


class Page(html.parser.HTMLParser):
    """The parts of a page the tests look at: tags, attributes, ids, text by element id."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.ids: set[str] = set()
        self.text: list[str] = []
        self.feed(source)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if dict(attrs).get("id"):
            self.ids.add(str(dict(attrs)["id"]))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    @property
    def all_text(self) -> str:
        return "".join(self.text)


def _report() -> DriftReport:
    flipped = {**dict.fromkeys(IDS, "passed"), IDS[1]: "failed"}
    receipts = [make_receipt("ci"), make_receipt("laptop", outcomes=flipped)]
    missing = [NotEvaluated(label="old-box", kind="refused", reason="old-box: connection refused")]
    return build_report([(r.label, r) for r in receipts], not_evaluated=missing)


def _hostile_report() -> DriftReport:
    outcomes = {**dict.fromkeys(IDS, "passed")}
    outcomes.update({f"tests/test_x.py::test_h[{h}]": "failed" for h in HOSTILE})
    ids = sorted(outcomes)
    collection = {
        "collection.collected": ids,
        "collection.selected": ids,
        "collection.executed": ids,
        "collection.order": ids,
    }
    written = {"tree.written": ["<img src=y onerror=\"document.title='file'\">.txt", "\u202eevil"]}
    receipts = [
        make_receipt(SCRIPT, outcomes=outcomes, **collection, **written),
        make_receipt(RTL, outcomes={**outcomes, IDS[0]: "failed"}, **collection),
    ]
    return build_report([(r.label, r) for r in receipts])


def _clean(value: str) -> str:
    """What a reader sees of value: invisible characters spelled out."""
    return "".join(c if c == text(c) or c in "<>&\"'" else _spelled(c) for c in value)


def _spelled(c: str) -> str:
    code = ord(c)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def test_text_escapes_markup_and_shows_invisible_characters() -> None:
    assert text(SCRIPT) == "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;"
    assert text('a"b') == "a&quot;b"
    shown = text(RTL)
    assert "\u202e" not in shown
    assert shown == 'rtl<span class="ctl" title="U+202E">\\u202e</span>gpj.exe'
    assert text("a\x1bb\nc") == (
        'a<span class="ctl" title="U+001B">\\x1b</span>b'
        '<span class="ctl" title="U+000A">\\x0a</span>c'
    )
    for invisible in ("\u200b", "\u2066", "\u2028", "\ufeff", "\U000e0041", "\x85", "\u061c"):
        assert invisible not in text(f"x{invisible}y")
    assert text("lone\ud800").encode("utf-8")  # a lone surrogate can be written out
    assert attr(f'{RTL}"\n') == "rtl\\u202egpj.exe&quot;\\x0a"


def test_the_page_has_every_section_and_the_gate_matrix() -> None:
    report = _report()
    page = Page(render_html(report))
    assert {"summary", "boxes", "gates", "gate-matrix", "blocking", "outcomes", "outcome-matrix",
            "failing", "failing-tests", "drift", "not-evaluated", "not-evaluated-list"} <= page.ids  # fmt: skip
    assert "trend" not in page.ids and "flaky" not in page.ids  # only with history data
    rows = [a for tag, a in page.tags if tag == "tr" and "data-box" in a]
    # boxes x gates: one row per evaluated box in the gate matrix, plus the box not evaluated
    assert [a["data-box"] for a in rows[:3]] == ["ci", "laptop", "old-box"]
    cells = [a for tag, a in page.tags if tag == "td" and "data-gate" in a]
    assert [c["data-gate"] for c in cells] == [*GATES, *GATES]
    assert "NOT EVALUATED (refused)" in page.all_text
    assert f"{IDS[1]}" in page.all_text and "old-box: connection refused" in page.all_text


def test_the_page_is_self_contained() -> None:
    source = render_html(_hostile_report())
    page = Page(source)
    assert {tag for tag, _ in page.tags} <= ALLOWED_TAGS
    assert "script" not in {tag for tag, _ in page.tags}
    for tag, attrs in page.tags:
        assert not [name for name in attrs if name.startswith("on")], (tag, attrs)
        assert "src" not in attrs
        href = attrs.get("href")
        if href is not None:
            assert href.startswith("#"), href  # nothing outside the page
    csp = next(a for t, a in page.tags if t == "meta" and a.get("http-equiv"))
    assert "default-src 'none'" in str(csp["content"])


def test_the_title_holds_no_markup() -> None:
    report = msgspec.structs.replace(_report(), expected_commit="<b>\u202e1234")
    source = render_html(report)
    title = source.split("<title>", 1)[1].split("</title>", 1)[0]
    assert title == f"charpin drift · commit &lt;b&gt;\\u202e1234 · exit {report.exit_code}"
    assert "<span" not in title


def test_hostile_labels_ids_and_file_names_are_text() -> None:
    source = render_html(_hostile_report())
    page = Page(source)
    assert {tag for tag, _ in page.tags} <= ALLOWED_TAGS
    shown = page.all_text
    for hostile in HOSTILE:
        assert _clean(f"tests/test_x.py::test_h[{hostile}]") in shown
    assert "<img src=y onerror=\"document.title='file'\">.txt" in shown  # the file name, as text
    assert "\\u202eevil" in shown
    assert "\u202e" not in source and "\x1b" not in source
    assert source.encode("utf-8")


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_no_string_becomes_markup(value: str) -> None:
    outcomes = {**dict.fromkeys(IDS, "passed"), f"tests/t.py::test[{value}]": "failed"}
    ids = sorted(outcomes)
    parts = {
        "collection.collected": ids,
        "collection.selected": ids,
        "collection.executed": ids,
        "collection.order": ids,
        "outcomes": outcomes,
    }
    receipts = [make_receipt(f"box{value}", **parts), make_receipt("other")]
    report = build_report([(r.label, r) for r in receipts])
    source = render_html(report)
    page = Page(source)
    assert {tag for tag, _ in page.tags} <= ALLOWED_TAGS
    assert all(not name.startswith("on") for _, attrs in page.tags for name in attrs)
    assert _clean(f"tests/t.py::test[{value}]") in page.all_text


def test_trend_and_flaky_sections_take_plain_data() -> None:
    trend = {
        "ci": [
            TrendPoint("r1", "2026-11-29", True),
            TrendPoint("r2", "2026-11-30", False, "gates not passing: Clean tree"),
        ],
        SCRIPT: [TrendPoint(*("r3", "2026-11-30", True))],
    }
    flaky = [FlakyTest(IMG, "ci", 2, 5)]
    page = Page(render_html(_report(), trend=trend, flaky=flaky))
    assert {"trend", "trend-table", "flaky", "flaky-table"} <= page.ids
    titles = [a["title"] for t, a in page.tags if t == "span" and "title" in a]
    assert "2026-11-30 · r2 · not clean: gates not passing: Clean tree" in titles
    assert "1 of 2" in page.all_text and "2 of 5 runs" in page.all_text
    assert IMG in page.all_text and SCRIPT in page.all_text
    empty = Page(render_html(_report(), trend={}, flaky=[]))
    assert "No nights recorded yet." in empty.all_text and "None found." in empty.all_text


def test_the_run_folder_holds_drift_html(tmp_path: Path) -> None:
    page = render_html(_report()).encode()
    files = results.ReportFiles(drift_json=b"{}\n", drift_md=b"# drift\n", drift_html=page)
    folder = results.write_run(tmp_path, "run-1", [], files)
    assert (folder / "drift.html").read_bytes() == page
    assert (folder / "drift.md").exists() and (folder / "drift.json").exists()


def _run_folder(root: Path, name: str, report: DriftReport, *, page: bool = True) -> None:
    files = results.ReportFiles(
        drift_json=encode_json(report),
        drift_md=b"# drift\n",
        drift_html=render_html(report).encode() if page else None,
    )
    results.write_run(root, name, [], files)


def _flaky_reports() -> list[DriftReport]:
    """Three nights of one commit: IDS[1] fails on laptop in the first and the last."""
    nights = []
    for failing in (True, False, True):
        outcomes = {**dict.fromkeys(IDS, "passed"), IDS[1]: "failed" if failing else "passed"}
        receipts = [make_receipt("ci"), make_receipt("laptop", outcomes=outcomes)]
        nights.append(build_report([(r.label, r) for r in receipts]))
    return nights


def test_history_html_indexes_every_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    names = ["20261128T031700Z-aaaaaa", "20261129T031700Z-bbbbbb", "20261130T031700Z-cccccc"]
    for name, report in zip(names, _flaky_reports(), strict=True):
        _run_folder(runs, name, report, page=name != names[0])
    (runs / "broken").mkdir()
    (runs / "broken" / "drift.json").write_text('{"not": "a report"}')
    os.utime(runs / "broken" / "drift.json", (1_800_000_000, 1_800_000_000))  # 2027-01-15
    (runs / ".20261201T000000Z-dddddd.partial-1234").mkdir()  # a run being written
    (runs / "notes").mkdir()  # no drift.json: not a run folder
    os.symlink(runs / names[1], runs / "linked")  # never followed
    assert main(["history", "html", str(runs)]) == 0
    assert capsys.readouterr().out == (
        f"wrote {runs / 'index.html'}: 4 run(s), 1 unreadable (listed with the reason)\n"
    )
    source = (runs / "index.html").read_text()
    page = Page(source)
    order = [a["data-run"] for t, a in page.tags if t == "tr" and "data-run" in a]
    # newest first; "broken" has no time in its name: its file's time puts it first
    assert order == ["broken", *reversed(names)]
    links = [a["href"] for t, a in page.tags if t == "a" and not str(a["href"]).startswith("#")]
    assert links == [
        "broken/drift.json",
        f"{names[2]}/drift.html",
        f"{names[1]}/drift.html",
        f"{names[0]}/drift.json",  # no drift.html in that folder
    ]
    assert "drift.json is not a drift report: Object contains unknown field `not`" in page.all_text
    assert "2026-11-30 03:17:00 UTC" in page.all_text
    assert "2027-01-15 08:00:00 UTC" in page.all_text
    trend = [a for t, a in page.tags if t == "tr" and a.get("data-box")]
    assert [a["data-box"] for a in trend] == ["ci", "laptop"]
    assert "3 of 3" in page.all_text and "1 of 3" in page.all_text  # ci clean, laptop once
    assert IDS[1] in page.all_text and "2 of 3 runs" in page.all_text  # flaky on laptop
    assert {tag for tag, _ in page.tags} <= ALLOWED_TAGS


def test_history_html_refuses_a_missing_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["history", "html", str(tmp_path / "nope")]) == 64
    assert "is not a folder" in capsys.readouterr().err


def test_derived_trend_and_flaky() -> None:
    runs = [
        IndexedRun(name=f"r{i}", started=f"2026-11-{28 + i}", report=r)
        for i, r in enumerate(_flaky_reports())
    ][::-1]  # newest first, as the index lists them
    trend = derive_trend(runs)
    assert [p.clean for p in trend["laptop"]] == [False, True, False]  # oldest first
    assert [p.run_id for p in trend["laptop"]] == ["r0", "r1", "r2"]
    assert "1 failing test(s)" in trend["laptop"][0].note
    assert trend["ci"][0] == TrendPoint("r0", "2026-11-28", True, "")
    assert derive_flaky(runs) == [FlakyTest(IDS[1], "laptop", 2, 3)]
    # Another commit is another question: the two failing nights moved to a second commit
    # leave one night per commit, and nothing flaky.
    moved = [
        IndexedRun(run.name, run.started, _on_commit(run.report, "f" * 40)) if i != 1 else run
        for i, run in enumerate(runs)
    ]
    assert derive_flaky(moved) == []


def _on_commit(report: DriftReport | None, commit: str) -> DriftReport:
    assert report is not None
    boxes = [msgspec.structs.replace(b, commit=commit) for b in report.boxes]
    return msgspec.structs.replace(report, boxes=boxes)


def test_index_page_escapes_folder_names() -> None:
    runs = [IndexedRun(name='"><script>x</script>', started="now", report=None, problem=SCRIPT)]
    source = render_index(runs, where=IMG)
    page = Page(source)
    assert {tag for tag, _ in page.tags} <= ALLOWED_TAGS
    [link] = [a["href"] for t, a in page.tags if t == "a" and not str(a["href"]).startswith("#")]
    assert link == "%22%3E%3Cscript%3Ex%3C%2Fscript%3E/drift.json"
    assert SCRIPT in page.all_text and IMG in page.all_text
