"""Coordinator side; stdlib and the SSH stack (ssh.py). Disposable servers: a host whose
`[tool.charpin.hosts.NAME]` has `provision` and `dispose` commands is made for one run.

The provision commands run on this machine, in the repository folder, and the last line they
print is one JSON object: {"host", "port", "user", "host_key", "identity_file", "id"}. charpin
connects with exactly that host key (a private known_hosts file holding only it: no trust on
first use), runs the box as usual, and runs the dispose commands with CHARPIN_HOST_ID=<id> and
CHARPIN_HOST=<alias> exactly once: after the run, and also when connecting, setup or the run
fails, on a timeout and on Ctrl-C. A dispose that fails is recorded with the id, for the CLI to
say loudly which server to delete by hand.
"""

from __future__ import annotations

import json
import os
import re
import shutil
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
_KEY = re.compile(r"(ssh-ed25519|ecdsa-sha2-nistp(?:256|384|521)|ssh-rsa) [A-Za-z0-9+/]+=*")


@dataclass
class Disposals:
    """What was disposed and what failed, across the boxes of a run (thread-safe)."""

    done: list[tuple[str, str]] = field(default_factory=list)  # (alias, id)
    failed: list[tuple[str, str, str]] = field(default_factory=list)  # (alias, id, reason)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, alias: str, box_id: str, problem: str | None) -> None:
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
        from charpin_coordinator.remote.ssh import SshTransport  # the SSH stack, when needed

        made = provision(spec, repo, timeout)
        dispose = _Disposer(spec, repo, made.id, disposals)
        folder = tempfile.mkdtemp(prefix="charpin-provisioned-")
        try:
            known = Path(folder) / "known_hosts"
            endpoint = made.host if made.port == 22 else f"[{made.host}]:{made.port}"
            known.write_text(f"{endpoint} {made.host_key}\n", encoding="utf-8")
            resolved = replace(
                spec,
                hostname=made.host,
                port=made.port,
                user=made.user,
                identity_files=(made.identity_file,) if made.identity_file else (),
                identities_only=bool(made.identity_file),
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
            dispose()
            raise
        return Disposable(box, dispose, folder)

    return connect


def provision(spec: HostSpec, repo: Path, timeout: float) -> Made:
    """Run spec's provision commands; the server their last output line describes."""
    out = b""
    for command in spec.extras.provision or []:
        done = _shell(command, repo, {"CHARPIN_HOST": spec.name}, timeout, spec.name, "provision")
        if done.returncode != 0:
            raise BoxError(
                spec.name,
                "provision-failed",
                f"provision command {command!r} exited {done.returncode}: "
                f"{last_lines(done.stderr or done.stdout)}; fix it or the provider's credentials",
            )
        out = done.stdout
    return parse_made(spec.name, out)


def parse_made(alias: str, stdout: bytes) -> Made:
    """The JSON object on the last non-empty line of a provision command's output."""
    lines = [line for line in stdout.decode("utf-8", "replace").splitlines() if line.strip()]

    def bad(why: str) -> BoxError:
        return BoxError(
            alias,
            "provision-failed",
            f"provision printed {why}; its last line must be one JSON object with host, port, "
            "user, host_key, identity_file and id",
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
    port = data.get("port", 22)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise bad(f"port {port!r}")
    key = str(data["host_key"]).strip()
    if not _KEY.fullmatch(" ".join(key.split()[:2])):
        raise bad(f"host_key {key[:40]!r}, which is not one `type base64` public key")
    return Made(
        host=str(data["host"]),
        port=port,
        user=str(data["user"]),
        host_key=" ".join(key.split()[:2]),
        identity_file=str(data.get("identity_file") or ""),
        id=str(data["id"]),
    )


class _Disposer:
    """Runs the dispose commands once, whoever asks first."""

    def __init__(self, spec: HostSpec, repo: Path, box_id: str, disposals: Disposals):
        self.spec, self.repo, self.id, self.disposals = spec, repo, box_id, disposals
        self._once = threading.Lock()
        self._done = False

    def __call__(self) -> None:
        with self._once:
            if self._done:
                return
            self._done = True
        problem = None
        env = {"CHARPIN_HOST": self.spec.name, "CHARPIN_HOST_ID": self.id}
        for command in self.spec.extras.dispose or []:
            try:
                done = _shell(command, self.repo, env, DISPOSE_SECONDS, self.spec.name, "dispose")
            except BoxError as exc:
                problem = str(exc)
                break
            if done.returncode != 0:
                problem = f"{command!r} exited {done.returncode}: {last_lines(done.stderr)}"
                break
        self.disposals.record(self.spec.name, self.id, problem)


class Disposable:
    """An SshTransport whose close() also disposes of the server it runs on."""

    def __init__(self, box: Transport, dispose: Callable[[], None], folder: str):
        self._box, self._dispose, self._folder = box, dispose, folder
        self.name = box.name
        self.home = box.home
        self.host_key_fingerprint = box.host_key_fingerprint
        self.host_key_accepted_new = box.host_key_accepted_new
        self.stats: TransferStats = box.stats  # the same object: counts stay live

    def open(self, argv: Sequence[str]) -> Channel:
        """Start argv on the provisioned server."""
        return self._box.open(argv)

    def close(self) -> None:
        """Close the connection, then dispose of the server (once)."""
        try:
            self._box.close()
        finally:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._dispose()


def _shell(
    command: str, repo: Path, extra: dict[str, str], timeout: float, alias: str, what: str
) -> subprocess.CompletedProcess[bytes]:
    try:
        # Provision and dispose are this machine's configured shell lines (never a patch's).
        return subprocess.run(  # noqa: S602
            command,
            shell=True,
            cwd=str(repo),
            env={**os.environ, **extra},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise BoxError(
            alias, "provision-failed", f"{what} command {command!r} ran past {timeout:g}s"
        ) from None
