"""Snapshot shipping through a LocalTransport box: bundle round trip, sha256 check, increments."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from charpin_coordinator.remote import snapshot
from charpin_coordinator.remote.bundle import runner_bundle
from charpin_coordinator.remote.transport import LocalTransport
from charpin_runner.errors import IntegrityError, UsageError

from tests.conftest import git, make_repo

PY = sys.executable


def _runner(box: LocalTransport) -> str:
    """The runner zipapp on the box (the install step verifies checkouts with it)."""
    path = Path(box.home()) / "runner.pyz"
    if not path.exists():
        path.write_bytes(runner_bundle().data)
    return str(path)


def _ship(box: LocalTransport, snap: snapshot.Snapshot, dest: str) -> int:
    """Ship snap the way a run does; return the bytes this call put on the box."""
    cache = f"{box.home()}/cache repo.git"
    runner = _runner(box)
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
        tree=snap.tree,
        runner=runner,
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
            tree=snap.tree,
            runner=_runner(box),
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


def _poison(cache: Path, blob: str, data: bytes) -> None:
    """Replace a loose object's content while keeping its name, as a hostile test could."""
    for pack in (cache / "objects" / "pack").glob("*.pack"):
        # Loose objects are easier to rewrite than a pack's; the attack is the same.
        moved = pack.with_name("old.bin")
        pack.rename(moved)
        pack.with_suffix(".idx").unlink()
        with moved.open("rb") as handle:
            subprocess.run(["git", "-C", str(cache), "unpack-objects", "-q"], stdin=handle, check=True)
        moved.unlink()
    path = cache / "objects" / blob[:2] / blob[2:]
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"blob %d\0" % len(data) + data))


def test_a_poisoned_cache_repository_is_caught_by_the_files_and_dropped(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src", {"a.txt": "one\n", "b.txt": "two\n"})
    box = LocalTransport("box", tmp_path / "box")
    box.root.mkdir()
    _ship(box, snapshot.resolve(repo, "HEAD"), str(box.root / "r1"))
    cache = box.root / "cache repo.git"
    # An earlier run's test rewrote the object behind a.txt; the next commit reuses that blob.
    _poison(cache, git(repo, "rev-parse", "HEAD:a.txt"), b"poisoned\n")
    (repo / "b.txt").write_text("three\n")
    git(repo, "commit", "-qam", "next")
    snap = snapshot.resolve(repo, "HEAD")
    with pytest.raises(IntegrityError, match="tampered"):
        _ship(box, snap, str(box.root / "r2"))
    # git itself was fooled: it checked the attacker's bytes out under the right ids.
    assert (box.root / "r2" / "a.txt").read_text() == "poisoned\n"
    # The cache is gone, so the next run ships everything again and gets the real files.
    assert not cache.exists()
    _ship(box, snap, str(box.root / "r3"))
    assert (box.root / "r3" / "a.txt").read_text() == "one\n"


def test_a_planted_hook_in_the_cache_repository_never_runs(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src", {"a.txt": "one\n"})
    box = LocalTransport("box", tmp_path / "box")
    box.root.mkdir()
    _ship(box, snapshot.resolve(repo, "HEAD"), str(box.root / "r1"))
    cache = box.root / "cache repo.git"
    marker = tmp_path / "hook-ran"
    hook = tmp_path / "evil-hooks"
    hook.mkdir()
    for name in ("reference-transaction", "post-checkout", "fsmonitor"):
        (hook / name).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (hook / name).chmod(0o755)
    with (cache / "config").open("a") as handle:
        handle.write(f"[core]\n\thooksPath = {hook}\n\tfsmonitor = {hook / 'fsmonitor'}\n")
    (repo / "a.txt").write_text("two\n")
    git(repo, "commit", "-qam", "next")
    _ship(box, snapshot.resolve(repo, "HEAD"), str(box.root / "r2"))
    assert not marker.exists()
