"""Load: four coordinators at once, each running `run` and `verify` several times against `clean`
and two loopback sshd boxes that share one cache with it (#20). Four repositories, two
dependency sets, a disk cap that makes the runs evict each other's venvs. Every result must
equal the result of the same run alone; nothing is left running; the disk ends under the cap.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
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
from tests.conftest import make_repo
from tests.sshd import SshBox, SshdFactory

pytestmark = [pytest.mark.slow, pytest.mark.ssh]

ROOT = Path(__file__).resolve().parents[2]
CAP_MB = 40  # room for one venv (about 25 MB), not two: the runs evict each other's
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


@dataclass(frozen=True)
class Workload:
    """One repository, its dependency set and what its coordinator does, in order."""

    name: str
    setup: tuple[str, ...]
    patch: str  # calc.py as the agent's patch leaves it
    ops: tuple[str, ...]
    failing: bool = False


WORKLOADS = (
    Workload("alpha", (), REFACTOR, ("run", "verify", "run")),
    Workload("beta", (), BREAKS, ("run", "verify", "run"), failing=True),
    Workload("gamma", (DEPS, "echo dependency set A"), REFACTOR, ("verify", "run", "verify")),
    Workload("delta", (DEPS, "echo dependency set B"), REFACTOR, ("run", "verify", "run")),
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
    tmp_path: Path, work: Workload, op: str, run_id: str, repo: Path, patch: Path, config: Path
) -> Coordinator:
    out = tmp_path / "out" / work.name
    hosts = "clean,box1,box2"
    if op == "run":
        argv = run_argv(repo, hosts, out, run_id, ssh_config=config)
        return Coordinator(f"{work.name}-{run_id}", argv, out / run_id / "drift.json")
    argv = verify_argv(repo, hosts, patch, out, run_id, ssh_config=config)
    return Coordinator(f"{work.name}-{run_id}", argv, out / run_id / "verify.json")


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
    import threading

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

    # Alone: each distinct operation of each workload, one at a time.
    alone: dict[tuple[str, str], dict[str, Any]] = {}
    for work in WORKLOADS:
        repo, patch = repos[work.name]
        for op in dict.fromkeys(work.ops):
            one = _coordinator(tmp_path, work, op, f"alone-{op}", repo, patch, config)
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

    # Together: four coordinators, each its workload's operations in order.
    together: dict[str, list[tuple[str, Coordinator]]] = {}
    threads = []
    for work in WORKLOADS:
        repo, patch = repos[work.name]
        steps = [
            (op, _coordinator(tmp_path, work, op, f"together-{k}-{op}", repo, patch, config))
            for k, op in enumerate(work.ops)
        ]
        together[work.name] = steps
        thread = threading.Thread(target=_sequence, args=([c for _, c in steps], env, logs))
        threads.append(thread)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(900)
    wait_all([c for steps in together.values() for _, c in steps], timeout=60)

    wrong = {}
    for work in WORKLOADS:
        for op, one in together[work.name]:
            got, want = summary(one.report()), summary(alone[(work.name, op)])
            if got != want:
                wrong[one.name] = {
                    "together": findings(one.report()),
                    "alone": findings(alone[(work.name, op)]),
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
