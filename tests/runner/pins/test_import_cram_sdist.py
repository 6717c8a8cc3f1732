"""`charpin import cram` on cram 0.7's own files, copied from its sdist into tests/data (#22):
examples/env.t imports as cram passes it, tests/xunit.t imports with normalisation rules for the
values it matches with (re) (the patterns are matched before normalisation), one bad file is
reported while the rest are imported, and a drifted cram pin reads as cram's `[1]` -> `[3]` at
the line of its `.t`."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from pins_helpers import Runner, edit

from tests.conftest import git
from tests.runner.pins.test_import_cram import TALLY, TALLY_T

SDIST = Path(__file__).resolve().parents[2] / "data" / "cram-0.7"
RULES = """\
[[tool.charpin.pins.normalise]]
name = "work"
kind = "work"
[[tool.charpin.pins.normalise]]
name = "stamp"
kind = "timestamp"
[[tool.charpin.pins.normalise]]
name = "seconds"
kind = "regex"
pattern = 'time="\\d+\\.\\d{6}"'
replace = 'time="S"'
[[tool.charpin.pins.normalise]]
name = "host"
kind = "regex"
pattern = 'hostname="[^"]+"'
replace = 'hostname="H"'
"""


@pytest.fixture
def cram_repo(tmp_path: Path) -> Path:
    """cram's files in a repository of their own, as in its sdist."""
    repo = tmp_path / "cram-0.7"
    shutil.copytree(SDIST, repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "cram 0.7's tests")
    return repo


def _pins(repo: Path) -> dict[str, dict[str, object]]:
    lines = (repo / "pins.jsonl").read_text().splitlines()
    return {row["id"]: row for row in map(json.loads, lines)}


def test_crams_examples_import_and_one_bad_file_is_reported_alone(
    cram_repo: Path, charpin: Runner
) -> None:
    code, out, err = charpin("import", "cram", "--repo", str(cram_repo), str(cram_repo / "examples"))
    # fail.t fails under cram itself (its README says so): reported with cram's diff, alone.
    assert code == 2, out + err
    assert "examples/fail.t: the unchanged program does not pass this test under cram's" in err
    assert "  +++ examples/fail.t.err\n" in err
    assert "charpin: error: cram .t: 1 file(s) not imported (above); the 4 others" in err
    assert set(_pins(cram_repo)) == {
        "examples-bare",
        "examples-env",
        "examples-missingeol",
        "examples-test",
    }
    # env.t checks cram's variables and its folder (`*/cramtests*/env.t (glob)`), as cram sets them.
    assert "imported examples-env" in out
    assert "not imported: examples/skip.t: cram skips this test here (it exits 80)" in out
    assert "not imported: examples/empty.t: empty" in out
    assert charpin("pins", "check", "--repo", str(cram_repo))[0] == 0


def test_crams_xunit_t_imports_when_its_changing_values_are_normalised(
    cram_repo: Path, charpin: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("cram", reason="the test extra installs cram 0.7, which xunit.t runs")
    # setup.sh runs `which python`: the one with cram installed.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    xunit = str(cram_repo / "tests" / "xunit.t")
    # Without rules the (re) lines are pinned to tonight's timestamps and times: red on replay,
    # reported as such, nothing written.
    code, _out, err = charpin("import", "cram", "--repo", str(cram_repo), xunit)
    assert code == 2
    assert "tests/xunit.t: imported, but the pin does not replay green" in err
    assert not (cram_repo / "pins.jsonl").exists()

    (cram_repo / "pyproject.toml").write_text(RULES)
    code, out, err = charpin("import", "cram", "--repo", str(cram_repo), xunit)
    assert code == 0, out + err
    # The patterns held on what cram printed (a real timestamp); the golden is normalised.
    stdout = str(_pins(cram_repo)["tests-xunit"]["stdout"])
    assert 'timestamp="$TIMESTAMP"' in stdout and 'time="S"' in stdout
    assert charpin("pins", "check", "--repo", str(cram_repo))[0] == 0


def test_a_drifted_cram_pin_reads_as_crams_exit_status_at_the_line_of_its_t(
    tmp_path: Path, charpin: Runner
) -> None:
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tally.py").write_text(TALLY)
    (repo / "tests" / "tally.t").write_text(TALLY_T)
    code, out, err = charpin("import", "cram", "--repo", str(repo), str(repo / "tests/tally.t"))
    assert code == 0, out + err
    edit(repo / "tally.py", "sys.exit(0 if total < 10 else 3)", "sys.exit(0 if total < 10 else 1)")
    code, out, _err = charpin("pins", "check", "--repo", str(repo))
    assert code == 2
    assert "CRAM-CHARPIN-SALT" not in out
    assert "--- golden/tests/tally.t\n" in out
    line = next(i for i, x in enumerate(TALLY_T.splitlines(), 1) if "7\\n8" in x)
    hunk = next(x for x in out.splitlines() if x.lstrip().startswith("@@"))
    assert hunk.endswith(f"@@ tests/tally.t:{line}"), hunk
    assert "\n  -  [3]\n  +  [1]\n" in out, out
