"""Fixtures for the hostile corpus: each attack runs for real on local, clean and an sshd box."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import ssh_box, sshd_factory

__all__ = ["ssh_box", "sshd_factory"]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _runner_importable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The local box runs `python -m charpin_runner`; in a source checkout it is not installed.
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "runner"))
    # The clean box keeps its cache under XDG_CACHE_HOME: never the developer's real home.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
