"""Hostile test suites: each trick a test can play shows up in the receipt the parent writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git, make_repo
from tests.runner.test_receipt_cmd import charpin, charpin_env, only_receipt
from tests.waiting import AWAIT_GATE, OPEN_GATE, make_gate, waiting

FIXTURE = "tests/fixtures/rates.json"
ORIGINAL = '{"vat": "0.20"}\n'


# Without bubblewrap: what these attacks reach (a gate or marker outside the repository, the
# repository's .git) the sandbox's view hides or makes read-only, so under it they fail before
# they start. What they test is the parent's own defence, all there is on a box without bwrap.
BARE = ("--sandbox", "off")


def hostile_repo(tmp_path: Path, body: str) -> Path:
    """A committed repository with one fixture and one test module with body."""
    return make_repo(
        tmp_path / "repo",
        {
            FIXTURE: ORIGINAL,
            "tests/test_hostile.py": "import os, pathlib, subprocess, sys, time\n" + body,
        },
    )


def live_members(pgid: int) -> list[int]:
    """Pids of non-zombie processes in process group pgid."""
    return [pid for pid, group, _ in _processes() if group == pgid]


def live_in(folder: Path) -> list[int]:
    """Pids of non-zombie processes whose working directory is inside folder."""
    root = os.path.realpath(folder)
    return [pid for pid, _, cwd in _processes() if cwd == root or cwd.startswith(root + os.sep)]


def _processes() -> list[tuple[int, int, str]]:
    """(pid, process group, cwd) of every visible non-zombie process."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                cwd = os.readlink(entry / "cwd")
            except (OSError, IndexError):
                continue
            if fields[0] not in ("Z", "X"):
                found.append((int(entry.name), int(fields[2]), cwd))
    return found


def test_a_test_that_mutates_a_fixture(tmp_path: Path) -> None:
    repo = hostile_repo(
        tmp_path, f"def test_edit():\n    pathlib.Path({FIXTURE!r}).write_text('edited')\n"
    )
    result = charpin(repo)
    assert result.returncode == 0, result.stderr
    fixtures = only_receipt(repo)["fixtures"]
    assert fixtures["changed"] == [FIXTURE]
    assert f"1 changed ({FIXTURE})" in result.stdout
    assert only_receipt(repo)["tree"]["written"] == [FIXTURE]


def test_a_test_that_swaps_a_fixture_for_an_escaping_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("not a fixture")
    repo = hostile_repo(
        tmp_path,
        "def test_swap():\n"
        f"    p = pathlib.Path({FIXTURE!r})\n"
        "    p.unlink()\n"
        f"    p.symlink_to({str(outside)!r})\n",
    )
    charpin(repo)
    fixtures = only_receipt(repo)["fixtures"]
    assert fixtures["type_changed"] == [FIXTURE]
    assert fixtures["escaping_symlinks"] == [FIXTURE]
    after = {f["path"]: f for f in fixtures["after"]}
    assert after[FIXTURE]["kind"] == "symlink" and after[FIXTURE]["sha256"] is None


def test_a_background_process_cannot_edit_a_fixture_after_the_session(tmp_path: Path) -> None:
    gate = make_gate(tmp_path / "gate")
    # The late writer holds the gate, says so on its stdout, and edits the fixture only once
    # released: if charpin left it alive, it would still wait at the gate after charpin returns.
    late = (
        OPEN_GATE.format(gate=str(gate))
        + "print('waiting', flush=True)\n"
        + AWAIT_GATE
        + f"open({FIXTURE!r}, 'w').write('x')\n"
    )
    repo = hostile_repo(
        tmp_path,
        "def test_spawn():\n"
        f"    late = subprocess.Popen([sys.executable, '-c', {late!r}], stdout=subprocess.PIPE)\n"
        "    assert late.stdout.readline() == b'waiting\\n'\n",
    )
    result = charpin(repo, *BARE)
    assert result.returncode == 0, result.stderr
    assert only_receipt(repo)["fixtures"]["changed"] == []
    assert live_in(repo) == []
    assert not waiting(gate), "the late writer outlived the session"
    assert (repo / FIXTURE).read_text() == ORIGINAL


def test_a_setsid_daemon_is_adopted_and_killed_too(tmp_path: Path) -> None:
    marker = tmp_path / "daemon-pid"
    gate = make_gate(tmp_path / "gate")
    daemon = (
        "import os, sys\n"
        "if os.fork(): sys.exit(0)\n"
        "os.setsid()\n"
        "if os.fork(): sys.exit(0)\n"
        + OPEN_GATE.format(gate=str(gate))
        + f"open({str(marker) + '.tmp'!r}, 'w').write(str(os.getpid()))\n"
        f"os.rename({str(marker) + '.tmp'!r}, {str(marker)!r})\n"
        + AWAIT_GATE
        + f"open({FIXTURE!r}, 'w').write('x')\n"
    )
    repo = hostile_repo(
        tmp_path,
        "def test_daemon():\n"
        f"    subprocess.run([sys.executable, '-c', {daemon!r}], check=True)\n"
        f"    while not os.path.exists({str(marker)!r}):\n"
        "        time.sleep(0.01)\n",
    )
    # The pid is the host's only without a PID namespace; under bwrap the namespace kills it.
    result = charpin(repo, "--sandbox", "off")
    assert result.returncode == 0, result.stderr
    assert not waiting(gate), "the daemon outlived the session"
    assert (repo / FIXTURE).read_text() == ORIGINAL
    assert not Path(f"/proc/{int(marker.read_text())}").exists()


def test_a_git_hook_planted_by_a_test_never_runs_in_the_parent(tmp_path: Path) -> None:
    marker = tmp_path / "hook-ran"
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch '{marker}'\necho x > '{FIXTURE}'\ncat\n")
    hook.chmod(0o755)
    repo = hostile_repo(
        tmp_path,
        "def test_plant():\n"
        f"    subprocess.run(['git', 'config', 'core.fsmonitor', {str(hook)!r}], check=True)\n"
        "    subprocess.run(['git', 'config', 'filter.evil.clean', "
        f"{str(hook)!r}], check=True)\n"
        "    pathlib.Path('.gitattributes').write_text('* filter=evil\\n')\n",
    )
    result = charpin(repo, *BARE)
    # The planted config is evidence: the run is incomplete, and nothing of it ran.
    assert result.returncode == 2, result.stderr
    assert not marker.exists()
    assert (repo / FIXTURE).read_text() == ORIGINAL
    assert only_receipt(repo)["fixtures"]["changed"] == []
    assert only_receipt(repo)["tree"]["written"] == [".gitattributes"]


def test_a_test_that_rewrites_git_head(tmp_path: Path) -> None:
    repo = hostile_repo(tmp_path, "def test_ok():\n    pass\n")
    first = git(repo, "rev-parse", "HEAD")
    (repo / "second.txt").write_text("2\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "second")
    second = git(repo, "rev-parse", "HEAD")
    (repo / "tests" / "test_head.py").write_text(
        f"def test_head():\n    open('.git/HEAD', 'w').write({first + chr(10)!r})\n"
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "third")
    third = git(repo, "rev-parse", "HEAD")
    charpin(repo, *BARE)
    identity = only_receipt(repo)["identity"]
    assert (identity["head_before"], identity["head_after"]) == (third, first)
    assert identity["tree_before"] != identity["tree_after"]
    assert second != first
    assert "second.txt" in only_receipt(repo)["tree"]["dirty_after"]


def test_os_exit_zero_mid_run_is_incomplete(tmp_path: Path) -> None:
    repo = hostile_repo(
        tmp_path,
        "def test_a():\n    pass\ndef test_b():\n    os._exit(0)\ndef test_c():\n    pass\n",
    )
    result = charpin(repo)
    assert result.returncode == 2, result.stderr
    exit_block = only_receipt(repo)["exit"]
    assert exit_block["status"] == 0
    assert exit_block["interpretation"] == "incomplete"
    assert exit_block["pytest_status"] is None
    assert any("never finished" in reason for reason in exit_block["reasons"])
    assert "0 → incomplete" in result.stdout
    assert "never finished" in result.stderr


def test_timeout_kills_the_whole_group_quickly(tmp_path: Path) -> None:
    repo = hostile_repo(
        tmp_path,
        "def test_slow():\n"
        "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "    time.sleep(60)\n",
    )
    began = time.monotonic()
    result = charpin(repo, "--timeout", "2", timeout=90)
    elapsed = time.monotonic() - began
    assert result.returncode == 4, result.stderr
    assert elapsed < 45  # far below the 60 s sleep: the deadline, not the test, ended the run
    exit_block = only_receipt(repo)["exit"]
    assert exit_block["interpretation"] == "timed-out"
    assert "2 s deadline" in exit_block["reasons"][0]
    # Every process of the run had its cwd in the repository; none may be left.
    assert live_in(repo) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_charpin_still_writes_an_interrupted_receipt(
    tmp_path: Path, sig: signal.Signals
) -> None:
    started = tmp_path / "started"
    repo = hostile_repo(
        tmp_path,
        f"def test_wait():\n    pathlib.Path({str(started)!r}).write_text(str(os.getpgid(0)))\n"
        "    time.sleep(60)\n",
    )
    out = tmp_path / "receipt.json"
    proc = subprocess.Popen(
        # --sandbox off: the group id the test writes is the host's only outside a PID namespace.
        [sys.executable, "-m", "charpin_runner", "receipt", "-o", str(out), "--sandbox", "off"],
        cwd=repo,
        env=charpin_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if started.exists() and started.read_text():
                break
            time.sleep(0.05)
        assert started.read_text()
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert live_members(int(started.read_text())) == []
    receipt: dict[str, Any] = json.loads(out.read_text())
    assert receipt["exit"]["interpretation"] == "interrupted"
    assert "interrupted" in receipt["exit"]["reasons"][0]
    assert os.path.exists(out)


def test_a_test_that_breaks_the_repository_still_gets_a_receipt(tmp_path: Path) -> None:
    repo = hostile_repo(tmp_path, "def test_break():\n    open('.git/HEAD', 'w').write('junk')\n")
    result = charpin(repo, *BARE)
    assert result.returncode == 2, result.stderr
    receipt = only_receipt(repo)
    assert receipt["identity"]["head_after"] == "unresolved"
    assert receipt["tree"]["dirty_digest_after"] == "unresolved"
    assert receipt["exit"]["interpretation"] == "incomplete"
    assert any(r.startswith("after the run, git") for r in receipt["exit"]["reasons"])


def test_a_conftest_that_drops_items_silently_makes_the_run_incomplete(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {
            "tests/conftest.py": (
                "def pytest_collection_modifyitems(config, items):\n    items[:] = items[:1]\n"
            ),
            "tests/test_many.py": "def test_a():\n    pass\ndef test_b():\n    pass\n"
            "def test_c():\n    pass\n",
        },
    )
    result = charpin(repo, "--no-pins")
    assert result.returncode == 2, result.stderr
    receipt = only_receipt(repo)
    assert receipt["collection"]["dropped"] == [
        "tests/test_many.py::test_b",
        "tests/test_many.py::test_c",
    ]
    assert receipt["exit"]["interpretation"] == "incomplete"
    reason = (
        "2 collected test(s) were removed during collection without being reported as "
        "deselected; report removed items through config.hook.pytest_deselected(items=...) "
        "or deselect them with -k/-m/--deselect"
    )
    assert [r for r in receipt["exit"]["reasons"] if "removed during collection" in r] == [reason]
    assert f"charpin: {reason}" in result.stderr.splitlines()


def test_a_conftest_that_reports_what_it_removes_stays_ok(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {
            "tests/conftest.py": (
                "def pytest_collection_modifyitems(config, items):\n"
                "    config.hook.pytest_deselected(items=items[1:])\n"
                "    items[:] = items[:1]\n"
            ),
            "tests/test_many.py": "def test_a():\n    pass\ndef test_b():\n    pass\n",
        },
    )
    result = charpin(repo, "--no-pins")
    assert result.returncode == 0, result.stderr
    assert only_receipt(repo)["collection"]["dropped"] == []


HOSTILE_NAMES = {
    "backslash": b"back\\slash.txt",
    "newline": b"new\nline.txt",
    "quote": b'it\'s "quoted".txt',
    "shell": b"$HOME;rm -rf x.txt",
}


def test_hostile_file_names_give_a_receipt_the_coordinator_accepts(tmp_path: Path) -> None:
    from charpin_coordinator.receipts import read_receipt_file

    repo = hostile_repo(tmp_path, "def test_ok():\n    pass\n")
    top = os.fsencode(repo)
    for raw in HOSTILE_NAMES.values():
        with open(os.path.join(top, raw), "wb") as handle:  # untracked, dirty
            handle.write(b"x")
    fixtures = os.path.join(top, b"tests", b"fixtures")
    for raw in (b"bad\xff", *HOSTILE_NAMES.values()):
        with open(os.path.join(fixtures, raw), "wb") as handle:
            handle.write(b"y")
    outside = tmp_path / "outside.txt"
    outside.write_text("not a fixture")
    os.symlink(os.fsencode(outside), os.path.join(fixtures, b"out\xfe"))
    out = tmp_path / "receipt.json"
    result = charpin(repo, "-o", str(out), "--no-pins")
    assert result.returncode == 0, result.stderr
    raw_receipt = out.read_bytes()
    data = json.loads(raw_receipt.decode("utf-8"))  # strict UTF-8: no lone surrogates
    # One escape everywhere: an undecodable byte becomes a backslash escape, like \xff.
    shown = {name: raw.decode("utf-8") for name, raw in HOSTILE_NAMES.items()}
    assert sorted(data["tree"]["dirty_before"]) == sorted(
        [*shown.values(), "tests/fixtures/bad\\xff", "tests/fixtures/out\\xfe"]
        + [f"tests/fixtures/{s}" for s in shown.values()]
    )
    assert data["tree"]["written"] == []
    paths = {f["path"] for f in data["fixtures"]["after"]}
    assert "tests/fixtures/bad\\xff" in paths
    assert {f"tests/fixtures/{s}" for s in shown.values()} <= paths
    assert data["fixtures"]["escaping_symlinks"] == ["tests/fixtures/out\\xfe"]
    receipt = read_receipt_file(out)
    assert "back\\slash.txt" in receipt.tree.dirty_before
    assert "tests/fixtures/bad\\xff" in {f.path for f in receipt.fixtures.after}


def test_hostile_names_written_by_a_test_are_escaped_the_same_way(tmp_path: Path) -> None:
    from charpin_coordinator.receipts import read_receipt_file

    body = (
        "def test_write():\n"
        "    for raw in (b'tests/fixtures/bad\\xff', b'tests/fixtures/back\\\\slash',"
        " b'new\\nline'):\n"
        "        open(raw, 'wb').write(b'z')\n"
    )
    repo = hostile_repo(tmp_path, body)
    out = tmp_path / "receipt.json"
    result = charpin(repo, "-o", str(out), "--no-pins")
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_bytes().decode("utf-8"))
    expected = ["new\nline", "tests/fixtures/back\\slash", "tests/fixtures/bad\\xff"]
    assert data["tree"]["written"] == expected
    assert data["fixtures"]["added"] == expected[1:]
    read_receipt_file(out)


def test_a_test_id_with_an_undecodable_byte_is_escaped_everywhere(tmp_path: Path) -> None:
    from charpin_coordinator.receipts import read_receipt_file

    repo = hostile_repo(tmp_path, "def test_ok():\n    pass\n")
    folder = os.path.join(os.fsencode(repo), b"tests", b"bad\xff")
    os.mkdir(folder)
    with open(os.path.join(folder, b"test_x.py"), "wb") as handle:
        handle.write(b"def test_a():\n    pass\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "odd folder")
    out = tmp_path / "receipt.json"
    result = subprocess.run(
        [sys.executable, "-m", "charpin_runner", "receipt", "-o", str(out), "--no-pins"],
        cwd=repo,
        env=charpin_env(),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_bytes().decode("utf-8"))
    odd = "tests/bad\\xff/test_x.py::test_a"
    assert odd in data["collection"]["executed"] and data["outcomes"][odd] == "passed"
    assert odd in read_receipt_file(out).outcomes
