"""verify --reuse-base's records: kept in the coordinator's state folder, private, and used only
when their HMAC under this machine's key covers the record and every receipt's exact bytes."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from charpin_coordinator.statedir import state_root
from charpin_coordinator.verify import reuse

from tests.conftest import make_repo

BASE = "b" * 40
CONFIG = "c" * 64
RECEIPTS = {"clean": b'{"receipt": "clean"}\n', "ci": b'{"receipt": "ci"}\n'}


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return make_repo(tmp_path / "repo", {"a.txt": "a\n"})


def _found(repo: Path, hosts: tuple[str, ...] = ("clean", "ci")) -> tuple[list[str], list[str]]:
    notes: list[str] = []
    ids = [r.run_id for r in reuse.candidates(repo, BASE, CONFIG, hosts, notes=notes)]
    return ids, notes


def _stored(repo: Path, run_id: str) -> Path:
    notes: list[str] = []
    folder = reuse.store(repo, run_id, BASE, CONFIG, RECEIPTS, notes=notes)
    assert folder is not None and not notes, notes
    return folder


def test_a_stored_record_comes_back_newest_first_with_its_exact_bytes(repo: Path) -> None:
    _stored(repo, "v0")
    folder = _stored(repo, "v1")
    notes: list[str] = []
    [newest, older] = list(reuse.candidates(repo, BASE, CONFIG, ["ci", "clean"], notes=notes))
    assert (newest.run_id, older.run_id, notes) == ("v1", "v0", [])
    assert newest.receipts == RECEIPTS and newest.folder == folder
    # Only this base, this configuration and exactly these boxes.
    assert list(reuse.candidates(repo, "d" * 40, CONFIG, ["ci", "clean"], notes=notes)) == []
    assert list(reuse.candidates(repo, BASE, "e" * 64, ["ci", "clean"], notes=notes)) == []
    assert _found(repo, ("clean",)) == ([], [])


def test_the_state_folder_is_outside_the_repository_and_private(repo: Path) -> None:
    folder = _stored(repo, "v0")
    root = state_root()
    assert root == repo.parent / "state" / "charpin"
    assert not folder.resolve().is_relative_to(repo.resolve())
    assert not (repo / ".charpin").exists()
    for path in [root, root / "reuse", folder.parent, folder, folder / "base" / "clean"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    for path in [root / "reuse.key", folder / "record.json", folder / "record.mac"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert len((root / "reuse.key").read_bytes()) == 32


def test_a_changed_receipt_copy_is_not_reused(repo: Path) -> None:
    _stored(repo, "v0")
    folder = _stored(repo, "v1")
    copy = folder / "base" / "ci" / "receipt.json"
    copy.write_bytes(copy.read_bytes().replace(b"ci", b"CI"))
    ids, [note] = _found(repo)
    assert ids == ["v0"]
    assert note == (
        f"--reuse-base: {folder} is not reused: base/ci/receipt.json changed since it was stored"
    )


def test_a_record_rewritten_to_match_a_changed_receipt_fails_its_hmac(repo: Path) -> None:
    folder = _stored(repo, "v1")
    copy = folder / "base" / "ci" / "receipt.json"
    copy.write_bytes(b'{"receipt": "forged"}\n')
    record = json.loads((folder / "record.json").read_text())
    record["boxes"]["ci"]["sha256"] = __import__("hashlib").sha256(copy.read_bytes()).hexdigest()
    (folder / "record.json").write_text(json.dumps(record))
    ids, [note] = _found(repo)
    assert ids == [] and note.endswith(
        "its HMAC does not match (not written by this machine's verify)"
    )


def test_a_record_made_with_another_key_is_not_reused(repo: Path) -> None:
    # What a test that cannot read reuse.key can plant: a whole record under its own key.
    planted = _stored(repo, "v9")
    key = state_root() / "reuse.key"
    key.unlink()
    reuse.load_key(create=True)  # this machine's key is another one
    ids, [note] = _found(repo)
    assert ids == [] and note.startswith(f"--reuse-base: {planted} is not reused: its HMAC")


def test_a_record_moved_to_another_id_or_repository_is_not_reused(
    repo: Path, tmp_path: Path
) -> None:
    folder = _stored(repo, "v1")
    shutil.copytree(folder, folder.with_name("v99991231"))
    other = make_repo(tmp_path / "other", {"b.txt": "b\n"})
    theirs = reuse.reuse_root(other)
    theirs.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    shutil.copytree(folder.parent, theirs)
    ids, [note] = _found(repo)
    assert ids == ["v1"] and note.endswith("its record was moved from another folder")
    moved, notes = _found(other)
    assert moved == [] and all("another repository" in n or "moved" in n for n in notes), notes


def test_a_linked_receipt_or_a_missing_key_is_not_trusted(repo: Path) -> None:
    folder = _stored(repo, "v1")
    copy = folder / "base" / "ci" / "receipt.json"
    elsewhere = folder.parent.parent / "elsewhere.json"
    elsewhere.write_bytes(copy.read_bytes())
    copy.unlink()
    copy.symlink_to(elsewhere)
    ids, [note] = _found(repo)
    assert ids == [] and str(folder) in note
    copy.unlink()
    copy.write_bytes(elsewhere.read_bytes())
    os.chmod(copy, 0o600)
    assert _found(repo) == (["v1"], [])
    (state_root() / "reuse.key").unlink()
    ids, [note] = _found(repo)
    assert ids == [] and note.endswith("reuse.key is missing")


def test_a_state_folder_inside_the_repository_is_never_used(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(repo / ".charpin" / "state"))
    notes: list[str] = []
    assert reuse.store(repo, "v1", BASE, CONFIG, RECEIPTS, notes=notes) is None
    assert "inside the repository" in notes[0] and not (repo / ".charpin").exists()
    # Even when something put a valid-looking record there: not read.
    monkeypatch.setenv("XDG_STATE_HOME", str(repo.parent / "state"))
    shutil.copytree(_stored(repo, "v1").parents[3], repo / ".charpin" / "state")
    monkeypatch.setenv("XDG_STATE_HOME", str(repo / ".charpin" / "state"))
    ids, [note] = _found(repo)
    assert ids == [] and "inside the repository, where a test could write" in note


def test_a_relative_xdg_state_home_is_ignored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")
    assert state_root() == tmp_path / ".local" / "state" / "charpin"
