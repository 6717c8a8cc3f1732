"""Watched-root hashing on real folders: every kind of change, symlinks never followed."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

import pytest
from charpin_runner import fixtures
from charpin_runner.errors import ConfigError

ROOT = "tests/fixtures"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo" / ROOT
    (root / "sub").mkdir(parents=True)
    (root / "rates.json").write_bytes(b'{"vat": "0.20"}\n')
    (root / "sub" / "big.bin").write_bytes(os.urandom(3 << 20))
    (root / "keep.txt").write_bytes(b"keep\n")
    return tmp_path / "repo"


def take(repo: Path, roots: list[str] | None = None) -> fixtures.Snapshot:
    return fixtures.snapshot(repo, fixtures.check_roots(roots or [ROOT]))


def test_files_are_hashed_with_mode_and_kind(repo: Path) -> None:
    os.chmod(repo / ROOT / "keep.txt", 0o640)
    snap = take(repo)
    assert sorted(snap.files) == [f"{ROOT}/keep.txt", f"{ROOT}/rates.json", f"{ROOT}/sub/big.bin"]
    keep = snap.files[f"{ROOT}/keep.txt"]
    assert (keep.kind, keep.mode, keep.sha256, keep.target) == ("file", 0o640, sha(b"keep\n"), None)
    big = (repo / ROOT / "sub" / "big.bin").read_bytes()
    assert snap.files[f"{ROOT}/sub/big.bin"].sha256 == sha(big)


def test_unchanged_folder_diffs_to_nothing(repo: Path) -> None:
    result = fixtures.diff(take(repo), take(repo))
    assert (result.added, result.removed, result.changed) == ([], [], [])
    assert (result.type_changed, result.mode_changed, result.escaping_symlinks) == ([], [], [])
    assert result.before == result.after


def test_mutation_deletion_addition_and_mode_change(repo: Path) -> None:
    before = take(repo)
    (repo / ROOT / "rates.json").write_bytes(b'{"vat": "0.21"}\n')
    (repo / ROOT / "keep.txt").unlink()
    (repo / ROOT / "sub" / "new.txt").write_bytes(b"new")
    os.chmod(repo / ROOT / "sub" / "big.bin", 0o755)
    result = fixtures.diff(before, take(repo))
    assert result.changed == [f"{ROOT}/rates.json"]
    assert result.removed == [f"{ROOT}/keep.txt"]
    assert result.added == [f"{ROOT}/sub/new.txt"]
    assert result.mode_changed == [f"{ROOT}/sub/big.bin"]
    assert result.type_changed == []


def test_file_replaced_by_symlink_is_type_changed(repo: Path) -> None:
    before = take(repo)
    target = repo / ROOT / "rates.json"
    target.unlink()
    target.symlink_to("keep.txt")
    result = fixtures.diff(before, take(repo))
    assert result.type_changed == [f"{ROOT}/rates.json"]
    assert result.changed == []
    assert result.escaping_symlinks == []
    after = {f.path: f for f in result.after}
    assert after[f"{ROOT}/rates.json"].kind == "symlink"
    assert after[f"{ROOT}/rates.json"].target == "keep.txt"


def test_escaping_symlink_is_reported_and_never_followed(tmp_path: Path, repo: Path) -> None:
    secret = os.urandom(64)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(secret)
    (repo / ROOT / "leak").symlink_to(outside)
    (repo / ROOT / "up").symlink_to("../../..")
    snap = take(repo)
    assert snap.escaping == [f"{ROOT}/leak", f"{ROOT}/up"]
    leak = snap.files[f"{ROOT}/leak"]
    assert (leak.kind, leak.sha256, leak.target) == ("symlink", None, str(outside))
    dumped = json.dumps([asdict(f) for f in snap.files.values()])
    assert sha(secret) not in dumped
    # The walk did not descend through "up" into the rest of the filesystem.
    assert all(path.startswith(ROOT + "/") for path in snap.files)
    assert fixtures.diff(snap, snap).escaping_symlinks == [f"{ROOT}/leak", f"{ROOT}/up"]


def test_symlink_inside_the_root_is_not_escaping(repo: Path) -> None:
    (repo / ROOT / "alias").symlink_to("sub/big.bin")
    assert take(repo).escaping == []


def test_fifo_is_kind_other_and_not_opened(repo: Path) -> None:
    os.mkfifo(repo / ROOT / "pipe")
    entry = take(repo).files[f"{ROOT}/pipe"]
    assert (entry.kind, entry.sha256) == ("other", None)


def test_missing_root_is_listed(repo: Path) -> None:
    snap = take(repo, [ROOT, "data/golden"])
    assert snap.missing == ["data/golden"]
    result = fixtures.diff(snap, snap)
    assert result.missing_roots == ["data/golden"]
    assert result.roots == ["data/golden", ROOT]


def test_root_reached_through_an_escaping_parent_link_is_not_walked(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere" / "fixtures"
    elsewhere.mkdir(parents=True)
    (elsewhere / "f.txt").write_text("outside")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "tests").symlink_to(tmp_path / "elsewhere")
    snap = take(repo)
    assert snap.files == {}
    assert snap.escaping == [ROOT]
    assert snap.missing == [ROOT]


def test_whole_repository_root_skips_git_and_own_folder(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for rel in (".git/HEAD", ".charpin/receipts/r.json", "src/x.py", ".env.example"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(rel)
    assert sorted(take(repo, ["."]).files) == [".env.example", "src/x.py"]


@pytest.mark.parametrize("bad", ["/etc", "../outside", "tests/../../x", "", "a\\b"])
def test_roots_outside_the_repository_are_config_errors(bad: str) -> None:
    with pytest.raises(ConfigError, match="watch entry"):
        fixtures.check_roots([bad])


def test_roots_are_normalised_and_deduplicated() -> None:
    assert fixtures.check_roots(["./tests/fixtures/", "tests/fixtures", "data"]) == [
        "data",
        "tests/fixtures",
    ]


def test_hash_file_refuses_symlinks_and_hash_many_keeps_order(tmp_path: Path) -> None:
    paths = []
    for index in range(20):
        path = tmp_path / f"f{index}"
        path.write_bytes(bytes([index]) * (index * 70000))
        paths.append(str(path))
    link = tmp_path / "link"
    link.symlink_to(paths[3])
    assert fixtures.hash_file(str(link)) is None
    expected = [sha(Path(p).read_bytes()) for p in paths]
    assert fixtures.hash_many(paths) == expected
