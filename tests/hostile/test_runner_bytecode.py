"""Attack: a test plants compiled byte code in the box's runner folder (which runs from byte code
compiled once when it was placed), so that the next run executes the attacker's runner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git
from tests.hostile.harness import SAY_TOML, host_for, repo_with, require_bwrap, run, said

PLANTER = """
import glob, os, py_compile, tempfile
from pathlib import Path


def test_plants_byte_code():
    runners = glob.glob(os.path.join({home!r}, ".cache", "charpin", "runners", "charpin-runner-*"))
    target = Path(runners[0]) / "charpin_runner" / "seal.py"
    evil = Path(tempfile.mkdtemp()) / "seal.py"
    evil.write_text(target.read_text() + "\\nopen({marker!r}, 'a').write('ran\\\\n')\\n")
    planted = sorted((target.parent / "__pycache__").glob("seal.*.pyc"))
    try:
        for cached in planted:
            py_compile.compile(str(evil), cfile=str(cached), dfile=str(target), doraise=True)
        print("ATTEMPT written " + " ".join(map(str, planted)), flush=True)
    except (OSError, IndexError) as exc:
        print("ATTEMPT refused " + repr(exc), flush=True)
"""


def _plant(
    kind: str, sandbox: str, sshd_factory: Any, tmp_path: Path
) -> tuple[dict[str, Any], str]:
    hosts, boxes, ssh_config = host_for(kind, sshd_factory, tmp_path)
    home = boxes[0].root if boxes else tmp_path / "xdg-cache" / "charpin" / "clean-box"
    marker = tmp_path / "evil-ran"
    test = PLANTER.format(home=str(home), marker=str(marker))
    repo = repo_with(tmp_path / "repo", {"tests/test_plant.py": test}, boxes, SAY_TOML)
    _, _, folder = run(repo, hosts, "--sandbox", sandbox, ssh_config=ssh_config, run_id="r1")
    receipt = json.loads((folder / hosts / "receipt.json").read_text())
    (repo / "tests/test_plant.py").write_text("def test_fine():\n    pass\n")
    git(repo, "commit", "-qam", "next")
    _, second, _ = run(repo, hosts, "--sandbox", sandbox, ssh_config=ssh_config, run_id="r2")
    assert not marker.exists(), "the planted byte code ran in the next run"
    assert not second["not_evaluated"], second
    return receipt, said(folder, hosts)


@pytest.mark.parametrize("kind", ["clean", "ssh"])
def test_without_a_sandbox_planted_byte_code_is_caught_and_the_runner_replaced(
    kind: str, sshd_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    receipt, attempt = _plant(kind, "off", sshd_factory, tmp_path)
    assert attempt.startswith("written /"), attempt
    assert receipt["exit"]["interpretation"] == "incomplete"
    assert any("wrote into" in r and "charpin-runner-" in r for r in receipt["exit"]["reasons"])


@pytest.mark.parametrize("kind", ["clean", "ssh"])
def test_under_bubblewrap_the_runner_folder_is_read_only(
    kind: str, sshd_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_bwrap()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    receipt, attempt = _plant(kind, "auto", sshd_factory, tmp_path)
    assert attempt.startswith("refused"), attempt
    assert receipt["exit"]["interpretation"] == "ok"
