"""Tests only: the Python 3.9 the runner must keep working on, found on this machine.

The runner promises Python 3.9 on boxes. The tests that prove it need a 3.9 interpreter: the one
named by CHARPIN_PYTHON39, else a pyenv build, else Debian's /usr/bin/python3.9 (which
`.ci/install-python39` installs from Debian 11 when this machine has none). Without any they
skip, unless CHARPIN_REQUIRE_PY39=1 (CI), where they fail.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

_CANDIDATES = (
    os.environ.get("CHARPIN_PYTHON39", ""),
    "/root/.pyenv/versions/3.9.18/bin/python3.9",
    "/usr/bin/python3.9",
)
PY39 = next(
    (Path(c) for c in _CANDIDATES if c and os.access(c, os.X_OK)), Path("/nonexistent/python3.9")
)
REQUIRED = os.environ.get("CHARPIN_REQUIRE_PY39") == "1"


def pythons() -> list[str]:
    """This interpreter and, when there is one, Python 3.9 (parametrize over them)."""
    return [sys.executable] + ([str(PY39)] if PY39.exists() or REQUIRED else [])


def needs_py39(*, venv: bool = False) -> pytest.MarkDecorator:
    """Skip without a Python 3.9 here; under CHARPIN_REQUIRE_PY39=1 run anyway, and fail.

    venv: the test makes a venv with it, so it needs ensurepip, which Debian 11's packages
    cannot give a Debian 12 machine (their ensurepip wants Debian 11's wheels); such a 3.9
    skips those tests, saying so, even in CI.
    """
    if PY39.exists() and venv and not _has_ensurepip():
        return pytest.mark.skip(reason=f"{PY39} has no working ensurepip (set CHARPIN_PYTHON39)")
    return pytest.mark.skipif(
        not PY39.exists() and not REQUIRED,
        reason="no Python 3.9 here (set CHARPIN_PYTHON39, or run .ci/install-python39)",
    )


@functools.cache
def _has_ensurepip() -> bool:
    # Only making one shows it: Debian's ensurepip imports fine and fails on a missing wheel.
    with tempfile.TemporaryDirectory(prefix="charpin-py39-") as tmp:
        try:
            done = subprocess.run(
                [str(PY39), "-I", "-m", "venv", tmp + "/venv"],
                capture_output=True,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
    return done.returncode == 0
