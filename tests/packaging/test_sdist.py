"""The source distributions hold what their own tests need, and the metadata is what users and
indexes expect: both checked by building them here and looking inside."""

from __future__ import annotations

import email.parser
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.packaging.build import FLOORS, ROOT, build


def _pyproject(path: Path) -> dict[str, object]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _tracked() -> set[str]:
    done = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip("not a git checkout (an unpacked sdist): nothing to compare with")
    return {p for p in done.stdout.decode().split("\0") if p}


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build("sdist", ROOT, tmp_path_factory.mktemp("sdist"))


def _members(archive: Path) -> set[str]:
    with tarfile.open(archive) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
    top = names[0].split("/", 1)[0]
    return {n.split("/", 1)[1] for n in names if n.startswith(top + "/")}


def test_the_sdist_holds_every_tracked_file(sdist: Path) -> None:
    members = _members(sdist)
    missing = sorted(_tracked() - members)
    assert missing == []
    assert not [m for m in members if "__pycache__" in m or m.startswith(".venv/")]


def _metadata(sdist_or_wheel: Path) -> email.message.Message:
    if sdist_or_wheel.suffix == ".whl":
        with zipfile.ZipFile(sdist_or_wheel) as wheel:
            [name] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
            text = wheel.read(name).decode()
    else:
        with tarfile.open(sdist_or_wheel) as tar:
            [member] = [m for m in tar.getmembers() if m.name.count("/") == 1
                        and m.name.endswith("/PKG-INFO")]  # fmt: skip
            handle = tar.extractfile(member)
            assert handle is not None
            text = handle.read().decode()
    return email.parser.Parser().parsestr(text)


def test_the_metadata_users_and_indexes_expect(sdist: Path) -> None:
    meta = _metadata(sdist)
    assert meta["Name"] == "charpin-remote" and meta["Requires-Python"] == ">=3.11"
    classifiers = meta.get_all("Classifier") or []
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert not [c for c in classifiers if c.endswith((":: 3.9", ":: 3.10"))]  # not for 3.9/3.10
    assert "Framework :: Pytest" in classifiers and "Typing :: Typed" in classifiers
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Source", "Issues", "Changelog", "Documentation"} <= set(urls)
    assert meta["Author"] or meta["Author-email"]
    assert "pytest" in (meta["Keywords"] or "")
    assert meta["Description-Content-Type"] == "text/markdown"


def test_declared_floors_are_the_constraints_file() -> None:
    declared = _pyproject(ROOT / "pyproject.toml")["project"]["dependencies"]  # type: ignore[index]
    floors = {}
    for spec in declared:  # type: ignore[attr-defined]
        name, _, version = re.fullmatch(r"([\w.-]+)(>=)([\d.]+)", spec).groups()  # type: ignore[union-attr]
        floors[name] = version
    pinned = {}
    for line in FLOORS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pinned[name] = version
    assert pinned == floors
    # The floor the issue found: msgspec 0.18.0-0.18.5 break the demo and every box.
    assert floors["msgspec"] == "0.18.6"


def test_the_runner_distribution_is_the_runner_alone_on_python_39(tmp_path: Path) -> None:
    runner = _pyproject(ROOT / "runner" / "pyproject.toml")["project"]
    assert runner["requires-python"] == ">=3.9"  # type: ignore[index]
    assert runner["dependencies"] == ["tomli>=1.1.0; python_version < '3.11'"]  # type: ignore[index]
    remote = _pyproject(ROOT / "pyproject.toml")["project"]
    assert runner["urls"] == remote["urls"]  # type: ignore[index]
    assert (ROOT / "runner" / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    wheel = build("wheel", ROOT / "runner", tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert all(n.startswith(("charpin_runner/", "charpin_runner-")) for n in names)
    assert "charpin_runner/py.typed" in names
    meta = _metadata(wheel)
    assert meta["Requires-Dist"].replace('"', "'") == "tomli>=1.1.0; python_version < '3.11'"
    assert "Programming Language :: Python :: 3.9" in (meta.get_all("Classifier") or [])
    sdist = build("sdist", ROOT / "runner", tmp_path / "sdist")
    assert {"pyproject.toml", "README.md", "LICENSE", "charpin_runner/cli.py"} <= _members(sdist)


@pytest.mark.slow
def test_tests_run_from_the_unpacked_sdist(sdist: Path, tmp_path: Path) -> None:
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path, filter="data")
    [root] = [p for p in tmp_path.iterdir() if p.is_dir()]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "tests/contract", "tests/test_deploy_examples.py", "tests/runner/test_stdlib_only.py",
         "-k", "not test_the_sdist"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert re.search(r"\d+ passed", done.stdout)
