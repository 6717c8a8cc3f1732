"""Snapshot shipping to a LocalTransport box's agent: bundle round trip, sha256 check, increments."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.remote import snapshot
from charpin_coordinator.remote.bundle import runner_bundle
from charpin_coordinator.remote.errors import BoxError
from charpin_coordinator.remote.session import BoxSession, shipped_agent
from charpin_coordinator.remote.transport import LocalTransport
from charpin_runner.caches import journal
from charpin_runner.caches.store import store_of
from charpin_runner.errors import UsageError

from tests.conftest import git, make_repo

PY = sys.executable
KEY = "0123456789abcdef"


def _session(box: LocalTransport) -> BoxSession:
    runner = runner_bundle()
    return BoxSession.start(
        box, shipped_agent(PY, box.home, runner), python=PY, runner=runner, timeout=60
    )


def _prepare(session: BoxSession, snap: snapshot.Snapshot, run: str) -> dict[str, Any]:
    fields = {"run_id": run, "folder": "box", "repo_key": KEY, "commit": snap.commit, "keep": True}
    facts, _ = session.call("prepare", fields, b"{}", timeout=60)
    return facts


def _install(session: BoxSession, snap: snapshot.Snapshot, data: bytes, sha: str) -> None:
    fields = {"bundle_sha256": sha, "commit": snap.commit, "ref": snapshot.BUNDLE_REF}
    got, _ = session.call("install", {**fields, "tree": snap.tree}, data, timeout=60)
    snapshot.check_identity(snap, got["head"], got["tree"], "box")


def _ship(box: LocalTransport, snap: snapshot.Snapshot, run: str) -> int:
    """Ship snap the way a run does (prepare, then install with the bundle the box needs);
    return the size of the bundle that travelled (0: the box had the commit)."""
    session = _session(box)
    try:
        facts = _prepare(session, snap, run)
        bundle = None if facts["has"] else snapshot.build_bundle(snap, facts["haves"])
        _install(session, snap, bundle.data if bundle else b"", bundle.sha256 if bundle else "")
    finally:
        session.close()
    return len(bundle.data) if bundle else 0


def _src(box: LocalTransport, run: str) -> Path:
    return box.root / ".cache" / "charpin" / "runs" / run / "box" / "src"


def _cache(box: LocalTransport) -> Path:
    return box.root / ".cache" / "charpin" / "repos" / f"{KEY}.git"


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
    assert _ship(box, snap, "one") > 0
    dest = _src(box, "one")
    assert git(dest, "rev-parse", "HEAD") == snap.commit
    assert (dest / "a.txt").read_text() == "one\n"
    assert not (dest.parent / "snapshot.bundle").exists()


def test_second_run_after_one_file_commit_sends_a_small_fraction(tmp_path: Path) -> None:
    repo = _big_repo(tmp_path / "src")
    box = LocalTransport("box", tmp_path / "box")
    box.root.mkdir()
    first = _ship(box, snapshot.resolve(repo, "HEAD"), "r1")
    (repo / "pkg/mod_7.py").write_text("VALUE_7 = 'changed'\n")
    git(repo, "commit", "-qam", "one file")
    second = _ship(box, snapshot.resolve(repo, "HEAD"), "r2")
    print(f"first={first} second={second} ratio={second / first:.4f}")
    assert second < first * 0.10
    # The same commit again: no bundle travels at all.
    assert _ship(box, snapshot.resolve(repo, "HEAD"), "r3") == 0


def test_tampered_bundle_is_refused_on_the_box(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src", {"a.txt": "one\n"})
    snap = snapshot.resolve(repo, "HEAD")
    box = LocalTransport("box", tmp_path / "box")
    box.root.mkdir()
    bundle = snapshot.build_bundle(snap)
    session = _session(box)
    try:
        _prepare(session, snap, "r1")
        with pytest.raises(BoxError, match="does not match") as caught:
            _install(session, snap, bundle.data[:-1] + bytes([bundle.data[-1] ^ 1]), bundle.sha256)
    finally:
        session.close()
    assert caught.value.kind == "snapshot-integrity"
    assert not _src(box, "r1").exists()


def test_identity_mismatch_is_an_integrity_error(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src", {"a.txt": "one\n"})
    snap = snapshot.resolve(repo, "HEAD")
    with pytest.raises(BoxError, match="expected") as caught:
        snapshot.check_identity(snap, "0" * 40, snap.tree, "b")
    assert caught.value.kind == "snapshot-integrity"


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


def test_a_poisoned_cache_repository_is_never_used_again(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src", {"a.txt": "one\n", "b.txt": "two\n"})
    box = LocalTransport("box", tmp_path / "box")
    box.root.mkdir()
    _ship(box, snapshot.resolve(repo, "HEAD"), "r1")
    cache = _cache(box)
    # An earlier run's test rewrote the object behind a.txt; the next commit reuses that blob.
    _poison(cache, git(repo, "rev-parse", "HEAD:a.txt"), b"poisoned\n")
    (repo / "b.txt").write_text("three\n")
    git(repo, "commit", "-qam", "next")
    snap = snapshot.resolve(repo, "HEAD")
    # The repository is not as its publication journal left it: replaced before anything reads
    # it, so the whole commit travels again and the checkout has the real files.
    assert _ship(box, snap, "r2") > 0
    assert (_src(box, "r2") / "a.txt").read_text() == "one\n"


def test_a_poisoned_cache_repository_is_caught_by_the_files_and_dropped(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src", {"a.txt": "one\n", "b.txt": "two\n"})
    box = LocalTransport("box", tmp_path / "box")
    box.root.mkdir()
    _ship(box, snapshot.resolve(repo, "HEAD"), "r1")
    cache = _cache(box)
    store, kind, name = store_of(cache)
    # A poisoning that also forged a journal record for itself (a test without bubblewrap, run
    # as the box user, could): the checkout's files are still checked against the commit's tree.
    with store.publishing(kind, name):
        before = journal.state(cache)
        _poison(cache, git(repo, "rev-parse", "HEAD:a.txt"), b"poisoned\n")
        store.record(kind, name, before, "forged")
    (repo / "b.txt").write_text("three\n")
    git(repo, "commit", "-qam", "next")
    snap = snapshot.resolve(repo, "HEAD")
    with pytest.raises(BoxError, match="tampered"):
        _ship(box, snap, "r2")
    # git itself was fooled: it checked the attacker's bytes out under the right ids.
    assert (_src(box, "r2") / "a.txt").read_text() == "poisoned\n"
    # The cache is condemned, so the next run ships everything into a new one and gets the
    # real files.
    assert store.condemned(kind, name)
    _ship(box, snap, "r3")
    assert (_src(box, "r3") / "a.txt").read_text() == "one\n"
    assert not store.condemned(kind, name)


def test_a_planted_hook_in_the_cache_repository_never_runs(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src", {"a.txt": "one\n"})
    box = LocalTransport("box", tmp_path / "box")
    box.root.mkdir()
    _ship(box, snapshot.resolve(repo, "HEAD"), "r1")
    cache = _cache(box)
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
    _ship(box, snapshot.resolve(repo, "HEAD"), "r2")
    assert not marker.exists()
