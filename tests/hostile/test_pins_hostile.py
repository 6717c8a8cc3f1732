"""Attacks by pin targets on `charpin pins`: daemons that outlive the pin, a target that kills its
supervisor, output floods, a FIFO in the output folder; and the modes of the files record writes.

Everything runs the real `charpin pins` CLI as a subprocess (it becomes a child subreaper, which
must not happen to the pytest process) on real programs in a real git repository.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import git, make_repo

ROOT = Path(__file__).resolve().parents[2]

# Double-forks a daemon (setsid, stdio on /dev/null) when ARM exists. The target waits until the
# daemon has started, writes its pid to PIDFILE and exits; the daemon writes into the repository
# one second later. KILL_PARENT: the target first SIGKILLs its own parent (charpin's supervisor).
DAEMON = """
import os, signal, sys, time
print("hello")
sys.stdout.flush()
if os.path.exists({arm!r}):
    if {kill_parent!r}:
        os.kill(os.getppid(), signal.SIGKILL)
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.write(w, str(os.getpid()).encode())
            os.close(w)
            time.sleep(1.0)
            with open({planted!r}, "w") as handle:
                handle.write("print('owned')\\n")
            os._exit(0)
        os._exit(0)
    os.close(w)
    pid = os.read(r, 64).decode()
    with open({pidfile!r}, "w") as handle:
        handle.write(pid)
"""

# A well-behaved pin that needs a helper it double-forked while it runs: its supervisor must not
# be disturbed by the sweep after the hostile pin, which ends while this one still waits.
NEEDS_HELPER = """
import os, time
ready = os.path.join(os.getcwd(), "out", "pong")
os.makedirs("out", exist_ok=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        time.sleep(0.8)
        with open(ready, "w") as handle:
            handle.write("pong\\n")
        os._exit(0)
    os._exit(0)
os.wait()
for _ in range(500):
    if os.path.exists(ready):
        break
    time.sleep(0.01)
print("helper answered" if os.path.exists(ready) else "helper was killed")
"""

FLOOD = """
import os, sys
if os.path.exists({arm!r}):
    chunk = b"x" * (1 << 20)
    for _ in range(200):
        sys.stdout.buffer.write(chunk)
else:
    print("small")
"""


def _charpin(
    repo: Path, *args: str, umask: int = 0o022, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(ROOT / "runner")
    return subprocess.run(
        [sys.executable, "-m", "charpin_runner", "pins", args[0], "--repo", str(repo), *args[1:]],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        umask=umask,
    )


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (which cannot write)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return text.rsplit(")", 1)[-1].split()[0] in "ZX"


def _daemon_repo(tmp_path: Path, kill_parent: bool) -> Path:
    tool = DAEMON.format(
        arm=str(tmp_path / "arm"),
        kill_parent=kill_parent,
        planted=str(tmp_path / "repo" / "planted.py"),
        pidfile=str(tmp_path / "daemon-pid"),
    )
    repo = make_repo(tmp_path / "repo", {"tool.py": tool, "helper.py": NEEDS_HELPER})
    recorded = _charpin(repo, "record", "--id", "hello", "--", "tool.py")
    assert recorded.returncode == 0, recorded.stderr
    recorded = _charpin(repo, "record", "--id", "helper", "--", "helper.py")
    assert recorded.returncode == 0, recorded.stderr
    assert "helper answered" in (repo / "pins.jsonl").read_text()
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "pins")
    (tmp_path / "arm").write_text("")
    return repo


def test_a_pin_daemon_is_dead_when_pins_check_returns(tmp_path: Path) -> None:
    repo = _daemon_repo(tmp_path, kill_parent=False)
    done = _charpin(repo, "check", "--jobs", "2")
    time.sleep(2.0)  # past the moment the daemon would have written
    assert not (repo / "planted.py").exists()
    assert _gone(int((tmp_path / "daemon-pid").read_text()))
    # The other pin, running in parallel with a helper of its own, was not disturbed.
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed, 0 drifted" in done.stdout


def test_a_target_that_kills_its_supervisor_still_loses_its_daemon(tmp_path: Path) -> None:
    repo = _daemon_repo(tmp_path, kill_parent=True)
    done = _charpin(repo, "check", "--jobs", "2")
    time.sleep(2.0)
    assert not (repo / "planted.py").exists()
    assert _gone(int((tmp_path / "daemon-pid").read_text()))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "DRIFT hello [error]" in done.stdout
    assert "supervisor died before the target ended" in done.stdout
    assert "DRIFT helper" not in done.stdout


def test_a_pin_daemon_is_dead_when_pins_record_returns(tmp_path: Path) -> None:
    (tmp_path / "arm").write_text("")
    tool = DAEMON.format(
        arm=str(tmp_path / "arm"),
        kill_parent=False,
        planted=str(tmp_path / "repo" / "planted.py"),
        pidfile=str(tmp_path / "daemon-pid"),
    )
    repo = make_repo(tmp_path / "repo", {"tool.py": tool})
    done = _charpin(repo, "record", "--id", "hello", "--", "tool.py")
    time.sleep(2.0)
    assert not (repo / "planted.py").exists()
    assert _gone(int((tmp_path / "daemon-pid").read_text()))
    assert done.returncode == 0, done.stderr


def test_a_pin_flooding_stdout_fails_with_output_limit(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"flood.py": FLOOD.format(arm=str(tmp_path / "arm"))})
    assert _charpin(repo, "record", "--id", "flood", "--", "flood.py").returncode == 0
    (tmp_path / "arm").write_text("")
    done = _charpin(repo, "check")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "DRIFT flood [output-limit]" in done.stdout
    assert "stdout went over the 67108864-byte limit" in done.stdout
    result = json.loads((repo / ".charpin/pins-actual/flood/result.json").read_text())
    assert result["classes"] == ["output-limit"]
    assert "sha256 of them: " in result["output_limit"]
    assert (repo / ".charpin/pins-actual/flood/stdout").stat().st_size == 64 * 1024 * 1024
    # Recording such a pin is refused with the limit named.
    refused = _charpin(repo, "record", "--update", "flood")
    assert refused.returncode == 2
    assert "stdout went over the 67108864-byte limit" in refused.stderr
    assert "limited to 64 MiB each" in refused.stderr


def test_output_files_over_the_limit_fail_without_being_read_whole(tmp_path: Path) -> None:
    # A sparse 100 GiB file costs nothing to make; reading it all would take minutes.
    tool = (
        "import os\nos.makedirs('out', exist_ok=True)\n"
        "with open('out/big', 'wb') as f:\n    f.truncate(100 * 1024 ** 3)\n"
    )
    repo = make_repo(tmp_path / "repo", {"sparse.py": tool})
    done = _charpin(repo, "record", "--id", "sparse", "--", "sparse.py")
    assert done.returncode == 2
    assert "the output files went over the 67108864-byte limit at big" in done.stderr
    assert not (repo / "pins.jsonl").exists()


def test_a_fifo_in_the_output_folder_is_recorded_not_opened(tmp_path: Path) -> None:
    tool = "import os\nos.makedirs('out', exist_ok=True)\nos.mkfifo('out/pipe')\n"
    repo = make_repo(tmp_path / "repo", {"fifo.py": tool})
    done = _charpin(repo, "record", "--id", "fifo", "--", "fifo.py", timeout=60)
    assert done.returncode == 0, done.stderr
    assert _charpin(repo, "check", timeout=60).returncode == 0


def test_record_writes_repository_files_with_the_users_umask(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {"app.py": "print('hi')\n", "cases/folder-pin/target.txt": "app.py\n"},
    )
    done = _charpin(repo, "record", "--id", "new-pin", "--", "app.py", umask=0o022)
    assert done.returncode == 0, done.stderr
    assert (repo / "pins.jsonl").stat().st_mode & 0o777 == 0o644
    assert (repo / "goldens" / "folder-pin.json").stat().st_mode & 0o777 == 0o644
    # Another umask gives other modes; an existing file keeps the mode it has.
    os.chmod(repo / "pins.jsonl", 0o664)
    (repo / "goldens" / "folder-pin.json").unlink()
    done = _charpin(repo, "record", "--update", umask=0o027)
    assert done.returncode == 0, done.stderr
    assert (repo / "pins.jsonl").stat().st_mode & 0o777 == 0o664
    assert (repo / "goldens" / "folder-pin.json").stat().st_mode & 0o777 == 0o640
