"""Benchmark: `charpin-remote compare` of two 100,000-test receipts with 1,000 differing outcomes.

Run: python tests/bench/bench_compare.py   (prints a Markdown table row; targets < 1 s, < 300 MB)
Wall time and peak RSS are measured for the whole CLI process (interpreter start-up included),
and in-process for decode + drift + render alone.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parents[2] / p) for p in ("runner", "coordinator", ".")]

from charpin_coordinator.drift import build_report  # noqa: E402
from charpin_coordinator.receipts import read_receipt_file  # noqa: E402
from charpin_coordinator.reports.common import encode_json  # noqa: E402
from charpin_coordinator.reports.text import render_text  # noqa: E402
from charpin_runner.receipt import dumps  # noqa: E402

from tests.receipt_factory import make_receipt  # noqa: E402

TESTS = 100_000
DIFFERING = 1_000


def build(tmp: Path) -> tuple[Path, Path]:
    ids = [f"tests/pkg{n % 100}/test_mod{n % 1000}.py::test_case_{n}" for n in range(TESTS)]
    ids.sort()
    base = dict.fromkeys(ids, "passed")
    other = dict(base)
    for nodeid in ids[:: TESTS // DIFFERING][:DIFFERING]:
        other[nodeid] = "failed"
    common = {
        "collection.collected": ids,
        "collection.selected": ids,
        "collection.executed": ids,
        "collection.order": ids,
        "durations": dict.fromkeys(ids, 0.001),
    }
    a, b = tmp / "a.json", tmp / "b.json"
    a.write_bytes(dumps(make_receipt("a", outcomes=base, **common)))
    b.write_bytes(
        dumps(
            make_receipt(
                "b", outcomes=other, **{"exit.status": 1, "exit.interpretation": "failed"}, **common
            )
        )
    )
    return a, b


def in_process(a: Path, b: Path) -> float:
    start = time.perf_counter()
    report = build_report([("a", read_receipt_file(a)), ("b", read_receipt_file(b))])
    encode_json(report)
    render_text(report, color=False)
    assert len(report.dimensions[0].matrix) == DIFFERING, report.dimensions[0].name
    return time.perf_counter() - start


def cli(a: Path, b: Path) -> tuple[float, float]:
    code = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run([sys.executable, '-m', 'charpin_coordinator', 'compare', '--json', *sys.argv[1:]],"
        " stdout=subprocess.DEVNULL)\n"
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(a), str(b)], capture_output=True, text=True, check=True
    )
    wall, rss_kb = out.stdout.split()
    return float(wall), int(rss_kb) / 1024


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        a, b = build(Path(tmp))
        size = a.stat().st_size / 1e6
        inproc = statistics.median(in_process(a, b) for _ in range(3))
        runs = [cli(a, b) for _ in range(3)]
        wall = statistics.median(r[0] for r in runs)
        rss = max(r[1] for r in runs)
    print("| benchmark | measured | target |")
    print("|---|---|---|")
    print(
        f"| compare 2 x {TESTS:,} tests, {DIFFERING:,} differing (CLI wall, receipts {size:.1f} MB each) | {wall:.2f} s | < 1 s |"
    )
    print(f"| compare, in-process decode + drift + render | {inproc:.2f} s | - |")
    print(f"| compare peak memory (CLI process RSS) | {rss:.0f} MB | < 300 MB |")


if __name__ == "__main__":
    main()
