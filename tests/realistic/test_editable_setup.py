"""`setup` installs dependencies into a cached venv, `prepare` readies every checkout (#10 item 8).

The project is the usual shape: a src-layout package that its tests can import only once it is
installed (`pip install -e .`), plus a generated module written by a script. The build backend
is in the tree (`backend-path`), so pip really builds and installs an editable wheel with no
package index: the same pip code paths as setuptools, without the network.
"""

from __future__ import annotations

import json
import site
from pathlib import Path

import pytest
from charpin_coordinator.cli import main

from tests.conftest import git, make_repo

RUNNER = str(Path(__file__).resolve().parents[2] / "runner")

# The box's fresh venv gets this interpreter's pytest through a .pth file: no network needed.
_OUTER = (
    "import site; open(site.getsitepackages()[0] + '/outer.pth', 'w')"
    f".write({site.getsitepackages()[0]!r})"
)
DEPS = f'python -c "{_OUTER}"'
# `pip`, as the README writes it: the per-run venv's own, whatever else is on PATH.
INSTALL = "pip install -q --no-build-isolation --no-index --no-deps -e ."

BACKEND = '''
import base64, hashlib, os, zipfile

NAME, VERSION = "shop", "0.1"
DIST = f"{NAME}-{VERSION}.dist-info"


def _wheel(directory, files):
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    files = dict(files)
    files[f"{DIST}/METADATA"] = f"Metadata-Version: 2.1\\nName: {NAME}\\nVersion: {VERSION}\\n"
    files[f"{DIST}/WHEEL"] = "Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    record = []
    with zipfile.ZipFile(os.path.join(directory, name), "w") as z:
        for path, text in files.items():
            data = text.encode()
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{path},sha256={digest.decode()},{len(data)}")
        record.append(f"{DIST}/RECORD,,")
        z.writestr(f"{DIST}/RECORD", "\\n".join(record) + "\\n")
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {}
    for root, _, names in os.walk("src"):
        for n in names:
            if n.endswith(".py"):
                path = os.path.join(root, n)
                with open(path) as handle:
                    files[os.path.relpath(path, "src")] = handle.read()
    return _wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {"__editable__.shop.pth": os.path.abspath("src") + "\\n"})
'''

SHOP = {
    "_build/backend.py": BACKEND,
    "src/shop/__init__.py": "from shop._rates import RATE\n\ndef price(n):\n    return n * RATE\n",
    "tools/gen_rates.py": (
        "from pathlib import Path\n"
        "Path('src/shop/_rates.py').write_text('RATE = 3\\n')\n"
    ),
    "tests/test_price.py": "from shop import price\n\ndef test_price():\n    assert price(2) == 6\n",
}


def _pyproject(setup: list[str], prepare: list[str]) -> str:
    return (
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["_build"]\n\n'
        '[project]\nname = "shop"\nversion = "0.1"\n\n'
        f"[tool.charpin]\nsetup = {json.dumps(setup)}\nprepare = {json.dumps(prepare)}\n"
    )


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYTHONPATH", RUNNER)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def _run(repo: Path, runs: Path, run_id: str) -> tuple[int, dict, dict]:
    # --sandbox off: the venv reaches this interpreter's pytest through a .pth naming its
    # site-packages, which the sandbox's view of a run does not show (rule 2).
    argv = ["run", "--repo", str(repo), "--hosts", "clean", "--out", str(runs), "--run-id", run_id]
    code = main([*argv, "--sandbox", "off"])
    report = json.loads((runs / run_id / "drift.json").read_text())
    receipt_path = runs / run_id / "clean" / "receipt.json"
    receipt = json.loads(receipt_path.read_text()) if receipt_path.exists() else {}
    return code, report, receipt


def _installed_here(name: str) -> bool:
    import subprocess
    import sys

    probe = f"import importlib.metadata as m; m.distribution({name!r})"
    return subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0


@pytest.mark.slow
def test_prepare_readies_every_checkout_and_its_writes_are_not_dirt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import sys

    # As with an activated venv: this interpreter's pip is the first `pip` on PATH.
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    assert not _installed_here("shop")
    files = dict(SHOP)
    files["pyproject.toml"] = _pyproject([DEPS], [INSTALL, "python tools/gen_rates.py"])
    repo = make_repo(tmp_path / "shop", files)
    runs = tmp_path / "runs"
    code, report, receipt = _run(repo, runs, "r1")
    assert report["not_evaluated"] == [], report["not_evaluated"]
    assert receipt["exit"]["interpretation"] == "ok", receipt["exit"]
    # What prepare wrote into the fresh checkout is listed as its own, not as the user's dirt.
    assert receipt["tree"]["dirty_before"] == []
    assert "src/shop/_rates.py" in receipt["tree"]["prepared"]
    # prepare's `pip` installed into the run's own venv, not into the coordinator's.
    assert not _installed_here("shop")
    gates = {g["gate"]: g["status"] for g in report["gates"]}
    assert gates["Clean tree"] == "PASS"
    assert [d["name"] for d in report["dimensions"]] == []
    assert code & 3 == 0  # one box: only "vacuous" (16) may be set
    # The next commit changes the code, and the venv cache hits: the tests must import the new
    # checkout, not the first one (an editable install made once by `setup` would).
    (repo / "src" / "shop" / "__init__.py").write_text(
        "from shop._rates import RATE\n\ndef price(n):\n    return n * RATE + 1\n"
    )
    git(repo, "commit", "-qam", "a fee")
    code, report, receipt = _run(repo, runs, "r2")
    assert report["boxes"][0]["failing"] == ["tests/test_price.py::test_price"], report["boxes"]
    assert receipt["tree"]["dirty_before"] == []
    assert code & 1


@pytest.mark.slow
def test_setup_that_installs_the_project_itself_is_refused_with_the_fix(tmp_path: Path) -> None:
    files = dict(SHOP)
    files["src/shop/_rates.py"] = "RATE = 3\n"
    files["pyproject.toml"] = _pyproject([DEPS, INSTALL], [])
    repo = make_repo(tmp_path / "shop", files)
    code, report, _ = _run(repo, tmp_path / "runs", "r1")
    (missing,) = report["not_evaluated"]
    assert missing["kind"] == "setup-failed"
    assert "setup installed the project itself (shop)" in missing["reason"]
    assert 'prepare = ["pip install -e . --no-deps"]' in missing["reason"]
    assert code & 4


@pytest.mark.slow
def test_a_setup_that_writes_into_the_checkout_is_refused_on_the_first_run(
    tmp_path: Path,
) -> None:
    """#11 item 4: `python3 -m venv .venv` in setup with test_command `.venv/bin/python` used
    to work once and then fail with "cannot start the test command"; setup runs in a throwaway
    copy, so anything it writes there is named at once, with the fix."""
    files = dict(SHOP)
    files["src/shop/_rates.py"] = "RATE = 3\n"
    files["tests/conftest.py"] = "import sys\nsys.path.insert(0, 'src')\n"
    files["pyproject.toml"] = _pyproject([DEPS, "mkdir -p .venv/bin && echo x > .venv/bin/py"], [])
    repo = make_repo(tmp_path / "shop", files)
    code, report, _ = _run(repo, tmp_path / "runs", "r1")
    (missing,) = report["not_evaluated"]
    assert missing["kind"] == "setup-failed"
    assert "setup wrote .venv/ into the checkout" in missing["reason"], missing["reason"]
    assert "`prepare`" in missing["reason"]
    assert code & 4


@pytest.mark.slow
def test_a_setup_that_only_installs_leaves_the_checkout_clean(tmp_path: Path) -> None:
    files = dict(SHOP)
    files["src/shop/_rates.py"] = "RATE = 3\n"
    files["tests/conftest.py"] = "import sys\nsys.path.insert(0, 'src')\n"
    files["pyproject.toml"] = _pyproject([DEPS], [])
    repo = make_repo(tmp_path / "shop", files)
    code, report, receipt = _run(repo, tmp_path / "runs", "r1")
    assert report["not_evaluated"] == [], report["not_evaluated"]
    assert receipt["tree"]["dirty_before"] == [] and receipt["tree"]["prepared"] == []
    assert receipt["tree"]["dirty_after"] == []
    assert code & 3 == 0
