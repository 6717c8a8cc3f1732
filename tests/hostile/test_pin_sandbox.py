"""Pin targets are code under test too: replayed by `charpin receipt`, they run in the tests'
sandbox, and what they write into the box's caches is caught like what a test writes.

Seen by an audit: pins replayed outside bubblewrap, and byte-code caches were not watched, so a
pin rewrote a `.pyc` in its venv with no finding and the next failing commit came back `ok`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git
from tests.hostile.harness import host_for, repo_with, require_bwrap, run
from tests.hostile.test_cache_poisoning import SETUP

# Does nothing where it is recorded; on a box (its interpreter in a cached venv) it plants a
# .pth and a byte-code file into that venv, and prints nothing either way (the pin stays green).
PLANTER = """
import sys
from pathlib import Path

prefix = Path(sys.prefix)
if "/.cache/charpin/venvs/" in str(prefix):
    for site in prefix.glob("lib/python*/site-packages"):
        for name, data in (("zz_pin.pth", "import os; open({marker!r}, 'a').write('x')\\n"),):
            try:
                (site / name).write_text(data)
            except OSError:
                pass
        cache = site / "_distutils_hack" / "__pycache__"
        try:
            cache.mkdir(parents=True, exist_ok=True)
            (cache / "planted.cpython-311.pyc").write_bytes(b"planted")
        except OSError:
            pass
"""


def _pinned_repo(kind: str, sshd_factory: Any, tmp_path: Path) -> tuple[Path, str, Any, Path]:
    hosts, boxes, ssh_config = host_for(kind, sshd_factory, tmp_path)
    marker = tmp_path / "pth-ran"
    repo = repo_with(
        tmp_path / "repo",
        {
            "tests/test_ok.py": "def test_ok():\n    assert True\n",
            "tools/plant.py": PLANTER.format(marker=str(marker)),
        },
        boxes,
        SETUP,
    )
    done = subprocess.run(
        [sys.executable, "-m", "charpin_runner", "pins", "record", "--id", "plant", "--",
         "tools/plant.py"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a pin")
    return repo, hosts, ssh_config, marker


def _then_a_failing_commit(repo: Path, hosts: str, ssh_config: Any, marker: Path) -> None:
    (repo / "tests/test_ok.py").write_text("def test_ok():\n    assert False\n")
    git(repo, "commit", "-qam", "fails")
    code, report, _ = run(repo, hosts, ssh_config=ssh_config, run_id="r2")
    assert not marker.exists(), "a .pth a pin planted ran in the next run"
    assert report["not_evaluated"] == [], report
    assert code & 1
    assert report["boxes"][0]["failing"] == ["tests/test_ok.py::test_ok"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["clean", "ssh"])
def test_a_pin_cannot_write_the_venv_under_bubblewrap(
    kind: str, sshd_factory: Any, tmp_path: Path
) -> None:
    require_bwrap()
    repo, hosts, ssh_config, marker = _pinned_repo(kind, sshd_factory, tmp_path)
    code, report, folder = run(repo, hosts, ssh_config=ssh_config, run_id="r1")
    receipt = json.loads((folder / hosts / "receipt.json").read_text())
    assert receipt["pins"]["results"][0]["status"] == "passed"
    assert receipt["exit"]["interpretation"] == "ok", receipt["exit"]
    assert code & 3 == 0, report  # one box: only "vacuous" (16) may be set
    _then_a_failing_commit(repo, hosts, ssh_config, marker)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["clean", "ssh"])
def test_without_a_sandbox_a_pins_writes_are_caught_and_the_venv_dropped(
    kind: str, sshd_factory: Any, tmp_path: Path
) -> None:
    repo, hosts, ssh_config, marker = _pinned_repo(kind, sshd_factory, tmp_path)
    _, _, folder = run(repo, hosts, "--sandbox", "off", ssh_config=ssh_config, run_id="r1")
    receipt = json.loads((folder / hosts / "receipt.json").read_text())
    assert receipt["exit"]["interpretation"] == "incomplete"
    reasons = "\n".join(receipt["exit"]["reasons"])
    assert "wrote into" in reasons and "removed" in reasons, reasons
    assert "__pycache__" in reasons or "zz_pin.pth" in reasons, reasons
    _then_a_failing_commit(repo, hosts, ssh_config, marker)
