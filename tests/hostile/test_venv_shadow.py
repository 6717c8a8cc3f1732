"""Attack: the commit ships a `venv/` package, so that charpin's own `python -m venv` (making the
setup venv, or the per-run venv of `prepare`) would run the commit's code as charpin, before
any sandbox: charpin's own processes start isolated, in a folder outside the checkout (#20)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.hostile.harness import repo_with, run
from tests.hostile.test_cache_poisoning import SETUP

SHADOW = "import pathlib\npathlib.Path({marker!r}).write_text('the commit ran as charpin')\n"


def test_a_venv_package_in_the_commit_is_never_what_charpin_runs(tmp_path: Path) -> None:
    marker = tmp_path / "shadow-ran"
    toml = SETUP + 'prepare = ["true"]\n'
    repo = repo_with(
        tmp_path / "repo",
        {
            "venv/__init__.py": SHADOW.format(marker=str(marker)),
            "venv/__main__.py": SHADOW.format(marker=str(marker)),
            "tests/test_a.py": "def test_a():\n    pass\n",
        },
        toml=toml,
    )
    code, report, folder = run(repo, "clean", "--sandbox", "off")
    assert not marker.exists(), marker.read_text()
    assert report["not_evaluated"] == [], report["not_evaluated"]
    receipt = json.loads((folder / "clean" / "receipt.json").read_text())
    assert receipt["exit"]["interpretation"] == "ok", receipt["exit"]
    assert code & ~16 == 0, code
