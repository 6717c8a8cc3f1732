"""A case folder whose work/ holds an empty folder records green and then fails from a clean
checkout, where git left the folder out (#22): `record` refuses it, with the fix, before anything
runs; with the fix the pin replays green from a fresh clone."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from pins_helpers import Runner

from tests.conftest import git, make_repo

# Writes into out/, which it expects to exist (as the recipe's harnesses often do).
PROGRAM = "with open('out/report.txt', 'w') as f:\n    f.write('total 3\\n')\nprint('done')\n"


def _case_folder(repo: Path) -> Path:
    folder = repo / "cases" / "report"
    (folder / "work" / "out").mkdir(parents=True)  # empty: git will not keep it
    (folder / "target.txt").write_text("report.py\n")
    (folder / "argv.json").write_text(json.dumps(["report.py"]) + "\n")
    return folder


def test_an_empty_folder_in_a_work_folder_is_refused_then_fixed(
    tmp_path: Path, charpin: Runner
) -> None:
    repo = make_repo(tmp_path / "repo", {"report.py": PROGRAM})
    folder = _case_folder(repo)
    code, out, err = charpin("pins", "record", "--repo", str(repo))
    assert code == 2, out + err
    [line] = [x for x in err.splitlines() if x.startswith("refused:")]
    assert line == (
        "refused: pin report: its work folder cases/report/work holds empty folder(s) out, which "
        "git does not keep, so the pin would fail from a clean checkout; put a file in each (e.g. "
        "cases/report/work/out/.gitkeep) or have the program create it, then record again"
    )
    assert not (repo / "goldens" / "report.json").exists()

    (folder / "work" / "out" / ".gitkeep").write_text("")
    code, out, err = charpin("pins", "record", "--repo", str(repo))
    assert code == 0, out + err
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "pin the report")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    code, out, err = charpin("pins", "check", "--repo", str(clone))
    assert code == 0, out + err
