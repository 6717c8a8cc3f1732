"""Fixtures for the pins tests: a throwaway repository holding the messy example programs."""

from __future__ import annotations

from pathlib import Path

import pytest
from charpin_runner.cli import main
from pins_helpers import Runner, build_messy_repo


@pytest.fixture
def messy_repo(tmp_path: Path) -> Path:
    """build_messy_repo in this test's tmp_path."""
    return build_messy_repo(tmp_path)


@pytest.fixture
def charpin(capsys: pytest.CaptureFixture[str]) -> Runner:
    """Run `charpin ARGS...` in-process; return (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run
