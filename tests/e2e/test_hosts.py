"""Host resolution and preflight against real sshd boxes: ProxyJump, odd aliases, hosts check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from charpin_coordinator.remote import openssh
from charpin_coordinator.remote.errors import BoxError
from charpin_coordinator.remote.hostcheck import check_host, check_hosts
from charpin_coordinator.remote.hosts import HostExtras, HostSpec, resolve_hosts
from charpin_coordinator.remote.ssh import open_box
from charpin_runner.errors import UsageError

from tests.conftest import run_on
from tests.sshd import SshBox, SshdFactory

pytestmark = pytest.mark.ssh

# As odd as OpenSSH accepts in a host name (it refuses spaces, quotes, $ ; and the like).
ODD_ALIAS = "ci.box~q!x+ü%h"


def test_odd_alias_connects(
    sshd_factory: SshdFactory,
) -> None:
    box = sshd_factory(name="odd", alias=ODD_ALIAS)
    [spec] = resolve_hosts([ODD_ALIAS], ssh_config=box.ssh_config)
    assert (spec.hostname, spec.port) == ("127.0.0.1", box.port)
    with open_box(spec) as transport:
        assert transport.name == ODD_ALIAS
        assert run_on(transport, ["echo", "up"])[1] == b"up\n"


def _behind(jump: SshBox, target: SshBox, tmp_path: Path) -> HostSpec:
    """target's spec, reached through `ProxyJump jump`."""
    config = tmp_path / "ssh_config"
    config.write_text(
        jump.ssh_config.read_text() + target.ssh_config.read_text() + "    ProxyJump jump\n"
    )
    [spec] = resolve_hosts([target.alias], ssh_config=config)
    return spec


def _refused(spec: HostSpec) -> BoxError:
    with pytest.raises(BoxError) as caught:
        with open_box(spec):
            pass
    assert caught.value.kind == "host-key"
    return caught.value


def test_proxyjump_goes_through_the_jump_box(sshd_factory: SshdFactory, tmp_path: Path) -> None:
    jump = sshd_factory(name="jump", options=["LogLevel=DEBUG1"])
    target = sshd_factory(name="target", host="127.0.0.2")
    spec = _behind(jump, target, tmp_path)
    assert [hop.name for hop in spec.proxy_jump] == ["jump"]
    with open_box(spec) as transport:
        assert transport.host_key_fingerprint == target.fingerprint
        assert run_on(transport, ["sh", "-c", 'echo "$HOME"'])[1] == f"{target.root}\n".encode()
    assert f"target 127.0.0.2 port {target.port}" in jump.log()


def test_jump_box_host_key_is_checked_too(sshd_factory: SshdFactory, tmp_path: Path) -> None:
    jump = sshd_factory(name="jump")
    target = sshd_factory(name="target")
    jump.known_hosts.write_text("")
    message = str(_refused(_behind(jump, target, tmp_path)))
    assert f"[127.0.0.1]:{jump.port} is not in known_hosts ({jump.known_hosts}" in message
    assert jump.fingerprint in message


def test_revoked_jump_box_key_is_refused(sshd_factory: SshdFactory, tmp_path: Path) -> None:
    jump = sshd_factory(name="jump")
    target = sshd_factory(name="target")
    key = " ".join(jump.host_key_line.split()[1:3])
    jump.known_hosts.write_text(f"{jump.host_key_line}\n@revoked * {key}\n")
    assert str(_refused(_behind(jump, target, tmp_path))) == (
        f"target: host key for [127.0.0.1]:{jump.port} is REVOKED: {jump.fingerprint} is on the "
        f"@revoked line {jump.known_hosts}:2; refusing: the box needs a new host key (if the "
        "revocation is a mistake, delete that line)"
    )


def test_hosts_check_reports_python_venv_git_and_disk(sshd_factory: SshdFactory) -> None:
    box = sshd_factory(name="ci")
    [spec] = resolve_hosts(["ci"], ssh_config=box.ssh_config)
    with open_box(spec) as transport:
        result = check_host(transport)
    assert result.ok, result.items
    assert [item.name for item in result.items] == [
        "reach", "python", "venv", "ensurepip", "git", "disk"
    ]  # fmt: skip
    assert result.host_key_fingerprint == box.fingerprint
    assert result.items[1].message.startswith("python3 3.")
    assert result.items[4].message.startswith("git version ")


def _python_without_venv(folder: Path) -> Path:
    """A real interpreter (a venv of this one) whose `venv` module fails on import, as on a
    distribution that ships a stub until python3-venv is installed. A .pth file puts the stub
    first on sys.path, which holds under `python -I` too (site-packages are still read)."""
    env = folder / "novenv-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    shadow = folder / "shadow"
    (shadow / "venv").mkdir(parents=True)
    (shadow / "venv" / "__init__.py").write_text("raise ImportError('stripped like Debian')\n")
    [site] = env.glob("lib/python*/site-packages")
    (site / "aaa-shadow.pth").write_text(f"import sys; sys.path.insert(0, {str(shadow)!r})\n")
    return env / "bin" / "python"


def test_hosts_check_names_what_to_install_and_survives_bad_boxes(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    good = sshd_factory(name="good")
    bare = sshd_factory(name="bare")
    novenv = _python_without_venv(tmp_path)
    config = tmp_path / "ssh_config"
    config.write_text(
        good.ssh_config.read_text()
        + bare.ssh_config.read_text()
        + "Host down\n    HostName 127.0.0.1\n    Port 1\n"
    )
    extras = {
        "good": HostExtras(python=str(novenv)),
        "bare": HostExtras(python="/nonexistent/python3"),
    }
    specs = resolve_hosts(["good", "down", "bare"], ssh_config=config, extras=extras)
    results = check_hosts(specs, connect_timeout=5.0)
    assert [r.host for r in results] == ["good", "down", "bare"]
    messages = {r.host: {i.name: (i.ok, i.message) for i in r.items} for r in results}
    assert messages["good"]["venv"] == (
        False,
        f"{novenv} on good lacks the venv module: install python3-venv",
    )
    assert messages["good"]["ensurepip"][0] is True
    assert results[1].error_kind == "refused"
    assert messages["down"]["reach"][0] is False
    ok, message = messages["bare"]["python"]
    assert not ok and message.startswith("bare: /nonexistent/python3 did not start (")
    assert "install python3 >= 3.9" in message
    assert not any(r.ok for r in results)


def test_hosts_check_runs_builtin_boxes_locally() -> None:
    [result] = check_hosts(resolve_hosts(["clean"], ssh_config=None))
    assert result.ok, result.items
    assert result.host_key_fingerprint is None


def test_known_hosts_written_by_openssh_is_accepted(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    box = sshd_factory(name="hashed")
    # a hashed entry, as HashKnownHosts=yes writes them
    subprocess.run(
        ["ssh-keygen", "-H", "-f", str(box.known_hosts)], check=True, capture_output=True
    )
    assert box.known_hosts.read_text().startswith("|1|")
    [spec] = resolve_hosts(["hashed"], ssh_config=box.ssh_config)
    with open_box(spec) as transport:
        assert transport.host_key_fingerprint == box.fingerprint


def test_included_file_and_match_block_reach_real_boxes(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    # Most real configs split hosts into Included files and use Match; OpenSSH's `ssh -G`
    # reads them (paramiko's parser reads neither), so these boxes resolve and answer.
    if openssh.find_ssh() is None:
        pytest.skip("no OpenSSH client here (apt-get install openssh-client)")
    scratch = sshd_factory(name="scratch")
    build = sshd_factory(name="build", host="127.0.0.2")
    included = tmp_path / "ssh_config.d"
    included.mkdir()
    (included / "scratch.conf").write_text(scratch.ssh_config.read_text())
    block = build.ssh_config.read_text().split("\n", 1)[1]  # its options, without `Host build`
    config = tmp_path / "ssh_config"
    config.write_text(f"Include {included}/*.conf\nMatch originalhost build-*\n{block}")
    specs = resolve_hosts(["scratch", "build-7"], ssh_config=config)
    assert [(s.hostname, s.port) for s in specs] == [
        ("127.0.0.1", scratch.port),
        ("127.0.0.2", build.port),
    ]
    results = check_hosts(specs, connect_timeout=5.0)
    reach = [(r.host, r.items[0].name, r.items[0].ok) for r in results]
    assert reach == [("scratch", "reach", True), ("build-7", "reach", True)]
    assert [r.host_key_fingerprint for r in results] == [scratch.fingerprint, build.fingerprint]
    with pytest.raises(UsageError, match=r"unknown host 'buidl-7': ssh -G finds no Host or Match"):
        resolve_hosts(["buidl-7"], ssh_config=config)
