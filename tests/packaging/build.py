"""Tests only: build charpin's distributions from this checkout and make venvs outside it.

Builds run without an isolated build environment (hatchling and build come with the test extra),
so they are fast and need no package index; installing a wheel's dependencies does need one
(PyPI): without it these tests skip, unless CHARPIN_REQUIRE_PYPI=1 (CI), where they fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# CHARPIN_FLOORS names another constraints file: how a floor is tried before it is declared.
FLOORS = Path(os.environ.get("CHARPIN_FLOORS") or ROOT / ".ci" / "constraints-floors.txt")


def build(kind: str, source: Path, out: Path) -> Path:
    """`python -m build --KIND --no-isolation` of source into out; return the one file made."""
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.iterdir())
    done = subprocess.run(
        [sys.executable, "-m", "build", f"--{kind}", "--no-isolation", "-o", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [made] = set(out.iterdir()) - before
    return made


def make_venv(folder: Path, python: str = sys.executable) -> Path:
    """A fresh venv with pip, made by `python`; returns its bin/ folder."""
    if python == sys.executable:
        venv.EnvBuilder(with_pip=True, clear=True).create(folder)
    else:
        subprocess.run([python, "-m", "venv", "--clear", str(folder)], check=True, timeout=300)
    return folder / "bin"


def pip_install(bin_dir: Path, *args: str) -> None:
    """pip install into a venv; skip (or fail in CI) when the index cannot be reached."""
    done = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "-q", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    if done.returncode == 0:
        return
    tail = done.stderr[-1500:]
    if (
        "No matching distribution" in tail
        or "Could not find a version" in tail
        or ("Failed to establish a new connection" in tail)
    ):
        if os.environ.get("CHARPIN_REQUIRE_PYPI") != "1":
            pytest.skip(f"cannot install from the package index here: {tail[-300:]}")
    pytest.fail(f"pip install {' '.join(args)} failed:\n{tail}")
