"""Benchmark: `charpin-remote run` over loopback sshd boxes (warm overhead, incremental, fan-out).

Run: python tests/bench/bench_remote.py   (prints a Markdown table; needs /usr/sbin/sshd and ssh)

* Warm overhead, trivial suite: `charpin-remote run --hosts box` (caches warm) against plain
  `ssh box 'cd <existing clone> && git checkout -q <commit> && python -m pytest -q'` on the same
  generated 1,000-trivial-test suite. Target ratio <= 2.0 (the fixed cost of a run dominates).
* Warm overhead, ~20 s suite: the same comparison on 40 tests of about 0.5 s each, a mix of
  pure-Python CPU work, zlib/hashlib work (both calibrated on this machine when the bench
  starts) and file I/O plus sleeping (waiting on something), about 20 s of plain pytest in
  all. Target ratio <= 1.05 (the fixed cost must vanish in a suite that does real work).
* Incremental shipping: bytes sent by the second run after a one-file commit, as a fraction of
  the first (cold) run to a fresh box. Target <= 2%.
* Fan-out: four loopback boxes at once against the slowest of the four run alone, wall time
  (target <= 1.3x), and the coordinator's CPU time (user + sys of the `charpin-remote` process
  and every child it waited for, taken from os.wait4) for the four-box run and for a single-box
  run, so the coordinator's CPU cost per box is visible (total / 4 and the marginal cost of
  boxes 2 to 4). The sshd boxes are children of this bench, not of the coordinator, and are
  only reaped at teardown, so their CPU (the box side: sshd, runner, pytest) is not in that
  figure; a local `ssh` client the coordinator spawns would be.
Wall times include the coordinator's interpreter start-up; medians of a few interleaved runs.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import site
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / p) for p in ("runner", "coordinator", ".")]

from tests.conftest import git, make_repo  # noqa: E402
from tests.sshd import SshBox, start_sshd  # noqa: E402

TESTS = 1_000
FILES = 20
REPEAT = 3
HEAVY_TESTS = 40  # of HEAVY_EACH seconds each: ~20 s of plain pytest
HEAVY_EACH = 0.5
HEAVY_REPEAT = 2
TIMEOUT = 900
ENV = dict(
    os.environ,
    PYTHONPATH=os.pathsep.join(str(ROOT / p) for p in ("runner", "coordinator")),
    GIT_AUTHOR_NAME="bench",
    GIT_AUTHOR_EMAIL="bench@charpin.invalid",
    GIT_COMMITTER_NAME="bench",
    GIT_COMMITTER_EMAIL="bench@charpin.invalid",
)
os.environ.update({k: ENV[k] for k in ENV if k.startswith("GIT_")})


@dataclass(frozen=True)
class Run:
    """One `charpin-remote run`: wall seconds, coordinator CPU seconds (user + sys), exit code."""

    wall: float
    cpu: float
    returncode: int


# --- generated suites -------------------------------------------------------------------------

# The heavy suite's work, as source text: the bench calibrates these very functions (exec'd
# below) and the generated tests carry the same text, so "0.5 s" means 0.5 s on this machine.
WORK = '''\
import hashlib
import zlib


def spin(n):
    """Pure-Python CPU work (holds the GIL, like most test code)."""
    x = 0
    for i in range(n):
        x = (x * 31 + i) % 1000003
    return x


BLOB = bytes(range(256)) * 4096 + hashlib.sha256(b"charpin").digest() * 8192


def squeeze(n):
    """C-library work: compress, decompress and hash a 1.3 MB buffer n times."""
    digest = b""
    for _ in range(n):
        packed = zlib.compress(BLOB, 6)
        digest = hashlib.sha256(zlib.decompress(packed) + digest).digest()
    return digest
'''


def calibrate(fn: Callable[[int], object], probe: int) -> int:
    """Iterations of fn that take HEAVY_EACH seconds here (best of three timings of probe)."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        fn(probe)
        best = min(best, time.perf_counter() - start)
    return max(1, round(probe * HEAVY_EACH / best))


def trivial_files() -> dict[str, str]:
    per = TESTS // FILES
    return {
        f"tests/test_gen_{f:02d}.py": "".join(
            f"def test_case_{f}_{n}():\n    assert {n} + 1 == {n + 1}\n" for n in range(per)
        )
        for f in range(FILES)
    }


def heavy_files() -> dict[str, str]:
    """40 tests of ~0.5 s: 16 pure-Python CPU, 12 zlib + sha256, 12 file I/O + sleep."""
    scope: dict[str, Any] = {}
    exec(compile(WORK, "<bench work>", "exec"), scope)  # our own constant text
    spins = calibrate(scope["spin"], 3_000_000)
    squeezes = calibrate(scope["squeeze"], 20)
    kinds = ["cpu"] * 16 + ["lib"] * 12 + ["io"] * 12
    assert len(kinds) == HEAVY_TESTS
    bodies = {
        "cpu": f"    assert spin({spins}) >= 0\n",
        "lib": f"    assert len(squeeze({squeezes})) == 32\n",
        "io": (
            "    path = tmp_path / 'blob.bin'\n"
            "    for _ in range(5):\n"
            "        path.write_bytes(BLOB)\n"
            "        assert path.read_bytes() == BLOB\n"
            f"        time.sleep({HEAVY_EACH / 5 - 0.005:.3f})\n"
        ),
    }
    files = {"tests/work.py": WORK}
    for f in range(4):
        tests = "".join(
            f"\n\ndef test_{kind}_{f}_{n}({'tmp_path' if kind == 'io' else ''}):\n" + bodies[kind]
            for n, kind in enumerate(kinds[f::4])
        )
        files[f"tests/test_heavy_{f}.py"] = (
            "import time\n\nfrom .work import BLOB, spin, squeeze\n" + tests
        )
    return files


def suite(root: Path, boxes: list[SshBox], files: dict[str, str] | None = None) -> Path:
    files = dict(trivial_files() if files is None else files)
    files["tests/__init__.py"] = ""
    hosts = "".join(f'[tool.charpin.hosts.{b.alias}]\npython = "{sys.executable}"\n' for b in boxes)
    files["pyproject.toml"] = hosts
    return make_repo(root, files)


def config_for(tmp: Path, boxes: list[SshBox]) -> Path:
    path = tmp / f"ssh_config_{len(list(tmp.glob('ssh_config_*')))}"
    path.write_text("".join(b.ssh_config.read_text() for b in boxes))
    return path


# --- runs -------------------------------------------------------------------------------------


def charpin_run(repo: Path, config: Path, hosts: str, run_id: str, *extra: str) -> Run:
    """Run the CLI as a subprocess; wall time and, through os.wait4, its CPU (with children)."""
    out = repo.parent / "runs"
    argv = [sys.executable, "-m", "charpin_coordinator", "run", "--repo", str(repo),
            "--ssh-config", str(config), "--hosts", hosts, "--out", str(out), "--run-id",
            run_id, "--json", "--jobs", "4", *extra]  # fmt: skip
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=ENV, stdin=subprocess.DEVNULL, stdout=stdout,
                                stderr=stderr)  # fmt: skip
        timer = threading.Timer(TIMEOUT, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        stdout.seek(0)
        stderr.seek(0)
        text, err = stdout.read(), stderr.read()
    try:
        report = json.loads(text)
    except ValueError:
        raise SystemExit(
            f"bench run {run_id} (exit {proc.returncode}) printed no JSON report:\n"
            f"{err.decode(errors='replace')[-4000:]}"
        ) from None
    if report["not_evaluated"]:
        raise SystemExit(f"bench run {run_id} failed: {report['not_evaluated']}")
    return Run(wall, usage.ru_utime + usage.ru_stime, proc.returncode)


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
    subprocess.run(argv, capture_output=True, timeout=TIMEOUT, check=True)
    return time.perf_counter() - start


# --- measurements -----------------------------------------------------------------------------


def warm_overhead(
    tmp: Path, name: str, files: dict[str, str] | None, repeat: int, plain_warmup: bool
) -> tuple[float, float]:
    """Median warm charpin wall and median plain ssh + pytest wall, runs interleaved."""
    box = start_sshd(tmp / "sshd", name=name, alias=name)
    try:
        repo = suite(tmp / f"{name}-repo", [box], files)
        config = config_for(tmp, [box])
        commit = git(repo, "rev-parse", "HEAD")
        clone = box.root / "clone"
        subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True, timeout=120)
        charpin_run(repo, config, name, f"{name}-warmup")
        if plain_warmup:
            plain_ssh(box, clone, commit)
        ours: list[float] = []
        plain: list[float] = []
        for i in range(repeat):
            ours.append(charpin_run(repo, config, name, f"{name}-{i}").wall)
            plain.append(plain_ssh(box, clone, commit))
        return statistics.median(ours), statistics.median(plain)
    finally:
        box.stop()


def protections(tmp: Path, repeat: int) -> tuple[float, float, int]:
    """Median warm wall with the default protections (bubblewrap, every box cache watched)
    and with `--sandbox off`, interleaved, on a box whose cache holds three other venvs; and
    how many entries the parent's stat snapshot walks there."""
    box = start_sshd(tmp / "sshd-prot", name="prot", alias="prot")
    try:
        repo = suite(tmp / "prot-repo", [box])
        config = config_for(tmp, [box])
        # A setup (so the box caches a venv; it gets this interpreter's pytest through a .pth
        # file, no network), and three other dependency sets, each with its venv in the box
        # cache, as a box that has verified a few branches would have.
        pyproject = repo / "pyproject.toml"
        site_dir = site.getsitepackages()[0]
        outer = f"import site; open(site.getsitepackages()[0] + '/outer.pth', 'w').write({site_dir!r})"
        pyproject.write_text(
            f"[tool.charpin]\nsetup = [{json.dumps(f'python -c {chr(34)}{outer}{chr(34)}')}]\n"
            + pyproject.read_text()
        )
        git(repo, "commit", "-qam", "setup")
        original = pyproject.read_text()
        for n in range(3):
            pyproject.write_text(original + f"\n# dependency set {n}\n")
            git(repo, "commit", "-qam", f"deps {n}")
            charpin_run(repo, config, "prot", f"prot-deps-{n}")
        pyproject.write_text(original)
        git(repo, "commit", "-qam", "back")
        charpin_run(repo, config, "prot", "prot-warmup")
        charpin_run(repo, config, "prot", "prot-warmup-off", "--sandbox", "off")
        auto: list[float] = []
        off: list[float] = []
        for i in range(repeat):
            auto.append(charpin_run(repo, config, "prot", f"prot-a{i}").wall)
            off.append(charpin_run(repo, config, "prot", f"prot-o{i}", "--sandbox", "off").wall)
        cache = box.root / "home" / ".cache" / "charpin"
        if not cache.is_dir():
            cache = next(box.root.rglob(".cache/charpin"))
        entries = sum(
            len(dirs) + len(files)
            for name in ("venvs", "repos", "runners")
            for _, dirs, files in os.walk(cache / name)
        )
        return statistics.median(auto), statistics.median(off), entries
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


@dataclass(frozen=True)
class FanOut:
    together: float  # median wall, four boxes at once
    single: float  # wall of the slowest box run alone
    cpu_together: float  # median coordinator CPU, four boxes at once
    cpu_single: float  # median coordinator CPU, one box alone


def fan_out(tmp: Path) -> FanOut:
    boxes = [start_sshd(tmp / "sshd", name=f"fan{i}", alias=f"fan{i}") for i in range(4)]
    try:
        repo = suite(tmp / "fan-repo", boxes)
        config = config_for(tmp, boxes)
        names = ",".join(b.alias for b in boxes)
        charpin_run(repo, config, names, "fan-warm")  # every box warm, like the single runs
        singles = [charpin_run(repo, config, b.alias, f"one-{b.alias}") for b in boxes]
        alls = [charpin_run(repo, config, names, f"all{i}") for i in range(REPEAT)]
        return FanOut(
            together=statistics.median(r.wall for r in alls),
            single=max(r.wall for r in singles),
            cpu_together=statistics.median(r.cpu for r in alls),
            cpu_single=statistics.median(r.cpu for r in singles),
        )
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
        ours, plain = warm_overhead(tmp, "warm", None, REPEAT, plain_warmup=True)
        heavy_ours, heavy_plain = warm_overhead(
            tmp, "heavy", heavy_files(), HEAVY_REPEAT, plain_warmup=False
        )
        first, second = incremental(tmp)
        fan = fan_out(tmp)
        guarded, unguarded, entries = protections(tmp, REPEAT)
    per_box = fan.cpu_together / 4
    extra = (fan.cpu_together - fan.cpu_single) / 3  # marginal cost of boxes 2 to 4
    print("| measure (loopback sshd) | charpin-remote | baseline | ratio | target |")
    print("|---|---|---|---|---|")
    print(f"| warm run vs plain ssh + pytest, {TESTS:,} trivial tests | {ours:.2f} s "
          f"| {plain:.2f} s | {ours / plain:.2f} | <= 2.0 |")  # fmt: skip
    print(f"| warm run vs plain ssh + pytest, {HEAVY_TESTS} tests of ~{HEAVY_EACH} s "
          f"(CPU, zlib, I/O + sleep) | {heavy_ours:.2f} s | {heavy_plain:.2f} s "
          f"| {heavy_ours / heavy_plain:.3f} | <= 1.05 |")  # fmt: skip
    print(f"| bytes sent, 2nd run after a one-file commit | {second:,} B | {first:,} B (1st run) "
          f"| {second / first:.2%} | <= 2% |")  # fmt: skip
    print(f"| four boxes at once vs slowest single box, wall | {fan.together:.2f} s "
          f"| {fan.single:.2f} s | {fan.together / fan.single:.2f}x | <= 1.3x |")  # fmt: skip
    print(f"| four boxes at once vs one box, coordinator CPU (user + sys) "
          f"| coordinator CPU {fan.cpu_together:.2f} s ({per_box:.2f} s/box) "
          f"| coordinator CPU {fan.cpu_single:.2f} s (1 box) "
          f"| {fan.cpu_together / fan.cpu_single:.2f}x (+{extra:.2f} s per extra box) "
          "| reported, no target |")  # fmt: skip
    print(f"| protections: default (bubblewrap, pins sandboxed, {entries:,} cache entries "
          f"watched) vs `--sandbox off`, {TESTS:,} trivial tests | {guarded:.2f} s "
          f"| {unguarded:.2f} s | {guarded - unguarded:+.2f} s | reported, no target |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
