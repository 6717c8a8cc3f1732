"""Collection of a box's caches (#20 item 2): under a size and an age cap, left-overs of
interrupted runs and builds removed, and never anything in use. Real folders, real processes
holding real leases (synchronised on a pipe)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from charpin_runner.caches import collect, journal
from charpin_runner.caches.store import Store

ROOT = Path(__file__).resolve().parents[2]
MB = 1024 * 1024


def _entry(store: Store, kind: str, name: str, megabytes: float, *, used_days_ago: float) -> Path:
    """A published entry of about that size, last leased that many days ago."""
    path = store.entry(kind, name)
    path.mkdir(parents=True)
    (path / "blob").write_bytes(os.urandom(int(megabytes * MB)))
    with store.publishing(kind, name):
        store.record(kind, name, journal.ABSENT, "publish")
    os.close(store.lease(kind, name))
    when = time.time() - used_days_ago * 86400
    os.utime(store.lock_file(kind, name, "lease"), (when, when))
    return path


HOLD = """
import sys
from pathlib import Path
from charpin_runner.caches.store import Store
store = Store(Path(sys.argv[1]))
fd = store.lease_run(sys.argv[3], sys.argv[4]) if sys.argv[2] == "runs" else store.lease(sys.argv[2], sys.argv[3])
print("held", flush=True)
sys.stdin.read()
"""


@contextmanager
def _held(store: Store, kind: str, *names: str) -> Iterator[subprocess.Popen[str]]:
    """Another run, holding a lease until the block ends (it is killed: the kernel frees it)."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLD, str(store.root), kind, *names],
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


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "charpin")


def _names(report: collect.Report) -> list[str]:
    return sorted(f"{item.kind}/{item.name}" for item, _ in report.removed)


def test_least_recently_used_entries_go_until_the_cap_and_one_in_use_stays(store: Store) -> None:
    _entry(store, "venvs", "oldest", 2, used_days_ago=3)
    _entry(store, "venvs", "older", 2, used_days_ago=2)
    _entry(store, "repos", "newest.git", 2, used_days_ago=0.1)
    in_use = _entry(store, "venvs", "busy", 2, used_days_ago=5)  # the oldest, but leased
    with _held(store, "venvs", "busy"):
        report = collect.collect(store.root, collect.Cap(max_mb=5))
        assert _names(report) == ["venvs/older", "venvs/oldest"]
        assert all("least recently used" in why for _, why in report.removed)
        assert in_use.is_dir() and [i.name for i in report.in_use] == ["busy"]
        assert report.after <= 5 * MB < report.before
    assert not store.entry("venvs", "oldest").exists()
    assert store.entry("repos", "newest.git").is_dir()


def test_a_dry_run_removes_nothing_and_says_what_it_would(store: Store) -> None:
    path = _entry(store, "venvs", "v", 1, used_days_ago=30)
    report = collect.collect(store.root, collect.Cap(), dry_run=True)
    assert _names(report) == ["venvs/v"] and "unused for more than 14 days" in report.removed[0][1]
    assert path.is_dir()


def test_what_interrupted_runs_and_builds_left_is_collected_and_live_ones_are_not(
    store: Store,
) -> None:
    for run_id in ("dead", "live", "kept"):
        folder = store.root / "runs" / run_id / "box"
        (folder / "src").mkdir(parents=True)
        (folder / "src" / "f").write_text("x")
    collect.mark_kept(store.root / "runs" / "kept" / "box")
    (store.root / "trash" / "venvs-x-1-aa").mkdir(parents=True)
    (store.root / "stage" / "abandoned").mkdir(parents=True)  # nobody holds its build lock
    building = store.root / "stage" / "being-built"
    building.mkdir()
    with store.building("venvs", "being-built"):
        # "dead" was leased by an agent that was killed outright: the kernel freed its lease.
        with _held(store, "runs", "dead", "box") as agent:
            agent.kill()
            agent.wait()
        with _held(store, "runs", "live", "box"):
            report = collect.collect(store.root, collect.Cap())
    assert _names(report) == ["runs/dead/box", "stage/abandoned", "trash/venvs-x-1-aa"]
    assert not (store.root / "runs" / "dead").exists()
    assert (store.root / "runs" / "live" / "box" / "src" / "f").exists()
    assert (store.root / "runs" / "kept" / "box").is_dir()  # --keep: until the age cap
    assert building.is_dir()


def test_condemned_and_one_off_entries_go_once_unused(store: Store) -> None:
    _entry(store, "venvs", "bad", 1, used_days_ago=0)
    store.condemn("venvs", "bad")
    _entry(store, "repos", "key~0a1b2c3d.git", 1, used_days_ago=0)
    with _held(store, "repos", "key~0a1b2c3d.git"):
        first = collect.collect(store.root, collect.Cap())
    assert _names(first) == ["venvs/bad"] and not store.condemned("venvs", "bad")
    second = collect.collect(store.root, collect.Cap())
    assert _names(second) == ["repos/key~0a1b2c3d.git"]


def test_only_the_most_recently_used_runner_folders_are_kept(store: Store) -> None:
    for n in range(5):
        _entry(store, "runners", f"charpin-runner-{n}", 0.01, used_days_ago=5 - n)
    report = collect.collect(store.root, collect.Cap())
    assert _names(report) == ["runners/charpin-runner-0", "runners/charpin-runner-1"]


def test_a_cap_in_a_request_is_checked() -> None:
    assert collect.Cap.from_request(None) is None
    assert collect.Cap.from_request({}) == collect.Cap()
    assert collect.Cap.from_request({"max_mb": 7, "max_days": 1}) == collect.Cap(7, 1.0)
    with pytest.raises(Exception, match="max_mb -1 is not a size"):
        collect.Cap.from_request({"max_mb": -1})
