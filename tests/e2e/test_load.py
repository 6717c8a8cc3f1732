"""Load: four coordinators at once, each running `run` and `verify` (two in one order, two in the
other, so that runs and verifies overlap) against `clean` and two loopback sshd boxes that share
one cache with it (#20). Four repositories (two clones of
each of two projects, so that every result has one run alone to equal and the time stays
bounded on 2 cores), two dependency sets, and a disk cap. Every result must equal the result of
the same run alone; no finding comes from another run; nothing is left running; the disk ends
under the cap.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.concurrency import (
    Coordinator,
    coordinator_env,
    findings,
    run_argv,
    summary,
    verify_argv,
    wait_all,
)
from tests.conftest import git, make_repo
from tests.sshd import SshBox, SshdFactory

pytestmark = [pytest.mark.slow, pytest.mark.ssh]

ROOT = Path(__file__).resolve().parents[2]
CAP_MB = 64  # room for both venvs (about 25 MB each), the repositories and the runner
_OUTER = (
    "import site; open(site.getsitepackages()[0] + '/outer.pth', 'w')"
    f".write({site.getsitepackages()[0]!r})"
)
DEPS = f'python -c "{_OUTER}"'
CALC = "def add(a, b):\n    return a + b\n"
CALC_TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
REFACTOR = "def add(a, b):\n    total = a + b\n    return total\n"
BREAKS = "def add(a, b):\n    return a - b\n"
FAILING = "def test_known_bug():\n    assert 1 + 1 == 3\n"
OPS = ("run", "verify")
CLONES = 2  # coordinators per project, each from a clone of its own; the second in reverse


@dataclass(frozen=True)
class Workload:
    """One project and its dependency set."""

    name: str
    setup: tuple[str, ...]
    patch: str  # calc.py as the agent's patch leaves it
    failing: bool = False


WORKLOADS = (
    Workload("alpha", (DEPS, "echo dependency set A"), REFACTOR),
    Workload("beta", (DEPS, "echo dependency set B"), BREAKS, failing=True),
)


def _repo(tmp_path: Path, work: Workload, boxes: list[SshBox]) -> tuple[Path, Path]:
    """(repository, the agent's patch file) for work."""
    hosts = "".join(
        f'[tool.charpin.hosts.{b.alias}]\npython = "{sys.executable}"\ncache_max_mb = {CAP_MB}\n'
        for b in boxes
    )
    hosts += f"[tool.charpin.hosts.clean]\ncache_max_mb = {CAP_MB}\n"
    files = {
        "tests/__init__.py": "",
        "calc.py": CALC,
        "tests/test_calc.py": CALC_TEST,
        f"{work.name}/__init__.py": f"NAME = {work.name!r}\n",  # another root commit each
        "pyproject.toml": f"[tool.charpin]\nsetup = {json.dumps(list(work.setup))}\n" + hosts,
    }
    if work.failing:
        files["tests/test_bug.py"] = FAILING
    repo = make_repo(tmp_path / work.name, files)
    (repo / "calc.py").write_text(work.patch)
    diff = subprocess.run(["git", "-C", str(repo), "diff"], capture_output=True, check=True)
    (repo / "calc.py").write_text(CALC)
    patch = tmp_path / f"{work.name}.diff"
    patch.write_bytes(diff.stdout)
    return repo, patch


def _coordinator(
    tmp_path: Path, name: str, op: str, run_id: str, repo: Path, patch: Path, config: Path
) -> Coordinator:
    out = tmp_path / "out" / name
    hosts = "clean,box1,box2"
    if op == "run":
        argv = run_argv(repo, hosts, out, run_id, ssh_config=config)
        return Coordinator(f"{name}-{run_id}", argv, out / run_id / "drift.json")
    argv = verify_argv(repo, hosts, patch, out, run_id, ssh_config=config)
    return Coordinator(f"{name}-{run_id}", argv, out / run_id / "verify.json")


def _sequence(coordinators: list[Coordinator], env: dict[str, str], logs: Path) -> None:
    """Run one workload's coordinators one after the other, in a thread of its own."""
    for one in coordinators:
        one.start(env, logs).wait(600)


def _wrote_into(folder: Path) -> list[str]:
    """Cache-watch findings in any receipt under folder (a concurrent publish must be none)."""
    found = []
    for receipt in folder.rglob("receipt.json"):
        reasons = json.loads(receipt.read_text())["exit"]["reasons"]
        found += [f"{receipt}: {r}" for r in reasons if "wrote into" in r or "condemned" in r]
    return found


def _disk(root: Path) -> int:
    total = 0
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                pass
    return total


def _working_in(folder: Path) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if entry.name.isdigit() and cwd.startswith(str(folder)):
            found.append(f"{entry.name}: {cwd}")
    return found


def test_four_coordinators_at_once_get_the_results_each_gets_alone(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    shared = cache / "charpin" / "clean-box"  # the clean box's home: both sshd boxes use it too
    shared.mkdir(parents=True)
    boxes = [
        sshd_factory(name=name, alias=name, set_env={"HOME": str(shared)})
        for name in ("box1", "box2")
    ]
    config = tmp_path / "ssh_config"
    config.write_text("".join(b.ssh_config.read_text() for b in boxes))
    env = coordinator_env(cache, tmp_path / "state")
    logs = tmp_path / "logs"
    repos = {w.name: _repo(tmp_path, w, boxes) for w in WORKLOADS}

    # Alone: each operation of each project, one at a time.
    alone: dict[tuple[str, str], dict[str, Any]] = {}
    for work in WORKLOADS:
        repo, patch = repos[work.name]
        for op in dict.fromkeys(OPS):
            one = _coordinator(tmp_path, work.name, op, f"alone-{op}", repo, patch, config)
            one.start(env, logs).wait(600)
            alone[(work.name, op)] = one.report()
            assert not one.report()["not_evaluated"], findings(one.report())
    # Everything charpin cached is freed (over SSH and on clean): the runs below build, fetch
    # and publish it again, all at once.
    gc = subprocess.run(
        [sys.executable, "-m", "charpin_coordinator", "hosts", "gc", "--hosts", "clean,box1",
         "--ssh-config", str(config), "--repo", str(repos["alpha"][0]), "--max-mb", "0"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert gc.returncode == 0, gc.stdout + gc.stderr
    assert list((shared / ".cache" / "charpin" / "venvs").iterdir()) == []

    # Together: four coordinators, two clones of each project, each its operations in order.
    together: list[tuple[str, str, Coordinator]] = []
    threads = []
    for work in WORKLOADS:
        origin, patch = repos[work.name]
        for k in range(CLONES):
            repo = tmp_path / f"{work.name}-clone{k}"
            git(tmp_path, "clone", "-q", str(origin), str(repo))
            name = f"{work.name}{k}"
            ops = OPS if k % 2 == 0 else OPS[::-1]
            steps = [
                _coordinator(tmp_path, name, op, f"together-{n}-{op}", repo, patch, config)
                for n, op in enumerate(ops)
            ]
            together += [(work.name, op, one) for op, one in zip(ops, steps, strict=True)]
            threads.append(threading.Thread(target=_sequence, args=(steps, env, logs)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(900)
    wait_all([one for *_, one in together], timeout=60)

    wrong = {}
    for project, op, one in together:
        if summary(one.report()) != summary(alone[(project, op)]):
            wrong[one.name] = {
                "together": findings(one.report()),
                "alone": findings(alone[(project, op)]),
                "log": one.output()[-1500:],
            }
    assert not wrong, json.dumps(wrong, indent=1)
    for (name, _), report in alone.items():
        assert not report["not_evaluated"], (name, report["not_evaluated"])
    assert _wrote_into(tmp_path / "out") == []
    # Nothing left running, on the boxes or here, and nothing left in the runs folder.
    for box in boxes:
        assert not box.session_pids(), box.session_pids()
    assert _working_in(shared) == [] and _working_in(tmp_path / "out") == []
    root = shared / ".cache" / "charpin"
    assert [p for p in (root / "runs").iterdir()] == []
    assert _disk(root) <= CAP_MB * 1024 * 1024, _disk(root)
