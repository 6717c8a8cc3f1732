"""Benchmark: the run history (SQLite) over a year of nightly runs.

Run: python tests/bench/bench_history.py [--keep DIR]   (a few minutes; prints Markdown rows)

A year = 365 nights x 4 boxes x 5,000 tests = 7.3 M outcome rows, with a few flaky tests, a
box not evaluated now and then, and some test churn. The year is built through the same insert
the recorder uses (record.insert, one transaction per night) from records made in memory, since
1,460 receipt files of 5,000 tests would take gigabytes. Then, against that database:

* insert one night: four real 5,000-test receipts in a run folder written by the coordinator's
  own writer, recorded the way `charpin-remote run` records it (read, decode strictly, insert);
* every query, in-process (open, check, answer, close) and as the CLI (`python -m
  charpin_coordinator history ... --json`, interpreter start-up included);
* prune: one night (the nightly case) and down to 90 days (the first prune of a year), each on
  a copy; the database size.
Targets: insert < 1 s, every query < 200 ms, size < 300 MB.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).parents[2] / p) for p in ("runner", "coordinator", ".")]

from charpin_coordinator.history import flaky as flake_evidence  # noqa: E402
from charpin_coordinator.history import query, store  # noqa: E402
from charpin_coordinator.history.folders import BoxRecord, RunRecord  # noqa: E402
from charpin_coordinator.history.prune import Keep, prune  # noqa: E402
from charpin_coordinator.history.record import insert, record  # noqa: E402
from charpin_coordinator.report import GATES  # noqa: E402

from tests.history_factory import box, run_folder  # noqa: E402
from tests.receipt_factory import frozen_rerun  # noqa: E402

NIGHTS = 365
BOXES = ("ci", "clean", "laptop", "scratch")
TESTS = 5_000
FLAKY = 25  # tests failing now and then
CHURN = 10  # tests renamed every week
ROOT = Path(__file__).resolve().parents[2]
END = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def ids_for(week: int) -> list[str]:
    """5,000 node ids; CHURN of them renamed each week (the dictionary grows, as it does)."""
    base = [f"tests/pkg{n % 40}/test_mod{n % 400}.py::test_case_{n}" for n in range(TESTS)]
    for k in range(CHURN):
        n = (week * CHURN + k) % TESTS
        base[n] = f"tests/pkg{n % 40}/test_mod{n % 400}.py::test_case_{n}_v{week}"
    return sorted(base)


def night(i: int, rng: random.Random) -> RunRecord:
    started = (END - timedelta(days=NIGHTS - 1 - i)).strftime("%Y-%m-%dT%H:%M:%SZ")
    ids = ids_for(i // 7)
    flaky = ids[100 : 100 + FLAKY]
    commit = f"{i // 2:040x}"  # a new commit every other night
    boxes = []
    for label in BOXES:
        if rng.random() < 0.02:
            boxes.append(BoxRecord(label=label, evaluated=False, reason="timeout: no answer"))
            continue
        outcomes = dict.fromkeys(ids, "passed")
        for nodeid in ids[200:250]:
            outcomes[nodeid] = "skipped"
        failed = [t for t in flaky if rng.random() < 0.1]
        for nodeid in failed:
            outcomes[nodeid] = "failed"
        gates = [(g, "PASS", "ok") for g in GATES]
        boxes.append(
            BoxRecord(
                label=label,
                evaluated=True,
                commit=commit,
                interpretation="failed" if failed else "ok",
                exit_status=1 if failed else 0,
                collected=len(ids),
                executed=len(ids),
                outcomes=outcomes,
                gates=gates,
                started_at=started,
            )
        )
    return RunRecord(
        run_id=f"{started.replace('-', '').replace(':', '')}-{i:06x}",
        kind="run",
        started_at=started,
        commit=commit,
        exit_code=1 if any(b.interpretation == "failed" for b in boxes) else 0,
        folder=f"/var/lib/charpin/runs/night-{i}",
        boxes=boxes,
    )


def build_year(db: Path) -> list[float]:
    rng = random.Random(12)
    times = []
    for i in range(NIGHTS):
        rec = night(i, rng)
        start = time.perf_counter()
        with store.opened(db, create=True) as conn, store.write(conn):
            insert(conn, rec, db=db)
        times.append(time.perf_counter() - start)
        if i % 50 == 49:
            print(f"  built {i + 1} nights", file=sys.stderr, flush=True)
    return times


def real_night(tmp: Path, n: int) -> Path:
    """A run folder with four real 5,000-test receipts, as `run` writes it."""
    started = (END + timedelta(days=n)).strftime("%Y-%m-%dT%H:%M:%SZ")
    ids = ids_for(NIGHTS // 7 + n)
    run_id = f"real-{n}"
    receipts = [
        box(label, run_id, started, extra=ids, failing=ids[100:102] if label == "ci" else ())
        for label in BOXES
    ]
    return run_folder(tmp / "real-runs", run_id, receipts)


def repeat_night(tmp: Path, n: int, repeats: int = 10) -> Path:
    """A `run --repeat 10 --include-frozen` run folder: four boxes, each ten 5,000-test
    receipts (the record and nine repeats), each with a side run of two frozen tests."""
    started = (END + timedelta(days=n)).strftime("%Y-%m-%dT%H:%M:%SZ")
    ids = ids_for(NIGHTS // 7 + n)
    run_id = f"repeat-{n}"
    frozen = ["tests/test_frozen.py::test_relay", "tests/test_frozen.py::test_smtp"]

    def one(label: str, rid: str, k: int) -> Any:
        side = frozen_rerun(
            {f: "failed" if k == 4 and f == frozen[1] else "passed" for f in frozen}
        )
        failing = ids[100:101] if k % 3 == 0 else ()
        return box(label, rid, started, extra=ids, failing=failing, frozen_rerun=side)

    records = [one(label, run_id, 1) for label in BOXES]
    more = {
        label: [one(label, f"{run_id}.r{k}", k) for k in range(2, repeats + 1)] for label in BOXES
    }
    return run_folder(tmp / "repeat-runs", run_id, records, repeats=more)


def timed(fn: Callable[[], object], rounds: int = 7) -> tuple[float, float]:
    values = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        values.append(time.perf_counter() - start)
    return statistics.median(values), max(values)


def cli_wall(db: Path, *argv: str, rounds: int = 3) -> float:
    command = [sys.executable, "-m", "charpin_coordinator", "history", *argv, "--json"]
    env = {"PYTHONPATH": f"{ROOT / 'runner'}:{ROOT / 'coordinator'}", "PATH": "/usr/bin:/bin"}
    values = []
    for _ in range(rounds):
        start = time.perf_counter()
        subprocess.run([*command, "--history", str(db)], check=True, env=env, capture_output=True)
        values.append(time.perf_counter() - start)
    return statistics.median(values)


def size_mb(db: Path) -> float:
    return sum(p.stat().st_size for p in [db, *store.side_files(db)] if p.exists()) / 1e6


def main() -> None:
    global NIGHTS
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", type=Path, help="build the year in DIR and keep it")
    parser.add_argument("--nights", type=int, default=NIGHTS, help="a shorter year (smoke test)")
    args = parser.parse_args()
    NIGHTS = args.nights
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="bench-history-"))
    tmp.mkdir(parents=True, exist_ok=True)
    db = tmp / "history.sqlite"
    try:
        start = time.perf_counter()
        per_night = build_year(db)
        build = time.perf_counter() - start
        rows = NIGHTS * len(BOXES) * TESTS
        year_size = size_mb(db)

        inserts = []
        for n in range(3):
            folder = real_night(tmp, n)
            start = time.perf_counter()
            record(db, [folder])
            inserts.append(time.perf_counter() - start)
        with_repeats = []
        for n in range(3, 5):
            folder = repeat_night(tmp, n)
            start = time.perf_counter()
            record(db, [folder])
            with_repeats.append(time.perf_counter() - start)
        from charpin_coordinator.history.folders import read_folder

        last = folder
        read = timed(lambda: read_folder(last), 3)[0]

        recent = query.recent_runs(db, 400)
        mid = recent[len(recent) // 2].run_id
        flaky = ids_for(0)[100]
        queries = {
            "history (20 recent runs)": (lambda: query.recent_runs(db, 20), ()),
            "history show RUN (mid-year run)": (lambda: query.show_run(db, mid), ("show", mid)),
            "history test NODEID (a flaky test, 30 runs x 4 boxes)": (
                lambda: query.outcome_timeline(db, flaky, 30),
                ("test", flaky),
            ),
            "history test NODEID --limit 365 (the whole year)": (
                lambda: query.outcome_timeline(db, flaky, 365),
                ("test", flaky, "--limit", "365"),
            ),
            "history box NAME (30 runs)": (lambda: query.box_runs(db, "ci", 30), ("box", "ci")),
            "box_trend(box, 30) (API)": (lambda: query.box_trend(db, "ci", 30), None),
            "ledger suggest (every flake candidate of the year, with evidence) (API)": (
                lambda: flake_evidence.suggest(db),
                None,
            ),
        }
        measured = {}
        for name, (fn, argv) in queries.items():
            median, worst = timed(fn)
            wall = cli_wall(db, *argv) if argv is not None else None
            measured[name] = (median, worst, wall)

        copy = tmp / "copy.sqlite"
        prunes = {}
        for name, keep in (
            (f"prune one night (keep {NIGHTS + 2} of {NIGHTS + 3} runs)", Keep(count=NIGHTS + 2)),
            ("prune --keep 90d (the first prune of a year)", Keep(days=90)),
        ):
            shutil.copy(db, copy)
            start = time.perf_counter()
            result = prune(copy, keep, now=END + timedelta(days=3))
            prunes[name] = (time.perf_counter() - start, len(result.removed))
            for side in store.side_files(copy):
                side.unlink(missing_ok=True)
        final = size_mb(db)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    print("| benchmark | measured | target |")
    print("|---|---|---|")
    print(
        f"| build a year: {NIGHTS} nights x {len(BOXES)} boxes x {TESTS:,} tests = {rows:,} "
        f"outcome rows | {build:.0f} s ({statistics.median(per_night) * 1000:.0f} ms per night "
        f"median, {max(per_night) * 1000:.0f} ms max) | - |"
    )
    print(f"| database size after the year | {year_size:.0f} MB | < 300 MB |")
    print(
        f"| insert one night from a run folder (4 x {TESTS:,}-test receipts: read, decode, "
        f"insert) | {statistics.median(inserts) * 1000:.0f} ms median of 3, "
        f"{max(inserts) * 1000:.0f} ms max (reading the folder alone {read * 1000:.0f} ms) "
        "| < 1 s |"
    )
    print(
        f"| insert one `--repeat 10 --include-frozen` night (4 boxes x 10 receipts x "
        f"{TESTS:,} tests, each with a side run) | {max(with_repeats) * 1000:.0f} ms max of "
        f"{len(with_repeats)} | < 1 s |"
    )
    for name, (median, worst, wall) in measured.items():
        cli_part = f"; CLI wall {wall * 1000:.0f} ms" if wall is not None else ""
        # The targets are for the history queries; the ledger's is reported.
        target = "reported" if name.startswith("ledger") else "< 200 ms"
        print(
            f"| {name} | {median * 1000:.1f} ms in-process (median of 7, max "
            f"{worst * 1000:.1f}){cli_part} | {target} |"
        )
    for name, (seconds, removed) in prunes.items():
        print(f"| {name}: {removed} runs removed | {seconds * 1000:.0f} ms | - |")
    print(f"| database size after 3 more nights | {final:.0f} MB | < 300 MB |")


if __name__ == "__main__":
    main()
