"""`charpin-remote run` against real OpenSSH sshd boxes on loopback: drift, failures, hostility."""

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

from tests.concurrency import await_arrival, make_fifos
from tests.conftest import git, make_repo
from tests.py39 import PY39, needs_py39
from tests.sshd import SshBox, SshdFactory

pytestmark = pytest.mark.ssh

ROOT = Path(__file__).resolve().parents[2]
# As hostile as OpenSSH accepts in a host name (it refuses spaces, quotes, $ ; and the like).
HOSTILE_ALIAS = "we*ird!~box%h+ü"
TZ_TEST = (
    "import datetime\n"
    "def test_epoch_is_midnight():\n"
    "    assert datetime.datetime.fromtimestamp(0).hour == 0\n"
    "def test_plain():\n"
    "    pass\n"
)


@pytest.fixture(autouse=True)
def _runner_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "runner"))


def _repo(
    root: Path, boxes: list[SshBox], files: dict[str, str] | None = None, extra_toml: str = ""
) -> Path:
    """A repository whose boxes use this interpreter (it has pytest) as their python."""
    hosts = "".join(
        f'[tool.charpin.hosts.{json.dumps(b.alias)}]\npython = "{sys.executable}"\n' for b in boxes
    )
    content = {
        "tests/__init__.py": "",
        "tests/test_tz.py": TZ_TEST,
        "pyproject.toml": extra_toml + hosts,
        **(files or {}),
    }
    return make_repo(root, content)


def _ssh_config(tmp_path: Path, boxes: list[SshBox], extra: str = "") -> Path:
    path = tmp_path / "ssh_config"
    path.write_text("".join(b.ssh_config.read_text() for b in boxes) + extra)
    return path


def _run(
    repo: Path, config: Path, hosts: str, *extra: str, run_id: str = "r1"
) -> tuple[int, dict[str, object], Path]:
    out = repo.parent / "runs"
    code = main(
        [
            "run",
            "--repo",
            str(repo),
            "--ssh-config",
            str(config),
            "--hosts",
            hosts,
            "--out",
            str(out),
            "--run-id",
            run_id,
            "--json",
            "--timeout",
            "120",
            *extra,
        ]
    )
    folder = out / run_id
    return code, json.loads((folder / "drift.json").read_text()), folder


def _not_evaluated(report: dict[str, object]) -> dict[str, dict[str, str]]:
    return {n["label"]: n for n in report["not_evaluated"]}  # type: ignore[attr-defined]


def _left_on_box(box: SshBox) -> list[Path]:
    runs = box.root / ".cache" / "charpin" / "runs"
    return list(runs.iterdir()) if runs.exists() else []


def test_tz_dependent_test_fails_on_the_tokyo_box_only(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    utc = sshd_factory(name="utc", alias="utc")
    tokyo = sshd_factory(name="tokyo", alias="tokyo", set_env={"TZ": "Asia/Tokyo"})
    repo = _repo(tmp_path / "repo", [utc, tokyo])
    code, report, folder = _run(repo, _ssh_config(tmp_path, [utc, tokyo]), "utc,tokyo")
    assert code & 1 and code & 2 and not code & 4
    outcomes = {d["name"]: d for d in report["dimensions"]}["outcomes"]  # type: ignore[attr-defined]
    rows = {r["item"]: r["values"] for r in outcomes["matrix"]}
    assert rows == {
        "tests/test_tz.py::test_epoch_is_midnight": {"utc": "passed", "tokyo": "failed"}
    }
    receipt = json.loads((folder / "tokyo" / "receipt.json").read_text())
    assert receipt["environment"]["host_key_fingerprint"] == tokyo.fingerprint
    # The whole pipeline of a box (runner, snapshot, setup, tests, receipt) is one SSH channel.
    assert json.loads((folder / "tokyo" / "box.json").read_text())["channels"] == 1
    assert not _left_on_box(utc) and not _left_on_box(tokyo)
    assert not utc.session_pids() and not tokyo.session_pids()


ZONE_PIN = (
    "with open('/etc/localtime', 'rb') as f:\n"
    "    print('system zone:', f.read().rsplit(b'\\n', 2)[-2].decode())\n"
)


def test_pin_reading_the_system_zone_drifts_on_the_box_with_another_localtime(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    home = sshd_factory(name="home", alias="home")
    away = sshd_factory(name="away", alias="away", localtime="Asia/Tokyo")
    repo = _repo(tmp_path / "repo", [home, away], {"report_zone.py": ZONE_PIN})
    recorded = subprocess.run(
        [
            sys.executable,
            "-m",
            "charpin_runner",
            "pins",
            "record",
            "--repo",
            str(repo),
            "--id",
            "zone",
            "--",
            "report_zone.py",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert recorded.returncode == 0, recorded.stderr
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "pin")
    code, report, _ = _run(repo, _ssh_config(tmp_path, [home, away]), "home,away")
    assert code & 2 and not code & 4
    pins = {d["name"]: d for d in report["dimensions"]}["pins"]  # type: ignore[attr-defined]
    assert "zone" in json.dumps(pins) and "away" in json.dumps(pins)
    gates = {(g["gate"], g["box"]): g["status"] for g in report["gates"]}  # type: ignore[attr-defined]
    assert gates[("Pin replay", "away")] == "FAIL"
    assert gates[("Pin replay", "home")] == "PASS"


def test_unreachable_port_is_not_evaluated_and_the_other_box_still_reports(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    good = sshd_factory(name="good", alias="good")
    dead = "Host dead\n    HostName 127.0.0.1\n    Port 1\n    User root\n"
    repo = _repo(tmp_path / "repo", [good])
    code, report, _ = _run(repo, _ssh_config(tmp_path, [good], dead), "good,dead")
    assert code & 4
    missing = _not_evaluated(report)["dead"]
    assert missing["kind"] == "refused" and "dead" in missing["reason"]
    assert [b["label"] for b in report["boxes"]] == ["good"]  # type: ignore[attr-defined]


def test_unknown_host_key_refused_then_accepted_new_and_recorded(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    box = sshd_factory(name="fresh", alias="fresh")
    box.known_hosts.write_text("")
    repo = _repo(tmp_path / "repo", [box])
    config = _ssh_config(tmp_path, [box])
    code, report, _ = _run(repo, config, "fresh", run_id="no")
    missing = _not_evaluated(report)["fresh"]
    assert code & 4 and missing["kind"] == "host-key"
    assert box.fingerprint in missing["reason"]
    code, report, folder = _run(repo, config, "fresh", "--accept-new", run_id="yes")
    assert not report["not_evaluated"]
    receipt = json.loads((folder / "fresh" / "receipt.json").read_text())
    assert receipt["environment"]["host_key_fingerprint"] == box.fingerprint
    assert receipt["environment"]["host_key_accepted_new"] is True
    assert box.host_key_line.split()[2] in box.known_hosts.read_text()


def test_hostile_alias_repo_path_and_test_ids(sshd_factory: SshdFactory, tmp_path: Path) -> None:
    box = sshd_factory(name="hostile", alias=HOSTILE_ALIAS)
    ids = (
        "import pytest\n"
        "@pytest.mark.parametrize('v', ['a b', \"q'uote\", '$HOME;touch pwned', 'dq\"x'])\n"
        "def test_odd(v):\n"
        "    assert v\n"
    )
    repo = _repo(tmp_path / "re po $x;'q'", [box], {"tests/test_odd.py": ids})
    code, report, folder = _run(repo, _ssh_config(tmp_path, [box]), f"{HOSTILE_ALIAS},local")
    assert not report["not_evaluated"], report["not_evaluated"]
    labels = [b["label"] for b in report["boxes"]]  # type: ignore[attr-defined]
    assert labels == [HOSTILE_ALIAS, "local"]
    (sub,) = [p for p in folder.iterdir() if p.is_dir() and p.name != "local"]
    assert json.loads((sub / "box.json").read_text())["label"] == HOSTILE_ALIAS
    executed = json.loads((sub / "receipt.json").read_text())["collection"]["executed"]
    assert "tests/test_odd.py::test_odd[$HOME;touch pwned]" in executed
    assert not list(box.root.rglob("pwned")) and not list(repo.rglob("pwned"))
    assert code & 4 == 0


def test_second_run_after_one_file_commit_sends_a_small_fraction(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    box = sshd_factory(name="inc", alias="inc")
    big = {
        f"pkg/m{i}.py": "".join(f"# {i}-{j}-{os.urandom(16).hex()}\n" for j in range(150))
        for i in range(40)
    }
    repo = _repo(tmp_path / "repo", [box], big)
    config = _ssh_config(tmp_path, [box])
    _run(repo, config, "inc", run_id="one")
    (repo / "pkg/m3.py").write_text("# changed\n")
    git(repo, "commit", "-qam", "one file")
    _run(repo, config, "inc", run_id="two")
    # Ship bytes of the runner are a one-off; compare what each run sent in total.
    first = json.loads((repo.parent / "runs/one/inc/box.json").read_text())["bytes_sent"]
    second = json.loads((repo.parent / "runs/two/inc/box.json").read_text())["bytes_sent"]
    print(f"first run sent {first} bytes, second {second} ({second / first:.2%})")
    assert second < first * 0.10


def test_test_hanging_past_the_deadline_is_timed_out_and_leaves_nothing(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    box = sshd_factory(name="slow", alias="slow")
    hang = "import time\ndef test_hang():\n    time.sleep(600)\n"
    repo = _repo(tmp_path / "repo", [box], {"tests/test_hang.py": hang})
    started = time.monotonic()
    code, _report, folder = _run(repo, _ssh_config(tmp_path, [box]), "slow,local", "--timeout", "6")
    assert time.monotonic() - started < 100
    receipt = json.loads((folder / "slow" / "receipt.json").read_text())
    assert receipt["exit"]["interpretation"] == "timed-out"
    assert code != 0
    assert not _left_on_box(box)
    assert not box.session_pids()


def test_a_box_whose_python_hangs_is_timed_out_at_its_deadline_not_after(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    # The host's python never answers the bootstrap and ignores its stdin closing: closing the
    # session waits only for what is left of the 5 s deadline (and a short floor), not 10 s more.
    box = sshd_factory(name="hang", alias="hang")
    python = tmp_path / "hanging-python"
    python.write_text("#!/bin/sh\nexec sleep 3600\n")
    python.chmod(0o755)
    toml = f'[tool.charpin.hosts.hang]\npython = "{python}"\n'
    repo = make_repo(
        tmp_path / "repo", {"tests/test_a.py": "def test_a():\n    pass\n", "pyproject.toml": toml}
    )
    started = time.monotonic()
    code, report, _ = _run(repo, _ssh_config(tmp_path, [box]), "hang", "--timeout", "5")
    wall = time.monotonic() - started
    missing = _not_evaluated(report)["hang"]
    assert missing["kind"] == "timeout" and "did not answer within" in missing["reason"], missing
    assert code & 4
    assert wall < 8.5, f"took {wall:.1f}s for a 5s deadline"


def test_sshd_killed_mid_run_is_not_evaluated(sshd_factory: SshdFactory, tmp_path: Path) -> None:
    box = sshd_factory(name="doomed", alias="doomed")
    hang = (
        "import os, time\ndef test_hang():\n"
        "    if os.environ.get('CHARPIN_TEST_SSHD_BOX'):\n        time.sleep(600)\n"
    )
    repo = _repo(tmp_path / "repo", [box], {"tests/test_hang.py": hang})
    proc = _spawn(repo, _ssh_config(tmp_path, [box]), "doomed,local")
    try:
        assert _wait(lambda: list(box.root.glob(".cache/charpin/runs/*/*/stdout.log")), 60)
        box.kill_sshd()
        out, _ = proc.communicate(timeout=120)
    finally:
        _reap(proc)
    report = json.loads(out)
    missing = _not_evaluated(report)["doomed"]
    assert missing["kind"] == "disconnected" and "doomed" in missing["reason"]
    assert proc.returncode & 4
    assert [b["label"] for b in report["boxes"]] == ["local"]
    # The connection is gone: the agent saw its input end, stopped the tests and cleaned up.
    assert _wait(lambda: not box.session_pids(), 60), box.session_pids()
    assert _wait(lambda: not _left_on_box(box), 30)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_sigint_mid_run_cleans_the_box_and_writes_a_partial_report(
    sshd_factory: SshdFactory, tmp_path: Path, sig: signal.Signals
) -> None:
    box = sshd_factory(name="intr", alias="intr")
    [started] = make_fifos(tmp_path, "started")
    hang = (
        f"import time\ndef test_hang():\n    open({str(started)!r}, 'w').close()\n"
        "    time.sleep(600)\n"
    )
    repo = _repo(tmp_path / "repo", [box], {"tests/test_hang.py": hang})
    # --sandbox off: the rendezvous FIFO lies outside the checkout, which the sandbox's
    # allow-list view does not show (#17 rule 2); the interruption, not the sandbox, is tested.
    proc = _spawn(repo, _ssh_config(tmp_path, [box]), "intr", "--sandbox", "off")
    try:
        await_arrival(started)  # the test is running inside the runner on the box
        proc.send_signal(sig)  # SIGTERM (systemctl stop, a cancelled CI job) acts as Ctrl-C
        out, _ = proc.communicate(timeout=120)
    finally:
        _reap(proc)
    assert proc.returncode & 4
    report = json.loads(out)
    drift = json.loads((repo.parent / "runs" / "sig" / "drift.json").read_text())
    assert drift == report
    interpretations = [b["interpretation"] for b in report["boxes"]]
    kinds = [n["kind"] for n in report["not_evaluated"]]
    assert interpretations == ["interrupted"] or kinds == ["interrupted"]
    assert not _left_on_box(box)
    assert _wait(lambda: not box.session_pids(), 10)


def test_a_coordinator_killed_mid_run_leaves_nothing_running_on_the_box(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    box = sshd_factory(name="orphan", alias="orphan")
    pid_file = box.root / "test.pid"
    hang = (
        "import os, time\ndef test_hang():\n"
        f"    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n    time.sleep(600)\n"
    )
    repo = _repo(tmp_path / "repo", [box], {"tests/test_hang.py": hang})
    # --sandbox off: the test reports its pid in a file outside the checkout, which the sandbox's
    # view hides; without bwrap's PID namespace, the supervisor alone must leave nothing running.
    proc = _spawn(repo, _ssh_config(tmp_path, [box]), "orphan", "--sandbox", "off")
    try:
        assert _wait(lambda: pid_file.exists() and pid_file.read_text(), 60)
        proc.kill()  # no Ctrl-C, no goodbye: the channel just ends
    finally:
        _reap(proc)
    # (The pid in the file may be one inside the sandbox's PID namespace: look by folder.)
    assert _wait(lambda: not _working_in(box.root / ".cache"), 30), _working_in(box.root)
    assert _wait(lambda: not _left_on_box(box), 30)
    assert _wait(lambda: not box.session_pids(), 10)


def _working_in(folder: Path) -> list[int]:
    """Processes whose working directory is inside folder (deleted or not)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if entry.name.isdigit() and cwd.startswith(str(folder)):
            found.append(int(entry.name))
    return found


@needs_py39(venv=True)
def test_every_box_step_runs_on_python_39(sshd_factory: SshdFactory, tmp_path: Path) -> None:
    box = sshd_factory(name="old", alias="old")
    # A 3.9 venv without pytest: the runner runs, pytest cannot start, the receipt says so.
    toml = f'[tool.charpin]\nsetup = ["true"]\n[tool.charpin.hosts.old]\npython = "{PY39}"\n'
    repo = make_repo(
        tmp_path / "repo", {"tests/test_a.py": "def test_a():\n    pass\n", "pyproject.toml": toml}
    )
    code, report, folder = _run(repo, _ssh_config(tmp_path, [box]), "old")
    assert not code & 4 and report["not_evaluated"] == [], report["not_evaluated"]
    receipt = json.loads((folder / "old" / "receipt.json").read_text())
    assert receipt["environment"]["python"].startswith("3.9.")
    assert not _left_on_box(box)


def _spawn(repo: Path, config: Path, hosts: str, *extra: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'runner'}{os.pathsep}{ROOT / 'coordinator'}")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "charpin_coordinator",
            "run",
            "--repo",
            str(repo),
            "--ssh-config",
            str(config),
            "--hosts",
            hosts,
            "--out",
            str(repo.parent / "runs"),
            "--run-id",
            "sig",
            "--json",
            "--timeout",
            "300",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )


def _wait(predicate: object, seconds: float) -> bool:
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def _reap(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


def test_changed_host_key_refuses_the_box_even_with_accept_new(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    box = sshd_factory(name="moved", alias="moved")
    other = tmp_path / "other_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True, timeout=30
    )
    kind, key = other.with_suffix(".pub").read_text().split()[:2]
    box.known_hosts.write_text(f"{box.host_key_line.split()[0]} {kind} {key}\n")
    repo = _repo(tmp_path / "repo", [box])
    code, report, _ = _run(repo, _ssh_config(tmp_path, [box]), "moved,local", "--accept-new")
    missing = _not_evaluated(report)["moved"]
    assert code & 4 and missing["kind"] == "host-key"
    assert str(box.known_hosts) in missing["reason"]
    assert [b["label"] for b in report["boxes"]] == ["local"]  # type: ignore[attr-defined]


def test_hosts_check_prints_one_line_per_box_and_check(
    sshd_factory: SshdFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    box = sshd_factory(name="chk", alias="chk")
    dead = "Host dead\n    HostName 127.0.0.1\n    Port 1\n    User root\n"
    config = _ssh_config(tmp_path, [box], dead)
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text('[tool.charpin]\nsetup = ["pip install pytest"]\n')
    check = ["hosts", "check", "--ssh-config", str(config), "--repo", str(project)]
    assert main([*check, "--hosts", "chk"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line.startswith("[chk] ok ") for line in lines)
    assert main([*check, "--hosts", "chk,dead"]) == 4
    assert "[dead] BAD reach" in capsys.readouterr().out


def test_hosts_check_says_bad_when_run_would_lack_pytest(
    sshd_factory: SshdFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    box = sshd_factory(name="nopy", alias="nopy")
    bare = "/usr/bin/python3"
    done = subprocess.run([bare, "-c", "import pytest"], capture_output=True, check=False)
    if done.returncode == 0:
        pytest.skip(f"needs a {bare} without pytest")
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(f'[tool.charpin.hosts.nopy]\npython = "{bare}"\n')
    argv = ["hosts", "check", "--hosts", "nopy", "--repo", str(project)]
    assert main([*argv, "--ssh-config", str(_ssh_config(tmp_path, [box]))]) == 4
    [bad] = [ln for ln in capsys.readouterr().out.splitlines() if " BAD " in ln]
    assert bad.startswith(f"[nopy] BAD pytest: {bare} on nopy cannot import pytest")


FLAKY_TEST = """\
import os
from pathlib import Path


def test_flaky():
    # Fails every third execution on a box: the counter file lives outside the checkout.
    counter = Path(os.environ["CHARPIN_TEST_COUNTER"])
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    assert n % 3 != 0


def test_frozen():
    pass
"""
FROZEN_LEDGER = json.dumps(
    {
        "version": 1,
        "entries": [
            {
                "id": "tests/test_flaky.py::test_frozen",
                "reason": "flaky on CI",
                "owner": "ana",
                "expires": "2099-01-01",
            }
        ],
    }
)


def test_repeats_and_frozen_re_runs_over_ssh_are_evidence_and_never_gate(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    boxes = [
        sshd_factory(name=name, alias=name, set_env={"CHARPIN_TEST_COUNTER": str(tmp_path / name)})
        for name in ("one", "two")
    ]
    repo = _repo(
        tmp_path / "repo",
        boxes,
        {"tests/test_flaky.py": FLAKY_TEST, "flake-ledger.json": FROZEN_LEDGER},
        # The counter's path reaches the tests only by name: the tests' environment is an
        # allow-list (#17 rule 6).
        extra_toml=(
            '[tool.charpin]\nledger = "flake-ledger.json"\nenv_allow = ["CHARPIN_TEST_COUNTER"]\n'
        ),
    )
    config = _ssh_config(tmp_path, boxes)
    # --sandbox off: the flaky test's counter lives outside the checkout, hidden by the sandbox.
    flags = ("--repeat", "3", "--include-frozen", "--sandbox", "off")
    code, report, folder = _run(repo, config, "one,two", *flags)
    # Repeat 1 (the record) passed everywhere: the third repeat's failure does not gate.
    assert code == 0, report["exit_bits"]
    repeats = report["repeats"]
    assert isinstance(repeats, dict) and repeats["count"] == 3
    for entry in repeats["boxes"]:
        assert entry["evaluated"] == 3 and entry["run_ids"] == ["r1", "r1.r2", "r1.r3"]
        assert entry["differing"] == [
            {"item": "tests/test_flaky.py::test_flaky", "outcomes": ["passed", "passed", "failed"]}
        ]
    frozen = report["frozen_reruns"]
    assert isinstance(frozen, dict)
    assert sorted((s["box"], s["repeat"], s["clean"]) for s in frozen["boxes"]) == [
        (name, k, True) for name in ("one", "two") for k in (1, 2, 3)
    ]
    for name in ("one", "two"):
        # Each repeat is its own sealed receipt, bound to its own run id, in its own folder.
        third = json.loads((folder / name / "repeats" / "3" / "receipt.json").read_text())
        assert (
            third["run_id"] == "r1.r3"
            and third["outcomes"]["tests/test_flaky.py::test_flaky"] == "failed"
        )
        record = json.loads((folder / name / "receipt.json").read_text())
        assert record["run_id"] == "r1" and record["frozen_rerun"]["clean"] is True
        assert "tests/test_flaky.py::test_frozen" not in record["outcomes"]
    assert not any(_left_on_box(b) for b in boxes)
