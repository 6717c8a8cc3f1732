"""Rule 3: every interpreter environment a run uses is protected like the box caches.

Seen in the field: a pin target wrote a `.pth` into the `[tool.charpin.pins] python` venv, and a
test planted one in the project's `.venv` used through `test_command`; each time the next broken
commit checked green. Under bubblewrap those environments are read-only; without it they are
watched, the run that wrote them is incomplete, and what it added is removed before anything
runs from them again.
"""

from __future__ import annotations

import json
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import git
from tests.hostile.harness import repo_with, require_bwrap, run

OUTER_SITE = site.getsitepackages()[0]


def _venv(where: Path) -> Path:
    """A venv that sees this interpreter's packages (pytest) through a .pth file."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    (site_dir,) = where.glob("lib/python*/site-packages")
    (site_dir / "outer.pth").write_text(OUTER_SITE + "\n")
    return site_dir


PLANT = (
    "import pathlib, sys\n"
    "site = next(pathlib.Path(sys.prefix).glob('lib/python*/site-packages'))\n"
    "try:\n"
    "    (site / 'zz_evil.pth').write_text(\"import os; open({marker!r}, 'a').write('ran')\\n\")\n"
    "    print('planted')\n"
    "except OSError as exc:\n"
    "    print('refused', type(exc).__name__)\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["off", "auto"])
def test_a_pin_target_cannot_poison_the_pins_python(sandbox: str, tmp_path: Path) -> None:
    if sandbox == "auto":
        require_bwrap()
    marker = tmp_path / "pth-ran"
    venv = tmp_path / "pins-venv"
    site_dir = _venv(venv)
    toml = (
        '[tool.charpin.pins]\npython = "' + str(venv / "bin" / "python") + '"\n'
        'file = "pins.jsonl"\n'
    )
    repo = repo_with(
        tmp_path / "repo",
        {
            "tool.py": PLANT.format(marker=str(marker)),
            "tests/test_ok.py": "def test_ok():\n    pass\n",
        },
        toml=toml,
    )
    record = ["pins", "record", "--sandbox", "off", "--id", "plant", "--", "tool.py"]
    recorded = subprocess.run(
        [sys.executable, "-m", "charpin_runner", *record],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Recording ran it once by hand without a sandbox (the oracle): clean that up first.
    (site_dir / "zz_evil.pth").unlink(missing_ok=True)
    marker.unlink(missing_ok=True)
    assert recorded.returncode == 0, recorded.stderr
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "pins")
    _, _, folder = run(repo, "clean", "--sandbox", sandbox, run_id="plant")
    receipt = json.loads((folder / "clean" / "receipt.json").read_text())
    reasons = " ".join(receipt["exit"]["reasons"])
    if sandbox == "off":
        assert "wrote into" in reasons and "removed" in reasons, reasons
        assert receipt["exit"]["interpretation"] == "incomplete"
    else:
        assert receipt["environment"]["sandbox"] == "bwrap"
    assert not (site_dir / "zz_evil.pth").exists(), "the planted .pth is still there"
    subprocess.run([str(venv / "bin" / "python"), "-c", "pass"], check=True)
    assert not marker.exists(), "the pins' python ran the planted .pth"


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["off", "auto"])
def test_a_test_cannot_poison_the_projects_own_venv(sandbox: str, tmp_path: Path) -> None:
    if sandbox == "auto":
        require_bwrap()
    marker = tmp_path / "pth-ran"
    body = "def test_plants():\n" + "".join(
        "    " + line + "\n" for line in PLANT.format(marker=str(marker)).splitlines()
    )
    repo = repo_with(
        tmp_path / "repo",
        {"tests/test_plant.py": body, ".gitignore": ".venv/\n"},
        toml='[tool.charpin]\ntest_command = [".venv/bin/python", "-m", "pytest"]\n',
    )
    site_dir = _venv(repo / ".venv")
    _, _, folder = run(repo, "local", "--sandbox", sandbox, run_id="plant")
    receipt = json.loads((folder / "local" / "receipt.json").read_text())
    if sandbox == "off":
        assert receipt["exit"]["interpretation"] == "incomplete", receipt["exit"]
        assert any(".venv" in r and "removed" in r for r in receipt["exit"]["reasons"])
    else:
        assert receipt["exit"]["interpretation"] == "ok", receipt["exit"]
    assert not (site_dir / "zz_evil.pth").exists(), "the planted .pth is still there"
    # The next commit fails; nothing the first run planted may run or hide it.
    (repo / "tests/test_plant.py").write_text("def test_fails():\n    assert False\n")
    git(repo, "commit", "-qam", "a failing commit")
    code, later, _ = run(repo, "local", "--sandbox", sandbox, run_id="later")
    assert not marker.exists(), "the project's venv ran the planted .pth"
    assert code & 1, later
