"""The runner installed on Python 3.9 (the charpin-runner wheel, which brings tomli there) reads
pyproject.toml: [tool.charpin] when it is there, the defaults when it is not. And without tomli
(a zipapp, a bare checkout) it still runs in a repository whose pyproject.toml cannot hold the
table, and refuses one that does with one line naming the fix."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import git, make_repo
from tests.packaging.build import ROOT, build, make_venv, pip_install
from tests.py39 import PY39, needs_py39

pytestmark = [pytest.mark.slow, needs_py39(venv=True)]

TESTS = {"tests/test_one.py": "def test_one():\n    assert True\n"}
CONFIGURED = (
    '[project]\nname = "billing"\nversion = "1"\n\n'
    '[tool.charpin]\nwatch = ["data"]\nledger = "quarantine.json"\n'
    'outputs = ["build"]\n'
)
LEDGER = '{"version": 1, "entries": []}'
PLAIN = '[project]\nname = "billing"\nversion = "1"\n\n[tool.black]\nline-length = 100\n'


@pytest.fixture(scope="module")
def py39_charpin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bin/ of a Python 3.9 venv with the charpin-runner wheel (and so tomli) and pytest."""
    base = tmp_path_factory.mktemp("py39")
    wheel = build("wheel", ROOT / "runner", base / "dist")
    assert wheel.name.startswith("charpin_runner-")
    bin_dir = make_venv(base / "venv", str(PY39))
    pip_install(bin_dir, str(wheel), "pytest")
    return bin_dir


def _receipt(bin_dir: Path, repo: Path) -> dict[str, object]:
    out = repo.parent / f"{repo.name}.json"
    done = subprocess.run(
        [str(bin_dir / "charpin"), "receipt", "--repo", str(repo), "--output", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    receipt: dict[str, object] = json.loads(out.read_text())
    return receipt


def test_wheel_on_python_39_brings_tomli(py39_charpin: Path) -> None:
    done = subprocess.run(
        [str(py39_charpin / "python"), "-c", "import sys, tomli; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "(3, 9)"


def test_python_39_reads_the_charpin_table(py39_charpin: Path, tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "configured",
        {**TESTS, "pyproject.toml": CONFIGURED, "data/in.csv": "a,b\n", "quarantine.json": LEDGER},
    )
    receipt = _receipt(py39_charpin, repo)
    assert receipt["environment"]["python"].startswith("3.9.")  # type: ignore[index]
    assert receipt["fixtures"]["roots"] == ["data"]  # type: ignore[index]
    assert receipt["quarantine"]["ledger_path"] == "quarantine.json"  # type: ignore[index]
    assert receipt["collection"]["executed"] == ["tests/test_one.py::test_one"]  # type: ignore[index]


def test_python_39_without_the_table_uses_the_defaults(py39_charpin: Path, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "plain", {**TESTS, "pyproject.toml": PLAIN})
    receipt = _receipt(py39_charpin, repo)
    # The defaults: tests/fixtures watched (absent here, so no root), the default ledger.
    assert receipt["fixtures"]["roots"] == []  # type: ignore[index]
    assert receipt["quarantine"]["ledger_path"] in (None, "flake-ledger.json")  # type: ignore[index]
    assert receipt["collection"]["executed"] == ["tests/test_one.py::test_one"]  # type: ignore[index]


def test_python_39_guard_reads_the_table(py39_charpin: Path, tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "guarded",
        {**TESTS, "pyproject.toml": CONFIGURED, "quarantine.json": LEDGER, "app.py": "x = 1\n"},
    )
    (repo / "quarantine.json").write_text(LEDGER.replace("[]", '[{"id": "tests/test_one.py"}]'))
    (repo / "app.py").write_text("x = 2\n")
    git(repo, "add", "-A")
    done = subprocess.run(
        [str(py39_charpin / "charpin"), "guard", "--staged", "--repo", str(repo)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # The ledger named in [tool.charpin] is protected: with app.py in one change, refused.
    assert done.returncode == 2, done.stdout + done.stderr
    assert "quarantine.json" in done.stderr and "app.py" in done.stderr


def _bare(repo: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """`charpin COMMAND --repo REPO` from the source tree on a bare 3.9: no site-packages, so no
    tomli (what a zipapp or a checkout on an old box is)."""
    return subprocess.run(
        [str(PY39), "-I", "-S", "-c",
         "import sys; sys.path.insert(0, sys.argv[1]); from charpin_runner.cli import main; "
         "sys.exit(main(sys.argv[2:]))",
         str(ROOT / "runner"), *command, "--repo", str(repo)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip


def test_bare_python_39_runs_where_no_table_can_be(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "plain", {**TESTS, "pyproject.toml": PLAIN})
    done = _bare(repo, "inventory")
    assert done.returncode == 0, done.stderr
    assert "not read" not in done.stdout + done.stderr


def test_bare_python_39_refuses_a_table_it_cannot_read(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "configured", {**TESTS, "pyproject.toml": CONFIGURED})
    done = _bare(repo, "pins", "check")
    assert done.returncode == 64
    [line] = done.stderr.splitlines()
    assert "cannot read the [tool.charpin] table in" in line
    assert "pip install charpin-runner" in line and "--config-json FILE" in line
    # inventory is lenient by design: the defaults, and a note that says why and the fix.
    lenient = _bare(repo, "inventory")
    assert lenient.returncode == 0
    assert "[tool.charpin] not read" in lenient.stdout + lenient.stderr
    assert "pip install charpin-runner" in lenient.stdout + lenient.stderr
