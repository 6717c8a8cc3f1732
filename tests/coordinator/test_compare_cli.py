"""`charpin-remote compare` end to end: files in, text / JSON / Markdown out, bitmask exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
from charpin_coordinator.cli import main
from charpin_coordinator.report import DriftReport
from charpin_runner.receipt import dumps

from tests.receipt_factory import IDS, make_receipt, stale_local


def write(tmp_path: Path, receipt, name=None) -> Path:
    path = tmp_path / f"{name or receipt.label}.json"
    path.write_bytes(dumps(receipt))
    return path


def test_text_report_names_the_test_and_the_box(tmp_path, capsys):
    flipped = {**dict.fromkeys(IDS, "passed"), IDS[2]: "failed"}
    a = write(tmp_path, make_receipt("laptop"))
    b = write(
        tmp_path,
        make_receipt("ci", outcomes=flipped, **{"exit.status": 1, "exit.interpretation": "failed"}),
    )
    code = main(["compare", str(a), str(b)])
    out = capsys.readouterr().out
    assert code == 1 | 2
    assert "[outcomes] 1 test(s) differ between boxes" in out
    assert f"{IDS[2]}  passed  failed" in out
    assert "exit 3 (1 tests failed; 2 drift or a gate blocked)" in out


def test_json_is_the_report_struct(tmp_path, capsys):
    a, b = write(tmp_path, make_receipt("a")), write(tmp_path, make_receipt("b"))
    assert main(["compare", "--json", str(a), str(b)]) == 0
    report = msgspec.json.decode(capsys.readouterr().out.encode(), type=DriftReport)
    assert report.groups == [["a", "b"]]
    assert {g.status for g in report.gates} == {"PASS"}


def test_markdown_lists_blocking_gates_with_their_action(tmp_path, capsys):
    local = stale_local()
    a, b = write(tmp_path, local), write(tmp_path, make_receipt("clean"))
    code = main(["compare", "--markdown", str(a), str(b)])
    out = capsys.readouterr().out
    assert code == 2
    assert "| Clean tree | ❌ FAIL | ✅ PASS |" in out
    assert "| Fixture integrity | ❌ FAIL | ✅ PASS |" in out
    assert "*Action:* commit, discard or declare" in out


def test_one_receipt_is_vacuous(tmp_path, capsys):
    code = main(["compare", str(write(tmp_path, make_receipt("alone")))])
    assert code == 16
    assert "vacuous: only 1 evaluated box(es): drift needs two" in capsys.readouterr().out


def test_the_same_run_twice_is_refused(tmp_path, capsys):
    a = write(tmp_path, make_receipt("box"))
    assert main(["compare", str(a), str(a)]) == 64
    assert "are the same run (box, run id" in capsys.readouterr().err


def test_same_labels_from_different_runs_stay_apart(tmp_path, capsys):
    a = write(tmp_path, make_receipt("box"), "one")
    b = write(tmp_path, make_receipt("box", run_id="20261130T000001Z-other"), "two")
    assert main(["compare", "--json", str(a), str(b)]) == 0
    assert json.loads(capsys.readouterr().out)["groups"] == [["box", "box#2"]]


def test_unknown_baseline_and_missing_file_are_usage_or_integrity_errors(tmp_path, capsys):
    a, b = write(tmp_path, make_receipt("a")), write(tmp_path, make_receipt("b"))
    assert main(["compare", "--baseline", "nope", str(a), str(b)]) == 64
    assert "--baseline 'nope' is not one of the evaluated boxes (a, b)" in capsys.readouterr().err
    assert main(["compare", str(a), str(tmp_path / "missing.json")]) == 8
    assert main(["compare"]) == 64


def _env() -> dict[str, str]:
    root = Path(__file__).parents[2]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(root / p) for p in ("runner", "coordinator")),
    }


def test_color_output_on_request_and_plain_when_piped(tmp_path):
    a, b = write(tmp_path, make_receipt("a")), write(tmp_path, make_receipt("b"))
    piped = subprocess.run(
        [sys.executable, "-m", "charpin_coordinator", "compare", str(a), str(b)],
        capture_output=True,
        text=True,
        check=False,
        env=_env(),
    )
    assert piped.returncode == 0
    assert "\x1b[" not in piped.stdout
    assert "Identity" in piped.stdout
    colored = subprocess.run(
        [
            sys.executable,
            "-m",
            "charpin_coordinator",
            "compare",
            "--color",
            "always",
            str(a),
            str(b),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=_env(),
    )
    assert "\x1b[" in colored.stdout
    assert "┏" in colored.stdout


def test_control_characters_from_receipts_never_reach_the_terminal(tmp_path, capsys):
    evil_id = "tests/test_a.py::test_x[\x1b[2J\nfake: PASS]"
    ids = [evil_id]
    evil = make_receipt(
        "evil\x1b[31m",
        **{
            "collection.collected": ids,
            "collection.selected": ids,
            "collection.executed": ids,
            "collection.order": ids,
            "outcomes": {evil_id: "failed"},
            "exit.status": 1,
            "exit.interpretation": "failed",
        },
    )
    a, b = write(tmp_path, make_receipt("a")), write(tmp_path, evil, "evil")
    for flags in ([], ["--markdown"], ["--color", "always"]):
        main(["compare", *flags, str(a), str(b)])
        out = capsys.readouterr().out
        assert "\x1b[2J" not in out
        assert "\x1b[31m" not in out
        assert "\nfake: PASS" not in out
        assert "\\x1b[2J\\x0afake: PASS" in out


def test_markdown_goes_to_a_file_or_to_stdout_as_run_does(tmp_path, capsys):
    # `--markdown FILE` writes the file (the text report still prints); `-` or no FILE prints
    # the Markdown instead, the same for `run` and `compare` (#10 item 13).
    a, b = write(tmp_path, make_receipt("a")), write(tmp_path, make_receipt("b"))
    md = tmp_path / "drift.md"
    assert main(["compare", str(a), str(b), "--markdown", str(md)]) == 0
    out = capsys.readouterr().out
    assert md.read_text().startswith("## charpin drift") and "## charpin drift" not in out
    assert "Identity" in out
    for flags in (["--markdown", "-"], ["--markdown"]):
        assert main(["compare", str(a), str(b), *flags]) == 0
        assert capsys.readouterr().out == md.read_text()
    assert main(["compare", "--json", str(a), str(b), "--markdown", str(md)]) == 0
    assert json.loads(capsys.readouterr().out)["groups"] == [["a", "b"]]
    assert main(["compare", "--json", "--markdown", "-", str(a), str(b)]) == 64
    assert "both print on stdout" in capsys.readouterr().err


def test_the_older_markdown_spelling_still_prints_and_keeps_the_receipt(tmp_path, capsys):
    a, b = write(tmp_path, make_receipt("a")), write(tmp_path, make_receipt("b"))
    before = a.read_bytes()
    assert main(["compare", "--markdown", str(a), str(b)]) == 0
    assert capsys.readouterr().out.startswith("## charpin drift")
    assert a.read_bytes() == before


def test_ids_that_differ_only_by_a_trailing_space_show_it(tmp_path, capsys):
    # A collection diff whose lines look the same is no help: the space is shown (#10 item 13).
    plain, spaced = "tests/cases.yaml::case one", "tests/cases.yaml::case one "
    ids = sorted([*IDS, plain])
    other = sorted([*IDS, spaced])
    a = write(
        tmp_path,
        make_receipt(
            "a",
            **{
                "collection.collected": ids,
                "collection.selected": ids,
                "collection.executed": ids,
                "collection.order": ids,
                "outcomes": dict.fromkeys(ids, "passed"),
            },
        ),
    )
    b = write(
        tmp_path,
        make_receipt(
            "b",
            **{
                "collection.collected": other,
                "collection.selected": other,
                "collection.executed": other,
                "collection.order": other,
                "outcomes": dict.fromkeys(other, "passed"),
            },
        ),
    )
    for flags in ([], ["--markdown"]):
        main(["compare", *flags, str(a), str(b)])
        out = capsys.readouterr().out
        assert f"-{plain}\n" in out, out
        assert f"+{plain}\u2420\n" in out, out
        assert "trailing whitespace shown as \u2420 space" in out
