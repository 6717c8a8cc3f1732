"""replay_for_receipt gives per-pin receipt rows, and nothing (never an error) without pins."""

from __future__ import annotations

import hashlib
from pathlib import Path

from charpin_runner import config as charpin_config
from charpin_runner.pins.replay import replay_for_receipt
from charpin_runner.receipt import Pins
from pins_helpers import Runner, edit


def test_repo_without_pins(tmp_path: Path) -> None:
    result = replay_for_receipt(tmp_path, charpin_config.load(tmp_path))
    assert result == Pins(None, False, [])


def test_repo_with_pins(messy_repo: Path, charpin: Runner) -> None:
    assert charpin("pins", "record", "--repo", str(messy_repo))[0] == 0
    edit(messy_repo / "export_invoices.py", "return 3", "return 4")
    result = replay_for_receipt(messy_repo, charpin_config.load(messy_repo))
    assert result.source == "pins.jsonl" and result.replayed
    rows = {r.id: r for r in result.results}
    assert set(rows) == {"inv-usd", "inv-exempt", "report", "legacy", "legacy-empty"}
    assert rows["inv-usd"].status == "failed"
    assert rows["inv-usd"].failure_class == "exit-code"
    assert rows["inv-usd"].exit_code == 4
    # What moved travels in the receipt, so `verify` can show it without the box's files.
    assert rows["inv-usd"].detail[0] == "exit code: golden 3, actual 4"
    assert rows["report"].status == "passed" and rows["report"].failure_class is None
    assert rows["report"].detail == []
    assert sorted(rows["report"].files) == [
        "regions/north.txt",
        "regions/south.txt",
        "summary.json",
    ]
    assert rows["legacy-empty"].exit_code == 2
    expected = hashlib.sha256(b"sync alpha\nsync beta\n").hexdigest()
    assert rows["legacy"].stdout_sha256 == expected
    # Receipts must not leave files in the repository (the clean-tree gate would see them).
    assert not (messy_repo / ".charpin").exists()
