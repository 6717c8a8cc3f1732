"""Attack, on every kind of box: a test edits a tracked file and hides the edit from git with an
index flag, and adds a file hidden by a new exclude entry. The box's receipt must name both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.harness import BOX_KINDS, host_for, repo_with, run

HIDER = """
import subprocess
from pathlib import Path


def test_hides_its_edit():
    Path("src/app.py").write_text("print('changed')\\n")
    subprocess.run(["git", "update-index", "--skip-worktree", "src/app.py"], check=True)
    Path("src/new.py").write_text("x = 1\\n")
    with open(".git/info/exclude", "a") as handle:
        handle.write("src/new.py\\n")
"""


@pytest.mark.parametrize("kind", BOX_KINDS)
def test_an_edit_hidden_from_git_is_in_the_receipt(
    kind: str, sshd_factory: Any, tmp_path: Path
) -> None:
    hosts, boxes, ssh_config = host_for(kind, sshd_factory, tmp_path)
    repo = repo_with(
        tmp_path / "repo",
        {"src/app.py": "print('original')\n", "tests/test_hide.py": HIDER},
        boxes,
    )
    # Without bubblewrap, where the index and .git/info are writable (under bwrap they are not).
    code, _, folder = run(repo, hosts, "--sandbox", "off", ssh_config=ssh_config)
    receipt = json.loads((folder / hosts / "receipt.json").read_text())
    assert {"src/app.py", "src/new.py"} <= set(receipt["tree"]["written"]), receipt["tree"]
    assert receipt["tree"]["flagged_after"] == ["src/app.py"]
    assert receipt["exit"]["interpretation"] == "incomplete"
    assert code != 0
