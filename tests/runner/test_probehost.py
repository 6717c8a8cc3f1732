"""The probe host: how the test command is rewritten to start pytest through charpin's boot, and
what the boot gives the tests (rule 1). Real interpreters, real pytest runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from charpin_runner import probehost
from charpin_runner.errors import ConfigError

from tests.conftest import make_repo
from tests.runner.test_receipt_cmd import charpin, only_receipt


def _boot_of(command: probehost.Command) -> str:
    return str(command.root / probehost.BOOT_NAME)


def test_python_dash_m_pytest_becomes_the_boot_with_its_options_kept(tmp_path: Path) -> None:
    command = probehost.rewrite(
        [sys.executable, "-X", "dev", "-W", "error", "-m", "pytest", "-q"], tmp_path, ""
    )
    try:
        assert command.argv == [sys.executable, "-X", "dev", "-W", "error", _boot_of(command), "-q"]
        assert (command.root / "charpin_runner").is_symlink()
    finally:
        probehost.discard(command)
    assert not command.root.exists()


def test_coverage_run_dash_m_pytest_keeps_coverage_in_front(tmp_path: Path) -> None:
    command = probehost.rewrite(["coverage", "run", "-m", "pytest", "-x"], tmp_path, "")
    try:
        assert command.argv == ["coverage", "run", _boot_of(command), "-x"]
    finally:
        probehost.discard(command)


@pytest.mark.parametrize("style", ["direct", "env", "pip-sh"])
def test_a_pytest_script_runs_on_the_interpreter_its_shebang_names(
    tmp_path: Path, style: str
) -> None:
    script = tmp_path / "bin" / "pytest"
    script.parent.mkdir()
    heads = {
        "direct": f"#!{sys.executable}\n",
        "env": f"#!/usr/bin/env {Path(sys.executable).name}\n",
        # pip writes this when the interpreter's path cannot be a shebang (spaces, length).
        "pip-sh": f"#!/bin/sh\n'''exec' \"{sys.executable}\" \"$0\" \"$@\"\n' '''\n",
    }
    script.write_text(heads[style] + "import pytest\n")
    path = str(Path(sys.executable).parent)
    command = probehost.rewrite([str(script), "-q"], tmp_path, path)
    try:
        assert command.argv[1:] == [_boot_of(command), "-q"]
        assert os.path.realpath(command.argv[0]) == os.path.realpath(sys.executable)
    finally:
        probehost.discard(command)


@pytest.mark.parametrize(
    "argv", [["tox", "-e", "py"], ["make", "test"], [sys.executable, "runtests.py"]]
)
def test_any_other_test_command_is_refused_with_the_fix(tmp_path: Path, argv: list[str]) -> None:
    with pytest.raises(ConfigError, match=r'test_command = \["python", "-m", "pytest"\]'):
        probehost.rewrite(argv, tmp_path, "")


def test_an_unsupported_test_command_is_one_line_and_exit_64(git_repo: Path) -> None:
    settings = git_repo.parent / "settings.json"
    settings.write_text(json.dumps({"test_command": ["make", "test"]}))
    result = charpin(git_repo, "--config-json", str(settings), "-o", str(git_repo.parent / "r.json"))
    assert result.returncode == 64, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("charpin: error: test_command ['make', 'test'] does not start pytest")


def test_the_tests_get_the_sys_path_and_pythonpath_of_python_dash_m_pytest(
    tmp_path: Path,
) -> None:
    """No behaviour change for an honest suite: the checkout importable from its root (as
    `python -m pytest` makes it), PYTHONPATH's folders on sys.path and in the environment."""
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "helper_mod.py").write_text("VALUE = 42\n")
    repo = make_repo(
        tmp_path / "repo",
        {
            "mypkg/__init__.py": "ANSWER = 1\n",
            "tests/test_paths.py": (
                "import os, sys\n"
                "def test_paths():\n"
                "    import mypkg, helper_mod\n"
                "    assert mypkg.ANSWER == 1 and helper_mod.VALUE == 42\n"
                "    assert os.getcwd() in sys.path\n"
                f"    assert os.environ['PYTHONPATH'].split(os.pathsep)[-1] == {str(extra)!r}\n"
                "    assert 'CHARPIN_BOOT_PYTHONPATH' not in os.environ\n"
            ),
        },
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2] / "runner"), str(extra)])
    result = subprocess.run(
        [sys.executable, "-m", "charpin_runner", "receipt", "--no-pins", "-q"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    receipt = only_receipt(repo)
    assert receipt["outcomes"] == {"tests/test_paths.py::test_paths": "passed"}
