"""Benchmark: `charpin-remote verify` on the clean box against two plain `charpin-remote run`s.

Run: python tests/bench/bench_verify.py   (prints a Markdown table)

* verify vs two runs: `verify --patched BRANCH --hosts clean` against `run --hosts clean
  --commit BASE` plus `run --hosts clean --commit BRANCH` on the demo's invoice exporter (pins,
  tests, fixtures, ledger), all warm. Target <= 1.1x.
* the sandbox: the same verify with `--sandbox off` (no bubblewrap, no confinement).
* protecting the caches: the stat snapshot of the paths later runs trust (the interpreter's
  environment, the runner, the box caches), taken before and after every run.
Wall times include each CLI's interpreter start-up; medians of interleaved rounds.
"""

from __future__ import annotations

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
from charpin_runner import sandbox  # noqa: E402

from tests.conftest import git  # noqa: E402

ROUNDS = 3


def cli(*args: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "charpin_coordinator", *args],
        env=env,
        capture_output=True,
        timeout=600,
        check=False,
    )
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1, 2, 3, 16, 18, 19):  # one box alone is "vacuous" (16)
        raise SystemExit(f"{args[0]} exited {done.returncode}: {done.stderr.decode()[-600:]}")
    return wall


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="charpin-bench-verify-") as name:
        tmp = Path(name)
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(str(ROOT / p) for p in ("runner", "coordinator")),
            XDG_CACHE_HOME=str(tmp / "xdg"),
        )
        repo = build_demo_repo(tmp / "invoice-export", stale=False).path
        base = git(repo, "rev-parse", "HEAD")
        code = repo / "export_invoices.py"
        code.write_text(
            code.read_text().replace("lines, skipped, total =", "lines, skipped, total =", 1)
            + "\n# refactored\n"
        )
        git(repo, "checkout", "-q", "-b", "agent")
        git(repo, "commit", "-qam", "agent: a comment")
        git(repo, "checkout", "-q", "main")
        common = ["--repo", str(repo), "--hosts", "clean"]
        counter = iter(range(10_000))

        def verify(*extra: str) -> float:
            return cli(
                "verify",
                *common,
                "--patched",
                "agent",
                "--run-id",
                f"v{next(counter)}",
                *extra,
                env=env,
            )

        def two_runs() -> float:
            first = cli("run", *common, "--commit", base, "--run-id", f"r{next(counter)}", env=env)
            return first + cli(
                "run", *common, "--commit", "agent", "--run-id", f"r{next(counter)}", env=env
            )

        verify()
        two_runs()
        ours, plain, unsandboxed = [], [], []
        for _ in range(ROUNDS):
            ours.append(verify())
            plain.append(two_runs())
            unsandboxed.append(verify("--sandbox", "off"))
        protect = [sys.prefix, str(tmp / "xdg")]
        start = time.perf_counter()
        for _ in range(5):
            sandbox.snapshot(tuple(protect))
        snapshot = (time.perf_counter() - start) / 5
        entries = len(sandbox.snapshot(tuple(protect)))
    v, p, u = (statistics.median(x) for x in (ours, plain, unsandboxed))
    print("| measure (demo repository, clean box, warm) | verify | baseline | ratio | target |")
    print("|---|---|---|---|---|")
    print(
        f"| verify vs two plain runs (base, patched) | {v:.2f} s | {p:.2f} s | {v / p:.2f} | <= 1.1 |"
    )
    print(
        f"| sandbox: verify confined vs `--sandbox off` | {v:.2f} s | {u:.2f} s | +{v - u:.2f} s | reported |"
    )
    print(
        f"| protecting the caches: stat snapshot of {entries:,} entries, before and after each run "
        f"| {2 * snapshot * 1000:.0f} ms per run | - | - | reported |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
