"""`charpin-remote run --notify CMD`: the hook gets the Markdown report on stdin and CHARPIN_EXIT,
CHARPIN_RUN_DIR; its failure (non-zero, not found, timeout) is one line on stderr and never
changes the run's exit code. Real runs of the `local` box, a real /bin/sh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.remote import notify as notify_module
from charpin_coordinator.remote.notify import notify

from tests.conftest import make_repo

ROOT = Path(__file__).resolve().parents[2]

TESTS = """\
def test_ok():
    pass


def test_broken():
    assert 1 == 2
"""


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return make_repo(tmp_path / "repo", {"tests/test_some.py": TESTS})


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "runner"), str(ROOT / "coordinator")])
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    return env


def _run(repo: Path, runs: Path, run_id: str, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "charpin_coordinator", "run", "--repo", str(repo)]
    argv += ["--hosts", "local", "--out", str(runs), "--run-id", run_id, "-q", *extra]
    return subprocess.run(
        argv, env=_env(runs.parent), capture_output=True, text=True, timeout=300, check=False
    )


def test_the_hook_gets_the_markdown_report_and_the_run(repo: Path, tmp_path: Path) -> None:
    runs, seen = tmp_path / "runs", tmp_path / "seen"
    seen.mkdir()
    hook = (
        f'cat > {seen}/summary.md; printf "%s\\n%s\\n" "$CHARPIN_EXIT" "$CHARPIN_RUN_DIR" '
        f"> {seen}/env.txt; echo hook says hi"
    )
    done = _run(repo, runs, "r1", "--json", "--notify", hook)
    assert done.returncode & 1  # test_broken failed, as planted
    json.loads(done.stdout)  # the hook's own output went to stderr, not into --json
    assert "hook says hi" in done.stderr
    assert "warning" not in done.stderr
    folder = runs / "r1"
    assert (seen / "summary.md").read_bytes() == (folder / "drift.md").read_bytes()
    assert "`tests/test_some.py::test_broken`" in (seen / "summary.md").read_text()
    exit_code, run_dir = (seen / "env.txt").read_text().splitlines()
    assert int(exit_code) == done.returncode
    assert Path(run_dir) == folder.absolute()


def test_a_failing_hook_is_one_line_and_never_the_exit_code(repo: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    plain = _run(repo, runs, "plain")
    assert plain.returncode & 1
    cases = {
        "exit 7": "charpin-remote: warning: --notify command 'exit' exited 7; the exit code is "
        "the run's",
        "no-such-notifier-xyz --flag": "charpin-remote: warning: --notify command "
        "'no-such-notifier-xyz' exited 127 (command not found); the exit code is the run's",
        "kill -9 $$": "charpin-remote: warning: --notify command 'kill' was killed by signal 9; "
        "the exit code is the run's",
    }
    for index, (hook, line) in enumerate(cases.items()):
        done = _run(repo, runs, f"hook-{index}", "--notify", hook)
        assert done.returncode == plain.returncode, done.stderr
        warnings = [ln for ln in done.stderr.splitlines() if ln.startswith("charpin-remote:")]
        assert line in warnings, done.stderr
        assert len([w for w in warnings if "--notify" in w]) == 1
    # An empty command is a usage error, found before anything runs.
    empty = _run(repo, runs, "empty", "--notify", " ")
    assert empty.returncode == 64 and "--notify needs a command" in empty.stderr
    assert not (runs / "empty").exists()  # refused before anything ran


def test_a_hook_past_the_time_limit_is_stopped_with_its_children(
    repo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(notify_module, "NOTIFY_TIMEOUT", 1.0)
    pid_file = tmp_path / "child.pid"
    hook = f"sleep 300 & echo $! > {pid_file}; wait"
    started = time.monotonic()
    code = main(
        ["run", "--repo", str(repo), "--hosts", "local", "--out", str(tmp_path / "runs"),
         "--run-id", "slow", "-q", "--notify", hook]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code & 1  # test_broken failed: the run's own code, whatever the hook did
    assert (
        "charpin-remote: warning: --notify command 'sleep' did not finish within 1 s and was "
        "stopped; the exit code is the run's\n"
    ) in captured.err
    assert time.monotonic() - started < 60
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10  # a signal is delivered soon after kill(), not during it
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the hook's background child outlived it"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_notify_itself(tmp_path: Path) -> None:
    big = b"x" * (4 * 1024 * 1024)  # more than a pipe holds; the hook never reads it
    assert notify("exit 0", big, exit_code=3, run_dir=tmp_path) is None
    out = tmp_path / "got"
    assert notify(f"cat > {out}", b"# report\n", exit_code=3, run_dir=tmp_path) is None
    assert out.read_bytes() == b"# report\n"
    assert (
        notify("exit 3", b"", exit_code=0, run_dir=tmp_path) == "--notify command 'exit' exited 3"
    )
    assert notify("./missing", b"", exit_code=0, run_dir=tmp_path) == (
        "--notify command './missing' exited 127 (command not found)"
    )
    script = tmp_path / "hook.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    line = notify(str(script), b"", exit_code=0, run_dir=tmp_path)
    assert line == f"--notify command {str(script)!r} exited 126 (not executable)"
    # A token in the command line is never repeated: only the first word is.
    hook = "printf %s https://hooks.invalid/T0/SECRET-TOKEN >/dev/null; exit 9"
    line = notify(hook, b"", exit_code=0, run_dir=tmp_path)
    assert line is not None and "SECRET-TOKEN" not in line
    started = time.monotonic()
    line = notify("trap '' TERM; sleep 30", b"", exit_code=0, run_dir=tmp_path, timeout=0.5)
    assert line == "--notify command 'trap' did not finish within 0.5 s and was stopped"
    assert time.monotonic() - started < 10  # SIGKILL after the grace period
