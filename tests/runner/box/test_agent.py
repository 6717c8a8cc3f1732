"""The box agent for real: a subprocess speaking frames, running a real runner on a real repo."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from charpin_runner import seal
from charpin_runner.box import wire
from charpin_runner.errors import EXIT_INTERRUPTED

from tests.conftest import make_repo

RUNNER_ROOT = str(Path(__file__).resolve().parents[3] / "runner")
RUN = "r1"


class Agent:
    """`charpin box serve` in a subprocess, driven frame by frame."""

    def __init__(self, home: Path):
        env = dict(os.environ, PYTHONPATH=RUNNER_ROOT)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "charpin_runner", "box", "serve", "--home", str(home)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert self.proc.stdout is not None
        out = self.proc.stdout
        self.reader = wire.Reader(out.read1)
        hello = self.reply()
        assert hello["ok"] and hello["ready"], hello

    def send(self, header: dict[str, Any], payload: bytes = b"") -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(wire.encode(header, payload))
        self.proc.stdin.flush()

    def reply(self) -> dict[str, Any]:
        frame = self.reader.read()
        assert frame is not None, "the agent ended"
        header, self.payload = frame
        return header

    def call(self, header: dict[str, Any], payload: bytes = b"") -> dict[str, Any]:
        self.send(header, payload)
        return self.reply()

    def end(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=60)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=60)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def start(request: pytest.FixtureRequest) -> Callable[[Path], Agent]:
    """Start agents that are always reaped and their pipes closed after the test."""
    started: list[Agent] = []

    def factory(home: Path) -> Agent:
        agent = Agent(home)
        started.append(agent)
        return agent

    request.addfinalizer(lambda: [agent.close() for agent in started])
    return factory


def _prepare(agent: Agent, repo: Path) -> dict[str, Any]:
    fields = {"op": "prepare", "run_id": RUN, "folder": "box", "in_place": str(repo)}
    return agent.call({**fields, "python": sys.executable}, b"{}")


def _launch(agent: Agent, key: str, **extra: Any) -> None:
    fields = {"op": "launch", "label": "box", "run_id": RUN, "commit": "0" * 40}
    agent.send({**fields, "timeout": 120, "sandbox": "off", "env": [], "key": key, **extra})


def fetched_receipt(agent: Agent) -> tuple[bytes, bytes]:
    """The receipt and its seal, from one fetch."""
    sizes = {p["name"]: p["size"] for p in agent.call({"op": "fetch"})["parts"]}
    receipt = agent.payload[: sizes["receipt"]]
    return receipt, agent.payload[sizes["receipt"] : sizes["receipt"] + sizes["seal"]]


def _run_folder(home: Path) -> Path:
    return home / ".cache" / "charpin" / "runs" / RUN / "box"


def test_unknown_steps_and_steps_out_of_order_are_error_replies(
    tmp_path: Path, start: Callable[[Path], Agent]
) -> None:
    agent = start(tmp_path)
    assert agent.call({"op": "dance"}) == {
        "ok": False,
        "kind": "runner-failed",
        "error": "box protocol: unknown step 'dance'; the coordinator and this runner differ",
        "size": 0,
    }
    assert agent.call({"op": "fetch"})["error"] == "box protocol: a step before prepare"
    assert agent.call({"op": "prepare", "run_id": "../x", "folder": "b"})["error"] == (
        "box protocol: run_id '../x' is not valid"
    )
    assert agent.call({"op": "bye"})["ok"] is True
    assert agent.proc.wait(timeout=30) == 0


def test_a_run_in_place_gives_a_sealed_receipt_and_cleans_up(
    tmp_path: Path, start: Callable[[Path], Agent]
) -> None:
    repo = make_repo(tmp_path / "repo", {"tests/test_a.py": "def test_a():\n    print('hi')\n"})
    home = tmp_path / "home"
    agent = start(home)
    facts = _prepare(agent, repo)
    assert facts["ok"] and facts["has"] is False and facts["python"] == sys.version.split()[0]
    key = seal.new_key()
    _launch(agent, key)
    ended = agent.reply()
    assert (ended["ok"], ended["status"], ended["ended"]) == (True, 0, "exit")
    assert seal.check(key, RUN, *fetched_receipt(agent), "box") == 0
    assert _run_folder(home).is_dir()
    assert agent.call({"op": "clean", "discard": False})["ok"]
    assert not _run_folder(home).exists()
    assert agent.call({"op": "bye"})["ok"] and agent.proc.wait(timeout=30) == 0


HANG = (
    "import os, time\n"
    "def test_hang():\n"
    "    open(os.environ['CHARPIN_PID_FILE'], 'w').write(str(os.getpid()))\n"
    "    time.sleep(600)\n"
)


def _hanging(tmp_path: Path) -> tuple[Path, Path, Path]:
    pid_file = tmp_path / "test.pid"
    repo = make_repo(tmp_path / "repo", {"tests/test_h.py": HANG})
    return repo, tmp_path / "home", pid_file


def _wait_for(path: Path) -> int:
    ends = time.monotonic() + 60
    while time.monotonic() < ends:
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def _gone(pid: int) -> bool:
    ends = time.monotonic() + 15
    while time.monotonic() < ends:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
def test_a_stop_request_stops_the_tests_and_the_receipt_says_interrupted(
    tmp_path: Path, start: Callable[[Path], Agent]
) -> None:
    repo, home, pid_file = _hanging(tmp_path)
    agent = start(home)
    _prepare(agent, repo)
    key = seal.new_key()
    # The box's configured variables reach the tests (the agent's --pass-env), nothing else.
    _launch(agent, key, env=[f"CHARPIN_PID_FILE={pid_file}"])
    test_pid = _wait_for(pid_file)
    agent.send({"op": "stop"})
    ended = agent.reply()
    assert (ended["status"], ended["ended"]) == (None, "stopped")
    assert _gone(test_pid)
    assert seal.check(key, RUN, *fetched_receipt(agent), "box") == EXIT_INTERRUPTED
    agent.call({"op": "bye"})


@pytest.mark.slow
def test_when_the_coordinator_vanishes_the_run_is_stopped_and_removed(
    tmp_path: Path, start: Callable[[Path], Agent]
) -> None:
    repo, home, pid_file = _hanging(tmp_path)
    agent = start(home)
    _prepare(agent, repo)
    _launch(agent, seal.new_key(), env=[f"CHARPIN_PID_FILE={pid_file}"])
    test_pid = _wait_for(pid_file)
    assert agent.end() == 0  # the stream ended: no goodbye, no stop request
    assert _gone(test_pid)
    assert not _run_folder(home).exists()


@pytest.mark.slow
def test_a_runner_that_ignores_sigterm_is_killed_at_the_agent_deadline(
    tmp_path: Path, start: Callable[[Path], Agent]
) -> None:
    stubborn = tmp_path / "stubborn-python"
    stubborn.write_text("#!/bin/sh\ntrap '' TERM\nsleep 600 &\nwait $!\nwait $!\n")
    stubborn.chmod(0o755)
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    agent = start(tmp_path / "home")
    fields = {"op": "prepare", "run_id": RUN, "folder": "box", "in_place": str(repo)}
    assert agent.call({**fields, "python": str(stubborn)}, b"{}")["ok"]
    started = time.monotonic()
    _launch(agent, seal.new_key(), timeout=0.2, grace=0.3)
    ended = agent.reply()
    assert (ended["status"], ended["ended"]) == (None, "deadline")
    assert time.monotonic() - started < 30
    parts = agent.call({"op": "fetch"})["parts"]
    assert parts[0]["problem"] == "missing"
    agent.call({"op": "bye"})
