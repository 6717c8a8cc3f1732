"""Attacks by pin targets on `charpin pins`: daemons that outlive the pin, a target that kills its
supervisor or forges its report, one that rewrites the supervisor's code, output floods, a FIFO in
the output folder; and the modes of the files record writes.

Everything runs the real `charpin pins` CLI as a subprocess (it becomes a child subreaper, which
must not happen to the pytest process) on real programs in a real git repository.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import git, make_repo
from tests.waiting import make_gate, waiting

ROOT = Path(__file__).resolve().parents[2]

# Double-forks a daemon (setsid, stdio on /dev/null) when ARM exists. The target waits until the
# daemon has started, writes its pid to PIDFILE and exits; the daemon writes into the repository
# once released from GATE (tests/waiting.py), which only happens if it is still alive after
# charpin returned. KILL_PARENT: the target first SIGKILLs its own parent (charpin's supervisor).
# FORGE: before that, it reopens through /proc every channel its supervisor holds beyond stdio,
# and charpin's end of those and every socket charpin holds, writes a report saying "exited 0,
# everything killed" into those it can open, and counts them into FORGED.
DAEMON = """
import os, select, signal, sys, time
print("hello")
sys.stdout.flush()
if os.path.exists({arm!r}):
    if {forge!r}:
        parent = os.getppid()
        with open(f"/proc/{{parent}}/stat") as handle:
            grandparent = int(handle.read().rsplit(")", 1)[-1].split()[1])
        links = {{}}
        for name in os.listdir(f"/proc/{{parent}}/fd"):
            if int(name) > 2:
                links[f"/proc/{{parent}}/fd/{{name}}"] = os.readlink(f"/proc/{{parent}}/fd/{{name}}")
        for name in os.listdir(f"/proc/{{grandparent}}/fd"):
            path = f"/proc/{{grandparent}}/fd/{{name}}"
            try:
                link = os.readlink(path)
                if link in links.values() or link.startswith("socket:"):
                    links[path] = ""
            except OSError:
                pass
        forged = 0
        for path in links:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue
            os.write(fd, b"exit 0\\nswept\\n")
            os.close(fd)
            forged += 1
        with open({forged!r}, "w") as handle:
            handle.write(str(forged))
    if {kill_parent!r}:
        os.kill(os.getppid(), signal.SIGKILL)
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            gate = os.open({gate!r}, os.O_RDONLY | os.O_NONBLOCK)
            os.write(w, str(os.getpid()).encode())
            os.close(w)
            select.select([gate], [], [])  # released only after charpin returned
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
# be disturbed by the sweep after the hostile pin. When armed, the helper answers only once the
# hostile pin's daemon is dead, so it is certainly alive while that pin is swept.
NEEDS_HELPER = """
import os, time
ready = os.path.join(os.getcwd(), "out", "pong")
os.makedirs("out", exist_ok=True)


def swept():
    try:
        pid = int(open({pidfile!r}).read())
    except (OSError, ValueError):
        return False  # not started yet, or its pid half-written
    try:
        state = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return True
    return state in "ZX"


if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        ends = time.monotonic() + 120
        while os.path.exists({arm!r}) and not swept() and time.monotonic() < ends:
            time.sleep(0.01)  # waits for an event: the other pin's daemon is dead
        with open(ready, "w") as handle:
            handle.write("pong\\n")
        os._exit(0)
    os._exit(0)
os.wait()
ends = time.monotonic() + 150
while not os.path.exists(ready) and time.monotonic() < ends:
    time.sleep(0.01)  # waits for an event: the helper's answer
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

# Appends LINE to the supervisor's source file SUPERVISOR when ARM exists.
PLANT = """
import os
print("hi")
if os.path.exists({arm!r}):
    with open({supervisor!r}, "a") as handle:
        handle.write({line!r})
"""


def _charpin(
    repo: Path, *args: str, umask: int = 0o022, timeout: float = 300, runner: Path = ROOT / "runner"
) -> subprocess.CompletedProcess[str]:
    # Without bubblewrap: these attacks arm from, and report to, files outside the repository,
    # which the sandbox's view hides (rule 2). What is tested here is the supervisor's own
    # containment, which is all there is on a box without bwrap.
    args = (args[0], "--sandbox", "off", *args[1:]) if args[0] in ("record", "check") else args
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = str(runner)
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


def _daemon_repo(tmp_path: Path, kill_parent: bool, forge: bool = False) -> Path:
    tool = DAEMON.format(
        arm=str(tmp_path / "arm"),
        kill_parent=kill_parent,
        forge=forge,
        forged=str(tmp_path / "forged"),
        planted=str(tmp_path / "repo" / "planted.py"),
        pidfile=str(tmp_path / "daemon-pid"),
        gate=str(make_gate(tmp_path / "gate")),
    )
    helper = NEEDS_HELPER.format(arm=str(tmp_path / "arm"), pidfile=str(tmp_path / "daemon-pid"))
    repo = make_repo(tmp_path / "repo", {"tool.py": tool, "helper.py": helper})
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
    assert not waiting(tmp_path / "gate"), "the pin's daemon outlived the run"
    assert not (repo / "planted.py").exists()
    assert _gone(int((tmp_path / "daemon-pid").read_text()))
    # The other pin, running in parallel with a helper of its own, was not disturbed.
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed, 0 drifted" in done.stdout


def test_a_target_that_kills_its_supervisor_still_loses_its_daemon(tmp_path: Path) -> None:
    repo = _daemon_repo(tmp_path, kill_parent=True)
    done = _charpin(repo, "check", "--jobs", "2")
    assert not waiting(tmp_path / "gate"), "the pin's daemon outlived the run"
    assert not (repo / "planted.py").exists()
    assert _gone(int((tmp_path / "daemon-pid").read_text()))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "DRIFT hello [error]" in done.stdout
    assert "supervisor died before the target ended" in done.stdout
    assert "DRIFT helper" not in done.stdout


def test_a_target_cannot_forge_its_supervisors_report(tmp_path: Path) -> None:
    # Were the report a pipe, the target would reopen it through /proc, write "exit 0, swept",
    # kill its supervisor, and the pin would pass with its daemon still alive.
    repo = _daemon_repo(tmp_path, kill_parent=True, forge=True)
    done = _charpin(repo, "check", "--jobs", "2")
    assert not waiting(tmp_path / "gate"), "the pin's daemon outlived the run"
    assert not (repo / "planted.py").exists(), done.stdout + done.stderr
    assert _gone(int((tmp_path / "daemon-pid").read_text()))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "supervisor died before the target ended" in done.stdout
    assert (tmp_path / "forged").read_text() == "0"


def test_a_pin_cannot_rewrite_the_supervisor_of_later_pins(tmp_path: Path) -> None:
    # The runner's files are the user's, so a target can rewrite them; charpin itself has read
    # them already, and so must every supervisor it starts later in the same run.
    runner = tmp_path / "runner"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "runner" / "charpin_runner", runner / "charpin_runner", ignore=ignore)
    supervisor = runner / "charpin_runner" / "pins" / "reaper.py"
    ran = tmp_path / "planted-supervisor-ran"
    tool = PLANT.format(
        arm=str(tmp_path / "arm"), supervisor=str(supervisor), line=f"\nopen({str(ran)!r}, 'w')\n"
    )
    repo = make_repo(tmp_path / "repo", {"a_plants.py": tool, "b_later.py": "print('b')\n"})
    for pin in ("a_plants", "b_later"):
        done = _charpin(repo, "record", "--id", pin, "--", f"{pin}.py", runner=runner)
        assert done.returncode == 0, done.stderr
    (tmp_path / "arm").write_text("")
    done = _charpin(repo, "check", "--jobs", "1", runner=runner)
    assert str(ran) in supervisor.read_text()  # the target did rewrite it
    assert not ran.exists()
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_pin_daemon_is_dead_when_pins_record_returns(tmp_path: Path) -> None:
    (tmp_path / "arm").write_text("")
    tool = DAEMON.format(
        arm=str(tmp_path / "arm"),
        kill_parent=False,
        forge=False,
        forged="",
        planted=str(tmp_path / "repo" / "planted.py"),
        pidfile=str(tmp_path / "daemon-pid"),
        gate=str(make_gate(tmp_path / "gate")),
    )
    repo = make_repo(tmp_path / "repo", {"tool.py": tool})
    done = _charpin(repo, "record", "--id", "hello", "--", "tool.py")
    assert not waiting(tmp_path / "gate"), "the pin's daemon outlived the run"
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
