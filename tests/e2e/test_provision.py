"""Disposable servers: provision and dispose commands around a run, with a real throwaway sshd
(deploy/provision-loopback-sshd) on loopback. Dispose runs exactly once, whatever happens."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from charpin_coordinator.cli import main

from tests.conftest import make_repo

pytestmark = [pytest.mark.ssh, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PROVISION = f"{sys.executable} {ROOT / 'deploy' / 'provision-loopback-sshd'}"
DISPOSE = f"{sys.executable} {ROOT / 'deploy' / 'dispose-loopback-sshd'}"
TEST = "def test_ok():\n    pass\n"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if not Path("/usr/sbin/sshd").exists():
        pytest.skip("needs /usr/sbin/sshd")
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "runner"))


def repo_with(
    tmp_path: Path, provision: str, dispose: str, files: dict[str, str] | None = None
) -> Path:
    count = tmp_path / "disposed"
    toml = (
        "[tool.charpin.hosts.scratch]\n"
        f"python = {json.dumps(sys.executable)}\n"
        f"provision = [{json.dumps(provision)}]\n"
        f"dispose = [{json.dumps(f'echo $CHARPIN_HOST_ID >> {count} && {dispose}')}]\n"
    )
    return make_repo(
        tmp_path / "repo", {"tests/test_a.py": TEST, "pyproject.toml": toml, **(files or {})}
    )


def run(repo: Path, *extra: str) -> tuple[int, dict[str, object]]:
    out = repo.parent / "runs"
    code = main(["run", "--repo", str(repo), "--hosts", "scratch", "--out", str(out),
                 "--run-id", "r1", "--json", "--timeout", "120", *extra])  # fmt: skip
    return code, json.loads((out / "r1" / "drift.json").read_text())


def disposed(tmp_path: Path) -> list[str]:
    path = tmp_path / "disposed"
    return path.read_text().split() if path.exists() else []


def test_a_provisioned_server_runs_the_box_and_is_disposed_once(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, PROVISION, DISPOSE)
    code, report = run(repo)
    assert report["not_evaluated"] == [], report["not_evaluated"]
    assert [b["label"] for b in report["boxes"]] == ["scratch"]  # type: ignore[index]
    [server] = disposed(tmp_path)
    assert not Path(server).exists()  # the folder and its sshd are gone
    receipt = json.loads((repo.parent / "runs" / "r1" / "scratch" / "receipt.json").read_text())
    assert receipt["environment"]["host_key_fingerprint"].startswith("SHA256:")
    assert code & 16 and not code & 4  # one box: vacuous, and nothing left behind


def test_a_failing_provision_is_not_evaluated_and_nothing_is_disposed(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, "echo quota exceeded >&2; exit 3", DISPOSE)
    code, report = run(repo)
    [missing] = report["not_evaluated"]  # type: ignore[misc]
    assert missing["kind"] == "provision-failed" and "quota exceeded" in missing["reason"]
    assert code & 4 and disposed(tmp_path) == []


def test_a_wrong_host_key_is_refused_and_the_server_still_disposed(tmp_path: Path) -> None:
    lie = (
        f'{PROVISION} | {sys.executable} -c "import json,sys; d=json.load(sys.stdin); '
        "d['host_key']='ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOxq1Wb1m5QQHTyTb2pRmBmnyfW1B9z1b1Uq3kWcXnGz'; "
        'print(json.dumps(d))"'
    )
    repo = repo_with(tmp_path, lie, DISPOSE)
    code, report = run(repo)
    [missing] = report["not_evaluated"]  # type: ignore[misc]
    assert missing["kind"] == "host-key", missing
    [server] = disposed(tmp_path)
    assert not Path(server).exists() and code & 4


def test_a_failing_dispose_is_reported_with_the_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = repo_with(tmp_path, PROVISION, "echo provider down >&2; exit 1")
    code, _ = run(repo)
    err = capsys.readouterr().err
    [server] = disposed(tmp_path)
    assert f"DISPOSE FAILED for scratch: server {server!r}" in err and "provider down" in err
    assert code & 4
    subprocess.run(DISPOSE, shell=True, env={**os.environ, "CHARPIN_HOST_ID": server}, check=True)


def test_provision_commands_in_a_commit_but_not_on_this_machine_never_run(tmp_path: Path) -> None:
    repo = repo_with(tmp_path, f"touch {tmp_path / 'ran'}; exit 1", DISPOSE)
    (repo / "pyproject.toml").write_text("")  # this machine's copy has no provision commands
    out = repo.parent / "runs"
    code = main(["run", "--repo", str(repo), "--hosts", "scratch", "--out", str(out)])
    assert code == 64 and not (tmp_path / "ran").exists()


def test_ctrl_c_mid_run_still_disposes_once(tmp_path: Path) -> None:
    hang = "import time\ndef test_hang():\n    time.sleep(600)\n"
    repo = repo_with(tmp_path, PROVISION, DISPOSE, {"tests/test_hang.py": hang})
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'runner'}{os.pathsep}{ROOT / 'coordinator'}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "charpin_coordinator", "run", "--repo", str(repo), "--hosts",
         "scratch", "--out", str(repo.parent / "runs"), "--json", "-q"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        ends = time.monotonic() + 60
        while time.monotonic() < ends and not list(Path("/tmp").glob("charpin-scratch-*/sshd.log")):
            time.sleep(0.1)
        time.sleep(3)  # connected, the tests running
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode & 4
    [server] = disposed(tmp_path)
    assert not Path(server).exists()
