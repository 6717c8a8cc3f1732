"""The box's shared caches under concurrent runs (#20): locks and leases, the publication journal,
and the cache watch's attribution: a run is charged only with what its own processes could
have written. Real files, real processes holding real locks, synchronised on pipes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from charpin_runner import sandbox
from charpin_runner.caches import journal, locks
from charpin_runner.caches.store import Store

ROOT = Path(__file__).resolve().parents[2]


def _publish(store: Store, kind: str, name: str, files: dict[str, str]) -> Path:
    """Build an entry in the staging folder and publish it as charpin does: rename, journal."""
    stage = store.stage(name)
    stage.mkdir(parents=True)
    for rel, text in files.items():
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        (stage / rel).write_text(text)
    with store.publishing(kind, name):
        store.entry(kind, name).parent.mkdir(parents=True, exist_ok=True)
        os.rename(stage, store.entry(kind, name))
        store.record(kind, name, journal.ABSENT, "publish")
    return store.entry(kind, name)


def _fetch(store: Store, kind: str, name: str, rel: str, text: str) -> None:
    """A journaled change to an entry in place, as a fetch into a cache repository is."""
    with store.publishing(kind, name):
        before = journal.state(store.entry(kind, name))
        (store.entry(kind, name) / rel).write_text(text)
        store.record(kind, name, before, "fetch")


def _in_another_process(code: str) -> None:
    """Run code (with `store` bound to the test's store) in a separate Python: another run."""
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "runner")},
        timeout=60,
    )


@pytest.fixture
def store(tmp_path: Path) -> Store:
    root = tmp_path / "charpin"
    for kind in ("venvs", "repos", "runners", "locks"):
        (root / kind).mkdir(parents=True)
    return Store(root)


def _plan(store: Store, **kw: object) -> sandbox.Plan:
    containers = tuple(str(store.root / k) for k in ("venvs", "repos", "runners"))
    return sandbox.Plan(mode="off", containers=containers, **kw)  # type: ignore[arg-type]


PUBLISH_ELSEWHERE = """
import os, sys
from pathlib import Path
from charpin_runner.caches import journal
from charpin_runner.caches.store import Store
store = Store(Path({root!r}))
stage = store.stage("b2")
stage.mkdir(parents=True)
(stage / "bin").mkdir()
(stage / "bin" / "python").write_text("#!/bin/sh\\n")
with store.publishing("venvs", "b2"):
    os.rename(stage, store.entry("venvs", "b2"))
    store.record("venvs", "b2", journal.ABSENT, "publish")
with store.publishing("repos", "r.git"):
    before = journal.state(store.entry("repos", "r.git"))
    (store.entry("repos", "r.git") / "pack-2").write_text("objects")
    store.record("repos", "r.git", before, "fetch")
"""


def test_what_another_run_publishes_during_the_tests_is_not_this_runs_finding(
    store: Store,
) -> None:
    _publish(store, "repos", "r.git", {"HEAD": "ref\n"})
    guard = sandbox.begin(_plan(store))
    # Meanwhile another run publishes a venv and fetches into the shared cache repository.
    _in_another_process(PUBLISH_ELSEWHERE.format(root=str(store.root)))
    assert sandbox.finish(guard) == []
    assert (store.entry("venvs", "b2") / "bin" / "python").is_file()
    assert (store.entry("repos", "r.git") / "pack-2").is_file()


def test_a_write_by_the_tests_is_still_caught_beside_a_concurrent_fetch(store: Store) -> None:
    _publish(store, "repos", "r.git", {"HEAD": "ref\n"})
    _publish(store, "venvs", "v1", {"bin/python": "#!/bin/sh\n"})
    guard = sandbox.begin(_plan(store))
    # The tests plant into the venv and into the repository; then a concurrent run fetches
    # into the repository under its lock (its journal record starts from the planted state).
    (store.entry("venvs", "v1") / "zz_evil.pth").write_text("import os\n")
    (store.entry("repos", "r.git") / "hooks").write_text("planted\n")
    _fetch(store, "repos", "r.git", "pack-2", "objects")
    reasons = sandbox.finish(guard)
    assert len(reasons) == 2, reasons
    assert all("wrote into" in r and "removed" in r for r in reasons), reasons
    assert not store.entry("venvs", "v1").exists()
    assert not store.entry("repos", "r.git").exists()


def test_a_planted_entry_and_a_forgotten_journal_are_findings(store: Store) -> None:
    guard = sandbox.begin(_plan(store))
    planted = store.root / "runners" / "charpin-runner-0000"
    (planted / "__pycache__").mkdir(parents=True)
    (planted / "__pycache__" / "seal.cpython-311.pyc").write_bytes(b"x")
    [reason] = sandbox.finish(guard)
    assert "charpin-runner-0000" in reason and "removed" in reason
    assert not planted.exists()


def test_under_bubblewrap_a_read_only_entry_is_never_the_tests_doing(store: Store) -> None:
    # The tests see every cache folder read-only but what is bound writable over it: a change
    # elsewhere, journaled or not, came from outside the sandbox.
    writable = store.root / "venvs" / "open"
    writable.mkdir()
    plan = _plan(store, writable=(str(writable),))
    guard = sandbox.Guard(plan=plan, used=True, before=sandbox.begin(plan).before)
    (store.root / "venvs" / "unjournaled").mkdir()  # not journaled: still not the tests'
    (writable / "x").write_text("written\n")
    [reason] = sandbox.finish(guard)
    assert "venvs/open" in reason
    assert (store.root / "venvs" / "unjournaled").exists()


HOLD_LEASE = """
import sys
from pathlib import Path
from charpin_runner.caches.store import Store
fd = Store(Path({root!r})).lease({kind!r}, {name!r})
print("held", flush=True)
sys.stdin.read()
"""


@contextmanager
def _lease_holder(store: Store, kind: str, name: str) -> Iterator[subprocess.Popen[str]]:
    """A process holding a lease until its stdin closes (or it is killed); yields once it
    holds it, and has ended when the block is left."""
    code = HOLD_LEASE.format(root=str(store.root), kind=kind, name=name)
    with subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "runner")},
    ) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        try:
            yield proc
        finally:
            proc.kill()


def test_an_entry_in_use_is_condemned_not_removed_and_goes_when_its_run_ends(
    store: Store,
) -> None:
    venv = _publish(store, "venvs", "v1", {"bin/python": "#!/bin/sh\n"})
    with _lease_holder(store, "venvs", "v1"):
        guard = sandbox.begin(_plan(store))
        (venv / "zz_evil.pth").write_text("import os\n")
        [reason] = sandbox.finish(guard)
        assert "condemned" in reason and "removed once those runs end" in reason
        assert venv.is_dir(), "removed while another run used it"
        assert store.condemned("venvs", "v1")
        assert not store.current("venvs", "v1")  # nobody takes it into use again
        assert not store.remove("venvs", "v1")
    assert store.remove("venvs", "v1")  # the lease died with its holder
    assert not venv.exists() and not store.condemned("venvs", "v1")


def test_a_lease_ends_with_its_holder_even_when_killed(store: Store) -> None:
    with _lease_holder(store, "repos", "r.git") as holder:
        assert store.in_use("repos", "r.git")
        holder.kill()  # no clean-up of its own: the kernel drops the lock
        holder.wait(timeout=30)
        assert not store.in_use("repos", "r.git")


def test_a_lock_file_removed_while_waited_on_is_not_held_twice(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "x.lock"
    first = locks.hold(path, exclusive=True)
    assert first is not None
    # The collector removes a lock file only while holding it; a waiter then gets the new file.
    os.unlink(path)
    second = locks.hold(path, exclusive=True, wait=False)
    assert second is not None, "the new lock file is free"
    assert locks.hold(path, exclusive=True, wait=False) is None
    locks.free(first)
    locks.free(second)


def test_the_journal_explains_only_an_unbroken_chain() -> None:
    records = [("-", "a"), ("a", "b"), ("x", "y"), ("b", "c")]
    assert journal.explains(records, "-", "c")
    assert journal.explains(records, "a", "b")
    assert not journal.explains(records, "a", "y")
    assert not journal.explains(records, "z", "c")
    assert journal.explains([], "q", "q")
