"""What a box run gives back is read with caps and without following links."""

from __future__ import annotations

import os
from pathlib import Path

from charpin_runner.box import files
from charpin_runner.box.layout import Layout


def test_a_regular_file_under_its_cap_comes_back_whole(tmp_path: Path) -> None:
    (tmp_path / "r").write_bytes(b"abc")
    assert files.read_capped(tmp_path / "r", 3, keep_tail=False) == (b"abc", None, False)


def test_a_symlink_a_fifo_and_a_missing_file_are_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"private key")
    (tmp_path / "link").symlink_to(secret)
    os.mkfifo(tmp_path / "fifo")
    assert files.read_capped(tmp_path / "link", 100, keep_tail=False)[:2] == (
        b"",
        "not readable (Too many levels of symbolic links)",
    )
    assert files.read_capped(tmp_path / "fifo", 100, keep_tail=False)[:2] == (
        b"",
        "not a regular file",
    )
    assert files.read_capped(tmp_path / "none", 100, keep_tail=False)[:2] == (b"", "missing")


def test_over_its_cap_a_receipt_is_refused_and_a_log_keeps_its_end(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 90 + b"the end")
    assert files.read_capped(tmp_path / "big", 10, keep_tail=False) == (
        b"",
        "97 bytes, over the 10-byte cap",
        False,
    )
    assert files.read_capped(tmp_path / "big", 10, keep_tail=True) == (b"xxxthe end", None, True)


def test_gather_names_every_part_and_its_size(tmp_path: Path) -> None:
    layout = Layout(root=tmp_path, run=tmp_path / "run", src=tmp_path / "src", cache_repo=None)
    layout.run.mkdir()
    layout.receipt.write_bytes(b"{}")
    layout.stdout.write_bytes(b"out")
    parts, data = files.gather(layout)
    assert [(p["name"], p["size"], p["problem"]) for p in parts] == [
        ("receipt", 2, None),
        ("seal", 0, "missing"),
        ("stdout", 3, None),
        ("stderr", 0, "missing"),
    ]
    assert data == b"{}out"


def test_remove_keeps_the_run_when_asked_and_always_drops_discarded_caches(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1" / "box"
    run.mkdir(parents=True)
    cache = tmp_path / "repos" / "k.git"
    cache.mkdir(parents=True)
    layout = Layout(root=tmp_path, run=run, src=run / "src", cache_repo=cache)
    files.remove(layout, keep=True, discard=[cache])
    assert run.is_dir() and not cache.exists()
    files.remove(layout, keep=False, discard=[])
    assert not (tmp_path / "runs" / "r1").exists()
