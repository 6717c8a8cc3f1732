"""drift.html's "Since" section (`run --against`): each box against its own earlier receipt, the
comparison made by the real temporal.compare_box on receipts that differ one thing at a time,
the page parsed into a small DOM (the section, never the page, is looked at as text)."""

from __future__ import annotations

import html.parser
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
from charpin_coordinator.drift import build_report
from charpin_coordinator.report import DriftReport, Since, SinceBox
from charpin_coordinator.reports.html_index import IndexedRun, derive_trend, render_index
from charpin_coordinator.reports.html_report import render_html
from charpin_coordinator.temporal import compare_box, with_since
from charpin_runner.receipt import FileState, Receipt
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.coordinator.test_html_report import ALLOWED_TAGS, HOSTILE, IMG, RTL, SCRIPT, _clean
from tests.receipt_factory import FIXTURE, IDS, make_receipt

VOID = {"meta", "br"}
NEW = "tests/test_c.py::test_new"


@dataclass
class Node:
    """An element: its tag, attributes and children (text as str)."""

    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """textContent, as a browser gives it."""
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            if isinstance(child, Node):
                yield from child.walk()

    def find(self, match: Callable[[Node], bool]) -> list[Node]:
        return [node for node in self.walk() if match(node)]

    def one(self, match: Callable[[Node], bool]) -> Node:
        [found] = self.find(match)
        return found

    def by_id(self, element_id: str) -> Node:
        return self.one(lambda n: n.attrs.get("id") == element_id)


class _Builder(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        # Close up to the matching element (the renderer writes well-formed markup; a stray
        # end tag would show up as a structure the asserts do not find).
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return
        raise AssertionError(f"</{tag}> closes nothing")

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def dom(source: str) -> Node:
    builder = _Builder()
    builder.feed(source)
    builder.close()
    assert builder.stack == [builder.root], [n.tag for n in builder.stack]  # all closed
    return builder.root


def since_box(page: Node, box: str) -> Node:
    return page.one(
        lambda n: "since-box" in n.attrs.get("class", "") and n.attrs["data-box"] == box
    )


def kind(box: Node, key: str) -> list[str]:
    """The items of one kind of change in a box's block."""
    lists = box.find(lambda n: n.tag == "ul" and n.attrs.get("data-kind") == key)
    assert len(lists) <= 1, key
    return [li.text for ul in lists for li in ul.find(lambda n: n.tag == "li")]


def row(page: Node, box: str) -> Node:
    table = page.by_id("since-table")
    return table.one(lambda n: n.tag == "tr" and n.attrs.get("data-box") == box)


def row_marks(page: Node, box: str) -> list[Node]:
    """A box's marks in the trend table, oldest first."""
    tr = page.by_id("trend-table").one(lambda n: n.tag == "tr" and n.attrs.get("data-box") == box)
    return tr.find(lambda n: n.tag == "span" and "title" in n.attrs)


def night(label: str = "ci", **parts: Any) -> Receipt:
    return make_receipt(label, **parts)


def with_tests(outcomes: dict[str, str], **parts: Any) -> dict[str, Any]:
    """Receipt parts for a box that collected and ran exactly these tests."""
    ids = sorted(outcomes)
    return {
        "collection.collected": ids,
        "collection.selected": ids,
        "collection.executed": ids,
        "collection.order": ids,
        "outcomes": outcomes,
        "durations": dict.fromkeys(ids, 0.01),
        **parts,
    }


def report_since(
    now: list[Receipt], earlier: dict[str, tuple[str, Receipt]], *, gating: bool = False
) -> DriftReport:
    """This run's report over `now`, with each box compared to its earlier (run id, receipt)."""
    report = build_report([(r.label, r) for r in now])
    boxes = [compare_box(r.label, r, earlier.get(r.label)) for r in now]
    return with_since(report, Since(against="last", gating=gating, boxes=boxes))


def failing_now() -> Receipt:
    """ci, the night after: test_two fails, test_three is gone, test_new came (and fails)."""
    outcomes = {IDS[0]: "passed", IDS[1]: "failed", NEW: "failed"}
    return night(
        **with_tests(outcomes, **{"exit.status": 1, "exit.interpretation": "tests-failed"})
    )


def test_without_against_there_is_no_since_section() -> None:
    page = dom(render_html(build_report([("ci", night()), ("b", night("b"))])))
    assert page.find(lambda n: n.attrs.get("id") in {"since", "since-table"}) == []
    assert "#since" not in links(page)
    assert "Since" not in page.by_id("summary").text


def links(page: Node) -> list[str]:
    return [n.attrs["href"] for n in page.find(lambda n: n.tag == "a" and "href" in n.attrs)]


def test_a_new_failure_and_tests_that_vanished_and_appeared() -> None:
    report = report_since(
        [failing_now(), night("b")], {"ci": ("r1", night()), "b": ("r1", night("b"))}
    )
    page = dom(render_html(report))
    section = page.by_id("since")
    assert section.one(lambda n: n.tag == "h2").text == "Since run r1"
    assert "#since" in links(page) and "#since-box-0" in links(page)
    summary = page.by_id("summary").text
    assert "Since run r1: 1 of 2 compared box(es) changed, informational" in summary

    ci = row(page, "ci")
    assert ci.attrs["data-since"] == "changed"
    cells = [td.text for td in ci.find(lambda n: n.tag == "td")]
    assert cells[:3] == ["ci", "r1", "1" * 12]
    assert cells[3].startswith("2 new failure(s) · changed: collection, outcomes, exit")
    assert cells[4] == "informational"
    assert row(page, "b").attrs["data-since"] == "unchanged"
    assert [td.text for td in row(page, "b").find(lambda n: n.tag == "td")][3] == "no changes"

    block = since_box(page, "ci")
    assert block.one(lambda n: n.tag == "h3").text == f"ci since r1 (commit {'1' * 12})"
    assert kind(block, "new-failures") == [IDS[1], NEW]
    assert kind(block, "vanished") == [IDS[2]]
    assert kind(block, "appeared") == [NEW]
    assert kind(block, "outcomes") == []  # every outcome change is said by a list above
    assert kind(block, "exit") == ["now: exit 1 (tests-failed) vs before 0 (ok)"]
    assert kind(block, "likely-cause") == []
    # b did not change: a row, no block.
    assert page.find(lambda n: n.attrs.get("data-box") == "b" and n.tag == "div") == []
    assert "Informational" in page.by_id("since-gating").text


def test_a_test_that_stopped_failing_and_a_fixture_that_started_mutating() -> None:
    before = night(**with_tests(dict.fromkeys(IDS, "passed") | {IDS[0]: "failed"}))
    parts: dict[str, Any] = {
        "fixtures.changed": [FIXTURE.path],
        "outcomes": {**dict.fromkeys(IDS, "passed"), IDS[2]: "skipped"},
    }
    after = night(**parts)
    page = dom(render_html(report_since([after], {"ci": ("r1", before)})))
    block = since_box(page, "ci")
    assert kind(block, "fixed") == [f"{IDS[0]}: failed → passed"]
    assert kind(block, "outcomes") == [f"{IDS[2]}: passed → skipped"]
    assert kind(block, "fixtures-started") == [f"{FIXTURE.path} content changed during the run"]
    assert kind(block, "new-failures") == []


def test_a_python_upgrade_is_shown_as_the_likely_cause() -> None:
    before = night(**{"environment.python": "3.11.7"})
    parts = with_tests(
        {IDS[0]: "passed", IDS[1]: "failed", IDS[2]: "passed"},
        **{
            "environment.python": "3.12.1",
            "environment.plugins": ["pytest-xdist-3.5.0"],
            "exit.status": 1,
            "exit.interpretation": "tests-failed",
        },
    )
    # Two boxes alike (no drift across them): exit bit 2 can only come from --gate-against-last.
    boxes = [make_receipt("ci", **parts), make_receipt("twin", **parts)]
    page = dom(render_html(report_since(boxes, {"ci": ("r1", before)}, gating=True)))
    block = since_box(page, "ci")
    cause = (
        "Python 3.11.7 → 3.12.1; plugin pytest-xdist-3.5.0 added (coincides with the changes below)"
    )
    [shown] = block.find(lambda n: n.attrs.get("data-kind") == "likely-cause")
    assert shown.text == f"Likely cause: {cause}"
    assert kind(block, "new-failures") == [IDS[1]]
    assert kind(block, "environment") == [
        "now vs before: python '3.12.1' vs '3.11.7'; pytest plugins differ: +pytest-xdist-3.5.0"
    ]
    cells = [td.text for td in row(page, "ci").find(lambda n: n.tag == "td")]
    assert cells[3].endswith(f"likely cause: {cause}")
    assert cells[4] == "exit bit 2"  # --gate-against-last, and the box changed
    assert "Gating (--gate-against-last)" in page.by_id("since-gating").text
    verdict = page.by_id("verdict").text
    assert verdict.startswith("exit 3: ") and verdict.endswith(
        "2 changed since the reference run (--gate-against-last)"
    )
    assert row(page, "twin").attrs["data-since"] == "none"
    assert "gating (--gate-against-last)" in page.by_id("summary").text


def test_an_upgrade_alone_is_informational_and_not_a_cause() -> None:
    upgraded = night(**{"environment.python": "3.12.1"})
    page = dom(render_html(report_since([upgraded], {"ci": ("r1", night())}, gating=True)))
    cells = [td.text for td in row(page, "ci").find(lambda n: n.tag == "td")]
    assert cells[3] == "no changes · environment: Python 3.11.7 → 3.12.1"
    assert cells[4] == "PASS"
    block = since_box(page, "ci")
    assert kind(block, "likely-cause") == [] and len(kind(block, "environment")) == 1


def test_a_box_with_no_earlier_receipt_says_so() -> None:
    report = report_since([night(), night("new-box")], {"ci": ("r1", night())})
    page = dom(render_html(report))
    none = row(page, "new-box")
    assert none.attrs["data-since"] == "none"
    assert [td.text for td in none.find(lambda n: n.tag == "td")] == [
        "new-box",
        "nothing to compare with: no earlier receipt for this box",
    ]
    assert page.find(lambda n: n.tag == "div" and n.attrs.get("data-box") == "new-box") == []
    assert (
        "0 of 1 compared box(es) changed, 1 with no earlier receipt" in page.by_id("summary").text
    )
    # No box has one (the first night): the heading says what was asked.
    first = dom(render_html(report_since([night()], {})))
    assert first.by_id("since").one(lambda n: n.tag == "h2").text == "Since the last run"
    assert row(first, "ci").attrs["data-since"] == "none"


def test_boxes_against_different_runs_share_no_run_in_the_heading() -> None:
    report = report_since(
        [failing_now(), night("b")], {"ci": ("r1", night()), "b": ("r0", night("b"))}
    )
    page = dom(render_html(report))
    assert page.by_id("since").one(lambda n: n.tag == "h2").text == "Since each box's last run"


def test_hostile_ids_labels_file_names_and_run_ids_stay_text() -> None:
    hostile_ids = [f"tests/test_x.py::test_h[{h}]" for h in HOSTILE]
    label = f"{SCRIPT}{RTL}"
    before = night(label, **with_tests(dict.fromkeys(IDS, "passed") | {hostile_ids[0]: "passed"}))
    now_outcomes = dict.fromkeys(IDS, "passed") | dict.fromkeys(hostile_ids[1:], "failed")
    hostile_file = f"tests/fixtures/{IMG}\u202e.json"
    fixture = FileState(hostile_file, "file", 0o644, "c" * 64, None)
    after = night(
        label,
        **with_tests(
            now_outcomes,
            **{
                "fixtures.before": [FIXTURE, fixture],
                "fixtures.after": [FIXTURE, fixture],
                "fixtures.changed": [hostile_file],
                "environment.plugins": [f"pytest-{SCRIPT}-1.0"],
            },
        ),
    )
    run_id = f'r1"><script>x</script>{RTL}'
    report = build_report([(label, after)])
    found = Since(
        against=f"{IMG}\x1b", gating=False, boxes=[compare_box(label, after, (run_id, before))]
    )
    source = render_html(with_since(report, found))
    page = dom(source)
    tags = {n.tag for n in page.walk()} - {"#document"}
    assert tags <= ALLOWED_TAGS
    for node in page.walk():
        assert not [name for name in node.attrs if name.startswith("on")], node.attrs
        assert "src" not in node.attrs
        assert node.attrs.get("href", "#").startswith("#")
    assert "\u202e" not in source and "\x1b" not in source

    # attr() spells invisible characters out as text, as _clean does for element text.
    block = page.one(lambda n: n.tag == "div" and n.attrs.get("data-box") == _clean(label))
    heading = block.one(lambda n: n.tag == "h3").text
    assert heading == f"{_clean(label)} since {_clean(run_id)} (commit {'1' * 12})"
    assert kind(block, "new-failures") == [_clean(i) for i in sorted(hostile_ids[1:])]
    assert kind(block, "vanished") == [_clean(hostile_ids[0])]
    assert kind(block, "appeared") == [_clean(i) for i in sorted(hostile_ids[1:])]
    assert kind(block, "fixtures-started") == [
        _clean(f"{hostile_file} content changed during the run")
    ]
    assert f"plugin pytest-{SCRIPT}-1.0 added" in (
        block.one(lambda n: n.attrs.get("data-kind") == "likely-cause").text
    )
    assert _clean(f"--against {IMG}\x1b") in page.by_id("since").text
    # The markers are real elements: a reader sees \u202e, never the override itself.
    markers = {n.text for n in block.find(lambda n: "ctl" in n.attrs.get("class", "").split())}
    assert markers >= {"\\u202e", "\\x1b", "\\x0a"}


def test_the_index_trend_marks_the_nights_that_changed() -> None:
    nights = []
    for name, earlier, now in (
        ("r1", None, night()),
        ("r2", ("r1", night()), night()),
        ("r3", ("r2", night()), failing_now()),
        ("r4", None, night()),  # a night run without --against
    ):
        report = build_report([("ci", now), ("b", night("b"))])
        if name != "r4":
            boxes = [compare_box("ci", now, earlier)]
            report = with_since(report, Since(against="last", gating=False, boxes=boxes))
        nights.append(IndexedRun(name=name, started=f"2026-12-0{name[1]}", report=report))
    trend = derive_trend(nights[::-1])
    assert [p.changed for p in trend["ci"]] == [None, False, True, None]
    assert trend["ci"][2].since.startswith("since r2: 2 new failure(s)")
    assert [p.changed for p in trend["b"]] == [None] * 4  # never compared
    page = dom(render_index(nights[::-1], where="runs"))
    ci = row_marks(page, "ci")
    assert [m.text for m in ci] == ["✓", "✓", "✗Δ", "✓"]
    # b was never compared: the cross-box drift of r3 marks it not clean, never changed.
    assert [m.text for m in row_marks(page, "b")] == ["✓", "✓", "✗", "✓"]
    assert "changed" in ci[2].attrs["class"].split()
    assert ci[1].attrs["title"] == "2026-12-02 · r2 · clean · no change since r1: no changes"
    assert "Δ (ringed) the box changed since its earlier receipt" in page.by_id("trend").text


def test_a_trend_without_comparisons_has_no_change_legend() -> None:
    page = dom(render_html(build_report([("ci", night())]), trend={"ci": []}))
    assert "Δ" not in page.by_id("trend").text


def test_a_minimal_since_box_renders() -> None:
    # Only the required fields (no commit, no dimensions): the row says what it can.
    report = msgspec.structs.replace(
        build_report([("ci", night())]),
        since=Since(
            against="last",
            gating=False,
            boxes=[SinceBox(box="ci", reference="r0", summary="no changes")],
        ),
    )
    page = dom(render_html(report))
    cells = [td.text for td in row(page, "ci").find(lambda n: n.tag == "td")]
    assert cells == ["ci", "r0", "-", "no changes", "informational"]


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_no_string_in_the_since_section_becomes_markup(value: str) -> None:
    test_id = f"tests/t.py::test[{value}]"
    now = night(f"box{value}", **with_tests(dict.fromkeys(IDS, "passed") | {test_id: "failed"}))
    found = Since(
        against=value,
        gating=True,
        boxes=[compare_box(now.label, now, (f"run{value}", night(now.label)))],
    )
    page = dom(render_html(with_since(build_report([(now.label, now)]), found)))
    assert {n.tag for n in page.walk()} - {"#document"} <= ALLOWED_TAGS
    assert all(not name.startswith("on") for n in page.walk() for name in n.attrs)
    block = since_box(page, _clean(now.label))
    assert kind(block, "new-failures") == [_clean(test_id)]
    assert kind(block, "appeared") == [_clean(test_id)]
