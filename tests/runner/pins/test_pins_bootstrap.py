"""The env-read bootstrap is invisible: same streams and exit code as plain `python SCRIPT`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from charpin_runner.pins.bootstrap import BOOTSTRAP, ENV_VAR

from tests.py39 import pythons

TARGET = """\
import os, sys
import helper
print(__name__, sys.argv[1:], os.path.basename(__file__), helper.VALUE)
print(os.environ.get("A_KEY"), os.getenv("B_KEY"), "C_KEY" in os.environ)
print(os.environb.get(b"D_KEY"))
mode = sys.argv[1]
if mode == "exit":
    sys.exit(7)
if mode == "raise":
    raise ValueError("boom")
if mode == "message":
    sys.exit("bad input")
"""


@pytest.fixture
def target(tmp_path: Path) -> Path:
    (tmp_path / "helper.py").write_text("VALUE = 42\n")
    script = tmp_path / "prog.py"
    script.write_text(TARGET)
    (tmp_path / "boot.py").write_text(BOOTSTRAP)
    return script


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, capture_output=True, env=env, cwd=cwd, timeout=60, check=False)


PYTHONS = pythons()


@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("mode", ["ok", "exit", "raise", "message"])
def test_bootstrap_matches_plain_python(
    target: Path, tmp_path: Path, mode: str, python: str
) -> None:
    env = {"A_KEY": "a", "PATH": "/usr/bin:/bin"}
    plain = _run([python, str(target), mode], env, tmp_path)
    side = tmp_path / "reads"
    boot_env = dict(env, **{ENV_VAR: str(side)})
    boot = _run([python, str(tmp_path / "boot.py"), str(target), mode], boot_env, tmp_path)
    assert (boot.returncode, boot.stdout, boot.stderr) == (
        plain.returncode,
        plain.stdout,
        plain.stderr,
    )
    assert plain.stdout.startswith(b"__main__ ['" + mode.encode() + b"'] prog.py 42\n")
    # Reads of unset keys are recorded too; the bootstrap's own variable is hidden.
    assert side.read_text().split("\n") == ["A_KEY", "B_KEY", "C_KEY", "D_KEY"]
    assert ENV_VAR.encode() not in boot.stdout
    if mode == "raise":
        assert b"boot.py" not in boot.stderr and b"ValueError: boom" in boot.stderr
