"""Attack: known_hosts lines paramiko cannot read (@revoked, @cert-authority, garbage) must neither
crash a run nor let a revoked box key in; matching agrees with OpenSSH's own ssh-keygen -F."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
from charpin_coordinator.remote.errors import BoxError
from charpin_coordinator.remote.hostkeys import load_known_hosts, parse_line
from charpin_coordinator.remote.hosts import HostSpec, resolve_hosts
from charpin_coordinator.remote.ssh import open_box

from tests.hostile.harness import not_evaluated, repo_with, run
from tests.sshd import SshBox, SshdFactory, _fingerprint, _keygen

pytestmark = pytest.mark.ssh

PASSING = {"tests/test_ok.py": "def test_ok():\n    pass\n"}


def _new_key(path: Path) -> tuple[str, str]:
    """A fresh ed25519 public key as `type base64`, and its SHA256 fingerprint."""
    _keygen(path)
    pub = path.with_suffix(".pub")
    return " ".join(pub.read_text().split()[:2]), _fingerprint(pub)


def _spec(box: SshBox) -> HostSpec:
    [spec] = resolve_hosts([box.alias], ssh_config=box.ssh_config)
    return spec


def _box_key(box: SshBox) -> str:
    return " ".join(box.host_key_line.split()[1:3])


def test_revoked_box_is_not_evaluated_as_host_key_while_marker_lines_elsewhere_are_skipped(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    good = sshd_factory(name="good", alias="good")
    bad = sshd_factory(name="bad", alias="bad")
    ca_key, _ = _new_key(tmp_path / "ca")
    # paramiko's HostKeys raised InvalidHostKey on both files: every box was runner-failed.
    good.known_hosts.write_text(
        f"@cert-authority *.example.com {ca_key} fleet CA\n"
        "this line is not a known_hosts line\n"
        f"{good.host_key_line}\n"
    )
    bad.known_hosts.write_text(f"{bad.host_key_line}\n@revoked * {_box_key(bad)}\n")
    config = tmp_path / "ssh_config"
    config.write_text(good.ssh_config.read_text() + bad.ssh_config.read_text())
    repo = repo_with(tmp_path / "repo", PASSING, [good, bad])

    code, report, _ = run(repo, "good,bad", ssh_config=config)

    missing = not_evaluated(report)
    assert list(missing) == ["bad"]
    assert missing["bad"]["kind"] == "host-key"
    assert missing["bad"]["reason"] == (
        f"bad: host key for [127.0.0.1]:{bad.port} is REVOKED: {bad.fingerprint} is on the "
        f"@revoked line {bad.known_hosts}:2; refusing: the box needs a new host key (if the "
        "revocation is a mistake, delete that line)"
    )
    assert [b["label"] for b in report["boxes"]] == ["good"]
    assert code & 4


@pytest.mark.parametrize("hosts", ["{endpoint}", "*", "elsewhere.invalid", "!{endpoint}"])
@pytest.mark.parametrize("accept_new", [False, True])
def test_revoked_key_is_refused_even_when_another_line_accepts_it(
    ssh_box: SshBox, hosts: str, accept_new: bool
) -> None:
    endpoint = f"[127.0.0.1]:{ssh_box.port}"
    revoked = f"@revoked {hosts.format(endpoint=endpoint)} {_box_key(ssh_box)} stolen 2024-05\n"
    ssh_box.known_hosts.write_text(f"{ssh_box.host_key_line}\n# rotated\n{revoked}")
    before = ssh_box.known_hosts.read_bytes()
    with pytest.raises(BoxError) as caught:
        with open_box(_spec(ssh_box), accept_new=accept_new):
            pass
    assert caught.value.kind == "host-key"
    assert caught.value.attempts == 1
    message = str(caught.value)
    assert f"{endpoint} is REVOKED: {ssh_box.fingerprint}" in message
    assert f"@revoked line {ssh_box.known_hosts}:3;" in message
    assert message.endswith(
        "the box needs a new host key (if the revocation is a mistake, delete that line)"
    )
    assert "\n" not in message
    assert ssh_box.known_hosts.read_bytes() == before
    # refused before authentication: the box never saw a login
    assert "Accepted publickey" not in ssh_box.log()


def test_revoked_line_of_another_key_changes_nothing(ssh_box: SshBox, tmp_path: Path) -> None:
    other, _ = _new_key(tmp_path / "old")
    ssh_box.known_hosts.write_text(f"@revoked * {other}\n{ssh_box.host_key_line}\n")
    with open_box(_spec(ssh_box)) as box:
        assert box.host_key_fingerprint == ssh_box.fingerprint
        assert box.host_key_notes == ()


def test_cert_authority_and_malformed_lines_are_skipped_with_notes_and_the_box_connects(
    ssh_box: SshBox, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ca_key, _ = _new_key(tmp_path / "ca")
    endpoint = f"[127.0.0.1]:{ssh_box.port}"
    kind, b64 = _box_key(ssh_box).split()
    ssh_box.known_hosts.write_text(
        f"@cert-authority {endpoint} {ca_key}\n"  # 1: even for this very box
        f"{endpoint} {kind} {b64[:-7]}!!\n"  # 2: key is not base64
        f"{endpoint} ssh-rsa {b64}\n"  # 3: blob says ed25519
        f"@trusted {endpoint} {kind} {b64}\n"  # 4: unknown marker
        f"{endpoint}\n"  # 5: too few fields
        f"|1|c2FsdA==|aGFzaA== {kind} {b64}\n"  # 6: hashed name of the wrong length
        f"{ssh_box.host_key_line}\n"  # 7
    )
    path = ssh_box.known_hosts
    expected = (
        f"{path}:1: skipped an @cert-authority line: host certificates are not supported; "
        "list the box's own host key to trust it",
        f"{path}:2: skipped a malformed known_hosts line (the key is not valid base64); "
        "fix or delete it",
        f"{path}:3: skipped a malformed known_hosts line (the key is not a 'ssh-rsa' key); "
        "fix or delete it",
        f"{path}:4: skipped a malformed known_hosts line (unknown marker '@trusted' (known: "
        "@revoked, @cert-authority)); fix or delete it",
        f"{path}:5: skipped a malformed known_hosts line (expected host names, a key type and "
        "a base64 key); fix or delete it",
        f"{path}:6: skipped a malformed known_hosts line (hashed host name "
        "'|1|c2FsdA==|aGFzaA==' is not |1|salt|hash); fix or delete it",
    )
    caplog.set_level(logging.WARNING, logger="charpin_coordinator.remote.hostkeys")
    for _ in range(2):
        with open_box(_spec(ssh_box)) as box:
            assert box.host_key_fingerprint == ssh_box.fingerprint
            assert box.host_key_notes == expected
    # many boxes and retries read one file: each note is logged once per process
    assert [r.getMessage() for r in caplog.records] == [
        f"charpin-remote: note: {note}" for note in expected
    ]


def test_hostile_bytes_in_known_hosts_never_crash_the_parser(tmp_path: Path) -> None:
    key, _ = _new_key(tmp_path / "k")
    kind, b64 = key.split()
    lines = [
        b"\xff\xfe\x00 binary \x00 junk",
        b"@revoked",
        b"@revoked host-only",
        b"@cert-authority",
        b"host " + b"x" * 1_000_000,
        b"host ssh-ed25519 AAAA",
        b"host ssh-ed25519 ====",
        b"|2|abc|def ssh-ed25519 " + b64.encode(),
        b"|1|" + b"|" * 5 + b" ssh-ed25519 " + b64.encode(),
        b"host\x0bsplit ssh-ed25519 " + b64.encode(),
        f"good,host\t{kind}\t{b64}\tcomment with  spaces\r".encode(),
    ]
    path = tmp_path / "known_hosts"
    path.write_bytes(b"\n".join(lines) + b"\n")
    known = load_known_hosts([str(path), str(tmp_path / "missing"), str(tmp_path)])
    assert [(line.lineno, line.patterns) for line in known.lines] == [
        (10, ("host\x0bsplit",)),  # str.split() would break at \x0b too; OpenSSH does not
        (11, ("good", "host")),
    ]
    # a pattern with thousands of stars must not make a match take exponential time
    stars = parse_line("kh", 1, f"{'*a' * 3000}b {key}")
    assert stars is not None and not stars.matches("a" * 500)
    where = re.compile(rf"{re.escape(str(path))}:(\d+): skipped ")
    noted = [int(m[1]) for m in map(where.match, known.notes) if m]
    assert len(noted) == len(known.notes)
    assert noted == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert all(len(note) < 300 for note in known.notes)


# Patterns OpenSSH's sshd(8) describes; ssh-keygen -F is the oracle for which lines match.
PATTERNS = [
    "plain.example.com",
    "*.example.com,!bad.example.com",
    "[10.0.0.?]:2222",
    "[10.0.0.5]:*",
    "10.0.0.5,Mixed.Case.Example",
    "!*.internal,*",
    "a?c,x*z",
    "[weird]host]:22",
]
NAMES = [
    "plain.example.com",
    "PLAIN.example.com",
    "a.example.com",
    "bad.example.com",
    "example.com",
    "[10.0.0.5]:2222",
    "[10.0.0.55]:2222",
    "[10.0.0.5]:22",
    "10.0.0.5",
    "mixed.case.example",
    "db.internal",
    "abc",
    "ac",
    "xz",
    "x.y.z",
    "[weird]host]:22",
]


def _openssh_lines(path: Path, name: str) -> list[int]:
    done = subprocess.run(
        ["ssh-keygen", "-F", name, "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return [int(n) for n in re.findall(r"^# Host .* found: line (\d+) *$", done.stdout, re.M)]


@pytest.mark.parametrize("hashed", [False, True])
def test_host_matching_agrees_with_ssh_keygen(tmp_path: Path, hashed: bool) -> None:
    key, _ = _new_key(tmp_path / "k")
    path = tmp_path / "known_hosts"
    path.write_text("".join(f"{pattern} {key}\n" for pattern in PATTERNS))
    if hashed:  # hashes plain names; wildcard and negated lines stay as they are
        subprocess.run(
            ["ssh-keygen", "-H", "-f", str(path)], check=True, capture_output=True, timeout=30
        )
        assert "|1|" in path.read_text()
    known = load_known_hosts([str(path)])
    assert not known.notes
    for name in NAMES:
        ours = [line.lineno for line in known.for_host(name)]
        # ssh lower-cases the host name before it looks it up (ssh-keygen -F does not)
        assert ours == _openssh_lines(path, name.lower()), name


def test_marker_lines_parse_as_openssh_reads_them(tmp_path: Path) -> None:
    key, _ = _new_key(tmp_path / "k")
    revoked = parse_line("kh", 7, f"  @revoked\t*.example.com {key} why\n")
    assert revoked is not None
    assert (revoked.marker, revoked.patterns, revoked.where) == (
        "@revoked",
        ("*.example.com",),
        "kh:7",
    )
    assert parse_line("kh", 8, f"@cert-authority * {key}") is None
    assert parse_line("kh", 9, "   # a comment") is None
    assert parse_line("kh", 10, "") is None


def test_notes_reach_the_user_once_on_stderr_one_line_each(
    sshd_factory: SshdFactory, tmp_path: Path
) -> None:
    # No coordinator CLI configures logging: the notes reach stderr as their bare message through
    # logging's last-resort handler. This pins that, through the real CLI and two boxes whose
    # ssh_config names one known_hosts file.
    one = sshd_factory(name="one", alias="one")
    two = sshd_factory(name="two", alias="two")
    ca_key, _ = _new_key(tmp_path / "ca")
    shared = one.known_hosts
    shared.write_text(
        f"@cert-authority *.example.com {ca_key}\n"
        "broken-line\n"
        f"{one.host_key_line}\n{two.host_key_line}\n"
    )
    config = tmp_path / "ssh_config"
    config.write_text(
        one.ssh_config.read_text()
        + two.ssh_config.read_text().replace(str(two.known_hosts), str(shared))
    )
    argv = ["hosts", "check", "--hosts", "one,two", "--ssh-config", str(config)]
    done = subprocess.run(
        [sys.executable, "-m", "charpin_coordinator", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    notes = [line for line in done.stderr.splitlines() if "known_hosts" in line or "@cert" in line]
    assert notes == [
        f"charpin-remote: note: {shared}:1: skipped an @cert-authority line: host certificates "
        "are not supported; list the box's own host key to trust it",
        f"charpin-remote: note: {shared}:2: skipped a malformed known_hosts line (expected host "
        "names, a key type and a base64 key); fix or delete it",
    ], done.stderr
    assert "Traceback" not in done.stderr
    assert "[one]" in done.stdout + done.stderr and "[two]" in done.stdout + done.stderr
