"""Class E: nothing charpin copies for a run follows a symbolic link out of the checkout.

Seen by an attacker (b08): a pin's `fixtures` folder was committed as a symlink to `~/.ssh`; the
pins' unsandboxed parent copied it whole into the pin's work folder, where the pin printed the
private key into the receipt. The rule (charpin_runner.copying): a folder charpin copies must
really lie inside the repository, else the pin fails with one line naming the path. The second
attack of the class was not fixed by hand: the fixtures folder itself is real, but a folder
above it is the link.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import git
from tests.hostile.harness import repo_with, run
from tests.hostile.test_pins_hostile import _charpin

KEY = "CANARY-PRIVATE-KEY-0b5e"
SHOW = "import os\nfor n in sorted(os.listdir('.')):\n    print(n, open(n).read().strip())\n"


def _pinned(tmp_path: Path, fixtures: str) -> Path:
    repo = repo_with(
        tmp_path / "repo",
        {
            "show.py": SHOW,
            f"{fixtures}/readme.txt": "dummy\n",
            "tests/test_a.py": "def test_a():\n    pass\n",
        },
    )
    done = _charpin(repo, "record", "--fixtures", fixtures, "--id", "show", "--", "show.py")
    assert done.returncode == 0, done.stderr
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "pin")
    return repo


def _secret_home(tmp_path: Path) -> Path:
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "id_ed25519").write_text(KEY + "\n")
    (ssh / "readme.txt").write_text("dummy\n")
    return ssh


def _relink(repo: Path, folder: str, target: Path) -> None:
    git(repo, "rm", "-rq", folder)
    os.symlink(target, repo / folder)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "link")


def _assert_refused(repo: Path, folder: Path, named: str) -> None:
    text = "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())
    assert KEY not in text, "the key was copied and printed"
    receipt = json.loads((folder / "clean" / "receipt.json").read_text())
    reasons = json.dumps(receipt.get("pins"))
    assert "outside the repository" in reasons and named in reasons, reasons


@pytest.mark.slow
def test_a_fixtures_folder_linked_out_of_the_checkout_is_refused(tmp_path: Path) -> None:
    ssh = _secret_home(tmp_path)
    repo = _pinned(tmp_path, "fx")
    _relink(repo, "fx", ssh)
    _, _, folder = run(repo, "clean")
    _assert_refused(repo, folder, "fixtures fx")


@pytest.mark.slow
def test_a_parent_folder_linked_out_of_the_checkout_is_refused(tmp_path: Path) -> None:
    """The second attack: `data/fx` is the fixtures folder, `data` the link."""
    real = tmp_path / "home" / "fx"  # a real folder: only `data` is a link
    real.mkdir(parents=True)
    (real / "id_ed25519").write_text(KEY + "\n")
    repo = _pinned(tmp_path, "data/fx")
    _relink(repo, "data", tmp_path / "home")
    _, _, folder = run(repo, "clean")
    _assert_refused(repo, folder, "fixtures data/fx")
