"""Benchmark: `charpin-remote compare` of a CI fleet, 50 receipts x 5,000 tests, as one folder.

Run: python tests/bench/bench_compare_fleet.py   (prints a Markdown table row; target < 2 s)
The receipts are named as deploy/ci/ names them (`receipt-<label>.json`, label `<os>-py<python>`)
and passed as one folder, as the final CI job passes its downloaded artifacts. A few boxes have
differing outcomes. Wall time is the whole CLI process (interpreter start-up included).
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

BOXES = 50
TESTS = 5_000
# Boxes 7, 17, 27, ... fail three tests each (their own three): 15 differing test ids in all.
FAILING_EVERY = 10
FAILING_PER_BOX = 3


def labels() -> list[str]:
    systems = ("ubuntu-24.04", "ubuntu-22.04", "macos-14", "macos-13", "windows-2022")
    pythons = ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15", "3.16", "3.17", "3.18")
    return [f"{os_name}-py{python}" for os_name in systems for python in pythons][:BOXES]


def build(folder: Path) -> list[Path]:
    ids = sorted(f"tests/pkg{n % 50}/test_mod{n % 500}.py::test_case_{n}" for n in range(TESTS))
    common = {
        "collection.collected": ids,
        "collection.selected": ids,
        "collection.executed": ids,
        "collection.order": ids,
        "durations": dict.fromkeys(ids, 0.001),
    }
    paths = []
    for index, label in enumerate(labels()):
        outcomes = dict.fromkeys(ids, "passed")
        parts: dict[str, object] = {}
        if index % FAILING_EVERY == 7:
            for nodeid in ids[index * 11 : index * 11 + FAILING_PER_BOX]:
                outcomes[nodeid] = "failed"
            parts = {"exit.status": 1, "exit.interpretation": "failed"}
        receipt = make_receipt(
            label, outcomes=outcomes, run_id=f"20261201T000000Z-{index:06x}", **common, **parts
        )
        path = folder / f"receipt-{label}.json"
        path.write_bytes(dumps(receipt))
        paths.append(path)
    return paths


def expected_differing() -> int:
    return len(range(7, BOXES, FAILING_EVERY)) * FAILING_PER_BOX


def in_process(paths: list[Path]) -> float:
    start = time.perf_counter()
    report = build_report([(p.stem[len("receipt-") :], read_receipt_file(p)) for p in paths])
    encode_json(report)
    render_text(report, color=False)
    outcomes = next(d for d in report.dimensions if d.name == "outcomes")
    assert len(outcomes.matrix) == expected_differing(), len(outcomes.matrix)
    return time.perf_counter() - start


def cli(folder: Path, *extra: str) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "charpin_coordinator", "compare", *extra, str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    assert done.returncode == 1 | 2, (done.returncode, done.stderr)  # failed tests, drift
    return wall, done.returncode


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "receipts"
        folder.mkdir()
        paths = build(folder)
        size = sum(p.stat().st_size for p in paths) / 1e6
        inproc = statistics.median(in_process(paths) for _ in range(3))
        text = statistics.median(cli(folder)[0] for _ in range(3))
        json_wall = statistics.median(cli(folder, "--json")[0] for _ in range(3))
    print("| benchmark | measured | target |")
    print("|---|---|---|")
    print(
        f"| compare a fleet: {BOXES} receipts x {TESTS:,} tests as one folder, "
        f"{expected_differing()} differing outcomes on {len(range(7, BOXES, FAILING_EVERY))} "
        f"boxes ({size:.1f} MB in all) (`bench_compare_fleet.py`) | {text:.2f} s CLI wall "
        f"(text), {json_wall:.2f} s (`--json`), {inproc:.2f} s decode + drift + render "
        "in-process | < 2 s |"
    )


if __name__ == "__main__":
    main()
