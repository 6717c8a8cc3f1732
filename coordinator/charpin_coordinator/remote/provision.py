"""Coordinator side; stdlib, plus the SSH stack (ssh.py) once a server exists. Disposable servers.

A host whose `[tool.charpin.hosts.NAME]` has `provision` and `dispose` commands is made for one
run. The provision commands run on this machine, in the repository folder, and the last line they
print is one JSON object: {"host", "port", "user", "host_key", "identity_file", "id"}. charpin
connects with exactly that host key (a private known_hosts file holding only it: no trust on
first use), runs the box as usual, and runs the dispose commands with CHARPIN_HOST_ID=<id> and
CHARPIN_HOST=<alias> exactly once: after the run, and also when connecting, setup or the run
fails, on a timeout and on Ctrl-C. The rule is simple: dispose runs once for every id provision
printed, even when that provision then failed or printed something else unusable; a provision
that printed no id has nothing to dispose and must remove what it made itself. A dispose that
fails is recorded with the id, for the CLI to say loudly which server to delete by hand.

Both kinds of command run in their own session with their output in files: a Ctrl-C typed at the
terminal cannot kill a provision halfway (leaving a server nobody knows the id of) or a dispose,
a timeout kills everything the command started, and a daemon the command leaves running (a
loopback sshd) cannot hold a pipe open and hang us.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from charpin_coordinator.remote.errors import BoxError, last_lines
from charpin_coordinator.remote.hosts import HostSpec
from charpin_coordinator.remote.transport import Channel, TransferStats, Transport

PROVISION_SECONDS = 600.0
DISPOSE_SECONDS = 300.0
# Host key algorithms an OpenSSH server can hold; the blob must name the same type inside.
_KEY = re.compile(r"(ssh-ed25519|ecdsa-sha2-nistp(?:256|384|521)|ssh-rsa) ([A-Za-z0-9+/]+=*)")


@dataclass
class Disposals:
    """What was disposed and what failed, across the boxes of a run (thread-safe)."""

    done: list[tuple[str, str]] = field(default_factory=list)  # (alias, id)
    failed: list[tuple[str, str, str]] = field(default_factory=list)  # (alias, id, reason)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, alias: str, box_id: str, problem: str | None) -> None:
        """Note one dispose: done when problem is None, else failed with that one-line reason."""
        with self._lock:
            if problem is None:
                self.done.append((alias, box_id))
            else:
                self.failed.append((alias, box_id, problem))


@dataclass(frozen=True)
class Made:
    """A provisioned server, as its provision command described it."""

    host: str
    port: int
    user: str
    host_key: str
    identity_file: str
    id: str


def connector(
    spec: HostSpec,
    *,
    repo: Path,
    disposals: Disposals,
    timeout: float = PROVISION_SECONDS,
) -> Callable[[], Transport]:
    """A call that provisions spec's server, connects to it and returns a Transport whose
    close() also disposes of the server."""

    def connect() -> Transport:
        holder: list[_Disposer] = []  # filled as soon as a provision command prints an id
        try:
            out = _provision(spec, repo, timeout, disposals, holder)
            made = parse_made(spec.name, out)
            if made.id != holder[0].id:  # the one disposed must be the one we connect to
                raise BoxError(
                    spec.name,
                    "provision-failed",
                    f"provision printed two ids ({holder[0].id!r}, then {made.id!r}); "
                    "make only its last command print the server's JSON",
                )
            return _connect(spec, made, repo, holder[0])
        except BaseException:
            if holder:
                holder[0]()
            raise

    return connect


def _provision(
    spec: HostSpec, repo: Path, timeout: float, disposals: Disposals, holder: list[_Disposer]
) -> bytes:
    """Run the provision commands; the last one's output. holder gets the first id printed."""
    out = b""
    env = {"CHARPIN_HOST": spec.name}
    for command in spec.extras.provision or []:
        done = _shell(command, repo, env, timeout, spec.name, "provision")
        box_id = printed_id(done.stdout)
        if box_id is not None and not holder:
            holder.append(_Disposer(spec, repo, box_id, disposals))
        if done.returncode != 0:
            after = (
                f"it printed id {holder[0].id!r}, which is disposed now"
                if holder
                else "it printed no id, so nothing is disposed: a failing provision must "
                "remove what it made"
            )
            raise BoxError(
                spec.name,
                "provision-failed",
                f"provision command {command!r} exited {done.returncode}: "
                f"{last_lines(done.stderr or done.stdout)}; fix that command or the "
                f"provider's credentials ({after})",
            )
        out = done.stdout
    return out


def _connect(spec: HostSpec, made: Made, repo: Path, dispose: _Disposer) -> Transport:
    """Connect to the made server with only its printed host key trusted."""
    from charpin_coordinator.remote.ssh import SshTransport  # the SSH stack, once needed

    folder = tempfile.mkdtemp(prefix="charpin-provisioned-")
    try:
        known = Path(folder) / "known_hosts"
        endpoint = made.host if made.port == 22 else f"[{made.host}]:{made.port}"
        known.write_text(f"{endpoint} {made.host_key}\n", encoding="utf-8")
        identity = str(repo / Path(made.identity_file).expanduser()) if made.identity_file else ""
        resolved = replace(
            spec,
            hostname=made.host,
            port=made.port,
            user=made.user,
            identity_files=(identity,) if identity else (),
            # the key made for this server only: the ssh agent's keys are not offered to it
            identities_only=bool(identity),
            user_known_hosts=(str(known),),
            global_known_hosts=(),
            proxy_jump=(),
        )
        box = SshTransport(resolved, accept_new=False)
        try:
            box.connect()
        except BaseException:
            box.close()
            raise
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return Disposable(box, dispose, folder)


def printed_id(stdout: bytes) -> str | None:
    """The id on the last non-empty output line, when that line is a JSON object with one."""
    lines = [line for line in stdout.decode("utf-8", "replace").splitlines() if line.strip()]
    try:
        data: Any = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    box_id = data.get("id") if isinstance(data, dict) else None
    if isinstance(box_id, bool) or not isinstance(box_id, (str, int)) or not str(box_id).strip():
        return None
    return str(box_id)


def parse_made(alias: str, stdout: bytes) -> Made:
    """The JSON object on the last non-empty line of a provision command's output."""
    lines = [line for line in stdout.decode("utf-8", "replace").splitlines() if line.strip()]

    def bad(why: str) -> BoxError:
        return BoxError(
            alias,
            "provision-failed",
            f"provision printed {why}; its last line must be one JSON object with host, port, "
            "user, host_key, identity_file and id: fix the provision command",
        )

    try:
        data: Any = json.loads(lines[-1]) if lines else None
    except ValueError:
        raise bad("no JSON on its last line") from None
    if not isinstance(data, dict):
        raise bad("nothing usable")
    missing = [k for k in ("host", "user", "host_key", "id") if not data.get(k)]
    if missing:
        raise bad(f"an object without {', '.join(missing)}")
    if printed_id(stdout) is None:
        raise bad(f"id {data['id']!r}, which is not a string or a number")
    port = data.get("port", 22)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise bad(f"port {port!r}")
    host = str(data["host"])
    if host.startswith("-") or any(ch.isspace() for ch in host) or "@" in host:
        raise bad(f"host {host[:40]!r}, which is not a host name or address")
    key = " ".join(str(data["host_key"]).split()[:2])
    if "\n" in str(data["host_key"]).strip() or not _one_key(key):
        raise bad(f"host_key {key[:40]!r}, which is not one `type base64` public key")
    return Made(
        host=host,
        port=port,
        user=str(data["user"]),
        host_key=key,
        identity_file=str(data.get("identity_file") or ""),
        id=str(data["id"]),
    )


def _one_key(text: str) -> bool:
    """`type base64` whose blob decodes and names the same type (a key pasted whole)."""
    match = _KEY.fullmatch(text)
    if match is None:
        return False
    try:
        blob = base64.b64decode(match.group(2), validate=True)
    except (binascii.Error, ValueError):
        return False
    if len(blob) < 4:
        return False
    (size,) = struct.unpack(">I", blob[:4])
    return blob[4 : 4 + size] == match.group(1).encode() and len(blob) > 4 + size


class _Disposer:
    """Runs the dispose commands once, whoever asks first (the box, a failure, or exit)."""

    def __init__(self, spec: HostSpec, repo: Path, box_id: str, disposals: Disposals):
        self.spec, self.repo, self.id, self.disposals = spec, repo, box_id, disposals
        self._once = threading.Lock()
        self._done = False
        with _pending_lock:
            _pending.add(self)

    def __call__(self) -> None:
        with self._once:
            if self._done:
                return
            self._done = True
        try:
            self.disposals.record(self.spec.name, self.id, self._dispose())
        finally:
            with _pending_lock:
                _pending.discard(self)

    def _dispose(self) -> str | None:
        """Every dispose command, even after one failed; the first failure as one line."""
        problems: list[str] = []
        env = {"CHARPIN_HOST": self.spec.name, "CHARPIN_HOST_ID": self.id}
        for command in self.spec.extras.dispose or []:
            try:
                done = _shell(command, self.repo, env, DISPOSE_SECONDS, self.spec.name, "dispose")
            except BoxError as exc:
                problems.append(str(exc).removeprefix(f"{self.spec.name}: "))
                continue
            except OSError as exc:  # no shell, a repository folder that vanished
                problems.append(f"dispose command {command!r} could not start: {exc}")
                continue
            if done.returncode != 0:
                tail = last_lines(done.stderr or done.stdout)
                problems.append(f"dispose command {command!r} exited {done.returncode}: {tail}")
        if not problems:
            return None
        more = f" (and {len(problems) - 1} more failed)" if len(problems) > 1 else ""
        return problems[0] + more


# Disposers whose server exists and that have not run yet: run at interpreter exit, so a second
# Ctrl-C (which abandons the box threads) still removes every server whose id we know.
_pending: set[_Disposer] = set()
_pending_lock = threading.Lock()


@atexit.register
def _dispose_leftovers() -> None:
    with _pending_lock:
        left = list(_pending)
    for dispose in left:
        dispose()


class Disposable:
    """An SshTransport whose close() also disposes of the server it runs on."""

    def __init__(self, box: Transport, dispose: Callable[[], None], folder: str):
        self._box, self._dispose, self._folder = box, dispose, folder
        self.name = box.name
        self.home = box.home
        self.host_key_fingerprint = box.host_key_fingerprint
        self.host_key_accepted_new = box.host_key_accepted_new
        self.stats: TransferStats = box.stats  # the same object: counts stay live

    def open(self, argv: Sequence[str], *, deadline: float | None = None) -> Channel:
        """Start argv on the provisioned server."""
        return self._box.open(argv, deadline=deadline)

    def close(self) -> None:
        """Close the connection, then dispose of the server (once)."""
        try:
            self._box.close()
        finally:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._dispose()


@dataclass(frozen=True)
class _Done:
    returncode: int
    stdout: bytes
    stderr: bytes


def _shell(
    command: str, repo: Path, extra: dict[str, str], timeout: float, alias: str, what: str
) -> _Done:
    """Run one configured shell line in its own session, output in files, killed at timeout."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        # Provision and dispose are this machine's configured shell lines (never a patch's).
        proc = subprocess.Popen(  # noqa: S602
            command,
            shell=True,
            cwd=str(repo),
            env={**os.environ, **extra},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # killed while it still runs (its pid cannot have been reused): all it started dies
            _kill_group(proc.pid)
            proc.wait()
            hint = (
                "a server it may have made has no known id: check the provider"
                if what == "provision"
                else "the server may still exist"
            )
            raise BoxError(
                alias,
                "provision-failed",
                f"{what} command {command!r} ran past {timeout:g}s and was killed "
                f"({last_lines(_tail(err))}); {hint}, and make the command finish sooner",
            ) from None
        except BaseException:
            _kill_group(proc.pid)
            proc.wait()
            raise
        out.seek(0)
        return _Done(code, out.read(), _tail(err))


def _tail(handle: Any) -> bytes:
    handle.seek(0, os.SEEK_END)
    handle.seek(max(0, handle.tell() - 64 * 1024))
    data: bytes = handle.read()
    return data


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
