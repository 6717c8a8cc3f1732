"""Benchmark: what the probe plugin costs a large, fast suite. Run as `python tests/bench/bench_probe.py`.

Generates a suite of trivial tests in a temporary folder, then times `python -m pytest` without and
with `--charpin-receipt`, interleaved so that machine noise hits both alike, and prints one
Markdown table row (plus its header) with the medians and their ratio. Target: ratio <= 1.05.
Wall time is the headline; the CPU time (user + sys of the pytest process) and the ratio of the
fastest rounds are printed beside it because they move less when other work shares the machine.
PYTHONDONTWRITEBYTECODE=1 is set as `charpin receipt` sets it, so every run compiles afresh.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNNER_DIR = Path(__file__).resolve().parents[2] / "runner"
PER_FILE = 100
TARGET = 1.05


def make_suite(root: Path, tests: int) -> None:
    """Write `tests` trivial test functions, PER_FILE to a module."""
    for start in range(0, tests, PER_FILE):
        count = min(PER_FILE, tests - start)
        body = "".join(f"def test_{start + i}():\n    assert True\n\n" for i in range(count))
        (root / f"test_gen_{start // PER_FILE:03d}.py").write_text(body)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_run(root: Path, extra: list[str]) -> tuple[float, float]:
    """Run pytest once in root; return its wall time and CPU time in seconds."""
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra]
    env = dict(os.environ, PYTHONPATH=str(RUNNER_DIR), PYTHONDONTWRITEBYTECODE="1")
    cpu_before = _children_cpu()
    began = time.perf_counter()
    done = subprocess.run(
        argv, check=False, cwd=root, env=env, capture_output=True, text=True, timeout=900
    )
    elapsed = time.perf_counter() - began
    if done.returncode != 0:
        sys.exit(f"bench_probe: pytest failed ({done.returncode}):\n{done.stdout[-2000:]}")
    return elapsed, _children_cpu() - cpu_before


def _medians(times: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=5000, help="suite size (default 5000)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="charpin-bench-") as tmp:
        root = Path(tmp)
        make_suite(root, args.tests)
        record = root.parent / f"{root.name}-probe.jsonl"
        # Plain runs block the plugin, in case charpin is installed and autoloads (inert anyway).
        plain = ["-p", "no:charpin_runner.plugin"]
        probed = ["-p", "charpin_runner.plugin", f"--charpin-receipt={record}"]
        timed_run(root, plain)  # warm-up: imports and file-system caches
        timed_run(root, probed)
        plain_times: list[tuple[float, float]] = []
        probe_times: list[tuple[float, float]] = []
        for _ in range(args.rounds):
            plain_times.append(timed_run(root, plain))
            probe_times.append(timed_run(root, probed))
        lines = record.read_text().count("\n")
        record.unlink()
    plain_wall, plain_cpu = _medians(plain_times)
    probe_wall, probe_cpu = _medians(probe_times)
    ratio = probe_wall / plain_wall
    verdict = "ok" if ratio <= TARGET else "over target"
    rounds = {"plain": plain_times, "probe": probe_times}
    print(f"<!-- (wall s, cpu s) per round: {rounds!r}; {lines} record lines -->")
    # Best-of ratio: on a shared machine noise only ever adds time, so minima are steadier.
    best = min(t[0] for t in probe_times) / min(t[0] for t in plain_times)
    print(
        "| benchmark | tests | rounds | plain median (s) | probe median (s) | ratio "
        "| CPU ratio | best-of ratio | target |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    print(
        f"| probe plugin | {args.tests:,} | {args.rounds} | {plain_wall:.2f} | {probe_wall:.2f} "
        f"| {ratio:.3f} | {probe_cpu / plain_cpu:.3f} | {best:.3f} | <= {TARGET} ({verdict}) |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
