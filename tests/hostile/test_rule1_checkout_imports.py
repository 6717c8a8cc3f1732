"""Rule 1: charpin's own processes never import from the checkout.

Each attack is a repository (or a patch) that ships a file with the name of something charpin
imports: its runner, its probe (as source-less byte code), a `*.dist-info` that pytest would
autoload, pytest or pluggy themselves, a sitecustomize.py. Each runs for real through
`charpin-remote run` on `local`, `clean` and a loopback sshd box, with a suite holding one
failing test: the attack wins if its marker file appears or the failure goes unseen.
"""

from __future__ import annotations

import os
import py_compile
import sys
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main

from tests.conftest import git
from tests.hostile.harness import BOX_KINDS, host_for, repo_with, run

SUITE = "def test_ok():\n    pass\n\n\ndef test_bad():\n    assert 0\n"
BAD = "tests/test_suite.py::test_bad"


def _marking(marker: Path, extra: str = "") -> str:
    return f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n{extra}"


def _caught(code: int, report: dict[str, Any], marker: Path) -> None:
    assert not marker.exists(), "code shipped in the checkout ran as part of charpin"
    assert report["not_evaluated"] == [], report["not_evaluated"]
    (box,) = report["boxes"]
    assert BAD in box["failing"], box
    assert code & 1


@pytest.mark.slow
@pytest.mark.parametrize("kind", BOX_KINDS)
def test_a_checkout_runner_package_never_becomes_the_measuring_parent(
    kind: str, sshd_factory: Any, tmp_path: Path
) -> None:
    """`local` used to start `python -m charpin_runner` in the working tree: a repository
    shipping charpin_runner/__main__.py became the parent holding the seal key."""
    marker = tmp_path / "forged"
    forger = _marking(marker, "raise SystemExit(0)\n")
    hosts, boxes, ssh_config = host_for(kind, sshd_factory, tmp_path)
    repo = repo_with(
        tmp_path / "repo",
        {
            "charpin_runner/__init__.py": forger,
            "charpin_runner/__main__.py": forger,
            "tests/test_suite.py": SUITE,
        },
        boxes,
    )
    code, report, _ = run(repo, hosts, ssh_config=ssh_config)
    _caught(code, report, marker)


@pytest.mark.slow
@pytest.mark.parametrize("kind", BOX_KINDS)
def test_source_less_probe_byte_code_in_the_checkout_is_never_loaded(
    kind: str, sshd_factory: Any, tmp_path: Path
) -> None:
    """A patch adding only charpin_runner/__init__.pyc and plugin.pyc (no source) replaced the
    probe: `python -m pytest` put the checkout first on sys.path."""
    marker = tmp_path / "shadowed"
    hosts, boxes, ssh_config = host_for(kind, sshd_factory, tmp_path)
    repo = repo_with(tmp_path / "repo", {"tests/test_suite.py": SUITE}, boxes)
    package = repo / "charpin_runner"
    package.mkdir()
    sources = tmp_path / "src"
    sources.mkdir()
    for name, text in (("__init__", ""), ("plugin", _marking(marker))):
        source = sources / f"{name}.py"
        source.write_text(text)
        py_compile.compile(str(source), cfile=str(package / f"{name}.pyc"), doraise=True)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "byte code only")
    code, report, _ = run(repo, hosts, ssh_config=ssh_config)
    _caught(code, report, marker)


@pytest.mark.slow
@pytest.mark.parametrize("kind", BOX_KINDS)
def test_a_dist_info_in_the_checkout_is_never_autoloaded_as_a_plugin(
    kind: str, sshd_factory: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "autoloaded"
    plugin = _marking(
        marker,
        "import pytest\n"
        "@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n"
        "    outcome.get_result().outcome = 'passed'\n",
    )
    hosts, boxes, ssh_config = host_for(kind, sshd_factory, tmp_path)
    repo = repo_with(
        tmp_path / "repo",
        {
            "zz-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: zz\nVersion: 1.0\n",
            "zz-1.0.dist-info/entry_points.txt": "[pytest11]\nzz = zzplugin\n",
            "zzplugin.py": plugin,
            "tests/test_suite.py": SUITE,
        },
        boxes,
    )
    code, report, _ = run(repo, hosts, ssh_config=ssh_config)
    _caught(code, report, marker)


@pytest.mark.slow
@pytest.mark.parametrize(
    "shadow", ["pytest.py", "pluggy/__init__.py", "_pytest/__init__.py", "json.py"]
)
def test_a_checkout_shadowing_the_harness_itself_is_not_what_runs(
    shadow: str, tmp_path: Path
) -> None:
    """The same rule for names nobody listed: pytest, its dependency pluggy, its internals, a
    standard-library module the probe uses. `python -m pytest` would import each of them from
    the checkout; charpin's boot imports them before the checkout is on sys.path."""
    marker = tmp_path / "shadowed"
    forged = _marking(marker, "import sys\nsys.exit(0)\n")
    repo = repo_with(tmp_path / "repo", {shadow: forged, "tests/test_suite.py": SUITE})
    code, report, _ = run(repo, "clean")
    _caught(code, report, marker)


@pytest.mark.slow
def test_a_sitecustomize_on_the_users_pythonpath_never_runs_before_the_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On `local` the tests get the user's environment: with PYTHONPATH=. a checkout's
    sitecustomize.py would run at interpreter start, before any plugin. The boot takes
    PYTHONPATH over itself, after the probe loaded (and gives it back to the tests)."""
    marker = tmp_path / "sitecustomize-ran"
    repo = repo_with(
        tmp_path / "repo",
        {
            "sitecustomize.py": _marking(marker),
            "tests/test_suite.py": SUITE
            + "\n\ndef test_pythonpath_is_given_back():\n"
            "    import os\n"
            "    assert os.environ['PYTHONPATH'].split(os.pathsep)[0] == '.'\n",
        },
    )
    monkeypatch.setenv("PYTHONPATH", ".")
    code, report, _ = run(repo, "local")
    _caught(code, report, marker)
    assert report["boxes"][0]["failing"] == [BAD]


@pytest.mark.slow
def test_hosts_check_never_starts_a_python_named_by_the_uncommitted_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`hosts check` used to read [tool.charpin.hosts.X] python from the working tree: an
    uncommitted edit named a script of the tree's own as the box's Python, and it ran."""
    marker = tmp_path / "evil-python-ran"
    repo = repo_with(tmp_path / "repo", {"tests/test_suite.py": SUITE})
    evil = repo / "evil-python"
    evil.write_text(f"#!/bin/sh\necho ran > {marker}\nexec {sys.executable} \"$@\"\n")
    evil.chmod(0o755)
    with (repo / "pyproject.toml").open("a") as handle:
        handle.write(f'[tool.charpin.hosts.clean]\npython = "{evil}"\n')
    code = main(["hosts", "check", "--hosts", "clean", "--repo", str(repo)])
    assert not marker.exists(), "hosts check ran a python named by the uncommitted tree"
    err = capsys.readouterr().err
    assert "uncommitted" in err, err
    assert code == 0, err


@pytest.mark.slow
@pytest.mark.parametrize("shadow", ["sitecustomize.py", "usercustomize.py"])
def test_a_pin_never_loads_a_checkout_file_before_its_target(shadow: str, tmp_path: Path) -> None:
    """The pins' bootstrap is charpin's code too: a sitecustomize.py or usercustomize.py of the
    tree (loaded at interpreter start when the checkout was on PYTHONPATH) must not run before
    it, nor at all. The target still imports the repository's own modules. (The modules the
    bootstrap imports are imported before the checkout is on sys.path, which matters on 3.9,
    where runpy is not a frozen module.)"""
    import subprocess

    marker = tmp_path / "shadow-ran"
    repo = repo_with(
        tmp_path / "repo",
        {
            shadow: _marking(marker),
            "mypkg/__init__.py": "",
            "mypkg/__main__.py": "import mypkg.core\nprint(mypkg.core.VALUE)\n",
            "mypkg/core.py": "VALUE = 'ok'\n",
        },
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "runner"))
    for args in (["record", "--id", "m", "--", "-m", "mypkg"], ["check"]):
        done = subprocess.run(
            [sys.executable, "-m", "charpin_runner", "pins", *args],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    assert "ok" in (repo / "pins.jsonl").read_text()
    assert not marker.exists(), f"the checkout's {shadow} ran inside a pin"
