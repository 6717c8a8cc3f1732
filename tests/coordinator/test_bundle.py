"""The runner zipapp: reproducible bytes, content-hash name, runs on a bare floor Python."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path

import charpin_runner
import pytest
from charpin_coordinator.remote import bundle

FLOOR_PY = "/root/.pyenv/versions/3.9.18/bin/python3.9"


def _copy_package(dest: Path) -> Path:
    src = Path(charpin_runner.__file__).parent
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def test_bytes_and_name_depend_on_content_only(tmp_path: Path) -> None:
    a = bundle.build_from(_copy_package(tmp_path / "a"))
    (tmp_path / "b").mkdir()
    b = bundle.build_from(_copy_package(tmp_path / "b" / "charpin_runner"))
    assert a.data == b.data and a.name == b.name
    assert a.name.startswith("charpin-runner-") and len(a.content) == 64
    (tmp_path / "a" / "errors.py").write_text("# changed\n", encoding="utf-8")
    assert bundle.build_from(tmp_path / "a").name != a.name


def test_archive_has_no_bytecode_and_a_fixed_main(tmp_path: Path) -> None:
    pkg = _copy_package(tmp_path / "pkg")
    (pkg / "__pycache__").mkdir(exist_ok=True)
    (pkg / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    built = bundle.build_from(pkg)
    assert built.data.startswith(b"#!/usr/bin/env python3\n")
    names = zipfile.ZipFile(BytesIO(built.data)).namelist()
    assert "__main__.py" in names and "charpin_runner/cli.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


@pytest.mark.skipif(
    importlib.util.find_spec("charpin_runner.receipt_cli") is None,
    reason="charpin receipt is not built yet",
)
@pytest.mark.parametrize("python", [FLOOR_PY, sys.executable])
def test_runs_receipt_help_under_isolated_python(tmp_path: Path, python: str) -> None:
    if not Path(python).exists():
        pytest.skip(f"{python} not installed")
    pyz = tmp_path / "runner.pyz"
    pyz.write_bytes(bundle.runner_bundle().data)
    done = subprocess.run(
        [python, "-I", "-S", str(pyz), "receipt", "--help"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "--expected-commit" in done.stdout
