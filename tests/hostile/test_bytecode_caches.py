"""Class E: byte-code caches are never trusted across runs.

Seen by an attacker: on `local` a test wrote pytest's checked-hash `.pyc` of another test file
(every assert replaced by `pass`) into the git-ignored `tests/__pycache__` (b09), and with
`--sandbox off` a test planted an unchecked-hash `.pyc` in the in-tree `.venv` (b10); a later
broken commit read passed. The rule: the tests (and pins and replays) read and write byte code
only in a fresh folder of their run (PYTHONPYCACHEPREFIX), so no `__pycache__` anywhere is read.
The second attack of the class was not fixed by hand: an unchecked-hash `.pyc` of a production
module in the checkout's ignored `shop/__pycache__`, which keeps the old behaviour whatever the
source says.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import git
from tests.hostile.harness import repo_with, require_bwrap, run
from tests.hostile.test_rule3_interpreter_envs import OUTER_SITE

MONEY = "def gross(net, rate):\n    return round(net * (100 + rate)) / 100\n"
BROKEN = "def gross(net, rate):\n    return int(net * (100 + rate)) / 100 + 7\n"
MONEY_TESTS = (
    "from shop.money import gross\n\n\ndef test_gross():\n    assert gross(10.0, 19) == 11.9\n"
)
# b09: pytest's own cache of tests/test_money.py with the asserts gone, checked-hash (flag 3),
# so it matches the unchanged test file in every later run.
PLANT_REWRITE = """
import importlib.util, marshal, pathlib, re, sys
import _pytest


def test_housekeeping():
    target = pathlib.Path(__file__).with_name("test_money.py")
    source = re.sub(r"^(\\s+)assert .*$", r"\\1pass", target.read_text(), flags=re.M)
    code = compile(source, str(target), "exec")
    cache = target.parent / "__pycache__"
    cache.mkdir(exist_ok=True)
    header = importlib.util.MAGIC_NUMBER + b"\\3\\0\\0\\0"
    header += importlib.util.source_hash(target.read_bytes())[:8]
    name = f"test_money.{sys.implementation.cache_tag}-pytest-{_pytest.__version__}.pyc"
    (cache / name).write_bytes(header + marshal.dumps(code))
"""
# An unchecked-hash .pyc (flag 1: never compared with its source) of a module, made from the
# source as it is now: it keeps running after the source changes.
PLANT_UNCHECKED = """
import importlib.util, marshal, pathlib, sys
import {module} as target


def test_housekeeping():
    src = pathlib.Path(target.__file__)
    pyc = src.parent / "__pycache__" / f"{{src.stem}}.{{sys.implementation.cache_tag}}.pyc"
    pyc.parent.mkdir(exist_ok=True)
    code = compile(src.read_text(), str(src), "exec")
    header = importlib.util.MAGIC_NUMBER + b"\\1\\0\\0\\0" + b"\\0" * 8
    pyc.write_bytes(header + marshal.dumps(code))
"""


def _shop(root: Path, files: dict[str, str], toml: str = "") -> Path:
    base = {
        ".gitignore": "__pycache__/\n.venv/\n",
        "shop/__init__.py": "",
        "shop/money.py": MONEY,
        "tests/test_money.py": MONEY_TESTS,
    }
    return repo_with(root, {**base, **files}, toml=toml)


def _break(repo: Path, planter: str) -> None:
    git(repo, "rm", "-q", planter)
    (repo / "shop" / "money.py").write_text(BROKEN)
    git(repo, "commit", "-qam", "broken")


def _failing(repo: Path, *extra: str) -> list[str]:
    code, report, _ = run(repo, "local", *extra, run_id="B")
    failing = report["boxes"][0]["failing"]
    assert code != 0 and failing, report["boxes"]
    return list(failing)


@pytest.mark.slow
def test_a_planted_assert_rewrite_cache_never_runs_again(tmp_path: Path) -> None:
    """b09, under the sandbox (the checkout is writable there, its ignored files too)."""
    require_bwrap()
    repo = _shop(tmp_path / "repo", {"tests/test_plant.py": PLANT_REWRITE})
    run(repo, "local", run_id="A")
    _break(repo, "tests/test_plant.py")
    assert "tests/test_money.py::test_gross" in _failing(repo)


@pytest.mark.slow
def test_an_unchecked_pyc_in_the_in_tree_venv_never_runs_again(tmp_path: Path) -> None:
    """b10: planted with --sandbox off (the watch skips byte-code caches), read under bwrap."""
    venv = tmp_path / "repo" / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site_dir,) = venv.glob("lib/python*/site-packages")
    (site_dir / "outer.pth").write_text(OUTER_SITE + "\n")
    (site_dir / "shoplib.py").write_text("def ok():\n    return True\n")
    toml = '[tool.charpin]\ntest_command = [".venv/bin/python", "-m", "pytest"]\n'
    uses = "import shoplib\n\n\ndef test_lib():\n    assert shoplib.ok()\n"
    repo = _shop(
        tmp_path / "repo",
        {
            "tests/test_plant.py": PLANT_UNCHECKED.format(module="shoplib"),
            "tests/test_lib.py": uses,
        },
        toml,
    )
    run(repo, "local", "--sandbox", "off", run_id="A")
    assert list((site_dir / "__pycache__").glob("shoplib.*.pyc")), "the attack did not plant"
    (site_dir / "shoplib.py").write_text("def ok():\n    return False\n")  # a later upgrade
    _break(repo, "tests/test_plant.py")
    assert "tests/test_lib.py::test_lib" in _failing(repo)


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["off", "auto"])
def test_an_unchecked_pyc_of_production_code_never_runs_again(sandbox: str, tmp_path: Path) -> None:
    """The second attack of the class: the production module's own byte code, planted in the
    checkout's ignored shop/__pycache__, keeps the good behaviour after the source broke."""
    if sandbox == "auto":
        require_bwrap()
    plant = PLANT_UNCHECKED.format(module="shop.money")
    repo = _shop(tmp_path / "repo", {"tests/test_plant.py": plant})
    run(repo, "local", "--sandbox", sandbox, run_id="A")
    assert list((repo / "shop" / "__pycache__").glob("money.*.pyc")), "the attack did not plant"
    _break(repo, "tests/test_plant.py")
    assert "tests/test_money.py::test_gross" in _failing(repo, "--sandbox", sandbox)
