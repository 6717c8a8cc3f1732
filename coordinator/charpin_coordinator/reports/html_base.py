"""Coordinator side; imports the stdlib, charpin_runner's version and report.py: the HTML pages' bottom layer (escaping, the page shell, shared cells, a dimension's body). Every html_* module builds on this one; it imports none of them."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence

from charpin_runner import __version__

from charpin_coordinator.report import Dimension

# Receipt text is data. Everything a receipt, a label or a file name can carry is escaped with
# html.escape (so no tag, attribute or entity reaches the page), and what would be invisible or
# would reorder the text around it is shown as a visible marker instead: C0/C1 controls, the
# bidi embeddings, overrides and isolates (U+202E would turn `gpj.exe` into `exe.jpg`),
# zero-width and invisible format characters, line and paragraph separators, the BOM, Unicode
# tags, and lone surrogates (which could not even be encoded).
_INVISIBLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    "\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb"
    "\ufffe\uffff\ud800-\udfff\U000e0000-\U000e0fff]"
)

# Past these a section says how many more rows drift.json holds (a page stays readable).
MAX_HTML_ROWS = 1000
MAX_HTML_DIFF_LINES = 2000

STATUS_CLASS = {"PASS": "pass", "FAIL": "fail", "INCOMPLETE": "incomplete"}
OUTCOME_CLASS = {
    "passed": "pass",
    "failed": "fail",
    "error": "fail",
    "xpassed": "incomplete",
    "skipped": "muted",
    "xfailed": "muted",
    "not": "muted",  # "not run"
}

# No script may run and nothing may be fetched: a second line of defence behind the escaping.
_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
    "form-action 'none'"
)

_STYLE = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
  max-width: 1200px; padding: 1rem 1.5rem 3rem; color: #1f2328; background: #fff; }
h1 { font-size: 1.5rem; margin: .2rem 0 .6rem; }
h2 { font-size: 1.15rem; margin: 2rem 0 .5rem; border-bottom: 1px solid #d0d7de;
  padding-bottom: .2rem; }
h3 { font-size: 1rem; margin: 1.2rem 0 .4rem; }
nav a { margin-right: .9rem; }
table { border-collapse: collapse; margin: .4rem 0; }
th, td { border: 1px solid #d0d7de; padding: .25rem .5rem; text-align: left;
  vertical-align: top; unicode-bidi: isolate; }
th { background: #f6f8fa; font-weight: 600; }
code, pre { font: 12.5px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  unicode-bidi: isolate; direction: ltr; }
td.id code { word-break: break-all; }
pre { background: #f6f8fa; padding: .6rem; overflow-x: auto; border: 1px solid #d0d7de; }
.pass { background: #dafbe1; color: #116329; }
.fail { background: #ffebe9; color: #a40e26; font-weight: 600; }
.incomplete { background: #fff8c5; color: #7d4e00; font-weight: 600; }
.notevaluated { background: #ffebe9; color: #a40e26; font-weight: 600; }
.muted { color: #57606a; }
.verdict { display: inline-block; padding: .2rem .6rem; border-radius: 4px; font-weight: 600; }
.ctl { font: 11px ui-monospace, monospace; background: #fff1a8; color: #7c2d12;
  border: 1px solid #d4a72c; border-radius: 3px; padding: 0 2px; margin: 0 1px; }
.diff .add { color: #116329; } .diff .del { color: #a40e26; } .diff .hunk { color: #8250df; }
.trend span { display: inline-block; min-width: 1.3em; text-align: center; margin: 1px;
  border-radius: 3px; }
.trend span.changed { outline: 2px solid #8250df; outline-offset: -2px; }
h4 { font-size: .95rem; margin: .8rem 0 .3rem; }
.since-box { margin: .6rem 0 1.4rem; padding-left: .8rem; border-left: 3px solid #d0d7de; }
.since-box.changed { border-left-color: #cf222e; }
.cause { display: inline-block; padding: .2rem .5rem; border-radius: 4px; }
#since-table a { color: inherit; }
ul { margin: .3rem 0; padding-left: 1.3rem; }
.more { font-style: italic; color: #57606a; }
pre.excerpt { margin: 0; max-height: 24em; overflow: auto; white-space: pre-wrap; }
#run-meta { color: #57606a; margin: 0 0 .6rem; }
footer { margin-top: 2.5rem; color: #57606a; font-size: 12px; }
"""


def text(value: str) -> str:
    """value as HTML text: escaped, with invisible and reordering characters shown visibly."""
    return _INVISIBLE.sub(_marker, html.escape(value, quote=True))


def attr(value: str) -> str:
    """value for a quoted attribute: escaped, invisible characters written as \\uNNNN text."""
    return html.escape(_INVISIBLE.sub(lambda m: _spelled(m.group()), value), quote=True)


def _spelled(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _marker(match: re.Match[str]) -> str:
    char = match.group()
    return f'<span class="ctl" title="U+{ord(char):04X}">{_spelled(char)}</span>'


def code_span(value: str) -> str:
    return f"<code>{text(value)}</code>" if value else ""


def status_cell(status: str) -> str:
    return f'<td class="{STATUS_CLASS.get(status, "muted")}">{text(status)}</td>'


def more_note(count: int, what: str) -> str:
    return f'<p class="more">… {count} more {text(what)} in drift.json</p>' if count > 0 else ""


def page(title: str, body: Iterable[str]) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en" dir="ltr">',
            "<head>",
            '<meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
            '<meta name="referrer" content="no-referrer">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{attr(title)}</title>",  # no markup inside a title: markers as text
            f"<style>{_STYLE}</style>",
            "</head>",
            "<body>",
            *body,
            "</body>",
            "</html>",
            "",
        ]
    )


def matrix_table(dim: Dimension, labels: Sequence[str], table_id: str) -> str:
    out = [
        f'<table id="{table_id}"><thead><tr><th>{"test" if dim.name == "outcomes" else "item"}</th>'
        + "".join(f"<th>{code_span(label)}</th>" for label in labels)
        + "</tr></thead><tbody>"
    ]
    for row in dim.matrix[:MAX_HTML_ROWS]:
        cells = []
        for label in labels:
            value = row.values.get(label, "-")
            css = OUTCOME_CLASS.get(value.split(" ", 1)[0], "")
            cells.append(
                f'<td class="{css}">{text(value)}</td>' if css else f"<td>{text(value)}</td>"
            )
        out.append(f'<tr><td class="id">{code_span(row.item)}</td>{"".join(cells)}</tr>')
    out.append("</tbody></table>")
    out.append(more_note(len(dim.matrix) - MAX_HTML_ROWS, "rows"))
    return "\n".join(out)


def dimension_body(
    dim: Dimension, labels: Sequence[str], table_id: str, list_attrs: str = ""
) -> list[str]:
    """A dimension's details, diff and matrix, each capped (drift.json keeps everything)."""
    out = []
    if dim.details:
        out.append(f"<ul{list_attrs}>")
        out += [f"<li>{text(d)}</li>" for d in dim.details[:MAX_HTML_ROWS]]
        out.append("</ul>")
        out.append(more_note(len(dim.details) - MAX_HTML_ROWS, "details"))
    if dim.diff:
        out.append(diff_block(dim.diff))
    if dim.matrix:
        out.append(matrix_table(dim, labels, table_id))
    return out


def id_diff_lines(diff: str) -> list[str]:
    """A unified diff of ids, one entry per diff line. A line that does not start like a diff
    line continues an id that held a newline: it is joined back (shown later as a marker)."""
    body = diff[:-1] if diff.endswith("\n") else diff
    lines: list[str] = []
    for line in body.split("\n"):
        if lines and not line.startswith((" ", "+", "-", "@")):
            lines[-1] += "\n" + line
        else:
            lines.append(line)
    return lines


def diff_block(diff: str) -> str:
    """A unified diff of ids, one line per line, an id's own newline shown as a marker."""
    lines = id_diff_lines(diff)
    shown = []
    for line in lines[:MAX_HTML_DIFF_LINES]:
        css = {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "")
        shown.append(f'<span class="{css}">{text(line)}</span>' if css else text(line))
    extra = more_note(len(lines) - MAX_HTML_DIFF_LINES, "diff lines")
    return '<pre class="diff">' + "\n".join(shown) + "</pre>" + extra


def footer() -> str:
    return (
        f"<footer>charpin-remote {text(__version__)} · one file, no script, nothing fetched; "
        "drift.json holds everything.</footer>"
    )
