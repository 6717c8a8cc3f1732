"""box/venv.py for real: venvs built in the staging folder and published by a rename, charpin's
own venv creation isolated from the checkout, setup and prepare lines through the caller's
wrap, and a project that shares its name with a dependency of the tools (#20, #22)."""

from __future__ import annotations

import site
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from charpin_runner.box import venv
from charpin_runner.caches import locks
from charpin_runner.caches.store import Store
from charpin_runner.errors import BoxStepError

pytestmark = pytest.mark.slow

# The fresh venv gets this interpreter's pytest through a .pth file: no network needed.
_OUTER = (
    "import site; open(site.getsitepackages()[0] + '/outer.pth', 'w')"
    f".write({site.getsitepackages()[0]!r})"
)
DEPS = f'python -c "{_OUTER}"'


def _checkout(tmp_path: Path, files: dict[str, str]) -> tuple[Path, Path]:
    """(venvs folder of a box cache, a run's checkout holding files)."""
    root = tmp_path / "cache" / "charpin"
    (root / "venvs").mkdir(parents=True)
    src = tmp_path / "cache" / "charpin" / "runs" / "r1" / "box" / "src"
    src.mkdir(parents=True)
    for rel, text in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    return root / "venvs", src


HOSTILE_VENV = {
    "venv/__init__.py": "",
    "venv/__main__.py": "open({marker!r}, 'w').write('ran')\n",
    "pyproject.toml": "[project]\nname = 'x'\n",
}


def test_a_venv_package_in_the_commit_never_runs_when_charpin_makes_its_venvs(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "the-commits-venv-ran"
    files = {k: v.format(marker=str(marker)) for k, v in HOSTILE_VENV.items()}
    venvs, src = _checkout(tmp_path, files)
    built = venv.build(venvs, src, [DEPS], 300)
    try:
        python = venv.prepare(src.parent, built.python, src, ["true"], 120)
    finally:
        locks.free(built.lease)
    assert not marker.exists(), "python -m venv imported the checkout's venv package"
    assert Path(python).is_file()


def test_a_venv_is_published_whole_and_relocated_from_the_staging_folder(tmp_path: Path) -> None:
    venvs, src = _checkout(tmp_path, {"pyproject.toml": "[project]\nname = 'y'\n"})
    built = venv.build(venvs, src, [DEPS], 300)
    try:
        store = Store(venvs.parent)
        name = Path(built.venv).name
        assert not built.cached and Path(built.venv).parent == venvs
        assert (Path(built.venv) / ".ok").is_file()
        assert list((venvs.parent / "stage").iterdir()) == []
        assert store.current("venvs", name), "the published venv is not as its journal says"
        assert store.in_use("venvs", name)  # the caller's lease
        # The scripts pip wrote in the staging folder run from where the venv is now.
        pip = Path(built.venv) / "bin" / "pip"
        assert str(venvs.parent / "stage") not in pip.read_text()
        done = subprocess.run([str(pip), "--version"], capture_output=True, text=True, check=False)
        assert done.returncode == 0 and built.venv in done.stdout, done
        again = venv.build(venvs, src, [DEPS], 300)
        assert again.cached and again.venv == built.venv
        locks.free(again.lease)
    finally:
        locks.free(built.lease)
    assert not Store(venvs.parent).in_use("venvs", Path(built.venv).name)


def test_setup_and_prepare_lines_run_through_the_callers_wrap(tmp_path: Path) -> None:
    venvs, src = _checkout(tmp_path, {"pyproject.toml": "[project]\nname = 'z'\n"})
    seen: list[list[str]] = []
    writes: list[list[str]] = []

    def wrap(argv: list[str], writable: Sequence[str], pythons: Sequence[str]) -> list[str]:
        seen.append(argv)
        writes.append([Path(w).name for w in writable])
        return ["env", "CHARPIN_WRAPPED=yes", *argv]

    check = 'test "$CHARPIN_WRAPPED" = yes'
    built = venv.build(venvs, src, [DEPS, check], 300, wrap=wrap)
    try:
        venv.prepare(src.parent, built.python, src, [check], 120, wrap=wrap)
        unwrapped = tmp_path / "unwrapped"
        unwrapped.mkdir()
        with pytest.raises(BoxStepError, match=r"prepare command 'test .* exited 1"):
            venv.prepare(unwrapped, built.python, src, [check], 120)
    finally:
        locks.free(built.lease)
    assert seen == [["/bin/sh", "-c", DEPS], ["/bin/sh", "-c", check], ["/bin/sh", "-c", check]]
    # Each line is told what it may write: setup the venv it builds and its copy of the
    # checkout; prepare the checkout and the run's own venv.
    assert writes[0][1] == writes[1][1] == "setup-work"
    assert writes[2] == [src.name, "venv"]


def test_a_project_named_like_a_dependency_of_pytest_may_install_pytest(tmp_path: Path) -> None:
    # Pygments' own repository: pytest depends on pygments, so `pip install pytest` puts a
    # `pygments/` from the index into the venv. That is a dependency, not the project.
    venvs, src = _checkout(
        tmp_path,
        {
            "pygments/__init__.py": "__version__ = '0.0.dev'\n",
            "pyproject.toml": "[project]\nname = 'Pygments'\nversion = '0.0.dev'\n",
            "requirements.txt": "pytest\n",
        },
    )
    built = venv.build(venvs, src, ["pip install -q -r requirements.txt"], 600)
    locks.free(built.lease)
    site_packages = next(Path(built.venv).glob("lib/python*/site-packages"))
    assert (site_packages / "pygments").is_dir()
    assert not list(site_packages.glob("pygments*.dist-info/direct_url.json"))


# A PEP 517 backend in the tree (no setuptools or wheel needed): a wheel of the package.
BACKEND = """
import base64, hashlib, os, zipfile


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {"iniconfig/__init__.py": open("iniconfig/__init__.py").read()}
    meta = "iniconfig-99.dist-info"
    files[meta + "/METADATA"] = "Metadata-Version: 2.1\\nName: iniconfig\\nVersion: 99\\n"
    files[meta + "/WHEEL"] = "Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    name = "iniconfig-99-py3-none-any.whl"
    rows = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)
            sha = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
            rows.append("%s,sha256=%s,%d" % (path, sha.decode(), len(text.encode())))
        wheel.writestr(meta + "/RECORD", "\\n".join(rows + [meta + "/RECORD,,"]) + "\\n")
    return name
"""
SELF_INSTALL = {
    "iniconfig/__init__.py": "SELF = True\n",
    "_build/backend.py": BACKEND,
    "pyproject.toml": (
        "[build-system]\nrequires = []\nbuild-backend = 'backend'\nbackend-path = ['_build']\n"
        "[project]\nname = 'iniconfig'\nversion = '99'\n"
    ),
}


def test_a_project_that_installs_itself_is_still_refused(tmp_path: Path) -> None:
    venvs, src = _checkout(tmp_path, SELF_INSTALL)
    with pytest.raises(BoxStepError, match=r"setup installed the project itself \(iniconfig\)"):
        venv.build(venvs, src, ["pip install -q --no-build-isolation --no-deps ."], 600)
    # Nothing published, nothing left in the staging folder, no lease left held.
    assert list(venvs.iterdir()) == [] and list((venvs.parent / "stage").iterdir()) == []
    key = venv.venv_key(src, ["pip install -q --no-build-isolation --no-deps ."])
    assert not Store(venvs.parent).in_use("venvs", key)
