"""Files a patch adds that charpin cannot read (verify/unread.py): deny by default. Real git
trees; pure otherwise."""

from __future__ import annotations

import subprocess
from pathlib import Path

from charpin_coordinator.verify import gitread, unread

from tests.conftest import make_repo


def findings(tmp_path: Path, files: dict[str, bytes]) -> dict[str, str]:
    repo = make_repo(tmp_path / "r", {"shop/__init__.py": "", "shop/money.py": "x = 1\n"})
    for rel, data in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    found = unread.findings(repo, _tree(repo), list(files), {"shop"})
    return {f.split(" (", 1)[0]: f.split(" (", 1)[1] for f in found}


def _tree(repo: Path) -> dict[str, tuple[str, str]]:
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "p"], check=True)
    return gitread.tree_files(repo, "HEAD")


def test_native_binary_and_unknown_formats_are_named(tmp_path: Path) -> None:
    found = findings(
        tmp_path,
        {
            "shop/_fast.cpython-311-x86_64-linux-gnu.so": b"\x7fELF\x02\x01\x01\0",
            "shop/table.dat": b"\x7fELF\x02\x01\x01\0\0\0",
            "tools/blob.txt": b"\x89PNG\r\n\x1a\n\0\0",  # binary outside the package too
            "shop/_speed.pyx": b"def f(): return 1\n",
            "shop/run": b"#!/bin/sh\necho hi\n",
        },
    )
    assert set(found) == {
        "shop/_fast.cpython-311-x86_64-linux-gnu.so",
        "shop/table.dat",
        "tools/blob.txt",
        "shop/_speed.pyx",
        "shop/run",
    }
    assert found["shop/table.dat"].startswith("binary content")
    assert found["shop/_speed.pyx"].startswith("not a format charpin reads")


def test_python_data_and_text_pass(tmp_path: Path) -> None:
    found = findings(
        tmp_path,
        {
            "shop/vat.py": b"RATE = 19\n",
            "shop/vat.pyi": b"RATE: int\n",
            "shop/rates.json": '{"DE": 19, "name": "M\u00fcnchen"}\n'.encode(),
            "shop/templates/invoice.html": b"<p>{{ total }}</p>\n",
            "shop/py.typed": b"",
            "shop/report": b"#!/usr/bin/env python3\nprint(1)\n",
            "docs/notes.rst": b"Notes\n",
            "tools/build.sh": b"#!/bin/sh\necho\n",  # outside a production package: Scope's not
        },
    )
    assert found == {}
