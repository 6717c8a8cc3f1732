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


def test_a_conftest_that_cannot_import_is_a_collection_error_with_its_message(
    tmp_path: Path,
) -> None:
    """pytest exits 4 ("usage") before any session when a conftest fails to import; the
    receipt names the conftest and the error instead of "the plugin did not load"."""
    files = dict(BROKEN)
    files["tests/test_prices.py"] = "def test_prices():\n    assert True\n"
    files["tests/conftest.py"] = "import shop.fixtures_db  # a module nobody committed\n"
    repo = make_repo(tmp_path / "shop", files)
    out = tmp_path / "r.json"
    done = subprocess.run(
        [sys.executable, "-m", "charpin_runner", "receipt", "--repo", str(repo), "-o", str(out)],
        env={**os.environ, "PYTHONPATH": RUNNER},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    receipt = json.loads(out.read_text())
    assert receipt["exit"]["pytest_status"] is None
    assert receipt["exit"]["status"] == 4
    assert receipt["exit"]["interpretation"] == "collection-error", receipt["exit"]
    first = receipt["exit"]["reasons"][0]
    assert first.startswith("collection error in tests/conftest.py: "), first
    assert "No module named 'shop'" in first or "No module named 'shop.fixtures_db'" in first
    assert not any("did not load" in r for r in receipt["exit"]["reasons"])
    assert done.returncode == 1
