"""Test helper: throwaway OpenSSH sshd processes on loopback, one per "box". Stdlib + pytest.

Each box gets its own host key, client key, authorized_keys, pinned known_hosts line, ssh_config
with a `Host <alias>` block and a HOME-like root folder (set through sshd `SetEnv HOME=...`).
Every process of a box (the sshd master, its per-connection children and every command a session
starts) carries a marker variable, so teardown can find and kill all of them and tests can assert
that nothing of a run was left behind.
"""

from __future__ import annotations

import os
import pwd
import shlex
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SSHD = Path("/usr/sbin/sshd")
MARKER = "CHARPIN_TEST_SSHD_BOX"
_BANNER_DEADLINE = 10.0


@dataclass
class SshBox:
    """One running sshd and everything a client needs to reach it."""

    name: str
    host: str
    port: int
    alias: str
    user: str
    key_path: Path
    known_hosts: Path
    ssh_config: Path
    root: Path
    host_key_line: str
    fingerprint: str
    log_path: Path
    box_id: str
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def log(self) -> str:
        """Return the sshd `-e` log so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def pids(self) -> list[int]:
        """Pids of every live process of this box: sshd's process tree plus marked commands."""
        # sshd rewrites its process title over its environ, so sshd processes are found through
        # the process tree; session commands get a fresh environ and carry the SetEnv marker.
        needle = f"{MARKER}={self.box_id}".encode()
        parents: dict[int, int] = {}
        found: set[int] = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            fields = stat.rpartition(")")[2].split()
            if fields[0] == "Z":  # a zombie is not "left running"
                continue
            parents[int(entry.name)] = int(fields[1])
            if needle in environ.split(b"\0"):
                found.add(int(entry.name))
        if self.proc is not None and self.proc.poll() is None:
            found.add(self.proc.pid)
        grew = True
        while grew:
            more = {pid for pid, ppid in parents.items() if ppid in found} - found
            found |= more
            grew = bool(more)
        return sorted(found)

    def session_pids(self) -> list[int]:
        """Pids of processes started by sessions (everything but sshd itself)."""
        result = []
        for pid in self.pids():
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                continue
            if exe != str(SSHD):
                result.append(pid)
        return result

    def kill_sshd(self) -> None:
        """Kill the sshd master and its connection processes (sessions keep running)."""
        for pid in self.pids():
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                continue
            if exe == str(SSHD):
                _signal(pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """Terminate sshd and every process it started; bounded."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        for _ in range(50):
            left = self.pids()
            if not left:
                return
            for pid in left:
                _signal(pid, signal.SIGKILL)
            time.sleep(0.05)


SshdFactory = Callable[..., SshBox]


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "charpin-test", "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )


def _fingerprint(pub: Path) -> str:
    out = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    return out.split()[1]


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _wait_banner(host: str, port: int, proc: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + _BANNER_DEADLINE
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection((host, port), timeout=1.0) as sock:
                sock.settimeout(1.0)
                if sock.recv(64).startswith(b"SSH-"):
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def ssh_config_quote(alias: str) -> str:
    """Quote a Host pattern for ssh_config: double quotes, the one quoting both OpenSSH and
    paramiko (shlex) read."""
    return f'"{alias}"' if alias != shlex.quote(alias) else alias


def localtime_wrapper(zone: str) -> list[str]:
    """Return a wrapper argv that gives sshd a private /etc/localtime showing zone."""
    zonefile = Path("/usr/share/zoneinfo") / zone
    if not zonefile.is_file():
        pytest.skip(f"time zone {zone} is missing from /usr/share/zoneinfo (install tzdata)")
    if os.geteuid() != 0:
        pytest.skip("a private /etc/localtime needs root (unshare --mount + mount --bind)")
    script = f'mount --bind {shlex.quote(str(zonefile))} /etc/localtime && exec "$0" "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]


def start_sshd(
    base: Path,
    *,
    name: str = "box",
    alias: str | None = None,
    host: str = "127.0.0.1",
    set_env: Mapping[str, str] | None = None,
    options: Sequence[str] = (),
    wrap: Sequence[str] = (),
    localtime: str | None = None,
    sftp: bool = True,
) -> SshBox:
    """Start one sshd under base/<name>/ and return the box once its banner answers.

    options are extra `Key=Value` sshd settings; wrap is an argv prefix (sshd runs under it);
    localtime gives the box another system time zone through a private mount namespace;
    sftp=False leaves the box without an SFTP subsystem (like some hardened servers).
    """
    if not SSHD.exists():
        pytest.skip(f"{SSHD} is not installed (apt-get install openssh-server)")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation folder
    folder = base / name
    folder.mkdir(parents=True, mode=0o700)
    root = folder / "home"
    root.mkdir(mode=0o700)
    host_key = folder / "host_key"
    client_key = folder / "client_key"
    _keygen(host_key)
    _keygen(client_key)
    authorized = folder / "authorized_keys"
    authorized.write_bytes(client_key.with_suffix(".pub").read_bytes())
    authorized.chmod(0o600)
    pub = host_key.with_suffix(".pub").read_text().split()
    box_id = uuid.uuid4().hex
    prefix = list(wrap)
    if localtime is not None:
        prefix = [*prefix, *localtime_wrapper(localtime)]
    env_pairs = {"HOME": str(root), MARKER: box_id, **(set_env or {})}
    setenv = " ".join(shlex.quote(f"{k}={v}") for k, v in env_pairs.items())
    log_path = folder / "sshd.log"
    alias = alias or name
    for _ in range(5):
        port = _free_port(host)
        argv = [
            *prefix,
            str(SSHD), "-D", "-e", "-f", "/dev/null",
            "-o", f"ListenAddress={host}",
            "-o", f"Port={port}",
            "-o", f"HostKey={host_key}",
            "-o", f"AuthorizedKeysFile={authorized}",
            "-o", f"PidFile={folder / 'sshd.pid'}",
            "-o", "PasswordAuthentication=no",
            "-o", "KbdInteractiveAuthentication=no",
            "-o", "UsePAM=no",
            "-o", "StrictModes=no",
            "-o", "PermitRootLogin=prohibit-password",
            *(["-o", "Subsystem=sftp internal-sftp"] if sftp else []),
            "-o", f"SetEnv={setenv}",
            *[arg for opt in options for arg in ("-o", opt)],
        ]  # fmt: skip
        log = log_path.open("ab")
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env={**os.environ, MARKER: box_id},
            start_new_session=True,
        )
        log.close()
        if _wait_banner(host, port, proc):
            break
        proc.kill()
        proc.wait(timeout=10)
        # another worker may have taken the port between our probe and sshd's bind; try again
        if "Address already in use" not in log_path.read_text(errors="replace"):
            raise RuntimeError(f"sshd for {name} did not start; log:\n{log_path.read_text()}")
    else:
        raise RuntimeError(f"sshd for {name} found no free port; log:\n{log_path.read_text()}")
    known_hosts = folder / "known_hosts"
    host_field = host if port == 22 else f"[{host}]:{port}"
    line = f"{host_field} {pub[0]} {pub[1]}"
    known_hosts.write_text(line + "\n")
    ssh_config = folder / "ssh_config"
    ssh_config.write_text(
        f"Host {ssh_config_quote(alias)}\n"
        f"    HostName {host}\n"
        f"    Port {port}\n"
        f"    User {_user()}\n"
        f"    IdentityFile {client_key}\n"
        f"    IdentitiesOnly yes\n"
        f"    UserKnownHostsFile {known_hosts}\n"
    )
    return SshBox(
        name=name,
        host=host,
        port=port,
        alias=alias,
        user=_user(),
        key_path=client_key,
        known_hosts=known_hosts,
        ssh_config=ssh_config,
        root=root,
        host_key_line=line,
        fingerprint=_fingerprint(host_key.with_suffix(".pub")),
        log_path=log_path,
        box_id=box_id,
        argv=argv,
        proc=proc,
    )


def _user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name
