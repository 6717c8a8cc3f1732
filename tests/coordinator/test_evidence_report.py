"""The report's evidence-only sections: Repeats (`run --repeat N`) and frozen tests re-run on the
side (`--include-frozen`). Built from real receipts (receipt_factory), rendered by the real
renderers, read back strictly; `compare` of a kept run folder and of receipts with a side run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import msgspec
import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.drift import build_report
from charpin_coordinator.evidence import (
    Attempt,
    frozen_section,
    repeats_section,
    with_evidence,
)
from charpin_coordinator.report import DriftReport, NotEvaluated
from charpin_coordinator.reports.common import encode_json
from charpin_coordinator.reports.markdown import render_markdown
from charpin_coordinator.reports.text import render_text
from charpin_runner.receipt import Receipt, dumps
from markdown_it import MarkdownIt

from tests.history_factory import box, run_folder
from tests.receipt_factory import IDS, frozen_rerun

FLAKY = IDS[0]
FROZEN = "tests/test_mail.py::test_relay"
HOSTILE = "tests/test_x.py::test_y[\x1b]8;;https://evil.example\x1b\\|<script>alert(1)</script>]"
TIMEOUT = NotEvaluated(label="a", kind="timeout", reason="a: killed at the 60s box deadline")


def _base() -> tuple[list[tuple[str, Receipt]], DriftReport]:
    receipts = [("a", box("a", "r1", "2026-06-01T00:00:00Z")), ("b", box("b", "r1", "x"))]
    return receipts, build_report(receipts)


def _attempts(failing_in_2: list[str]) -> list[Attempt]:
    started = "2026-06-01T00:00:00Z"
    return [
        Attempt(1, "r1", box("a", "r1", started)),
        Attempt(2, "r1.r2", box("a", "r1.r2", started, failing=failing_in_2)),
        Attempt(3, "r1.r3", None, TIMEOUT),
    ]


def test_a_flip_between_repeats_is_listed_and_nothing_else_changes() -> None:
    receipts, plain = _base()
    section = repeats_section(
        3, [("a", _attempts([FLAKY])), ("b", [Attempt(1, "r1", receipts[1][1])])]
    )
    report = with_evidence(plain, repeats=section)
    # Gates, drift and the exit code are the records' alone.
    assert (report.exit_code, report.gates, report.dimensions) == (
        plain.exit_code,
        plain.gates,
        plain.dimensions,
    )
    a, b = section.boxes
    assert (a.run_ids, a.evaluated) == (["r1", "r1.r2", "r1.r3"], 2)
    assert [(r.item, r.outcomes) for r in a.differing] == [(FLAKY, ["passed", "failed", "-"])]
    assert [(m.repeat, m.kind) for m in a.not_evaluated] == [(3, "timeout")]
    assert (b.evaluated, b.differing) == (1, [])
    text = render_text(report, color=False)
    assert (
        "repeats (--repeat 3: evidence only, never gating; repeat 1 is the receipt of record)"
        in text
    )
    assert f"    {FLAKY}  a: passed, failed, -" in text
    assert "    repeat 3 NOT EVALUATED (timeout): a: killed at the 60s box deadline" in text
    assert "  b: 1 of 3 repeats evaluated · nothing to compare" in text
    markdown = render_markdown(report)
    assert "### Repeats" in markdown and "| test | repeat 1 | repeat 2 | repeat 3 |" in markdown
    # drift.json carries it and reads back strictly as the report it is.
    raw = encode_json(report)
    assert json.loads(raw)["repeats"]["boxes"][0]["differing"][0]["outcomes"][1] == "failed"
    assert msgspec.json.decode(raw, type=DriftReport) == report


def test_without_repeats_or_side_runs_the_report_is_the_one_written_before() -> None:
    _, plain = _base()
    raw = json.loads(encode_json(plain))
    assert "repeats" not in raw and "frozen_reruns" not in raw
    # An older drift.json reads as a report without the sections.
    assert msgspec.json.decode(encode_json(plain), type=DriftReport) == plain
    text = render_text(plain, color=False)
    assert "repeats" not in text and "frozen tests" not in text
    # A repeat whose outcomes equal the record's adds a section that lists no test.
    same = repeats_section(2, [("a", _attempts([])[:2])])
    assert same.boxes[0].differing == []


def test_frozen_re_runs_are_shown_per_box_clean_or_why_not() -> None:
    _, plain = _base()
    clean = frozen_rerun({FROZEN: "passed"})
    dirty = frozen_rerun({}, requested=[FROZEN])  # asked for, never ran
    started = "2026-06-01T00:00:00Z"
    boxes = [
        ("a", [Attempt(1, "r1", box("a", "r1", started, frozen_rerun=clean))]),
        (
            "b",
            [
                Attempt(1, "r1", box("b", "r1", started, frozen_rerun=dirty)),
                Attempt(2, "r1.r2", box("b", "r1.r2", started, frozen_rerun=clean)),
            ],
        ),
        ("c", [Attempt(1, "r1", box("c", "r1", started))]),
    ]
    section = frozen_section(boxes)
    report = with_evidence(plain, frozen=section)
    assert report.exit_code == plain.exit_code and report.gates == plain.gates
    assert [(s.box, s.repeat, s.clean, s.outcomes) for s in section.boxes] == [
        ("a", 1, True, {FROZEN: "passed"}),
        ("b", 1, False, {FROZEN: "not run"}),
        ("b", 2, True, {FROZEN: "passed"}),
    ]
    assert section.absent[0].startswith("c: no frozen tests re-run")
    text = render_text(report, color=False)
    assert "frozen tests re-run (outside the gate: never changes a gate or the exit code)" in text
    assert "  a: clean (ok) · 1 frozen test(s) · 0.5 s" in text
    assert f"    {FROZEN}  passed" in text
    assert "  b: not clean (failed) · 1 frozen test(s) · 0.5 s: a frozen test did not pass" in text
    assert f"    {FROZEN}  not run" in text
    assert "  b, repeat 2: clean (ok)" in text
    markdown = render_markdown(report)
    assert "### Frozen tests re-run (outside the gate)" in markdown
    assert "- `b`: **not clean** (failed)" in markdown


def test_hostile_ids_in_the_evidence_sections_stay_text() -> None:
    _, plain = _base()
    started = "2026-06-01T00:00:00Z"
    flip = [
        Attempt(1, "r1", box("a", "r1", started, extra=[HOSTILE])),
        Attempt(2, "r1.r2", box("a", "r1.r2", started, extra=[HOSTILE], failing=[HOSTILE])),
    ]
    side = frozen_rerun({HOSTILE: "failed"})
    frozen = [("a", [Attempt(1, "r1", box("a", "r1", started, frozen_rerun=side))])]
    report = with_evidence(
        plain, repeats=repeats_section(2, [("a", flip)]), frozen=frozen_section(frozen)
    )
    for color in (False, True):
        assert "\x1b]8;" not in render_text(report, color=color)
    # In Markdown an id is a code span: shown as text by a renderer, never a tag.
    html = MarkdownIt("commonmark").enable("table").render(render_markdown(report))
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_compare_of_a_kept_run_folder_skips_its_repeats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = "2026-06-01T00:00:00Z"
    folder = run_folder(
        tmp_path / "runs",
        "r1",
        [box("a", "r1", started), box("b", "r1", started)],
        repeats={"a": [box("a", "r1.r2", started, failing=[FLAKY])]},
    )
    assert (folder / "a" / "repeats" / "2" / "receipt.json").is_file()
    code = main(["compare", "--json", str(folder)])
    out, err = capsys.readouterr()
    # Two boxes (a repeat is no box of its own, and no duplicate label), and a's record.
    assert code == 0, err
    report = json.loads(out)
    assert [b["label"] for b in report["boxes"]] == ["a", "b"]
    assert report["boxes"][0]["run_id"] == "r1"


def test_compare_shows_side_runs_of_a_fleet_and_gates_as_without(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = "2026-06-01T00:00:00Z"
    side = frozen_rerun({FROZEN: "failed"})
    paths = []
    for label, part in (("a", {"frozen_rerun": side}), ("b", {})):
        path = tmp_path / f"receipt-{label}.json"
        path.write_bytes(dumps(box(label, "r1", started, **part)))
        paths.append(str(path))
    code = main(["compare", "--json", *paths])
    report = json.loads(capsys.readouterr()[0])
    assert code == 0  # a failing frozen test on the side changes nothing
    assert [(s["box"], s["clean"]) for s in report["frozen_reruns"]["boxes"]] == [("a", False)]
    assert report["frozen_reruns"]["absent"][0].startswith("b: no frozen tests re-run")


def test_identical_side_runs_of_later_repeats_are_folded_into_one_line() -> None:
    _, plain = _base()
    clean = frozen_rerun({FROZEN: "passed"})
    dirty = frozen_rerun({}, requested=[FROZEN])
    started = "2026-06-01T00:00:00Z"
    attempts = [Attempt(1, "r1", box("a", "r1", started, frozen_rerun=clean))]
    attempts += [
        Attempt(k, f"r1.r{k}", box("a", f"r1.r{k}", started, frozen_rerun=clean)) for k in (2, 3, 4)
    ]
    attempts.append(Attempt(5, "r1.r5", box("a", "r1.r5", started, frozen_rerun=dirty)))
    attempts.append(Attempt(6, "r1.r6", box("a", "r1.r6", started, frozen_rerun=clean)))
    report = with_evidence(plain, frozen=frozen_section([("a", attempts)]))
    lines = render_text(report, color=False).splitlines()
    side = lines[lines.index(next(line for line in lines if line.startswith("frozen tests"))) :]
    assert "  a, repeats 2-4: the same as repeat 1" in side
    # A side run that differs is shown whole, and the one after it is not folded into repeat 1.
    assert any(line.startswith("  a, repeat 5: not clean") for line in side)
    assert any(line.startswith("  a, repeat 6: clean") for line in side)
    assert sum(line.startswith("  a") for line in side) == 4
    assert "- `a`, repeats 2-4: the same as repeat 1" in render_markdown(report)


def test_side_runs_of_later_repeats_only_and_many_frozen_tests_render() -> None:
    # Side runs of repeats 2 and 3 only (the record had none), both clean: folded, no rows.
    _, plain = _base()
    many = {f"tests/test_m.py::test_{n}": "passed" for n in range(60)}
    started = "2026-06-01T00:00:00Z"
    attempts = [Attempt(1, "r1", box("a", "r1", started))]
    attempts += [
        Attempt(k, f"r1.r{k}", box("a", f"r1.r{k}", started, frozen_rerun=frozen_rerun(many)))
        for k in (2, 3)
    ]
    attempts.append(Attempt(4, "r1.r4", box("a", "r1.r4", started)))
    report = with_evidence(plain, frozen=frozen_section([("a", attempts)]))
    text = render_text(report, color=False)
    assert "  a, repeat 3: the same as repeat 2" in text
    # A record with 60 frozen tests lists 50 and says how many more.
    record = [Attempt(1, "r1", box("a", "r1", started, frozen_rerun=frozen_rerun(many)))]
    text = render_text(with_evidence(plain, frozen=frozen_section([("a", record)])), color=False)
    assert "    ... 10 more in drift.json" in text


def test_a_repeat_cut_short_is_a_miss_not_a_run_and_a_never_started_one_says_not_run() -> None:
    _, plain = _base()
    started = "2026-06-01T00:00:00Z"
    stopped = box("a", "r1.r2", started)
    interrupted = dataclasses.replace(
        stopped.exit, status=130, interpretation="interrupted", reasons=["charpin was interrupted"]
    )
    cut = dataclasses.replace(stopped, outcomes={}, exit=interrupted)
    never = NotEvaluated(
        label="a", kind="interrupted", reason="a: not run: the run was interrupted"
    )
    attempts = [
        Attempt(1, "r1", box("a", "r1", started)),
        Attempt(2, "r1.r2", cut),
        Attempt(3, "r1.r3", None, never),
    ]
    section = repeats_section(3, [("a", attempts)])
    (entry,) = section.boxes
    # The interrupted repeat's missing outcomes are not "absent" tests: no flip is listed.
    assert entry.differing == [] and entry.evaluated == 1
    assert [(m.repeat, m.kind) for m in entry.not_evaluated] == [
        (2, "interrupted"),
        (3, "interrupted"),
    ]
    text = render_text(with_evidence(plain, repeats=section), color=False)
    assert "  a: 1 of 3 repeats evaluated · nothing to compare" in text
    assert "    repeat 2 NOT EVALUATED (interrupted): a: interrupted: its tests did not" in text
    assert "    repeat 3 not run: the run was interrupted" in text
