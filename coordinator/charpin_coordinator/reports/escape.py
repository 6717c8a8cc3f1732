"""Coordinator side; imports msgspec, the runner's line marker and report.py: how receipt text is shown in text and Markdown (controls escaped, Markdown inline syntax escaped, code spans with a long enough fence). The bottom layer of the text renderers; it imports no other module of this package.

Receipt text is data in every renderer: control characters are shown escaped, rich gets Text
(never markup strings), Markdown gets escaped text or code spans with a long enough fence.
"""

from __future__ import annotations

import re

import msgspec
from charpin_runner.pins.compare import mark_changed_lines

from charpin_coordinator.report import DriftReport, map_strings

# Receipts are untrusted: a label or node id carrying ESC or a newline must not repaint the
# terminal or forge a line in a PR comment. C0/C1 controls are shown as \xNN instead; the
# invisible direction and line-separator marks as \uNNNN (they reorder or break what is shown).
_CONTROLS: dict[int, str] = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
_CONTROLS.update(
    {c: f"\\u{c:04x}" for c in (0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))}
)
_CONTROLS.update({c: f"\\u{c:04x}" for c in (0x2028, 0x2029, 0xFEFF)})

# Markdown: HTML-significant characters become entities (so no tag reaches the renderer), the
# rest of the inline syntax is backslash-escaped (links, emphasis, code, tables, strikethrough).
_MD_ESCAPES: dict[int, str] = {ord("&"): "&amp;", ord("<"): "&lt;", ord(">"): "&gt;"}
_MD_ESCAPES.update({ord(c): "\\" + c for c in "\\`*_[]|~"})
# At the start of a list item or quote these would open a block (heading, list, rule).
_MD_BLOCK_START = re.compile(r"^(?:[#+=-]|\d{1,9}[.)])")


def shown(text: str) -> str:
    """text as every display shows receipt or alias text: controls and invisible marks escaped.
    (The redactor masks a secret in this spelling too.)"""
    return text.translate(_CONTROLS)


def diff_shown(diff: str) -> str:
    """A unified diff of node ids with its line breaks kept. An id may itself hold a newline:
    a line that does not start like a diff line (` `, `+`, `-`, `@`) continues the id before it
    and is joined back with the break escaped, so an id cannot add a free-standing line. An
    id's trailing spaces are shown (␠), or two ids that differ only there would look equal."""
    body = diff[:-1] if diff.endswith("\n") else diff
    lines: list[str] = []
    for line in body.split("\n"):
        if lines and not line.startswith((" ", "+", "-", "@")):
            lines[-1] += _CONTROLS[0x0A] + shown(line)
        else:
            lines.append(shown(line))
    return "\n".join(mark_changed_lines(lines)) + "\n"


def displayable(report: DriftReport) -> DriftReport:
    """The report with every control character escaped (for text and Markdown only)."""
    escaped = map_strings(report, shown)
    dimensions = [
        msgspec.structs.replace(dim, diff=diff_shown(raw.diff)) if raw.diff else dim
        for dim, raw in zip(escaped.dimensions, report.dimensions, strict=True)
    ]
    since = escaped.since
    if since is not None and report.since is not None:
        boxes = [
            msgspec.structs.replace(
                box,
                dimensions=[
                    msgspec.structs.replace(d, diff=diff_shown(r.diff)) if r.diff else d
                    for d, r in zip(box.dimensions, raw.dimensions, strict=True)
                ],
            )
            for box, raw in zip(since.boxes, report.since.boxes, strict=True)
        ]
        since = msgspec.structs.replace(since, boxes=boxes)
    return msgspec.structs.replace(escaped, dimensions=dimensions, since=since)


def md(text: str) -> str:
    """Text for Markdown inline content (a table cell, a list item, a heading)."""
    escaped = shown(text).translate(_MD_ESCAPES)
    if _MD_BLOCK_START.match(escaped):
        escaped = "\\" + escaped if not escaped[0].isdigit() else _escape_ordinal(escaped)
    return escaped


def _escape_ordinal(text: str) -> str:
    digits = len(text) - len(text.lstrip("0123456789"))
    return f"{text[:digits]}\\{text[digits:]}"


def longest_backtick_run(text: str) -> int:
    return max((len(run) for run in re.findall("`+", text)), default=0)


def md_code(text: str, *, table: bool = False) -> str:
    """Text as a code span: inside one nothing but the closing fence is syntax, so the fence is
    longer than any backtick run in the text. In a table a `|` still ends the cell unless it is
    escaped (GFM strips that backslash again inside the span)."""
    text = shown(text)
    if table:
        text = text.replace("|", "\\|")
    if not text:
        return ""
    fence = "`" * (longest_backtick_run(text) + 1)
    # CommonMark strips one space on each side, so padding keeps a leading backtick apart.
    if text[0] in "` " or text[-1] in "` ":
        text = f" {text} "
    return f"{fence}{text}{fence}"
