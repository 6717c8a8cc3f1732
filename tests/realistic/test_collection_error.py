"""A suite that cannot be collected (a test module importing a generated file that is missing)
is a red run to fix, not an interrupted box to wait for (#10 item 6)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from charpin_coordinator.cli import main

from tests.conftest import make_repo

RUNNER = str(Path(__file__).resolve().parents[2] / "runner")
BROKEN = {
    "src/shop/__init__.py": "",
    "src/shop/prices.py": "from shop._generated import TABLE  # written by `make generate`\n",
    "pyproject.toml": "[tool.pytest.ini_options]\npythonpath = ['src']\n",
    "tests/test_prices.py": "from shop.prices import TABLE\n\n\ndef test_table():\n    assert TABLE\n",
    "tests/test_other.py": "def test_other():\n    assert True\n",
}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", RUNNER)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def test_the_receipt_says_collection_error_with_the_error(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "shop", BROKEN)
    out = tmp_path / "r.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "charpin_runner",
            "receipt",
            "--repo",
            str(repo),
            "-o",
            str(out),
            "-q",
        ],
        env={**os.environ, "PYTHONPATH": RUNNER},
        capture_output=True,
        check=False,
        timeout=120,
    )
    receipt = json.loads(out.read_text())
    assert receipt["exit"]["interpretation"] == "collection-error"
    assert done.returncode == 1  # a red run, not 130 "interrupted"
    first = receipt["exit"]["reasons"][0]
    assert first.startswith("collection error in tests/test_prices.py: ")
    assert "No module named 'shop._generated'" in first


@pytest.mark.slow
def test_a_run_reports_it_as_failed_tests_not_a_box_that_was_not_evaluated(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "shop", BROKEN)
    runs = tmp_path / "runs"
    code = main(
        [
            "run",
            "--repo",
            str(repo),
            "--hosts",
            "clean",
            "--out",
            str(runs),
            "--run-id",
            "r1",
            "--json",
        ]
    )
    report = json.loads((runs / "r1" / "drift.json").read_text())
    assert report["not_evaluated"] == []
    assert code & 1 and not code & 4
    [completeness] = [g for g in report["gates"] if g["gate"] == "Completeness"]
    assert completeness["status"] == "FAIL"
    assert "No module named 'shop._generated'" in completeness["detail"]
