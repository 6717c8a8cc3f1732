"""Coordinator side; pure. A VerifyReport as text (terminal), Markdown (a PR comment) and JUnit.

The verdict comes first, then the gate table, then every failing observation with the one-line
action to take and what moved. Text from receipts and patches is escaped as every other display
escapes it (render.shown), so a hostile test id cannot repaint the terminal or the comment.
"""

from __future__ import annotations

import re

from charpin_coordinator.reports.escape import shown
from charpin_coordinator.reports.junit import gates_junit
from charpin_coordinator.verify.report import (
    VERIFY_GATES,
    WHOLE_PATCH,
    Observation,
    VerifyGate,
    VerifyReport,
)

_MARKS = {"PASS": "✅ PASS", "FAIL": "❌ FAIL", "INCOMPLETE": "⚠️ INCOMPLETE"}
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~])")
MAX_DETAIL = 40


def render_text(report: VerifyReport) -> str:
    """The verdict, the boxes, the gate table and why, for a terminal."""
    out = [
        f"charpin verify · {report.verdict}{_unconfined(report)} · base {report.base[:12]} · "
        f"patched {report.patched[:12]} · patch sha256 {report.patch_sha256[:12]}",
        f"  the patch changes {len(report.changed)} path(s): {_few(report.changed)}",
        *_judged_with(report),
        *(
            [f"  base receipts reused from verify {shown(report.base_from)}"]
            if report.base_from
            else []
        ),
        "",
        "boxes",
    ]
    for box in report.boxes:
        own = f" · own tests {box.own}" if box.own else ""
        sandbox = f" · {box.sandbox}" if box.sandbox else ""
        out.append(
            f"  {shown(box.label)}: base {box.base} · patched {box.patched}{own}{sandbox} · "
            f"{box.verdict}"
        )
    for missing in report.not_evaluated:
        out.append(
            f"  {shown(missing.label)}: NOT EVALUATED ({missing.kind}): {shown(missing.reason)}"
        )
    out += ["", "gates"]
    columns = _columns(report)
    width = max(len(g) for g in VERIFY_GATES) + 2
    cell = max([12, *(len(shown(c)) + 2 for c in columns)])
    out.append("  " + "gate".ljust(width) + "".join(shown(c).ljust(cell) for c in columns))
    for name in VERIFY_GATES:
        row = {g.box: g.status for g in report.gates if g.gate == name}
        out.append("  " + name.ljust(width) + "".join(row.get(c, "-").ljust(cell) for c in columns))
    failing = [g for g in report.gates if g.status != "PASS"]
    if failing:
        out += ["", "not passing"]
        for gate in failing:
            out.append(f"  {gate.gate} · {shown(gate.box)} · {gate.status}: {shown(gate.detail)}")
            out.append(f"      action: {gate.action}")
    if report.observations:
        out += ["", "what moved"]
        for seen in report.observations:
            out += _text_observation(seen)
    if report.evidence:
        out += ["", "behaviour beyond the asserts"]
        out += [f"  {shown(line)}" for line in evidence_lines(report)]
    if report.scope or report.helpers:
        out += ["", f"scope: {_few(report.scope)}" + _helpers(report)]
    else:
        # Said, so that an empty scope reads as checked, not as forgotten (#22).
        out += [
            "",
            "scope: no Python code changed (only comments, docstrings, layout or files "
            "that are not Python)",
        ]
    bits = "; ".join(report.exit_bits) or "accepted"
    out += ["", f"verdict {report.verdict} · exit {report.exit_code} ({bits})", ""]
    return "\n".join(out)


def _unconfined(report: VerifyReport) -> str:
    """The verdict's own warning when a patched run was not confined: a green verify that ran
    the agent's code without the sandbox is not the same claim."""
    loose = [b.label for b in report.boxes if b.sandbox and b.sandbox != "bwrap-confined"]
    return f" (patched run NOT confined on {', '.join(map(shown, loose))})" if loose else ""


def _judged_with(report: VerifyReport) -> list[str]:
    """What the patched code was judged with (the base's test side) and what the patch did to
    the tests, for the head of every report."""
    side = report.test_side
    if side is None:
        return []
    roots = ", ".join(f"{shown(r)}/" for r in side.roots) or "no test folder"
    lines = [
        f"  judged with the base's tests: {roots}; harness {_few(side.harness) or 'none'}"
        f" ({side.files} file(s) of the base put back)"
    ]
    for what, items in (("edits", side.edited), ("deletes", side.deleted), ("adds", side.added)):
        if items:
            lines.append(f"  the patch {what} {len(items)} test file(s): {_few(items)}")
    return lines


def render_markdown(report: VerifyReport) -> str:
    """The report as a pull-request comment."""
    icon = {"ACCEPT": "✅", "REJECT": "❌", "INCOMPLETE": "⚠️"}[report.verdict]
    out = [
        f"## {icon} charpin verify: {report.verdict}{_md(_unconfined(report))}",
        "",
        f"Base `{report.base[:12]}` · patched `{report.patched[:12]}` · patch sha256 "
        f"`{report.patch_sha256[:12]}` · {len(report.changed)} path(s) changed",
        "",
        *(_md(line.strip()) + "  " for line in _judged_with(report)),
        "",
    ]
    columns = _columns(report)
    out.append("| gate | " + " | ".join(_md(c) for c in columns) + " |")
    out.append("|---" * (len(columns) + 1) + "|")
    for name in VERIFY_GATES:
        row = {g.box: g.status for g in report.gates if g.gate == name}
        cells = " | ".join(_MARKS.get(row.get(c, ""), "-") for c in columns)
        out.append(f"| {name} | {cells} |")
    out.append("")
    for missing in report.not_evaluated:
        out.append(
            f"- **{_md(missing.label)}** NOT EVALUATED ({missing.kind}): {_md(missing.reason)}"
        )
    failing = [g for g in report.gates if g.status != "PASS"]
    if failing:
        out += ["### Not passing", ""]
        for gate in failing:
            out.append(f"- **{gate.gate}** · {_md(gate.box)}: {_md(gate.detail)}  ")
            out.append(f"  action: {_md(gate.action)}")
        out.append("")
    if report.observations:
        out += ["### What moved", ""]
        for seen in report.observations:
            out += _md_observation(seen)
    if report.evidence:
        out += ["### Behaviour beyond the asserts", ""]
        for line in evidence_lines(report):
            nested = line.startswith("  ")
            out.append(f"{'  - ' if nested else '- '}{_md(line.strip())}")
        out.append("")
    if report.scope or report.helpers:
        out += ["", f"Scope: {_md(_few(report.scope))}{_md(_helpers(report))}"]
    out += ["", f"Exit {report.exit_code}: {_md('; '.join(report.exit_bits) or 'accepted')}", ""]
    return "\n".join(out)


def render_junit(report: VerifyReport) -> bytes:
    """JUnit XML: a suite for the patch's own gates and one per box."""
    return gates_junit(_columns(report), report.gates, report.not_evaluated)


def evidence_lines(report: VerifyReport) -> list[str]:
    """One line per box of what the differential compared: the captured calls replayed, the
    generated inputs, what was not compared (never counted as the same), the seed."""
    lines = []
    for box in report.evidence:
        parts = [
            f"{box.compared} captured call(s) compared ({box.same} same, {box.differs} differ)"
        ]
        if box.not_compared:
            parts.append(f"{len(box.not_compared)} not compared")
        if box.generated or box.generated_differs or box.generated_not_compared:
            made = (
                f"{box.generated} generated input(s) ({box.generated_differs} function(s) differ)"
            )
            if box.generated_not_compared:
                made += f", {len(box.generated_not_compared)} function(s) not compared"
            parts.append(made)
        if box.unreached:
            parts.append(f"{len(box.unreached)} changed statement(s) no test ran")
        if box.untraced:
            parts.append(f"not traced: {box.untraced}")
        lines.append(f"{box.box}: {'; '.join(parts)} · seed {box.seed} · {box.seconds:g} s")
        for name, why in sorted({**box.not_compared, **box.generated_not_compared}.items())[:6]:
            lines.append(f"  not compared {name}: {why}")
    return lines


def _columns(report: VerifyReport) -> list[str]:
    return [WHOLE_PATCH, *(box.label for box in report.boxes)]


def _text_observation(seen: Observation) -> list[str]:
    lines = [f"  {seen.gate} · {shown(seen.box)} · {shown(seen.item)}: {shown(seen.what)}"]
    lines.append(f"      {seen.action}")
    lines += [f"        {shown(line)}" for line in seen.detail[:MAX_DETAIL]]
    return lines


def _md_observation(seen: Observation) -> list[str]:
    lines = [f"- **{seen.gate}** · {_md(seen.box)} · {_code(seen.item)}: {_md(seen.what)}  "]
    lines.append(f"  {_md(seen.action)}")
    if seen.detail:
        body = "\n".join(shown(line) for line in seen.detail[:MAX_DETAIL])
        fence = "`" * max(3, _longest_backticks(body) + 1)
        lines += ["", f"  {fence}diff", *(f"  {line}" for line in body.split("\n")), f"  {fence}"]
    return lines


def _helpers(report: VerifyReport) -> str:
    return f" (extracted helpers, not counted: {_few(report.helpers)})" if report.helpers else ""


def _few(items: list[str], shown_count: int = 6) -> str:
    head = ", ".join(shown(i) for i in items[:shown_count])
    more = len(items) - shown_count
    return (head + (f" and {more} more" if more > 0 else "")) or "none"


def _md(text: str) -> str:
    return _MD_SPECIAL.sub(r"\\\1", shown(text))


def _longest_backticks(text: str) -> int:
    return max((len(run) for run in re.findall("`+", text)), default=0)


def _code(text: str) -> str:
    text = shown(text)
    fence = "`" * (_longest_backticks(text) + 1)
    pad = " " if text[:1] in "` " or text[-1:] in "` " else ""
    return f"{fence}{pad}{text}{pad}{fence}"


__all__ = ["VerifyGate", "render_junit", "render_markdown", "render_text"]
