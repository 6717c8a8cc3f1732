"""A commit whose dependencies differ gets its own venv; its tests must still not be able to plant
code in the venv (or the byte code of a venv, or the runner) another commit's run will use.

Seen by an audit: commit B (another pyproject, so another venv key) wrote `zz_evil.pth` into
commit A's cached venv, which was not protected; the next run of a failing commit with A's
dependencies executed it in the runner and came back `ok`, every gate PASS.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git
from tests.hostile.harness import host_for, repo_with, require_bwrap, run, said
from tests.hostile.test_cache_poisoning import SAID, SETUP

# Writes into every venv and runner folder of the box cache but its own, and a .pyc beside a
# module of each venv (byte code a later import would load).
PLANTER = '''
import sys
from pathlib import Path


def test_plants_into_the_other_caches():
    cache = Path(sys.prefix).parent.parent  # <home>/.cache/charpin/venvs/<key> -> charpin
    done = []
    for venv in sorted((cache / "venvs").glob("*")):
        if not venv.is_dir() or venv == Path(sys.prefix):
            continue
        for site in venv.glob("lib/python*/site-packages"):
            try:
                (site / "zz_evil.pth").write_text(
                    "import os; open({marker!r}, 'a').write('pth\\\\n')\\n"
                )
                done.append(str(site))
            except OSError as exc:
                done.append("refused " + str(exc))
    for runner in sorted((cache / "runners").glob("*")):
        try:
            (runner / "__pycache__").mkdir(exist_ok=True)
            (runner / "__pycache__" / "planted.pyc").write_bytes(b"x")
            done.append(str(runner))
        except OSError as exc:
            done.append("refused " + str(exc))
    print("ATTEMPT " + " | ".join(done), flush=True)
'''

FAILING = "def test_fails():\n    assert False\n"


def _three_commits(
    kind: str, sandbox: str, sshd_factory: Any, tmp_path: Path
) -> tuple[str, str]:
    hosts, boxes, ssh_config = host_for(kind, sshd_factory, tmp_path)
    marker = tmp_path / "pth-ran"
    repo = repo_with(
        tmp_path / "repo",
        {"tests/test_a.py": "def test_a():\n    assert True\n"},
        boxes,
        SETUP + SAID,
    )
    _, first, _ = run(repo, hosts, "--sandbox", sandbox, ssh_config=ssh_config, run_id="a")
    assert first["not_evaluated"] == [], first
    # Commit B: other dependencies (another venv key), and a test that plants into A's caches.
    pyproject = repo / "pyproject.toml"
    original = pyproject.read_text()
    pyproject.write_text(original + "\n# a dependency changed\n")
    (repo / "tests/test_a.py").write_text(
        PLANTER.format(marker=str(marker))
    )
    git(repo, "commit", "-qam", "commit B")
    _, _, folder = run(repo, hosts, "--sandbox", sandbox, ssh_config=ssh_config, run_id="b")
    receipt = json.loads((folder / hosts / "receipt.json").read_text())
    # Commit C: A's dependencies again, and a failing test the poison would hide.
    pyproject.write_text(original)
    (repo / "tests/test_a.py").write_text(FAILING)
    git(repo, "commit", "-qam", "commit C fails")
    code, third, _ = run(repo, hosts, "--sandbox", sandbox, ssh_config=ssh_config, run_id="c")
    assert not marker.exists(), "a .pth planted by another commit's tests ran"
    assert third["not_evaluated"] == [], third
    assert code & 1, third
    assert third["boxes"][0]["failing"] == ["tests/test_a.py::test_fails"]
    planted = said(folder, hosts)
    return receipt["exit"]["interpretation"] + "\n" + "\n".join(receipt["exit"]["reasons"]), planted


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["clean", "ssh"])
def test_without_a_sandbox_every_cache_the_run_touched_is_removed(
    kind: str, sshd_factory: Any, tmp_path: Path
) -> None:
    found, planted = _three_commits(kind, "off", sshd_factory, tmp_path)
    assert "site-packages" in planted, planted
    assert found.startswith("incomplete"), found
    assert "wrote into" in found and "venvs" in found and "removed" in found, found
    assert "runners" in found, found


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["clean", "ssh"])
def test_under_bubblewrap_every_cache_of_the_box_is_read_only(
    kind: str, sshd_factory: Any, tmp_path: Path
) -> None:
    require_bwrap()
    found, planted = _three_commits(kind, "auto", sshd_factory, tmp_path)
    assert found.startswith("ok"), found
    # Under bubblewrap the other caches are not even there: nothing to write into.
    assert "site-packages" not in planted, planted
