"""The verify report's renderers: verdict first, every failing observation with its action, and
hostile text from receipts escaped in the terminal, the PR comment and JUnit."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import msgspec
from charpin_coordinator.drift import build_report
from charpin_coordinator.verify import gates
from charpin_coordinator.verify.render import render_junit, render_markdown, render_text
from charpin_coordinator.verify.report import VERIFY_REPORT_VERSION, BoxVerdict, VerifyReport
from charpin_runner.receipt import PinResult, Pins

from tests.receipt_factory import change, make_receipt

HOSTILE = "pin\x1b[2J`|*[x](y)\u202e"


def _report() -> VerifyReport:
    base = change(make_receipt("clean"), pins=Pins("pins.jsonl", True, [_pin("passed", None)]))
    after = change(base, pins=Pins("pins.jsonl", True, [_pin("failed", "stdout")]))
    found, seen = gates.box_gates("clean", base, after)
    patch_found, patch_seen = gates.patch_gates(gates.PatchFacts(scope=["a.py:f"]))
    everything = patch_found + found
    return VerifyReport(
        version=VERIFY_REPORT_VERSION,
        verdict=gates.verdict(everything, 1),
        base="b" * 40,
        patched="p" * 40,
        ran="p" * 40,
        base_from="",
        patch_sha256="c" * 64,
        changed=["a.py"],
        boxes=[BoxVerdict(label="clean", verdict="REJECT", base="ok", patched="ok")],
        not_evaluated=[],
        gates=everything,
        observations=patch_seen + seen,
        scope=["a.py:f"],
        helpers=[],
        drift=build_report([("clean", after)]),
        exit_code=2,
        exit_bits=["2 REJECT: a verify gate failed"],
    )


def _pin(status: str, kind: str | None) -> PinResult:
    detail = ["-old ```", "+new \x1b[31m"] if kind else []
    return PinResult(HOSTILE, status, 0, "", "", {}, kind, detail)  # type: ignore[arg-type]


def test_text_leads_with_the_verdict_and_escapes_receipt_text() -> None:
    text = render_text(_report())
    assert text.startswith("charpin verify · REJECT · base bbbbbbbbbbbb")
    assert "\x1b" not in text and "\u202e" not in text
    assert "stderr" not in text and "stdout drift: stop, unless" in text
    assert "verdict REJECT · exit 2" in text


def test_an_empty_scope_is_said_not_left_out() -> None:
    """#22: a comment-only patch printed no scope line, which read as a scope not looked at."""
    assert "scope: a.py:f" in render_text(_report())
    empty = msgspec.structs.replace(_report(), scope=[], helpers=[])
    assert "scope: no Python code changed (only comments, docstrings, layout" in render_text(empty)


def test_markdown_is_a_pr_comment_that_cannot_be_broken_out_of() -> None:
    md = render_markdown(_report())
    assert md.startswith("## ❌ charpin verify: REJECT")
    assert "| Behaviour | - | ❌ FAIL |" in md
    assert "\x1b" not in md and "\u202e" not in md
    assert "````diff" in md  # the fence is longer than any backtick run in the detail


def test_junit_has_a_suite_for_the_patch_and_one_per_box() -> None:
    root = ET.fromstring(render_junit(_report()))
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"charpin.all boxes", "charpin.clean"}
    assert suites["charpin.clean"].get("failures") == "1"
