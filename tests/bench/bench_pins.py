"""Benchmark: replaying 200 pins of a small Python CLI, against bare subprocess.run and prysk.

Run: python tests/bench/bench_pins.py [--pins 200]   (prints a Markdown table)
Targets (issue): per-pin overhead over a bare subprocess.run of the same command <= 15 ms;
speed-up with 2 workers >= 1.7x on a 2-core machine; charpin at least as fast as the same cases
as a cram-format suite run by prysk (which checks less: merged streams, no output files); and
importing those same 200 `.t` files (`charpin import cram --dialect prysk`: one verification
run, write, replay from disk) and replaying the imported pins, each against prysk (target >= 1x).
Each variant runs the same 200 commands; the best of ROUNDS (env BENCH_ROUNDS, default 3) is
reported. CPU seconds (this process plus all children, user + system) are printed beside wall
time because they barely move when other jobs share the machine, while wall time does.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parents[2] / "runner")]

from charpin_runner.config import PinsConfig  # noqa: E402
from charpin_runner.pins.execute import Session  # noqa: E402
from charpin_runner.pins.imports import cram as cram_import  # noqa: E402
from charpin_runner.pins.imports.common import run_import  # noqa: E402
from charpin_runner.pins.model import Case, Pin  # noqa: E402
from charpin_runner.pins.record import record_case  # noqa: E402
from charpin_runner.pins.replay import replay  # noqa: E402
from charpin_runner.pins.store import load_pins  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))

CLI = """\
import argparse, os, sys
parser = argparse.ArgumentParser(prog="tally")
parser.add_argument("--scale", type=int, default=1)
parser.add_argument("--out", action="store_true")
args = parser.parse_args()
total = 0
for line in sys.stdin:
    total += int(line) * args.scale
print("total", total)
print("lines read", file=sys.stderr)
if args.out:
    os.makedirs("out", exist_ok=True)
    with open("out/total.txt", "w") as handle:
        handle.write(str(total) + "\\n")
sys.exit(0 if total < 1000 else 1)
"""


def build_cases(repo: Path, count: int) -> list[Case]:
    (repo / "tally.py").write_text(CLI, encoding="utf-8")
    cases = []
    for n in range(count):
        argv = ["tally.py", "--scale", str(n % 7 + 1)] + (["--out"] if n % 2 else [])
        stdin = "".join(f"{k}\n" for k in range(n % 40)).encode()
        cases.append(Case(id=f"case-{n:03d}", argv=tuple(argv), stdin=stdin))
    return cases


def bare(repo: Path, cases: list[Case]) -> float:
    """The same commands with subprocess.run, sequentially, in one scratch folder each."""
    start = time.perf_counter()
    for case in cases:
        with tempfile.TemporaryDirectory() as work:
            subprocess.run(
                [sys.executable, str(repo / case.argv[0]), *case.argv[1:]],
                input=case.stdin,
                capture_output=True,
                cwd=work,
                check=False,
            )
    return time.perf_counter() - start


def charpin(repo: Path, pins: list[Pin], jobs: int) -> float:
    with Session(repo, PinsConfig()) as session:
        start = time.perf_counter()
        outcomes = replay(session, pins, jobs)
        elapsed = time.perf_counter() - start
    bad = [o.pin.case.id for o in outcomes if o.classes]
    assert not bad, f"pins drifted in the benchmark: {bad[:5]}"
    return elapsed


def _cram_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def build_prysk(repo: Path, pins: list[Pin], folder: Path) -> None:
    """One .t file per case (prysk gives each file its own temp folder, as charpin does per pin)."""
    folder.mkdir()
    for pin in pins:
        case, golden = pin.case, pin.golden
        assert golden is not None
        stdin = folder / f"{case.id}.stdin"
        stdin.write_bytes(case.stdin)
        argv = " ".join(_cram_quote(a) for a in case.argv[1:])
        # prysk merges the two streams into one; stdout is written first by this CLI only when
        # Python does not buffer it, so the test says so itself instead of relying on the
        # caller's environment (imported pins do not inherit it).
        lines = [f"  $ PYTHONUNBUFFERED=1 python3 {repo / case.argv[0]} {argv} < {stdin} 2>&1"]
        merged = golden.stdout.decode() + golden.stderr.decode()
        lines += [f"  {line}" for line in merged.splitlines()]
        if golden.exit_code:
            lines.append(f"  [{golden.exit_code}]")
        (folder / f"{case.id}.t").write_text("\n".join(lines) + "\n", encoding="utf-8")


def prysk(folder: Path) -> float:
    exe = shutil.which("prysk") or str(Path(sys.executable).with_name("prysk"))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    start = time.perf_counter()
    done = subprocess.run([exe, "-q", str(folder)], capture_output=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, done.stdout.decode()[-2000:]
    return elapsed


def import_cram(repo: Path, folder: Path, jobs: int) -> float:
    """`charpin import cram --dialect prysk` of every .t file: verify, write, replay from disk."""
    (repo / "pins.jsonl").unlink(missing_ok=True)
    files = sorted(folder.glob("*.t"))
    start = time.perf_counter()
    plan = cram_import.plan(repo, PinsConfig(), files, "prysk")
    result = run_import(repo, PinsConfig(), plan, jobs)
    elapsed = time.perf_counter() - start
    assert len(result.imported) == len(files), result.skipped[:3]
    return elapsed


def replay_imported(repo: Path, jobs: int) -> float:
    """Replay the imported pins as `charpin pins check` reads them."""
    pins = load_pins(repo, PinsConfig()).all
    return charpin(repo, pins, jobs)


def _cpu() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


CPU: dict[str, float] = {}


def _timed(label: str, fn: Callable[[], float]) -> float:
    walls, cpus = [], []
    for _ in range(ROUNDS):
        before = _cpu()
        walls.append(fn())
        cpus.append(_cpu() - before)
    CPU[label] = min(cpus)
    print(f"  {label}: {min(walls):.2f}s wall, {min(cpus):.2f}s CPU", file=sys.stderr)
    return min(walls)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pins", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        cases = build_cases(repo, args.pins)
        with Session(repo, PinsConfig()) as session:
            pins = [
                Pin(c, record_case(session, c, check_stability=False).observation) for c in cases
            ]
        # The .t files live in the repository: imported pins must replay from any checkout.
        folder = repo / "t"
        build_prysk(repo, pins, folder)
        count = len(pins)
        t_bare = _timed("bare", lambda: bare(repo, cases))
        t_one = _timed("charpin jobs=1", lambda: charpin(repo, pins, 1))
        t_two = _timed("charpin jobs=2", lambda: charpin(repo, pins, 2))
        t_prysk = _timed("prysk", lambda: prysk(folder))
        t_import = _timed("import", lambda: import_cram(repo, folder, 2))
        t_imp1 = _timed("imported jobs=1", lambda: replay_imported(repo, 1))
        t_imp2 = _timed("imported jobs=2", lambda: replay_imported(repo, 2))
    overhead = (t_one - t_bare) / count * 1000
    cpu_overhead = (CPU["charpin jobs=1"] - CPU["bare"]) / count * 1000
    rows = [
        ("bare subprocess.run, sequential", t_bare, "bare", ""),
        (
            "charpin replay, jobs=1",
            t_one,
            "charpin jobs=1",
            f"overhead {overhead:.1f} ms/pin wall, {cpu_overhead:.1f} ms/pin CPU (target <= 15)",
        ),
        (
            "charpin replay, jobs=2",
            t_two,
            "charpin jobs=2",
            f"speed-up {t_one / t_two:.2f}x (target >= 1.7)",
        ),
        (
            "prysk, same cases as .t files",
            t_prysk,
            "prysk",
            f"charpin jobs=1 is {t_prysk / t_one:.2f}x, jobs=2 is {t_prysk / t_two:.2f}x "
            "prysk's speed (target >= 1)",
        ),
        (
            f"charpin import cram of the {count} .t files (verify, write, replay), jobs=2",
            t_import,
            "import",
            f"{t_prysk / t_import:.2f}x prysk's speed (two runs of each case; target >= 1)",
        ),
        (
            "imported cram pins replayed, jobs=1",
            t_imp1,
            "imported jobs=1",
            f"{t_prysk / t_imp1:.2f}x prysk's speed",
        ),
        (
            "imported cram pins replayed, jobs=2",
            t_imp2,
            "imported jobs=2",
            f"{t_prysk / t_imp2:.2f}x prysk's speed (target >= 1)",
        ),
    ]
    print(
        f"{count} pins, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, best of {ROUNDS}\n"
    )
    print("| variant | wall s | per pin ms | CPU s | note |")
    print("|---|---:|---:|---:|---|")
    for name, seconds, key, note in rows:
        per_pin = seconds / count * 1000
        print(f"| {name} | {seconds:.2f} | {per_pin:.1f} | {CPU[key]:.2f} | {note} |")
    summary = {
        "overhead_ms": round(overhead, 2),
        "cpu_overhead_ms": round(cpu_overhead, 2),
        "speedup": round(t_one / t_two, 2),
        "vs_prysk": round(t_prysk / t_two, 2),
        "import_vs_prysk": round(t_prysk / t_import, 2),
        "imported_replay_vs_prysk": round(t_prysk / t_imp2, 2),
    }
    print(json.dumps(summary), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
