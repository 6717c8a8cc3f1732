"""Benchmark: `charpin-remote run` over loopback sshd boxes (warm overhead, incremental, fan-out).

Run: python tests/bench/bench_remote.py   (prints a Markdown table; needs /usr/sbin/sshd and ssh)

* Warm overhead: `charpin-remote run --hosts box` (second run, caches warm) against plain
  `ssh box 'cd <existing clone> && git checkout -q <commit> && python -m pytest -q'` on the same
  generated 1,000-test suite. Target ratio <= 1.15.
* Incremental shipping: bytes sent by the second run after a one-file commit, as a fraction of
  the first (cold) run to a fresh box. Target <= 2%.
* Fan-out: four loopback boxes at once against the slowest of the four run alone. Target <= 1.3x.
Wall times include the coordinator's interpreter start-up; medians of a few runs.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / p) for p in ("runner", "coordinator", ".")]

from tests.conftest import git, make_repo  # noqa: E402
from tests.sshd import SshBox, start_sshd  # noqa: E402

TESTS = 1_000
FILES = 20
REPEAT = 3
ENV = dict(
    os.environ,
    PYTHONPATH=os.pathsep.join(str(ROOT / p) for p in ("runner", "coordinator")),
    GIT_AUTHOR_NAME="bench",
    GIT_AUTHOR_EMAIL="bench@charpin.invalid",
    GIT_COMMITTER_NAME="bench",
    GIT_COMMITTER_EMAIL="bench@charpin.invalid",
)
os.environ.update({k: ENV[k] for k in ENV if k.startswith("GIT_")})


def suite(root: Path, boxes: list[SshBox]) -> Path:
    per = TESTS // FILES
    files = {
        f"tests/test_gen_{f:02d}.py": "".join(
            f"def test_case_{f}_{n}():\n    assert {n} + 1 == {n + 1}\n" for n in range(per)
        )
        for f in range(FILES)
    }
    files["tests/__init__.py"] = ""
    hosts = "".join(f'[tool.charpin.hosts.{b.alias}]\npython = "{sys.executable}"\n' for b in boxes)
    files["pyproject.toml"] = hosts
    return make_repo(root, files)


def config_for(tmp: Path, boxes: list[SshBox]) -> Path:
    path = tmp / f"ssh_config_{len(list(tmp.glob('ssh_config_*')))}"
    path.write_text("".join(b.ssh_config.read_text() for b in boxes))
    return path


def charpin_run(repo: Path, config: Path, hosts: str, run_id: str) -> tuple[float, int]:
    out = repo.parent / "runs"
    argv = [sys.executable, "-m", "charpin_coordinator", "run", "--repo", str(repo),
            "--ssh-config", str(config), "--hosts", hosts, "--out", str(out), "--run-id",
            run_id, "--json", "--jobs", "4"]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(argv, env=ENV, capture_output=True, timeout=900, check=False)
    wall = time.perf_counter() - start
    report = json.loads(done.stdout)
    if report["not_evaluated"]:
        raise SystemExit(f"bench run {run_id} failed: {report['not_evaluated']}")
    return wall, done.returncode


def bytes_sent(repo: Path, run_id: str, folder: str) -> int:
    meta = json.loads((repo.parent / "runs" / run_id / folder / "box.json").read_text())
    return int(meta["bytes_sent"])


def plain_ssh(box: SshBox, clone: Path, commit: str) -> float:
    remote = (
        f"cd {shlex.quote(str(clone))} && git checkout -q {commit} && "
        f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider"
    )
    argv = ["ssh", "-F", str(box.ssh_config), "-o", "BatchMode=yes", box.alias, remote]
    start = time.perf_counter()
    subprocess.run(argv, capture_output=True, timeout=900, check=True)
    return time.perf_counter() - start


def warm_overhead(tmp: Path) -> tuple[float, float]:
    box = start_sshd(tmp / "sshd", name="warm", alias="warm")
    try:
        repo = suite(tmp / "warm-repo", [box])
        config = config_for(tmp, [box])
        commit = git(repo, "rev-parse", "HEAD")
        clone = box.root / "clone"
        subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True, timeout=120)
        charpin_run(repo, config, "warm", "warmup")
        plain_ssh(box, clone, commit)
        ours = statistics.median(
            charpin_run(repo, config, "warm", f"w{i}")[0] for i in range(REPEAT)
        )
        plain = statistics.median(plain_ssh(box, clone, commit) for _ in range(REPEAT))
        return ours, plain
    finally:
        box.stop()


def incremental(tmp: Path) -> tuple[int, int]:
    box = start_sshd(tmp / "sshd", name="inc", alias="inc")
    try:
        repo = suite(tmp / "inc-repo", [box])
        config = config_for(tmp, [box])
        charpin_run(repo, config, "inc", "first")
        path = repo / "tests" / "test_gen_03.py"
        path.write_text(path.read_text() + "def test_added():\n    pass\n")
        git(repo, "commit", "-qam", "one file")
        charpin_run(repo, config, "inc", "second")
        return bytes_sent(repo, "first", "inc"), bytes_sent(repo, "second", "inc")
    finally:
        box.stop()


def fan_out(tmp: Path) -> tuple[float, float]:
    boxes = [start_sshd(tmp / "sshd", name=f"fan{i}", alias=f"fan{i}") for i in range(4)]
    try:
        repo = suite(tmp / "fan-repo", boxes)
        config = config_for(tmp, boxes)
        names = ",".join(b.alias for b in boxes)
        charpin_run(repo, config, names, "fan-warm")  # every box warm, like the single runs
        single = max(charpin_run(repo, config, b.alias, f"one-{b.alias}")[0] for b in boxes)
        together = statistics.median(
            charpin_run(repo, config, names, f"all{i}")[0] for i in range(REPEAT)
        )
        return together, single
    finally:
        for box in boxes:
            box.stop()


def freeze_runner(tmp: Path) -> None:
    """Run a private copy of the runner, so edits in the tree mid-bench cannot change its hash."""
    copy = tmp / "frozen"
    shutil.copytree(
        ROOT / "runner" / "charpin_runner",
        copy / "charpin_runner",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    ENV["PYTHONPATH"] = os.pathsep.join([str(copy), str(ROOT / "coordinator")])


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="charpin-bench-remote-") as name:
        tmp = Path(name)
        freeze_runner(tmp)
        ours, plain = warm_overhead(tmp)
        first, second = incremental(tmp)
        together, single = fan_out(tmp)
    print(
        f"| measure ({TESTS} tests, loopback sshd) | charpin-remote | baseline | ratio | target |"
    )
    print("|---|---|---|---|---|")
    print(f"| warm run vs plain ssh + pytest | {ours:.2f} s | {plain:.2f} s "
          f"| {ours / plain:.2f} | <= 1.15 |")  # fmt: skip
    print(f"| bytes sent, 2nd run after a one-file commit | {second:,} B | {first:,} B (1st run) "
          f"| {second / first:.2%} | <= 2% |")  # fmt: skip
    print(f"| four boxes at once vs slowest single box | {together:.2f} s | {single:.2f} s "
          f"| {together / single:.2f}x | <= 1.3x |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
