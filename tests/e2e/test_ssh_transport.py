"""SshTransport against real OpenSSH sshd boxes on loopback: channels, keys, failures."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from charpin_coordinator.remote.errors import BoxError
from charpin_coordinator.remote.hosts import HostSpec, resolve_hosts
from charpin_coordinator.remote.ssh import SshTransport, open_box
from charpin_coordinator.remote.transport import STDERR_KEEP

from tests.conftest import run_on
from tests.sshd import SshBox, SshdFactory, _fingerprint

pytestmark = pytest.mark.ssh

HOSTILE = "we ird 'q' \"dq\" $HOME ;touch pwned; `id` $(id)"


def spec_of(box: SshBox) -> HostSpec:
    """Resolve the box the way production does: its alias through its ssh_config."""
    [spec] = resolve_hosts([box.alias], ssh_config=box.ssh_config)
    return spec


def wait_for(predicate: object, seconds: float = 5.0) -> bool:
    """Poll predicate() until true or the bounded wait ends."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_channel_keeps_hostile_argv_and_bytes_exact(ssh_box: SshBox) -> None:
    payload = bytes(range(256)) * 41
    with open_box(spec_of(ssh_box)) as box:
        assert box.home == ""  # the agent finds the box user's home itself
        echoed = run_on(box, ["printf", "%s|", HOSTILE, "2nd arg"])
        copied = run_on(box, ["head", "-c", str(len(payload))], stdin=payload)
        assert box.stats.sent >= len(payload) and box.stats.received >= len(payload)
    assert echoed == (0, f"{HOSTILE}|2nd arg|".encode(), b"")
    assert copied == (0, payload, b"")
    assert not list(ssh_box.root.rglob("pwned"))
    assert not list(Path("/root").glob("pwned"))


def test_channel_gives_exit_code_and_stderr(ssh_box: SshBox) -> None:
    with open_box(spec_of(ssh_box)) as box:
        done = run_on(box, ["sh", "-c", 'head -c 7; printf "%s" "a b" >&2; exit 3'], stdin=b"in put\n")
    assert done == (3, b"in put\n", b"a b")


def test_megabytes_on_stdout_and_stderr_at_once_do_not_deadlock(ssh_box: SshBox) -> None:
    # paramiko stops a channel whose stderr nobody reads: the channel drains it while reading.
    script = "head -c 3000000 /dev/zero >&2; head -c 5000000 /dev/zero; echo end >&2"
    with open_box(spec_of(ssh_box)) as box:
        status, out, err = run_on(box, ["sh", "-c", script], timeout=60)
    assert status == 0 and len(out) == 5_000_000
    assert len(err) == STDERR_KEEP and err.endswith(b"end\n")


def test_a_channel_whose_program_ignores_stdin_still_finishes(ssh_box: SshBox) -> None:
    with open_box(spec_of(ssh_box)) as box:
        channel = box.open(["sh", "-c", "exit 7"])
        assert channel.recv(10, 30.0) == b""  # its output ended: the program is gone
        channel.send(b"x" * 100_000)  # swallowed, no hang, no error
        assert channel.recv(10, 5.0) == b""
        assert channel.finish(5.0).status == 7
        assert run_on(box, ["echo", "ok"])[1] == b"ok\n"  # the connection is still usable


def test_unreachable_port_is_refused_and_retried_a_bounded_number_of_times(
    ssh_box: SshBox,
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    spec = HostSpec(
        name="gone",
        hostname="127.0.0.1",
        port=closed_port,
        user=ssh_box.user,
        identity_files=(str(ssh_box.key_path),),
        user_known_hosts=(str(ssh_box.known_hosts),),
    )
    with pytest.raises(BoxError) as caught:
        with open_box(spec, retry_delays=(0.0, 0.0)):
            pass
    assert caught.value.kind == "refused"
    assert caught.value.attempts == 3
    assert str(caught.value) == (
        f"gone: unreachable: connection refused (127.0.0.1:{closed_port}); is sshd running there?"
    )


def test_changed_host_key_is_refused_with_both_fingerprints(
    ssh_box: SshBox, tmp_path: Path
) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kind, b64 = other.with_suffix(".pub").read_text().split()[:2]
    ssh_box.known_hosts.write_text(f"[127.0.0.1]:{ssh_box.port} {kind} {b64}\n")
    before = ssh_box.known_hosts.read_bytes()
    wrong = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(other.with_suffix(".pub"))],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()[1]
    with pytest.raises(BoxError) as caught:
        with open_box(spec_of(ssh_box), accept_new=True):
            pass
    message = str(caught.value)
    assert caught.value.kind == "host-key"
    assert caught.value.attempts == 1
    assert f"host key CHANGED for [127.0.0.1]:{ssh_box.port}" in message
    assert f"expected {wrong}, got {ssh_box.fingerprint}" in message
    assert str(ssh_box.known_hosts) in message
    # The advice removes the old key from the file that holds it, not ~/.ssh/known_hosts.
    endpoint = shlex.quote(f"[127.0.0.1]:{ssh_box.port}")
    remove = f"ssh-keygen -R {endpoint} -f {shlex.quote(str(ssh_box.known_hosts))}"
    assert message.endswith(f"remove the old line ({remove})")
    assert ssh_box.known_hosts.read_bytes() == before


def test_unknown_host_key_is_refused_with_fingerprint_and_file(ssh_box: SshBox) -> None:
    ssh_box.known_hosts.write_text("")
    with pytest.raises(BoxError) as caught:
        with open_box(spec_of(ssh_box)):
            pass
    assert caught.value.kind == "host-key"
    assert str(caught.value) == (
        f"box: host key for [127.0.0.1]:{ssh_box.port} is not in known_hosts "
        f"({ssh_box.known_hosts}, /etc/ssh/ssh_known_hosts, /etc/ssh/ssh_known_hosts2); "
        f"fingerprint {ssh_box.fingerprint}; verify it, then add it or rerun with --accept-new"
    )
    assert ssh_box.known_hosts.read_text() == ""


def test_accept_new_records_the_key_and_the_next_connect_needs_no_flag(ssh_box: SshBox) -> None:
    ssh_box.known_hosts.write_text("# my comment, kept\n")
    with open_box(spec_of(ssh_box), accept_new=True) as box:
        assert box.host_key_accepted_new is True
        assert box.host_key_fingerprint == ssh_box.fingerprint
    assert ssh_box.known_hosts.read_text() == "# my comment, kept\n" + ssh_box.host_key_line + "\n"
    with open_box(spec_of(ssh_box)) as box:
        assert box.host_key_accepted_new is False
        assert box.host_key_fingerprint == ssh_box.fingerprint


def _host_key(path: Path, kind: str) -> tuple[str, str]:
    """A fresh host key: (`type base64` of its public half, SHA256 fingerprint)."""
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)], check=True)
    pub = path.with_suffix(".pub")
    return " ".join(pub.read_text().split()[:2]), _fingerprint(pub)


@pytest.mark.parametrize("known", ["ecdsa", "ed25519", "both"])
def test_box_with_two_host_keys_shows_one_known_hosts_holds(
    sshd_factory: SshdFactory, tmp_path: Path, known: str
) -> None:
    ecdsa, ecdsa_fp = _host_key(tmp_path / "ecdsa_host_key", "ecdsa")
    box = sshd_factory(name="two", options=[f"HostKey={tmp_path / 'ecdsa_host_key'}"])
    endpoint = f"[127.0.0.1]:{box.port}"
    lines = {
        "ecdsa": f"{endpoint} {ecdsa}\n",
        "ed25519": f"{box.host_key_line}\n",
        "both": f"{endpoint} {ecdsa}\n{box.host_key_line}\n",
    }
    box.known_hosts.write_text(lines[known])
    with open_box(spec_of(box)) as transport:
        # like ssh, ask for a key type the file knows (paramiko's favourite is ed25519)
        expected = ecdsa_fp if known == "ecdsa" else box.fingerprint
        assert transport.host_key_fingerprint == expected


def test_any_listed_key_of_a_type_is_accepted_during_a_rotation(
    ssh_box: SshBox, tmp_path: Path
) -> None:
    retired, _ = _host_key(tmp_path / "retired", "ed25519")
    endpoint = f"[127.0.0.1]:{ssh_box.port}"
    ssh_box.known_hosts.write_text(f"{endpoint} {retired}\n{ssh_box.host_key_line}\n")
    with open_box(spec_of(ssh_box)) as box:
        assert box.host_key_fingerprint == ssh_box.fingerprint


@pytest.mark.parametrize(
    ("hosts", "trusted"),
    [
        ("[127.0.0.?]:{port}", True),
        ("other,[127.0.0.1]:*", True),
        ("[127.0.0.*]:*,![127.0.0.1]:{port}", False),
        ("127.0.0.1", False),  # without the port the line is for port 22 only
    ],
)
def test_wildcards_and_negations_match_as_in_openssh(
    ssh_box: SshBox, hosts: str, trusted: bool
) -> None:
    key = " ".join(ssh_box.host_key_line.split()[1:3])
    ssh_box.known_hosts.write_text(f"{hosts.format(port=ssh_box.port)} {key}\n")
    if trusted:
        with open_box(spec_of(ssh_box)) as box:
            assert box.host_key_fingerprint == ssh_box.fingerprint
        return
    with pytest.raises(BoxError) as caught:
        with open_box(spec_of(ssh_box)):
            pass
    assert caught.value.kind == "host-key"
    assert "is not in known_hosts" in str(caught.value)


def test_wrong_client_key_is_an_auth_failure_and_not_retried(
    ssh_box: SshBox, tmp_path: Path
) -> None:
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    text = ssh_box.ssh_config.read_text().replace(str(ssh_box.key_path), str(stranger))
    ssh_box.ssh_config.write_text(text)
    with pytest.raises(BoxError) as caught:
        with open_box(spec_of(ssh_box), retry_delays=(5.0, 5.0)):
            pass
    assert caught.value.kind == "auth"
    assert caught.value.attempts == 1
    assert str(caught.value).startswith("box: authentication failed")


@pytest.fixture
def agent_socket(tmp_path: Path) -> Iterator[str]:
    """A private ssh-agent of this test (never the developer's: conftest drops SSH_AUTH_SOCK)."""
    sock = str(tmp_path / "agent.sock")
    proc = subprocess.Popen(
        ["ssh-agent", "-D", "-a", sock], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            if Path(sock).exists():
                break
            time.sleep(0.05)
        yield sock
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_agent_authenticates_when_identities_only_is_off(
    ssh_box: SshBox, tmp_path: Path, agent_socket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"SSH_AUTH_SOCK": agent_socket, "PATH": os.environ["PATH"]}
    subprocess.run(["ssh-add", "-q", str(ssh_box.key_path)], env=env, check=True, timeout=30)
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    # The configured key is not authorized; only the agent holds the authorized one.
    text = ssh_box.ssh_config.read_text().replace(str(ssh_box.key_path), str(stranger))
    ssh_box.ssh_config.write_text(text.replace("IdentitiesOnly yes", "IdentitiesOnly no"))
    monkeypatch.setenv("SSH_AUTH_SOCK", agent_socket)
    with open_box(spec_of(ssh_box)) as box:
        assert run_on(box, ["echo", "in"])[1] == b"in\n"
        # ...and the agent is not forwarded: the box's session has no agent socket.
        assert run_on(box, ["sh", "-c", 'echo "[${SSH_AUTH_SOCK:-}]"'])[1] == b"[]\n"
    # With IdentitiesOnly yes (as ssh, only the configured key counts) the agent stays out.
    ssh_box.ssh_config.write_text(text)
    with pytest.raises(BoxError) as caught:
        with open_box(spec_of(ssh_box)):
            pass
    assert caught.value.kind == "auth"


def test_sshd_killed_mid_command_is_a_lost_connection(ssh_box: SshBox) -> None:
    with open_box(spec_of(ssh_box)) as box:
        killer = threading.Timer(0.5, ssh_box.kill_sshd)
        killer.start()
        try:
            with pytest.raises(BoxError) as caught:
                run_on(box, ["sleep", "30"], timeout=20)
        finally:
            killer.join()
    assert caught.value.kind == "disconnected"


def test_transport_refuses_builtin_boxes_and_empty_commands() -> None:
    with pytest.raises(Exception, match="built-in box"):
        SshTransport(HostSpec(name="clean", builtin=True))
    from charpin_coordinator.remote.ssh import remote_command

    with pytest.raises(Exception, match="empty remote command"):
        remote_command([])


def test_boxes_can_differ_by_setenv_and_system_time_zone(sshd_factory: SshdFactory) -> None:
    tokyo = sshd_factory(name="tokyo", localtime="Asia/Tokyo", set_env={"LANG": "de_DE.UTF-8"})
    plain = sshd_factory(name="plain")
    probe = ["sh", "-c", 'printf "%s|%s" "$(date +%Z)" "${LANG-unset}"']
    with open_box(spec_of(tokyo)) as box:
        assert run_on(box, probe)[1] == b"JST|de_DE.UTF-8"
    with open_box(spec_of(plain)) as box:
        zone, _, _ = run_on(box, probe)[1].partition(b"|")
    assert zone != b"JST"


def test_silent_port_times_out_with_bounded_attempts(ssh_box: SshBox) -> None:
    with socket.socket() as server:  # accepts TCP, never says a banner
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        spec = HostSpec(
            name="mute",
            hostname="127.0.0.1",
            port=server.getsockname()[1],
            user=ssh_box.user,
            identity_files=(str(ssh_box.key_path),),
            user_known_hosts=(str(ssh_box.known_hosts),),
        )
        with pytest.raises(BoxError) as caught:
            with open_box(spec, connect_timeout=0.3, retry_delays=(0.0, 0.0)):
                pass
    assert caught.value.kind == "timeout"
    assert caught.value.attempts == 3
    assert str(caught.value).startswith("mute: unreachable: ")
