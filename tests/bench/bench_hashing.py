"""Benchmark: charpin's fixture hashing against hashlib in memory and against sha256sum.

Plain script, not collected by pytest. Run from the repository root:

    python tests/bench/bench_hashing.py [--files 3000] [--total-mb 300] [--repeat 3]

Creates the files in a temporary folder (random sizes, urandom content), warms the page cache,
measures the three rates in the same run (interleaved rounds, best of --repeat), prints a Markdown table and deletes
the data. Ratios, not absolute times, are what the README quotes.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "runner"))

from charpin_runner import fixtures

MB = 1_000_000


def make_files(folder: Path, count: int, total: int, rng: random.Random) -> list[Path]:
    """count files under folder whose sizes (exponential spread) add up to about total bytes."""
    weights = [rng.expovariate(1.0) for _ in range(count)]
    scale = total / sum(weights)
    paths = []
    for index, weight in enumerate(weights):
        path = folder / f"d{index % 37:02d}" / f"f{index:05d}.bin"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(os.urandom(max(1, int(weight * scale))))
        paths.append(path)
    return paths


def timed(action: Callable[[], object]) -> float:
    """Wall time of one call of action."""
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def run(files: int, total_mb: int, repeat: int) -> str:
    rng = random.Random(20261130)
    scratch = Path(tempfile.mkdtemp(prefix="charpin-bench-"))
    try:
        data = scratch / "data"
        data.mkdir()
        paths = make_files(data, files, total_mb * MB, rng)
        size = sum(p.stat().st_size for p in paths)
        for path in paths:  # warm the page cache so every contender reads from memory
            path.read_bytes()
        buffer = os.urandom(size)

        listing = b"\0".join(os.fsencode(p) for p in paths)

        def sha256sum() -> None:
            subprocess.run(
                ["xargs", "-0", "sha256sum"],
                input=listing,
                stdout=subprocess.DEVNULL,
                check=True,
            )

        contenders: dict[str, Callable[[], object]] = {
            "mem": lambda: hashlib.sha256(buffer).hexdigest(),
            "ours": lambda: fixtures.snapshot(scratch, ["data"]),
            "tool": sha256sum,
        }
        # Rounds interleave the contenders, so a burst of load elsewhere hits all of them alike.
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(repeat):
            for name, action in contenders.items():
                times[name].append(timed(action))
    finally:
        shutil.rmtree(scratch)
    rate = {name: size / MB / min(values) for name, values in times.items()}
    return "\n".join(
        [
            f"{files:,} files, {size / MB:,.0f} MB, page cache warm, best of {repeat} rounds, "
            f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}",
            "",
            "| measurement | MB/s | ratio |",
            "|---|---:|---|",
            f"| hashlib.sha256 over one in-memory buffer | {rate['mem']:,.0f} | 1.00 (reference) |",
            f"| charpin fixture hashing of the folder | {rate['ours']:,.0f} | "
            f"{rate['ours'] / rate['mem']:.2f} of in-memory (target >= 0.6) |",
            f"| sha256sum via xargs (one process) | {rate['tool']:,.0f} | "
            f"charpin is {rate['ours'] / rate['tool']:.2f}x sha256sum |",
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--total-mb", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if shutil.which("sha256sum") is None or shutil.which("xargs") is None:
        print(
            "bench_hashing: sha256sum and xargs are needed (coreutils, findutils)", file=sys.stderr
        )
        return 64
    print(run(args.files, args.total_mb, args.repeat))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
