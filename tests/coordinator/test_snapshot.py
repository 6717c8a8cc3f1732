"""Snapshot shipping through a LocalTransport box: bundle round trip, sha256 check, increments."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
from charpin_coordinator.remote import snapshot
from charpin_coordinator.remote.transport import LocalTransport
from charpin_runner.errors import IntegrityError, UsageError

from tests.conftest import git, make_repo

PY = sys.executable


def _ship(box: LocalTransport, snap: snapshot.Snapshot, dest: str) -> int:
    """Ship snap the way a run does; return the bytes this call put on the box."""
    cache = f"{box.home()}/cache repo.git"
    sent_before = box.stats.sent
    has, haves = snapshot.box_haves(box, PY, cache, snap.commit)
    path = sha = None
    if not has:
        bundle = snapshot.build_bundle(snap, haves)
        path, sha = f"{box.home()}/snap.bundle", bundle.sha256
        box.put(bundle.data, path)
    got = snapshot.install(
        box,
        PY,
        cache_repo=cache,
        bundle_path=path,
        bundle_sha256=sha,
        commit=snap.commit,
        dest=dest,
    )
    snapshot.check_identity(snap, got, box.name)
    return box.stats.sent - sent_before


def _big_repo(root: Path) -> Path:
    # Distinct lines (hex digests) so compression cannot hide the size of the tree.
    files = {
        f"pkg/mod_{i}.py": "".join(
            f"# {hashlib.sha256(f'{i}-{j}'.encode()).hexdigest()}\n" for j in range(100)
        )
        for i in range(60)
    }
    return make_repo(root, files)


def test_round_trip_checks_out_the_commit_with_its_tree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src", {"a.txt": "one\n", "tests/test_a.py": "def test(): pass\n"})
    snap = snapshot.resolve(repo, "HEAD")
    box = LocalTransport("box", tmp_path / "box")
    box.root.mkdir()
    dest = str(box.root / "run one" / "src")
    _ship(box, snap, dest)
    assert git(Path(dest), "rev-parse", "HEAD") == snap.commit
    assert (Path(dest) / "a.txt").read_text() == "one\n"
    assert not (box.root / "snap.bundle").exists()


def test_second_run_after_one_file_commit_sends_a_small_fraction(tmp_path: Path) -> None:
    repo = _big_repo(tmp_path / "src")
    box = LocalTransport("box", tmp_path / "box")
    box.root.mkdir()
    first = _ship(box, snapshot.resolve(repo, "HEAD"), str(box.root / "r1"))
    (repo / "pkg/mod_7.py").write_text("VALUE_7 = 'changed'\n")
    git(repo, "commit", "-qam", "one file")
    second = _ship(box, snapshot.resolve(repo, "HEAD"), str(box.root / "r2"))
    print(f"first={first} second={second} ratio={second / first:.4f}")
    assert second < first * 0.10
    # The same commit again: nothing travels at all.
    assert _ship(box, snapshot.resolve(repo, "HEAD"), str(box.root / "r3")) == 0


def test_tampered_bundle_is_refused_on_the_box(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src", {"a.txt": "one\n"})
    snap = snapshot.resolve(repo, "HEAD")
    box = LocalTransport("box", tmp_path / "box")
    box.root.mkdir()
    bundle = snapshot.build_bundle(snap)
    path = str(box.root / "snap.bundle")
    box.put(bundle.data[:-1] + bytes([bundle.data[-1] ^ 1]), path)
    with pytest.raises(IntegrityError, match="does not match"):
        snapshot.install(
            box,
            PY,
            cache_repo=str(box.root / "c.git"),
            bundle_path=path,
            bundle_sha256=bundle.sha256,
            commit=snap.commit,
            dest=str(box.root / "src"),
        )
    assert not (box.root / "src").exists()


def test_identity_mismatch_is_an_integrity_error(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src", {"a.txt": "one\n"})
    snap = snapshot.resolve(repo, "HEAD")
    with pytest.raises(IntegrityError, match="expected"):
        snapshot.check_identity(snap, snapshot.CheckedOut(head="0" * 40, tree=snap.tree), "b")


def test_unknown_revision_is_a_usage_error(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src", {"a.txt": "one\n"})
    with pytest.raises(UsageError, match="no-such-tag"):
        snapshot.resolve(repo, "no-such-tag")


def test_haves_unknown_locally_are_not_prerequisites(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src", {"a.txt": "one\n"})
    bundle = snapshot.build_bundle(snapshot.resolve(repo, "HEAD"), ["f" * 40, "not-hex"])
    assert bundle.prerequisites == ()
