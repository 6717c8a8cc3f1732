"""The measurement attacks, run where users run them: `charpin-remote run` on `local`, `clean`
and a loopback sshd box. tests/hostile/test_git_measurement.py and test_probe_relabel.py hold
one test per variant through `charpin receipt`; these show the same defences hold through the
whole pipeline (box agent, sealed receipt, coordinator gates), on every kind of box.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.hostile.harness import BOX_KINDS, gate, host_for, repo_with, run
from tests.hostile.test_git_measurement import APP, HEADER, trap
from tests.hostile.test_probe_relabel import SUITE, logreport_relabel
from tests.waiting import waiting


@pytest.mark.slow
@pytest.mark.parametrize("kind", BOX_KINDS)
def test_a_filter_planted_in_git_config_never_runs_and_the_edit_is_seen(
    kind: str, sshd_factory: Any, tmp_path: Path
) -> None:
    script, ran = trap(tmp_path, "filter")
    body = (
        f"    pathlib.Path('.git/evil.cfg').write_text('[filter \"hide\"]\\n\\tclean = {script}\\n"
        "\\trequired = true\\n')\n"
        "    git('config', 'include.path', 'evil.cfg')\n"
        "    os.makedirs('.git/info', exist_ok=True)\n"
        "    pathlib.Path('.git/info/attributes').write_text('* filter=hide\\n')\n"
        f"    pathlib.Path({APP!r}).write_text(\"print('HELLO')\\n\")\n"
    )
    hosts, boxes, ssh_config = host_for(kind, sshd_factory, tmp_path)
    repo = repo_with(
        tmp_path / "repo",
        {APP: "print('hello')\n", "tests/test_attack.py": HEADER + "def test_attack():\n" + body},
        boxes,
    )
    # Without bubblewrap, where .git is writable (under bwrap it is read-only to the tests).
    code, report, _ = run(repo, hosts, "--sandbox", "off", ssh_config=ssh_config)
    assert not ran.exists(), "charpin's own git ran the planted filter"
    assert not waiting(tmp_path / "filter-gate"), "the filter's daemon outlived the run"
    assert not (tmp_path / "filter-daemon").exists()
    assert report["not_evaluated"] == [], report
    assert gate(report, "Clean tree", hosts) == "FAIL"
    box = report["boxes"][0]
    assert box["interpretation"] == "incomplete", box
    assert code & 2


@pytest.mark.slow
@pytest.mark.parametrize("kind", BOX_KINDS)
def test_a_conftest_relabelling_a_failure_does_not_get_a_clean_box(
    kind: str, sshd_factory: Any, tmp_path: Path
) -> None:
    hosts, boxes, ssh_config = host_for(kind, sshd_factory, tmp_path)
    repo = repo_with(
        tmp_path / "repo",
        {
            "tests/conftest.py": logreport_relabel("tryfirst=True", "xfail"),
            "tests/test_many.py": SUITE,
        },
        boxes,
    )
    code, report, _ = run(repo, hosts, ssh_config=ssh_config)
    assert report["not_evaluated"] == [], report
    box = report["boxes"][0]
    assert box["interpretation"] == "incomplete", box
    assert "tests/test_many.py::test_bad" in box["failing"]
    assert code & 1


@pytest.mark.slow
def test_a_local_test_cannot_rewrite_earlier_run_folders(tmp_path: Path) -> None:
    """`run --against` and the history read earlier run folders back from the repository's
    `.charpin/`: under bubblewrap a test on `local` cannot rewrite them (the rest of the
    repository stays writable)."""
    from tests.hostile.harness import SAY_TOML, require_bwrap, said

    require_bwrap()
    body = (
        "    import pathlib\n"
        "    for target in (pathlib.Path('.charpin/runs/r0/local/receipt.json'),\n"
        "                   pathlib.Path('scratch.txt')):\n"
        "        try:\n"
        "            target.parent.mkdir(parents=True, exist_ok=True)\n"
        "            target.write_text('forged')\n"
        "            print('ATTEMPT wrote ' + str(target), flush=True)\n"
        "        except OSError:\n"
        "            print('ATTEMPT refused ' + str(target), flush=True)\n"
    )
    repo = repo_with(
        tmp_path / "repo", {"tests/test_forge.py": "def test_forge():\n" + body}, toml=SAY_TOML
    )
    _, _, folder = run(repo, "local")
    lines = said(folder, "local").splitlines()
    assert "refused .charpin/runs/r0/local/receipt.json" in lines, lines
    assert "wrote scratch.txt" in lines, lines
