"""`charpin-remote compare FOLDER`: a CI fleet's downloaded receipts, labels kept and unique."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.gates import evaluate
from charpin_runner.receipt import Receipt, dumps

from tests.receipt_factory import IDS, make_receipt


def put(folder: Path, receipt: Receipt, name: str | None = None) -> Path:
    path = folder / (name or f"receipt-{receipt.label}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(dumps(receipt))
    return path


def fleet(folder: Path, *labels: str) -> None:
    for n, label in enumerate(labels):
        put(folder, make_receipt(label, run_id=f"20261201T000000Z-{n:06x}"))


def test_a_folder_is_every_receipt_in_it_sorted_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet(tmp_path / "receipts", "ubuntu-24.04-py3.12", "macos-14-py3.11", "ubuntu-24.04-py3.11")
    (tmp_path / "receipts" / "notes.json").write_text("not a receipt")  # not receipt*.json
    assert main(["compare", "--json", str(tmp_path / "receipts")]) == 0
    boxes = [b["label"] for b in json.loads(capsys.readouterr().out)["boxes"]]
    assert boxes == ["macos-14-py3.11", "ubuntu-24.04-py3.11", "ubuntu-24.04-py3.12"]


def test_artifact_subfolders_and_files_mix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # download-artifact without merge-multiple: one subfolder per artifact.
    put(tmp_path / "dl" / "receipt-a", make_receipt("a", run_id="r-a"))
    put(tmp_path / "dl" / "receipt-b", make_receipt("b", run_id="r-b"))
    extra = put(tmp_path, make_receipt("c", run_id="r-c"), "c.json")
    assert main(["compare", "--json", str(tmp_path / "dl"), str(extra)]) == 0
    assert [b["label"] for b in json.loads(capsys.readouterr().out)["boxes"]] == ["a", "b", "c"]


def test_a_duplicate_label_in_a_fleet_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "receipts"
    put(folder, make_receipt("linux-py3.12", run_id="r-1"), "receipt-linux-py3.12.json")
    put(folder, make_receipt("linux-py3.12", run_id="r-2"), "receipt-other.json")
    assert main(["compare", str(folder)]) == 64
    out = capsys.readouterr()
    assert out.out == ""
    [line] = out.err.splitlines()
    assert "label 'linux-py3.12' is in both" in line
    assert "receipt-linux-py3.12.json" in line and "receipt-other.json" in line
    assert "its own --label" in line


def test_explicit_files_with_one_label_still_stay_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = put(tmp_path, make_receipt("box", run_id="r-1"), "one.json")
    b = put(tmp_path, make_receipt("box", run_id="r-2"), "two.json")
    assert main(["compare", "--json", str(a), str(b)]) == 0
    assert json.loads(capsys.readouterr().out)["groups"] == [["box", "box#2"]]


def test_a_folder_without_receipts_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["compare", str(tmp_path / "empty")]) == 64
    assert "no receipt*.json under" in capsys.readouterr().err


def test_a_fleet_folder_is_recorded_with_its_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    fleet(tmp_path / "receipts", "ubuntu-py3.11", "ubuntu-py3.12")
    out = tmp_path / "charpin"
    out.mkdir()
    code = main(
        [
            "compare",
            "--record",
            "--out",
            str(out / "runs"),
            "--history",
            str(out / "history.sqlite"),
            "--markdown",
            str(out / "drift.md"),
            str(tmp_path / "receipts"),
        ]
    )
    assert code == 0, capsys.readouterr().err
    [folder] = (out / "runs").iterdir()
    assert sorted(p.parent.name for p in folder.glob("*/receipt.json")) == [
        "ubuntu-py3.11",
        "ubuntu-py3.12",
    ]
    assert (out / "history.sqlite").is_file() and (out / "drift.md").is_file()
    # A kept run folder is itself a folder of receipts.
    capsys.readouterr()
    assert main(["compare", "--json", str(folder)]) == 0
    boxes = [b["label"] for b in json.loads(capsys.readouterr().out)["boxes"]]
    assert boxes == ["ubuntu-py3.11", "ubuntu-py3.12"]


def test_parity_blames_only_the_box_with_the_uncommitted_test_file() -> None:
    extra = [*IDS, "tests/test_new.py::test_x"]
    local = make_receipt(
        "local",
        **{
            "collection.collected": extra,
            "collection.executed": extra,
            "tree.dirty_before": ["tests/test_new.py"],
        },
    )
    labeled = [(r.label, r) for r in (make_receipt("base"), local, make_receipt("other"))]
    results = {(g.gate, g.box): g for g in evaluate(labeled, labeled[0], None)}
    blamed = results[("Collection parity", "local")]
    assert blamed.status == "FAIL"
    assert "uncommitted files here: tests/test_new.py" in blamed.detail
    assert results[("Collection parity", "base")].status == "PASS"
    assert results[("Collection parity", "other")].status == "PASS"
