"""Rule 4: charpin's git sees only objects, never the repository's opinion of them, and any change
under `.git` during a run is a finding.

The attack from the field: a test on `local` wrote `refs/replace/<blob of HEAD:pyproject.toml>`;
every later `run` and `verify` then read the attacker's [tool.charpin] (deselecting the test
that catches it). Its siblings replace the commit or the tree instead; and the watch of `.git`
is deny by default, so a ref namespace or control file nobody listed is a finding too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import git
from tests.hostile.harness import repo_with, run

CATCH = "tests/test_catch.py::test_the_rate"
SUITE = {
    "app.py": "RATE = 2\n",
    "tests/test_catch.py": "import app\n\ndef test_the_rate():\n    assert app.RATE == 3\n",
}
HONEST = '[tool.charpin]\npytest_args = ["-q"]\n'
FORGED = f'[tool.charpin]\npytest_args = ["-q", "--deselect", "{CATCH}"]\n'

# Run on `local`, in the working tree: plant a replacement for one object of HEAD, so that git
# (with replace refs honoured) reads FORGED wherever pyproject.toml at HEAD is read.
PLANT = """
import pathlib, subprocess

def git(*args, data=None):
    return subprocess.run(['git', *args], input=data, capture_output=True, check=True).stdout

def test_plant():
    forged = git('hash-object', '-w', '--stdin', data={forged!r}.encode()).strip().decode()
    what = {what!r}
    if what == 'blob':
        original = git('rev-parse', 'HEAD:pyproject.toml').strip().decode()
        git('replace', '-f', original, forged)
    else:
        listing = git('ls-tree', 'HEAD').decode().replace(
            git('rev-parse', 'HEAD:pyproject.toml').strip().decode(), forged)
        tree = git('mktree', data=listing.encode()).strip().decode()
        if what == 'tree':
            git('replace', '-f', git('rev-parse', 'HEAD^{{tree}}').strip().decode(), tree)
        else:
            commit = git('commit-tree', tree, '-m', 'forged').strip().decode()
            git('replace', '-f', git('rev-parse', 'HEAD').strip().decode(), commit)
"""


@pytest.mark.slow
@pytest.mark.parametrize("what", ["blob", "tree", "commit"])
def test_a_replace_ref_planted_by_a_local_test_changes_no_later_run(
    what: str, tmp_path: Path
) -> None:
    repo = repo_with(
        tmp_path / "repo",
        {**SUITE, "tests/test_plant.py": PLANT.format(forged=FORGED, what=what)},
        toml=HONEST,
    )
    # Without bubblewrap, where a test can write .git (under it .git is read-only).
    _, _, folder = run(repo, "local", "--sandbox", "off", run_id="plant")
    receipt = json.loads((folder / "local" / "receipt.json").read_text())
    reasons = " ".join(receipt["exit"]["reasons"])
    assert "the run changed the repository's git directory: .git/refs/replace/" in reasons
    assert receipt["exit"]["interpretation"] == "incomplete"
    # The replacement is there for git with replace refs on; charpin must not see it.
    assert "--deselect" in git(repo, "show", "HEAD:pyproject.toml")
    code, later, folder = run(repo, "clean", run_id="later")
    (box,) = later["boxes"]
    assert CATCH in box["failing"], box
    assert code & 1


@pytest.mark.slow
@pytest.mark.parametrize(
    "path",
    [
        "refs/replace/0123456789012345678901234567890123456789",
        "refs/some-namespace-nobody-listed/x",
        "packed-refs",
        "info/grafts",
        "objects/info/alternates",
        "shallow",
        "hooks/post-checkout",
    ],
)
def test_any_change_under_git_during_a_run_is_a_finding(path: str, tmp_path: Path) -> None:
    body = (
        "import pathlib\n\n\ndef test_write():\n"
        f"    target = pathlib.Path('.git') / {path!r}\n"
        "    target.parent.mkdir(parents=True, exist_ok=True)\n"
        "    with open(target, 'a') as handle:\n"
        "        handle.write('planted\\n')\n"
    )
    repo = repo_with(tmp_path / "repo", {"tests/test_write.py": body})
    _, _, folder = run(repo, "local", "--sandbox", "off")
    receipt = json.loads((folder / "local" / "receipt.json").read_text())
    assert receipt["exit"]["interpretation"] == "incomplete", receipt["exit"]
    assert any(f".git/{path}" in reason for reason in receipt["exit"]["reasons"]), receipt["exit"]


@pytest.mark.slow
def test_an_ordinary_run_that_only_reads_git_has_no_git_finding(tmp_path: Path) -> None:
    """No false alarm: tests that call git to read (status refreshes the index, rev-parse,
    log) leave the run clean."""
    body = (
        "import subprocess\n\n\ndef test_reads():\n"
        "    for args in (['status'], ['rev-parse', 'HEAD'], ['log', '-1'], ['describe', "
        "'--always']):\n"
        "        subprocess.run(['git', *args], check=True, capture_output=True)\n"
    )
    repo = repo_with(tmp_path / "repo", {"tests/test_reads.py": body})
    _, _, folder = run(repo, "local")
    receipt = json.loads((folder / "local" / "receipt.json").read_text())
    assert receipt["exit"]["interpretation"] == "ok", receipt["exit"]
