"""Nothing of a run is left running, on the box or here, after any deadline, Ctrl-C or lost
connection (#20 item 3). Real processes on real boxes (clean, loopback sshd); every wait is on
an event: a FIFO whose writer is the process that must end (its end is the FIFO's end), or the
coordinator's own exit."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.remote.hosts import resolve_hosts
from charpin_coordinator.remote.ssh import SshTransport

from tests.conftest import make_repo
from tests.sshd import SshBox, SshdFactory

ROOT = Path(__file__).resolve().parents[2]
# The agent's ready frame, as a python that then ignores its input (and SIGTERM) would say it.
READY = '{"ok": true, "ready": true, "python": "3.11.0", "size": 0}'


def _watch(fifo: Path) -> int:
    """The reading end of fifo, opened before the process that must end opens its writing end
    (`exec 3>FIFO`, first thing): that process's end is then the FIFO's end."""
    os.mkfifo(fifo)
    return os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)


def _gone(reader: int, seconds: float) -> bool:
    """True once every writer of the watched FIFO has ended (it reads to its end)."""
    ends = time.monotonic() + seconds
    while True:
        left = ends - time.monotonic()
        ready, _, _ = select.select([reader], [], [], max(0.0, left))
        if ready and not os.read(reader, 4096):
            return True
        if left <= 0:
            return False


def _python(tmp_path: Path, body: str) -> tuple[Path, int]:
    """A host `python` that is a shell script holding a FIFO open, and the FIFO's reader."""
    fifo = tmp_path / "alive"
    reader = _watch(fifo)
    python = tmp_path / "python3"
    python.write_text(f"#!/bin/sh\nexec 3>{fifo}\n{body}\n")
    python.chmod(0o755)
    return python, reader


HANGS = "exec sleep 3600"
# Answers the bootstrap as the agent would, then ignores its input, SIGTERM and SIGHUP.
IGNORES = f"trap '' TERM HUP\nprintf '%s\\n' '{READY}'\nexec sleep 3600"


def _ssh_repo(tmp_path: Path, box: SshBox, python: Path) -> tuple[Path, Path]:
    toml = f'[tool.charpin.hosts.{box.alias}]\npython = "{python}"\n'
    repo = make_repo(
        tmp_path / "repo", {"tests/test_a.py": "def test_a():\n    pass\n", "pyproject.toml": toml}
    )
    config = tmp_path / "ssh_config"
    config.write_text(box.ssh_config.read_text())
    return repo, config


def _run(repo: Path, hosts: str, *extra: str) -> tuple[int, dict[str, object]]:
    out = repo.parent / "runs"
    argv = ["run", "--repo", str(repo), "--hosts", hosts, "--out", str(out), "--run-id", "r1"]
    code = main([*argv, "--json", "-q", "--timeout", "5", *extra])
    return code, json.loads((out / "r1" / "drift.json").read_text())


@pytest.mark.ssh
@pytest.mark.parametrize("body", [HANGS, IGNORES], ids=["hangs", "ignores-its-input"])
def test_a_box_python_that_hangs_or_ignores_its_input_is_killed_at_the_deadline(
    sshd_factory: SshdFactory, tmp_path: Path, body: str
) -> None:
    box = sshd_factory(name="stuck", alias="stuck")
    python, reader = _python(tmp_path, body)
    repo, config = _ssh_repo(tmp_path, box, python)
    code, report = _run(repo, "stuck", "--ssh-config", str(config))
    [missing] = report["not_evaluated"]  # type: ignore[misc]
    assert missing["kind"] == "timeout", missing
    assert code & 4
    # When the coordinator returns, the box's process is already gone (killed through a
    # second channel), not asleep until the box is torn down.
    assert _gone(reader, 1.0), "the box python still runs after the run returned"
    os.close(reader)
    assert not box.session_pids()


@pytest.mark.parametrize("body", [HANGS, IGNORES], ids=["hangs", "ignores-its-input"])
def test_a_clean_box_python_that_hangs_or_ignores_its_input_is_killed_at_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    python, reader = _python(tmp_path, body)
    toml = f'[tool.charpin.hosts.clean]\npython = "{python}"\n'
    repo = make_repo(
        tmp_path / "repo", {"tests/test_a.py": "def test_a():\n    pass\n", "pyproject.toml": toml}
    )
    _, report = _run(repo, "clean")
    [missing] = report["not_evaluated"]  # type: ignore[misc]
    assert missing["kind"] == "timeout", missing
    assert _gone(reader, 1.0), "the clean box's python still runs after the run returned"
    os.close(reader)


@pytest.mark.ssh
def test_the_box_ends_a_program_by_itself_when_its_connection_is_lost(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    """Nobody left to stop it: the connection is dropped, the program ignores its input and
    SIGHUP. The box's own watchdog (coreutils timeout) ends it at its deadline."""
    box = sshd_factory(name="lost", alias="lost")
    fifo = tmp_path / "alive"
    reader = _watch(fifo)
    [spec] = resolve_hosts(["lost"], ssh_config=box.ssh_config)
    transport = SshTransport(spec)
    transport.connect()
    try:
        transport.open(
            ["/bin/sh", "-c", f"trap '' HUP; exec 3>{fifo}; exec sleep 3600"], deadline=2
        )
        box.kill_sshd()  # the connection is gone; nobody will finish the channel
        transport.close()
        assert _gone(reader, 60.0), "the program outlived its deadline on the box"
    finally:
        os.close(reader)
    assert not box.session_pids()


def test_a_local_program_ends_by_itself_when_its_coordinator_is_gone(tmp_path: Path) -> None:
    """The clean box's agent is a child of the coordinator: killed outright, the coordinator
    closes nothing; the program ignores its input and still ends at its deadline."""
    fifo = tmp_path / "alive"
    reader = _watch(fifo)
    code = (
        "import os, signal, subprocess, sys\n"
        "from pathlib import Path\n"
        "from charpin_coordinator.remote.transport import LocalTransport\n"
        f"box = LocalTransport('clean', Path({str(tmp_path)!r}))\n"
        f"box.open(['/bin/sh', '-c', \"trap '' HUP; exec 3>{fifo}; exec sleep 3600\"], deadline=2)\n"
        "print('started', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    try:
        env = dict(os.environ, PYTHONPATH=f"{ROOT / 'runner'}{os.pathsep}{ROOT / 'coordinator'}")
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, check=False
        )
        assert done.stdout == b"started\n", done.stderr
        assert _gone(reader, 60.0), "the program outlived its coordinator and deadline"
    finally:
        os.close(reader)
