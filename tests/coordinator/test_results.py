"""The run folder: safe box folder names, atomic layout, never overwritten."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from charpin_coordinator.remote import results
from charpin_coordinator.remote.boxrun import BoxOutcome
from charpin_coordinator.report import NotEvaluated
from charpin_runner.errors import UsageError
from charpin_runner.runid import check_run_id, new_run_id

_FILES = results.ReportFiles(drift_json=b"{}\n", drift_md=b"# drift\n")


def test_folder_names_are_safe_distinct_and_keep_plain_names() -> None:
    labels = ["ci", "we ird'$;box", "we_ird__box", "../etc", "CI", "-x"]
    folders = results.safe_folders(labels)
    assert folders["ci"] == "ci"
    assert len(set(folders.values())) == len(labels)
    for name in folders.values():
        assert name[0].isalnum() and set(name) <= set(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
        )
        assert len(name) <= 64 and ".." not in name.split("/")


def test_layout_and_alias_kept_in_json(tmp_path: Path) -> None:
    ok = BoxOutcome(
        label="we ird'$;box",
        raw_receipt=b'{"r": 1}',
        stdout=b"out",
        stderr=b"err",
        sent=10,
    )
    bad = BoxOutcome(
        label="down",
        not_evaluated=NotEvaluated(label="down", kind="refused", reason="down: refused"),
    )
    folder = results.write_run(tmp_path / "runs", "run-1", [ok, bad], _FILES)
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == [
        "down",
        "down/box.json",
        "down/stderr.log",
        "down/stdout.log",
        "drift.json",
        "drift.md",
        "we_ird_box-b6acc462",
        "we_ird_box-b6acc462/box.json",
        "we_ird_box-b6acc462/receipt.json",
        "we_ird_box-b6acc462/stderr.log",
        "we_ird_box-b6acc462/stdout.log",
    ]
    meta = json.loads((folder / "we_ird_box-b6acc462" / "box.json").read_text())
    assert meta["label"] == "we ird'$;box" and meta["bytes_sent"] == 10
    assert json.loads((folder / "down" / "box.json").read_text())["kind"] == "refused"
    assert not [p for p in (tmp_path / "runs").iterdir() if p.name.startswith(".")]


def test_an_existing_run_is_never_reused(tmp_path: Path) -> None:
    results.write_run(tmp_path, "run-1", [], _FILES)
    with pytest.raises(UsageError, match="never overwritten"):
        results.write_run(tmp_path, "run-1", [], _FILES)


def test_bad_run_ids_are_refused() -> None:
    assert check_run_id("nightly-2026.11.30") == "nightly-2026.11.30"
    for bad in ("../x", "a b", "", ".hidden", "a/b"):
        with pytest.raises(UsageError):
            check_run_id(bad)
    assert check_run_id(new_run_id())
