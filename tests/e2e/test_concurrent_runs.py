"""Runs on one shared box at the same time are judged as if each ran alone (#20).

The two failures the issue reports, made to happen every time: the runs are real coordinator
processes, and they overlap exactly where the bug lives because their tests and setup commands
meet at FIFO rendezvous points (tests/concurrency.py), not because of the clock.
"""

from __future__ import annotations

import json
import shlex
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.concurrency import (
    RENDEZVOUS_TEST,
    Coordinator,
    await_arrival,
    await_arrivals,
    coordinator_env,
    findings,
    make_fifos,
    release,
    run_argv,
    summary,
    unblock,
    verify_argv,
    wait_all,
)
from tests.conftest import git, make_repo
from tests.hostile.harness import require_bwrap
from tests.sshd import SshdFactory

pytestmark = pytest.mark.slow

# A box's fresh venv gets this interpreter's pytest through a .pth file: no network needed.
_OUTER = (
    "import site; open(site.getsitepackages()[0] + '/outer.pth', 'w')"
    f".write({site.getsitepackages()[0]!r})"
)
DEPS = f'python -c "{_OUTER}"'
CALC = "def add(a, b):\n    return a + b\n"
CALC_TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
# An agent's refactor that changes nothing a test or a caller sees.
CALC_PATCHED = "def add(a, b):\n    total = a + b\n    return total\n"


def _toml(setup: list[str], prepare: tuple[str, ...] | list[str] = (), hosts: str = "") -> str:
    lines = ["[tool.charpin]", f"setup = {json.dumps(setup)}"]
    if prepare:
        lines.append(f"prepare = {json.dumps(list(prepare))}")
    return "\n".join(lines) + "\n" + hosts


def _patch(repo: Path, rel: str, text: str) -> Path:
    """The diff an agent would hand over for one edit; the working tree is left as it was."""
    original = (repo / rel).read_text()
    (repo / rel).write_text(text)
    diff = subprocess.run(
        ["git", "-C", str(repo), "diff", "--binary"], capture_output=True, check=True
    ).stdout
    (repo / rel).write_text(original)
    path = repo.parent / f"{repo.name}.diff"
    path.write_bytes(diff)
    return path


def _py(code: str) -> str:
    """A setup/prepare line that runs one line of code with the venv's python."""
    return f"python -c {shlex.quote(code)}"


# Without bubblewrap only, for now: the rendezvous FIFOs lie outside the checkouts, which the
# sandbox's allow-list view no longer shows (#17 rule 2), so under bwrap nobody arrives.
@pytest.mark.parametrize("sandbox", ["off"])
def test_a_verify_and_a_run_with_a_new_dependency_set_at_once_on_clean(
    tmp_path: Path, sandbox: str
) -> None:
    """verify A (cached venv) while run B builds and publishes a new venv: A's tests ran while
    B's venv appeared, and A finished while B was about to use it. A must read exactly as when
    it ran alone (no `wrote into .../venvs/...`), and B must be evaluated with its venv."""
    if sandbox == "auto":
        require_bwrap()
    sync = tmp_path / "sync"
    a_sync, b_sync = sync / "a", sync / "b"
    a_arrived, a_go, a_done = make_fifos(sync, "a-arrived", "a-go", "a-done")
    repo_a = make_repo(
        tmp_path / "a",
        {
            "tests/__init__.py": "",
            "calc.py": CALC,
            "tests/test_calc.py": CALC_TEST,
            "tests/test_meet.py": RENDEZVOUS_TEST.format(
                sync=str(a_sync), arrive=str(a_arrived), go=str(a_go)
            ),
            "pyproject.toml": _toml([DEPS]),
        },
    )
    # B's prepare runs right after its new venv is published: it lets A's tests end, then
    # waits until A's coordinator has finished (its cache watch and clean-up included).
    meet = (
        f"import os; os.path.exists({str(b_sync)!r}) and "
        f"(open({str(a_go)!r}, 'w').close(), open({str(a_done)!r}).read())"
    )
    repo_b = make_repo(
        tmp_path / "b",
        {
            "tests/__init__.py": "",
            "tests/test_b.py": "def test_b():\n    pass\n",
            "pyproject.toml": _toml([DEPS, "echo another dependency set"], [_py(meet)]),
        },
    )
    patch = _patch(repo_a, "calc.py", CALC_PATCHED)
    env = coordinator_env(tmp_path / "cache", tmp_path / "state")
    logs, out = tmp_path / "logs", tmp_path / "out"
    extra = ("--sandbox", sandbox)

    def verify_a(run_id: str) -> Coordinator:
        argv = verify_argv(repo_a, "clean", patch, out / "a", run_id, *extra)
        return Coordinator(f"a-{run_id}", argv, out / "a" / run_id / "verify.json")

    def run_b(run_id: str) -> Coordinator:
        argv = run_argv(repo_b, "clean", out / "b", run_id, *extra)
        return Coordinator(f"b-{run_id}", argv, out / "b" / run_id / "drift.json")

    # Alone first: A's venv is then cached, as in the report; B's is not (another key).
    alone_a = verify_a("alone").start(env, logs)
    alone_a.wait()
    assert alone_a.report()["verdict"] == "ACCEPT", findings(alone_a.report())

    a_sync.touch()
    b_sync.touch()
    a = verify_a("together").start(env, logs)
    b: Coordinator | None = None
    try:
        await_arrival(a_arrived)  # A's base run is in its tests: its cache watch has begun
        a_sync.unlink()  # A's patched run does not meet anyone
        b = run_b("together").start(env, logs)
        a.wait()  # A's tests end when B's venv is published (B's prepare opens a-go)
        release(a_done)  # only now B goes on to its tests, with whatever A left of its venv
        b.wait()
    finally:
        for fifo in (a_arrived, a_go, a_done):
            unblock(fifo)
        for one in (a, b):
            if one is not None and one.proc is not None and one.proc.poll() is None:
                one.proc.kill()
    b_sync.unlink()
    assert findings(a.report()) == findings(alone_a.report()), a.output()
    assert summary(a.report()) == summary(alone_a.report())
    report_b = b.report()
    assert report_b["not_evaluated"] == [], findings(report_b)
    assert summary(report_b) == summary(_alone(run_b("alone"), env, logs))


def _alone(one: Coordinator, env: dict[str, str], logs: Path) -> dict[str, object]:
    one.start(env, logs).wait()
    return one.report()


@pytest.mark.ssh
def test_one_verify_and_three_runs_at_once_on_clean_and_an_ssh_box(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    """Four coordinators, four commits of one project (one cache repository per box), two
    dependency sets: every run is in its tests while the others ship, publish and clean up,
    and each must come back as it does alone: green, no finding, no NOT EVALUATED."""
    box = sshd_factory(name="shared", alias="shared")
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(box.ssh_config.read_text())
    hosts_toml = f'[tool.charpin.hosts.shared]\npython = "{sys.executable}"\n'
    sync = tmp_path / "sync"
    origin = make_repo(
        tmp_path / "origin",
        {
            "tests/__init__.py": "",
            "calc.py": CALC,
            "tests/test_calc.py": CALC_TEST,
            "pyproject.toml": _toml([]) + hosts_toml,
        },
    )
    boxes = ("clean", "shared")
    coordinators: list[Coordinator] = []
    arrivals: list[tuple[Path, Path]] = []
    out = tmp_path / "out"
    for n in range(4):
        repo = tmp_path / f"clone{n}"
        git(tmp_path, "clone", "-q", str(origin), str(repo))
        meets = {}
        for label in boxes:
            arrive, go = make_fifos(sync, f"{n}-{label}-arrive", f"{n}-{label}-go")
            arrivals.append((arrive, go))
            meets[label] = (arrive, go)
        # Which box a test runs on, from where its checkout is (the clean box's cache path).
        test = (
            "import os\n"
            "_BOX = 'clean' if 'clean-box' in os.path.abspath(__file__) else 'shared'\n"
            "_MEET = " + repr({k: (str(a), str(g)) for k, (a, g) in meets.items()}) + "\n\n\n"
            "def test_meets_the_others():\n"
            f"    if os.path.exists({str(sync / str(n))!r}):\n"
            "        arrive, go = _MEET[_BOX]\n"
            "        with open(arrive, 'w'):\n            pass\n"
            "        with open(go) as wait:\n            wait.read()\n"
        )
        (repo / "tests" / f"test_meet_{n}.py").write_text(test)
        # Two dependency sets: two of the four build a venv of their own on both boxes.
        setup = [DEPS, f"echo dependency set {n % 2}"] if n >= 2 else []
        (repo / "pyproject.toml").write_text(_toml(setup) + hosts_toml)
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"commit {n}")
        (sync / str(n)).touch()
        if n == 0:
            patch = _patch(repo, "calc.py", CALC_PATCHED)
            # --sandbox off: the rendezvous lies outside the checkout, outside the sandbox's view.
            argv = verify_argv(
                repo, ",".join(boxes), patch, out, "v0", "--sandbox", "off", ssh_config=ssh_config
            )
            coordinators.append(Coordinator("verify0", argv, out / "v0" / "verify.json"))
        else:
            argv = run_argv(
                repo, ",".join(boxes), out, f"r{n}", "--sandbox", "off", ssh_config=ssh_config
            )
            coordinators.append(Coordinator(f"run{n}", argv, out / f"r{n}" / "drift.json"))
    env = coordinator_env(tmp_path / "cache", tmp_path / "state")
    try:
        for one in coordinators:
            one.start(env, tmp_path / "logs")
        # A run that broke before its tests never arrives; the others are let go then.
        missing = await_arrivals(
            [a for a, _ in arrivals],
            lambda: all(c.proc is not None and c.proc.poll() is None for c in coordinators),
        )
        for n in range(4):
            (sync / str(n)).unlink()
        for _, go in arrivals:
            unblock(go)
        wait_all(coordinators)
    finally:
        for arrive, go in arrivals:
            unblock(arrive)
            unblock(go)
        for one in coordinators:
            if one.proc is not None and one.proc.poll() is None:
                one.proc.kill()
    wrong = {}
    for one in coordinators:
        report = one.report()
        bad = findings(report)
        if report.get("verdict", "ACCEPT") != "ACCEPT" or report.get("exit_code", 0) or bad:
            wrong[one.name] = bad or [one.output()]
    assert not wrong, json.dumps(wrong, indent=1)
    assert not missing, missing
    assert not box.session_pids()
    assert not list(box.root.glob(".cache/charpin/runs/*/*")), "a run folder was left"
