"""Receipt text is data in every renderer: rich markup, Markdown, HTML and XML stay inert.

A receipt's label, node ids and file names are written by whoever controls the box or the code
under test. Rendered on a terminal they must not become OSC 8 hyperlinks or escape sequences;
rendered as Markdown (a PR comment) they must not become links, HTML, headings or table cells.
The Markdown is checked with a real CommonMark renderer (markdown-it-py, which rich depends on).
"""

from __future__ import annotations

import html
import io
import re
import xml.etree.ElementTree as ET

import pytest
from charpin_coordinator.drift import build_report
from charpin_coordinator.remote.display import LiveProgress, PlainProgress
from charpin_coordinator.report import DriftReport, NotEvaluated, map_strings
from charpin_coordinator.reports.junit import to_junit
from charpin_coordinator.reports.markdown import render_markdown
from charpin_coordinator.reports.text import render_text
from charpin_runner.receipt import Exit, Receipt
from markdown_it import MarkdownIt
from markdown_it.token import Token
from rich.console import Console

from tests.receipt_factory import IDS, make_receipt

LINK_LABEL = "[link=https://evil.example/x]ci-ok[/link]"
HEADING_LABEL = "# forged heading"
MISSING_LABEL = "[bold]gone[/bold]<b>x</b>"
BAD_ID = (
    "tests/test_a.py::test_x[[link=https://evil.example/y]ok[/link]"
    "|<script>alert(2)</script>``x`*_a_*]"
)
# Starts with a fence: as a context line of a diff it would close a ``` block early.
FENCE_ID = "```evil.py::test_z"
BAD_FILE = "<img src=x onerror=alert(3)>|cell.txt"
REASON = "[link=https://evil.example/z]retry[/link] <script>alert(4)</script>\x1b]8;;https://evil.example\x1b\\"
OSC8 = "\x1b]8;"
SGR = re.compile(r"\x1b\[[0-9;]*m")


def _with_ids(label: str, ids: list[str], **parts: object) -> Receipt:
    return make_receipt(
        label,
        **{
            "collection.collected": ids,
            "collection.selected": ids,
            "collection.executed": ids,
            "collection.order": ids,
            "outcomes": dict.fromkeys(ids, "passed"),
            "durations": dict.fromkeys(ids, 0.01),
            **parts,
        },
    )


def hostile_report() -> DriftReport:
    ids = [FENCE_ID, *IDS]
    # Sorted, as a decoded receipt's sets are; without IDS[0] the first change sits next to
    # FENCE_ID, so it is a context line of the diff.
    hostile_ids = sorted([FENCE_ID, BAD_ID, *IDS[1:]])
    hostile = _with_ids(
        LINK_LABEL,
        hostile_ids,
        **{
            "outcomes": {**dict.fromkeys(hostile_ids, "passed"), BAD_ID: "failed"},
            "tree.dirty_after": [BAD_FILE],
            "exit": Exit(1, "failed", [], 0),
        },
    )
    return build_report(
        [
            ("base", _with_ids("base", ids)),
            (LINK_LABEL, hostile),
            (HEADING_LABEL, _with_ids(HEADING_LABEL, ids)),
        ],
        baseline="base",
        not_evaluated=[NotEvaluated(label=MISSING_LABEL, kind="timeout", reason=REASON)],
    )


def _terminal(renderable: object) -> str:
    buffer = io.StringIO()
    Console(file=buffer, force_terminal=True, width=200, color_system="truecolor").print(renderable)
    return buffer.getvalue()


def _only_styles(text: str) -> str:
    """text with SGR colour codes removed; any other ESC left in it is an injected sequence."""
    return SGR.sub("", text)


def test_the_report_carries_the_hostile_strings() -> None:
    # Otherwise the rendering tests below would prove nothing.
    report = hostile_report()
    assert LINK_LABEL in [box.label for box in report.boxes]
    assert any(BAD_ID in row.item for dim in report.dimensions for row in dim.matrix)
    assert any(FENCE_ID in dim.diff for dim in report.dimensions)
    assert any(BAD_FILE in g.detail for g in report.gates)


def test_rich_report_shows_markup_as_text_without_links_or_escapes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "120")  # the report follows the terminal; xdist says 80
    out = render_text(hostile_report(), color=True)
    assert OSC8 not in out
    visible = _only_styles(out)
    assert "\x1b" not in visible  # only rich's own colour codes reach the terminal
    assert f"[tree] dirty working tree on {LINK_LABEL}" in visible
    assert f"{LINK_LABEL}: {BAD_FILE}" in visible


def test_live_progress_shows_a_hostile_alias_as_text() -> None:
    progress = LiveProgress([LINK_LABEL, "[red]x\x1b]8;;https://evil.example\x1b\\"])
    out = _terminal(progress._table())
    assert OSC8 not in out
    assert "\x1b" not in _only_styles(out)
    assert "ci-ok[/link]" in _only_styles(out)


def _markdown_tokens(text: str) -> list[Token]:
    return MarkdownIt("commonmark", {"html": True}).enable("table").parse(text)


def _rendered(text: str) -> str:
    return str(MarkdownIt("commonmark", {"html": True}).enable("table").render(text))


def _flat(tokens: list[Token]) -> list[Token]:
    out: list[Token] = []
    for token in tokens:
        out.append(token)
        out.extend(_flat(token.children or []))
    return out


def test_markdown_has_no_html_links_or_forged_headings() -> None:
    md = render_markdown(hostile_report())
    tokens = _flat(_markdown_tokens(md))
    kinds = {t.type for t in tokens}
    assert not kinds & {"html_inline", "html_block", "link_open", "image"}
    page = _rendered(md)
    assert "<script" not in page
    assert "<img" not in page
    assert "href" not in page
    assert "<b>" not in page
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert not [h for h in headings if "forged" in h]
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    # Escaped, not dropped: the reader sees exactly what the receipt says.
    assert LINK_LABEL in text
    assert HEADING_LABEL in text
    assert BAD_FILE in text
    assert "<script>alert(4)</script>" in text


def test_markdown_tables_keep_their_columns() -> None:
    tokens = _markdown_tokens(render_markdown(hostile_report()))
    widths: list[list[int]] = []
    for token in tokens:
        if token.type == "table_open":
            widths.append([])
        elif token.type == "tr_open":
            widths[-1].append(0)
        elif token.type in ("th_open", "td_open"):
            widths[-1][-1] += 1
    assert len(widths) >= 3
    for table in widths:
        assert len(set(table)) == 1, table  # a `|` in a label or id made no extra cell


def test_markdown_code_spans_and_fences_hold_hostile_ids_whole() -> None:
    tokens = _flat(_markdown_tokens(render_markdown(hostile_report())))
    assert BAD_ID in [t.content for t in tokens if t.type == "code_inline"]
    fences = [t for t in tokens if t.type == "fence"]
    assert fences, "the collection diff is a fenced block"
    for fence in fences:
        assert fence.info == "diff"
        assert f" {FENCE_ID}" in fence.content.splitlines()  # the fence was not closed early


def test_markdown_diff_keeps_its_lines() -> None:
    md = render_markdown(hostile_report())
    assert "\\x0a" not in md  # each diff line on its own line, not one escaped blob


def test_junit_keeps_hostile_text_as_xml_data() -> None:
    root = ET.fromstring(to_junit(hostile_report()))
    assert {element.tag for element in root.iter()} <= {
        "testsuites",
        "testsuite",
        "testcase",
        "failure",
        "error",
    }
    names = {suite.get("name") for suite in root.iter("testsuite")}
    assert f"charpin.{LINK_LABEL}" in names
    assert any(BAD_FILE in (f.get("message") or "") for f in root.iter("failure"))


def test_map_strings_changes_receipt_text_but_not_the_fixed_vocabulary() -> None:
    original = hostile_report()
    report = map_strings(original, str.upper)
    assert LINK_LABEL.upper() in [box.label for box in report.boxes]
    assert any(BAD_FILE.upper() in g.detail for g in report.gates)
    assert [(g.gate, g.status) for g in report.gates] == [
        (g.gate, g.status) for g in original.gates
    ]
    assert [n.kind for n in report.not_evaluated] == ["timeout"]


def test_a_newline_in_a_node_id_cannot_add_a_line_to_a_rendered_diff() -> None:
    newline_id = "tests/test_a.py::test_n[x\nGATES: all PASS]"
    ids = sorted([*IDS, newline_id])
    report = build_report(
        [("base", _with_ids("base", list(IDS))), ("other", _with_ids("other", ids))],
        baseline="base",
    )
    assert any(newline_id in dim.diff for dim in report.dimensions)
    plain = render_text(report, color=False)
    md = render_markdown(report)
    for out in (plain, md):
        assert "\nGATES: all PASS" not in out
        assert "+tests/test_a.py::test_n[x\\x0aGATES: all PASS]" in out
    assert "--- base/collected" in md.splitlines()  # the diff itself keeps its lines


# Tab and the right-to-left override: \xNN for one, \uNNNN for the other, in every display.
REORDERING_ALIAS = "box\t\u202eevil"


def test_every_display_escapes_the_same_characters() -> None:
    stream = io.StringIO()
    PlainProgress([REORDERING_ALIAS], stream).phase(REORDERING_ALIAS, "connect")
    live = _terminal(LiveProgress([REORDERING_ALIAS])._table())
    report = build_report([(REORDERING_ALIAS, _with_ids(REORDERING_ALIAS, list(IDS)))])
    shown = "box\\x09\\u202eevil"
    assert stream.getvalue().startswith(f"[{shown}] connect")
    assert shown in live
    assert shown in render_text(report, color=False)
    for out in (stream.getvalue(), live, render_text(report, color=False)):
        assert "\u202e" not in out
