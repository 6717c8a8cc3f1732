"""Benchmark: a shared box under a long day of runs (#20). One loopback sshd box, real runs.

Run: python tests/bench/bench_soak.py   (prints a Markdown table; needs /usr/sbin/sshd)

* Soak: 50 `charpin-remote run --hosts box` back to back, each of a new commit (so each ships
  an increment into the box's cache repository), every tenth with another dependency set (a new
  venv of about 25 MB) and a disk cap of 64 MB on the box (`cache_max_mb`). Measured: the size
  of the box's `~/.cache/charpin` after runs 1, 10, 25 and 50 (the disk growth, and whether the
  cap holds), the files under its `locks/` (journals and leases; collected too), and the
  processes of the run left on the box after each run (the box's sshd session processes,
  found by the marker every process of the box carries): must be 0 after every run.
* Throughput: the same 12 runs (3 commits x 4 repositories) done by 1 coordinator one after
  the other, then by 4 coordinators at once (one repository each), on that box, interleaved in
  one session: runs per minute and the ratio (4 at once / 1). On 2 cores the box side (pytest,
  git, the runner) and the coordinators share the CPU, so the ceiling is about 2x.
"""

from __future__ import annotations

import json
import os
import site
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / p) for p in ("runner", "coordinator", ".")]

from tests.conftest import git, make_repo  # noqa: E402
from tests.sshd import SshBox, start_sshd  # noqa: E402

SOAK_RUNS = 50
NEW_DEPS_EVERY = 10
CAP_MB = 64
THROUGHPUT_COMMITS = 3
COORDINATORS = 4
ROUNDS = 2
TIMEOUT = 600
_OUTER = (
    "import site; open(site.getsitepackages()[0] + '/outer.pth', 'w')"
    f".write({site.getsitepackages()[0]!r})"
)
DEPS = f'python -c "{_OUTER}"'
ENV = dict(
    os.environ,
    PYTHONPATH=os.pathsep.join(str(ROOT / p) for p in ("runner", "coordinator")),
    GIT_AUTHOR_NAME="bench",
    GIT_AUTHOR_EMAIL="bench@charpin.invalid",
    GIT_COMMITTER_NAME="bench",
    GIT_COMMITTER_EMAIL="bench@charpin.invalid",
)
os.environ.update({k: ENV[k] for k in ENV if k.startswith("GIT_")})
TESTS = "".join(f"def test_{i}():\n    assert {i} + 1 == {i + 1}\n\n" for i in range(50))


def pyproject(box: SshBox, setup: list[str]) -> str:
    return (
        f"[tool.charpin]\nsetup = {json.dumps(setup)}\n"
        f'[tool.charpin.hosts.{box.alias}]\npython = "{sys.executable}"\n'
        f"cache_max_mb = {CAP_MB}\n"
    )


def repository(root: Path, box: SshBox, name: str) -> Path:
    return make_repo(
        root / name,
        {
            "tests/__init__.py": "",
            "tests/test_many.py": TESTS,
            f"{name}.py": f"NAME = {name!r}\n",  # another root commit: another cache repository
            "pyproject.toml": pyproject(box, []),
        },
    )


def commit(repo: Path, n: int, setup: list[str] | None = None, box: SshBox | None = None) -> None:
    (repo / "notes.txt").write_text(f"change {n}\n")
    if setup is not None and box is not None:
        (repo / "pyproject.toml").write_text(pyproject(box, setup))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"change {n}")


def charpin_run(repo: Path, config: Path, run_id: str) -> float:
    """One run as a subprocess; its wall time. Exits the bench when the box is not evaluated."""
    out = repo.parent / "runs" / repo.name
    argv = [sys.executable, "-m", "charpin_coordinator", "run", "--repo", str(repo),
            "--ssh-config", str(config), "--hosts", "box", "--out", str(out), "--run-id",
            run_id, "--json", "-q"]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(argv, env=ENV, capture_output=True, timeout=TIMEOUT, check=False)
    wall = time.perf_counter() - start
    try:
        report = json.loads(done.stdout)
    except ValueError:
        raise SystemExit(f"run {run_id} printed no report: {done.stderr.decode()[-3000:]}") from None
    if report["not_evaluated"] or report["boxes"][0]["interpretation"] != "ok":
        raise SystemExit(f"run {run_id} was not a clean run: {report['not_evaluated']}")
    return wall


def disk(root: Path) -> int:
    total = 0
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                pass
    return total


def files_under(root: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(root))


def soak(tmp: Path, box: SshBox, config: Path) -> tuple[dict[int, tuple[int, int]], int, float]:
    """{run: (cache bytes, lock files)}, processes left in all, median seconds per run."""
    repo = repository(tmp, box, "soak")
    cache = box.root / ".cache" / "charpin"
    sizes: dict[int, tuple[int, int]] = {}
    left = 0
    walls = []
    for n in range(1, SOAK_RUNS + 1):
        setup = [DEPS, f"echo dependency set {n // NEW_DEPS_EVERY}"]
        commit(repo, n, setup if n % NEW_DEPS_EVERY in (0, 1) else None, box)
        walls.append(charpin_run(repo, config, f"soak-{n}"))
        left += len(box.session_pids())
        if n in (1, 10, 25, 50):
            sizes[n] = (disk(cache), files_under(cache / "locks"))
    return sizes, left, statistics.median(walls)


def throughput(tmp: Path, box: SshBox, config: Path) -> tuple[float, float, int]:
    """(runs per minute by 1 coordinator, by 4 at once, processes left), medians of ROUNDS."""
    repos = [repository(tmp, box, f"tp{k}") for k in range(COORDINATORS)]
    for repo in repos:  # warm: each repository's first ship and the runner placed
        charpin_run(repo, config, "warm")
    single, together, left = [], [], 0
    for rnd in range(ROUNDS):
        start = time.perf_counter()
        for k, repo in enumerate(repos):
            for c in range(THROUGHPUT_COMMITS):
                commit(repo, 100 * rnd + c)
                charpin_run(repo, config, f"one-{rnd}-{k}-{c}")
        single.append(len(repos) * THROUGHPUT_COMMITS * 60 / (time.perf_counter() - start))
        left += len(box.session_pids())

        def sequence(k: int, repo: Path, rnd: int = rnd) -> None:
            for c in range(THROUGHPUT_COMMITS):
                commit(repo, 1000 + 100 * rnd + c)
                charpin_run(repo, config, f"four-{rnd}-{k}-{c}")

        threads = [
            threading.Thread(target=sequence, args=(k, repo)) for k, repo in enumerate(repos)
        ]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        together.append(len(repos) * THROUGHPUT_COMMITS * 60 / (time.perf_counter() - start))
        left += len(box.session_pids())
    return statistics.median(single), statistics.median(together), left


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="charpin-bench-soak-") as name:
        tmp = Path(name)
        box = start_sshd(tmp / "sshd", name="box", alias="box")
        try:
            config = tmp / "ssh_config"
            config.write_text(box.ssh_config.read_text())
            sizes, soak_left, per_run = soak(tmp, box, config)
            one, four, tp_left = throughput(tmp, box, config)
        finally:
            box.stop()
    mb = 1024 * 1024
    print("| measure (one loopback sshd box) | measured | target |")
    print("|---|---|---|")
    growth = ", ".join(f"after run {n}: {size / mb:.1f} MB" for n, (size, _) in sizes.items())
    print(f"| box cache over {SOAK_RUNS} runs (5 dependency sets, cap {CAP_MB} MB) | {growth} "
          f"| under the cap after every run |")  # fmt: skip
    locks = ", ".join(f"{count}" for _, (_, count) in sizes.items())
    print(f"| files under locks/ after runs {', '.join(map(str, sizes))} | {locks} | bounded |")
    print(f"| processes left on the box after each of {SOAK_RUNS} runs (sum) | {soak_left} | 0 |")
    print(f"| median wall per soak run | {per_run:.2f} s | reported |")
    print(f"| throughput, {COORDINATORS} coordinators at once vs 1, runs per minute | "
          f"{four:.1f} vs {one:.1f} = {four / one:.2f}x | > 1x (about 2x on 2 cores) |")  # fmt: skip
    print(f"| processes left after the throughput rounds (sum) | {tp_left} | 0 |")
    over = [n for n, (size, _) in sizes.items() if size > CAP_MB * mb]
    return 1 if soak_left or tp_left or over else 0


if __name__ == "__main__":
    raise SystemExit(main())
