"""Disposable servers: provision and dispose commands around a run, with a real throwaway sshd
(deploy/provision-loopback-sshd) on loopback. Dispose runs exactly once, whatever happens."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from charpin_coordinator.cli import main
from charpin_coordinator.config import load_config
from charpin_coordinator.remote import snapshot
from charpin_coordinator.remote.boxrun import BoxOutcome, BoxTarget, RunPlan, run_box
from charpin_coordinator.remote.bundle import runner_bundle
from charpin_coordinator.remote.errors import BoxError
from charpin_coordinator.remote.hosts import HostSpec, decode_host_extras, resolve_hosts
from charpin_coordinator.remote.provision import Disposals, connector, parse_made, printed_id
from charpin_runner.errors import ConfigError, UsageError

from tests.concurrency import await_arrival, make_fifos, release
from tests.conftest import make_repo
from tests.e2e.conftest import _require_sshd

pytestmark = [pytest.mark.ssh, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PROVISION = f"{sys.executable} {ROOT / 'deploy' / 'provision-loopback-sshd'}"
DISPOSE = f"{sys.executable} {ROOT / 'deploy' / 'dispose-loopback-sshd'}"
TEST = "def test_ok():\n    pass\n"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _require_sshd()  # fails instead of skipping under CHARPIN_REQUIRE_SSH=1 (CI)
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


def test_provision_commands_only_in_the_working_tree_never_run(tmp_path: Path) -> None:
    """A test on `local` can rewrite the working tree's pyproject.toml: that alone must not make
    the next run execute commands on this machine."""
    repo = make_repo(tmp_path / "repo", {"tests/test_a.py": TEST, "pyproject.toml": ""})
    marker = tmp_path / "ran"
    (repo / "pyproject.toml").write_text(
        "[tool.charpin.hosts.scratch]\n"
        f"provision = [{json.dumps(f'touch {marker}')}]\ndispose = ['true']\n"
    )
    out = repo.parent / "runs"
    code = main(["run", "--repo", str(repo), "--hosts", "scratch", "--out", str(out)])
    assert code == 64 and not marker.exists()


def test_ctrl_c_mid_run_still_disposes_once(tmp_path: Path) -> None:
    [started] = make_fifos(tmp_path, "started")
    hang = (
        f"import time\ndef test_hang():\n    open({str(started)!r}, 'w').close()\n"
        "    time.sleep(600)\n"
    )
    repo = repo_with(tmp_path, PROVISION, DISPOSE, {"tests/test_hang.py": hang})
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'runner'}{os.pathsep}{ROOT / 'coordinator'}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "charpin_coordinator", "run", "--repo", str(repo), "--hosts",
         "scratch", "--out", str(repo.parent / "runs"), "--json", "-q",
         # --sandbox off: the rendezvous FIFO lies outside the checkout, outside the view.
         "--sandbox", "off"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        await_arrival(started)  # connected, the tests running
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode & 4
    [server] = disposed(tmp_path)
    assert not Path(server).exists()


# --- the connector itself, driven through run_box (what `run` does per box) -------------------


def _plan(repo: Path) -> RunPlan:
    snap = snapshot.resolve(repo, "HEAD")
    return RunPlan(
        run_id="prov",
        snap=snap,
        config_table=load_config(repo, rev=snap.commit).table,
        setup=[],
        timeout=120,
        keep=False,
        runner=runner_bundle(),
        repo_key="0123456789abcdef",
    )


def _spec(tmp_path: Path, provision: str, dispose: str = DISPOSE) -> HostSpec:
    table = {"scratch": {"provision": [provision], "dispose": [dispose]}}
    empty = tmp_path / "ssh_config"  # no Host block: a provisioned host is never looked up
    empty.write_text("")
    [spec] = resolve_hosts(["scratch"], ssh_config=empty, extras=decode_host_extras(table))
    return spec


def _box(
    tmp_path: Path, provision: str, *, stop: threading.Event | None = None,
    on_phase: Callable[[str], None] | None = None, files: dict[str, str] | None = None,
) -> tuple[BoxOutcome, Disposals]:  # fmt: skip
    repo = make_repo(tmp_path / "repo", {"tests/test_a.py": TEST, **(files or {})})
    disposals = Disposals()
    target = BoxTarget(
        label="scratch",
        connect=connector(_spec(tmp_path, provision), repo=repo, disposals=disposals),
        python=sys.executable,
    )

    def phase(_label: str, name: str) -> None:
        if on_phase is not None:
            on_phase(name)

    return run_box(target, _plan(repo), phase, stop or threading.Event()), disposals


def _made(tmp_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / "made.json").read_text())
    return data


def _gone(made: dict[str, Any]) -> None:
    """The server's folder is removed and nothing listens on its port any more."""
    assert not Path(made["id"]).exists()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", made["port"]), 2):
        pass


def test_run_box_on_a_provisioned_server_disposes_it_exactly_once(tmp_path: Path) -> None:
    outcome, disposals = _box(tmp_path, f"{PROVISION} | tee {tmp_path / 'made.json'}")
    assert outcome.not_evaluated is None, outcome.not_evaluated
    assert outcome.receipt is not None
    assert outcome.receipt.outcomes == {"tests/test_a.py::test_ok": "passed"}
    made = _made(tmp_path)
    assert disposals.done == [("scratch", made["id"])] and disposals.failed == []
    _gone(made)


def test_a_stop_mid_run_still_disposes_once(tmp_path: Path) -> None:
    stop = threading.Event()
    hang = "import time\ndef test_hang():\n    time.sleep(600)\n"

    def on_phase(name: str) -> None:
        if name == "test":  # the tests are starting on the server: Ctrl-C now
            threading.Timer(2.0, stop.set).start()

    started = time.monotonic()
    outcome, disposals = _box(
        tmp_path, f"{PROVISION} | tee {tmp_path / 'made.json'}", stop=stop, on_phase=on_phase,
        files={"tests/test_hang.py": hang},
    )  # fmt: skip
    assert time.monotonic() - started < 90
    assert outcome.interrupted
    made = _made(tmp_path)
    assert disposals.done == [("scratch", made["id"])]
    _gone(made)


def test_a_provision_that_printed_an_id_and_then_failed_is_disposed(tmp_path: Path) -> None:
    outcome, disposals = _box(tmp_path, f"{PROVISION} | tee {tmp_path / 'made.json'}; exit 5")
    assert outcome.not_evaluated is not None
    assert outcome.not_evaluated.kind == "provision-failed"
    made = _made(tmp_path)
    assert f"printed id {made['id']!r}, which is disposed now" in outcome.not_evaluated.reason
    assert disposals.done == [("scratch", made["id"])]
    _gone(made)


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        ("d['host_key'] = 'ssh-ed25519 AAAA'", "host_key 'ssh-ed25519 AAAA'"),
        ("d['host_key'] = d['host_key'] + '\\n' + d['host_key']", "host_key"),
        ("d['host_key'] = 'ssh-rsa ' + d['host_key'].split()[1]", "host_key 'ssh-rsa"),
        ("del d['user']", "an object without user"),
        ("d['port'] = 'twenty-two'", "port 'twenty-two'"),
    ],
)
def test_unusable_provision_output_is_refused_naming_the_key_and_disposed(
    tmp_path: Path, edit: str, named: str
) -> None:
    script = tmp_path / "edit.py"
    script.write_text(f"import json, sys\nd = json.load(sys.stdin)\n{edit}\nprint(json.dumps(d))\n")
    provision = f"{PROVISION} | tee {tmp_path / 'made.json'} | {sys.executable} {script}"
    outcome, disposals = _box(tmp_path, provision)
    assert outcome.not_evaluated is not None
    assert outcome.not_evaluated.kind == "provision-failed"
    assert named in outcome.not_evaluated.reason and "\n" not in outcome.not_evaluated.reason
    made = _made(tmp_path)
    assert disposals.done == [("scratch", made["id"])]  # it printed an id: the server goes
    _gone(made)


def test_output_without_an_id_is_refused_and_nothing_is_disposed(tmp_path: Path) -> None:
    outcome, disposals = _box(tmp_path, "echo 'created something'")
    assert outcome.not_evaluated is not None
    assert outcome.not_evaluated.kind == "provision-failed"
    assert "no JSON on its last line" in outcome.not_evaluated.reason
    assert disposals.done == [] and disposals.failed == []


def test_a_failing_dispose_is_recorded_with_the_id(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"tests/test_a.py": TEST})
    disposals = Disposals()
    spec = _spec(tmp_path, PROVISION, "echo 'API said 503' >&2; exit 7")
    box = connector(spec, repo=repo, disposals=disposals)()
    box.close()
    box.close()  # closing twice disposes once
    [(alias, box_id, reason)] = disposals.failed
    assert alias == "scratch" and Path(box_id).is_dir() and disposals.done == []
    assert "exited 7: API said 503" in reason and "\n" not in reason
    env = {**os.environ, "CHARPIN_HOST_ID": box_id}
    subprocess.run(DISPOSE, shell=True, env=env, check=True)  # by hand, as the CLI says
    assert not Path(box_id).exists()


def test_a_provision_past_its_timeout_is_killed_with_all_it_started(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"tests/test_a.py": TEST})
    pidfile = tmp_path / "child.pid"
    spec = _spec(tmp_path, f"sleep 300 & echo $! > {pidfile}; wait")
    disposals = Disposals()
    started = time.monotonic()
    with pytest.raises(BoxError) as caught:
        connector(spec, repo=repo, disposals=disposals, timeout=1.0)()
    assert time.monotonic() - started < 30
    assert caught.value.kind == "provision-failed"
    assert "ran past 1s and was killed" in str(caught.value)
    child = int(pidfile.read_text())
    for _ in range(100):  # SIGKILLed; gone once its parent (the shell, reaped) is
        if not Path(f"/proc/{child}").exists() or "Z" in _state(child):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the provision's child {child} outlived its timeout")
    assert disposals.done == [] and disposals.failed == []


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return "Z"


def test_ctrl_c_at_the_terminal_during_provision_lets_it_finish_then_disposes(
    tmp_path: Path,
) -> None:
    # The provision arrives, then waits until the Ctrl-C has been sent: it is mid-provision.
    started, go = make_fifos(tmp_path, "started", "go")
    provision = f": > {started}; cat {go} >/dev/null; {PROVISION} | tee {tmp_path / 'made.json'}"
    repo = repo_with(tmp_path, provision, DISPOSE)
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'runner'}{os.pathsep}{ROOT / 'coordinator'}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "charpin_coordinator", "run", "--repo", str(repo), "--hosts",
         "scratch", "--out", str(repo.parent / "runs"), "--json", "-q"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        await_arrival(started)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends its foreground group
        release(go)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode & 4
    made = _made(tmp_path)  # provision was not killed halfway: it made and described its server
    assert disposed(tmp_path) == [made["id"]]
    _gone(made)


# --- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"ci": {"provision": ["make-it"]}}, "provision and dispose come together"),
        ({"ci": {"dispose": ["drop-it"]}}, "provision and dispose come together"),
        ({"local": {"provision": ["a"], "dispose": ["b"]}}, "local is a built-in box"),
        ({"clean": {"provision": ["a"], "dispose": ["b"]}}, "clean is a built-in box"),
        ({"ci": {"provision": "make-it", "dispose": ["b"]}}, "hosts.ci.provision"),
    ],
)
def test_provision_configuration_is_checked(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        decode_host_extras(table)
    assert message in str(caught.value) and "tool.charpin.hosts" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_provisioned_host_needs_no_ssh_config_entry(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host other\n    HostName 10.0.0.1\n")
    extras = decode_host_extras({"scratch": {"provision": ["p"], "dispose": ["d"]}})
    [spec] = resolve_hosts(["scratch"], ssh_config=config, extras=extras)
    assert spec.name == "scratch" and spec.hostname == "" and not spec.builtin
    assert spec.extras.provision == ["p"] and spec.extras.dispose == ["d"]
    with pytest.raises(UsageError, match="unknown host 'other2'"):
        resolve_hosts(["other2"], ssh_config=config, extras=extras)


def test_an_id_must_be_a_string_or_a_number() -> None:
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOxq1Wb1m5QQHTyTb2pRmBmnyfW1B9z1b1Uq3kWcXnGz"
    line = {"host": "10.0.0.7", "user": "root", "host_key": key}
    assert parse_made("s", json.dumps({**line, "id": 4711}).encode()).id == "4711"
    for bad in ([1], True, {"a": 1}):
        assert printed_id(json.dumps({**line, "id": bad}).encode()) is None
        with pytest.raises(BoxError, match="which is not a string or a number"):
            parse_made("s", json.dumps({**line, "id": bad}).encode())
