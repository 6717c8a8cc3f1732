"""Benchmark: `charpin-remote verify` with its differential evidence (change coverage, the base's
captured calls replayed on both versions, generated inputs) against `verify --no-differential`
(the pins and the tests alone), side by side in one run on the demo's invoice exporter.

Run: python tests/bench/bench_differential.py   (prints a Markdown table)

Two patches to `export_invoices.gross`: the demo's own (act two: the rounding changed, REJECT)
and an honest refactor of the same function (ACCEPT), where the generated inputs spend their
whole budget because nothing differs. The budget knobs: `--generate N` and `--generate-seconds
S` (`[tool.charpin.verify] generate` / `generate_seconds`); `--no-differential` turns the whole
differential off. Target <= 1.3x. Wall times include each CLI's interpreter start-up; medians
of interleaved rounds, all warm.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / p) for p in ("runner", "coordinator", ".")]

from charpin_coordinator.remote.demo import build_demo_repo  # noqa: E402
from charpin_coordinator.remote.demo_cli import demo_patch  # noqa: E402

from tests.conftest import git  # noqa: E402

ROUNDS = 3
GROSS = '    return (amount * (1 + rate)).quantize(Decimal("0.01"), rounding=rounding)\n'
REFACTOR = (
    '    cents = Decimal("0.01")  # invoices are in cents\n'
    "    return (amount * (rate + 1)).quantize(cents, rounding=rounding)\n"
)


def cli(*args: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "charpin_coordinator", *args],
        env=env,
        capture_output=True,
        timeout=900,
        check=False,
    )
    wall = time.perf_counter() - start
    if done.returncode not in (0, 2, 16, 18):
        raise SystemExit(f"{args[0]} exited {done.returncode}: {done.stderr.decode()[-600:]}")
    return wall


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="charpin-bench-differential-") as name:
        tmp = Path(name)
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(str(ROOT / p) for p in ("runner", "coordinator")),
            XDG_CACHE_HOME=str(tmp / "xdg"),
            XDG_STATE_HOME=str(tmp / "state"),
        )
        repo = build_demo_repo(tmp / "invoice-export", stale=False).path
        (tmp / "demo.diff").write_bytes(demo_patch(repo))
        code = repo / "export_invoices.py"
        source = code.read_text()
        assert GROSS in source, "the demo's gross() moved; update the bench"
        code.write_text(source.replace(GROSS, REFACTOR, 1))
        (tmp / "refactor.diff").write_bytes(git(repo, "diff").encode() + b"\n")
        git(repo, "checkout", "-q", "--", "export_invoices.py")
        counter = iter(range(10_000))

        boxed: dict[str, list[float]] = {}

        def verify(patch: str, *extra: str) -> float:
            run_id = f"v{next(counter)}"
            wall = cli(
                "verify",
                *("--repo", str(repo), "--hosts", "clean", "--patch", str(tmp / patch)),
                *("--out", str(tmp / "verify"), "--run-id", run_id, *extra),
                env=env,
            )
            report = json.loads((tmp / "verify" / run_id / "verify.json").read_text())
            # The differential's own wall time on the box (replays and generated inputs).
            boxed.setdefault(patch, []).extend(e["seconds"] for e in report["evidence"])
            return wall

        patches = {
            "the demo's patch (REJECT)": "demo.diff",
            "an honest refactor (ACCEPT)": "refactor.diff",
        }
        times: dict[tuple[str, bool], list[float]] = {}
        for patch in patches.values():  # warm: the venv, the caches
            verify(patch)
            verify(patch, "--no-differential")
        for _ in range(ROUNDS):
            for patch in patches.values():
                times.setdefault((patch, True), []).append(verify(patch))
                times.setdefault((patch, False), []).append(verify(patch, "--no-differential"))
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(
        "| verify on the demo, clean box, warm | with differential | `--no-differential` "
        "| ratio | target | of which the differential on the box |"
    )
    print("|---|---|---|---|---|---|")
    for label, patch in patches.items():
        on = statistics.median(times[(patch, True)])
        off = statistics.median(times[(patch, False)])
        box = statistics.median(boxed.get(patch) or [0.0])
        print(f"| {label} | {on:.2f} s | {off:.2f} s | {on / off:.2f} | <= 1.3 | {box:.2f} s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
