"""Coordinator side. The only module that talks to fabric and paramiko over the network.

SshTransport wraps fabric's Connection and fixes what fabric leaves unsafe: host keys are checked
against known_hosts by hostkeys.py (fabric hard-codes AutoAddPolicy), agent forwarding is off (the
agent may authenticate this connection, never the box's onward ones), no environment crosses as
SSH env requests, every timeout is set, and command output is drained concurrently with a deadline
(paramiko deadlocks when a channel's output is not read). Foreign exceptions become one BoxError
line at the boundary (map_ssh_errors).
"""

from __future__ import annotations

import logging
import select
import shlex
import socket
import stat
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

import paramiko
from charpin_runner.errors import IntegrityError, UsageError
from fabric import Config, Connection
from paramiko.ssh_exception import NoValidConnectionsError

from charpin_coordinator.remote.hostkeys import (
    HostKeyRefused,
    HostKeyVerifier,
    StrictClient,
    fingerprint,
)
from charpin_coordinator.remote.hosts import BoxError, HostSpec, is_secret_name
from charpin_coordinator.remote.transport import Completed, TransferStats

# paramiko logs transport-thread failures at ERROR; without a handler Python's last-resort
# handler would print tracebacks. Errors reach the user as BoxError lines instead.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

DEFAULT_CONNECT_TIMEOUT: Final = 10.0
DEFAULT_IO_TIMEOUT: Final = 60.0  # one SFTP read or write, one channel open
RETRY_DELAYS: Final = (0.5, 1.0)  # connect only: 3 attempts in all
KILL_TIMEOUT: Final = 5.0
KEEPALIVE_SECONDS: Final = 15
_CHUNK: Final = 32768

# The first line a command prints is the pid of its shell, which sshd made a session (and so a
# process group) leader: killing `-pid` through a second channel kills everything it started.
_WRAPPER: Final = "printf '%s\\n' \"$$\"; "


@contextmanager
def map_ssh_errors(host: str) -> Iterator[None]:
    """Turn socket/paramiko exceptions into one-line BoxErrors naming host and fix."""
    try:
        yield
    except BoxError:
        raise
    except HostKeyRefused as exc:
        raise BoxError(host, "host-key", exc.explain()) from exc
    except paramiko.AuthenticationException as exc:
        raise BoxError(
            host,
            "auth",
            f"authentication failed ({exc}); check User and IdentityFile in the ssh config",
        ) from exc
    except socket.gaierror as exc:
        raise BoxError(
            host, "dns", f"unreachable: name lookup failed ({exc.strerror}); check HostName"
        ) from exc
    except NoValidConnectionsError as exc:
        addrs = ", ".join(f"{a[0]}:{a[1]}" for a in exc.errors)
        raise BoxError(
            host, "refused", f"unreachable: connection refused ({addrs}); is sshd running there?"
        ) from exc
    except ConnectionRefusedError as exc:
        raise BoxError(
            host, "refused", "unreachable: connection refused; is sshd running there?"
        ) from exc
    except TimeoutError as exc:
        raise BoxError(
            host, "timeout", "unreachable: timed out; check the address and firewall"
        ) from exc
    except paramiko.ChannelException as exc:
        raise BoxError(
            host, "refused", f"unreachable through the jump host: {exc.text}; check ProxyJump"
        ) from exc
    except (paramiko.SSHException, EOFError, OSError) as exc:
        text = str(exc) or type(exc).__name__
        if "No authentication methods" in text or "No existing session" in text:
            raise BoxError(
                host, "auth", f"authentication failed ({text}); set IdentityFile for it"
            ) from exc
        if "banner" in text.lower() or "timeout" in text.lower():
            raise BoxError(host, "timeout", f"unreachable: {text}; is it an SSH server?") from exc
        raise BoxError(host, "disconnected", f"connection lost: {text}; retry the run") from exc


def _open(conn: Any) -> None:
    """Open a fabric Connection, surfacing the transport thread's error when there is one."""
    try:
        conn.open()
    except paramiko.SSHException as exc:
        # A banner timeout kills the transport thread, and the caller then sees a later symptom
        # such as "No existing session"; the saved exception is the real cause.
        transport = conn.client.get_transport()
        saved = getattr(transport, "saved_exception", None)
        if isinstance(saved, Exception) and saved is not exc:
            raise saved from exc
        # paramiko's start_client(timeout=) gives up silently; auth then fails with "No existing
        # session" although the server never finished the handshake: that is a timeout.
        if transport is not None and transport.host_key is None:
            raise TimeoutError("no SSH handshake within the connect timeout") from exc
        raise


def _retryable(exc: BoxError) -> bool:
    return exc.kind in ("refused", "timeout")


class SshTransport:
    """One SSH box. Connect with connect() (or open_box); every operation has a deadline."""

    def __init__(
        self,
        spec: HostSpec,
        *,
        accept_new: bool = False,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        io_timeout: float = DEFAULT_IO_TIMEOUT,
        retry_delays: Sequence[float] = RETRY_DELAYS,
    ):
        if spec.builtin:
            raise UsageError(f"{spec.name} is a built-in box; it does not use SSH")
        self.name = spec.name
        self.spec = spec
        self.stats = TransferStats()
        self.accept_new = accept_new
        self.connect_timeout = connect_timeout
        self.io_timeout = io_timeout
        self.retry_delays = tuple(retry_delays)
        self.host_key_fingerprint: str | None = None
        self.host_key_accepted_new = False
        # lines of the known_hosts files that were skipped (@cert-authority, malformed)
        self.host_key_notes: tuple[str, ...] = ()
        self.connect_attempts = 0
        self._conn: Any = None  # fabric.Connection (untyped)
        self._policy: HostKeyVerifier | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._sftp_missing = False
        self._home: str | None = None

    # -- connection -------------------------------------------------------------------------

    def _connection(self, spec: HostSpec, gateway: Any) -> tuple[Any, HostKeyVerifier]:
        """A fabric Connection with our policy, keys and timeouts; no config files read."""
        # lazy=True and an empty SSHConfig: fabric must not read ~/.fabric.yml or ssh_config
        # behind our back; hosts.py already resolved everything explicitly.
        config = Config(lazy=True, ssh_config=paramiko.SSHConfig())
        kwargs: dict[str, Any] = {
            "timeout": self.connect_timeout,
            "banner_timeout": self.connect_timeout,
            "auth_timeout": self.connect_timeout,
            "channel_timeout": self.io_timeout,
            # Authenticating with the agent is like ssh; forwarding it is what design §8 forbids.
            # IdentitiesOnly: ssh would offer only agent keys matching IdentityFile, and
            # paramiko cannot filter them, so the agent stays out.
            "allow_agent": not spec.identities_only,
            "look_for_keys": not spec.identity_files,
        }
        if spec.identity_files:
            kwargs["key_filename"] = list(spec.identity_files)
        conn = Connection(
            spec.hostname,
            user=spec.user,
            port=spec.port,
            config=config,
            gateway=gateway if gateway is not None else False,
            forward_agent=False,
            connect_kwargs=kwargs,
            inline_ssh_env=False,
        )
        # fabric installs AutoAddPolicy in Connection.__init__ (fabric#1804); replace the client
        # with one that refuses unknown keys and checks every known_hosts file of the spec.
        policy = HostKeyVerifier(spec, accept_new=self.accept_new)
        conn.client = StrictClient(policy)
        return conn, policy

    def _chain(self, spec: HostSpec) -> tuple[Any, HostKeyVerifier]:
        gateway = None
        for index, hop in enumerate(spec.proxy_jump):
            # the first hop may have its own ProxyJump; later hops go through the previous one
            if index == 0 and hop.proxy_jump:
                gateway, _ = self._chain(hop)
            else:
                gateway, _ = self._connection(hop, gateway)
        return self._connection(spec, gateway)

    def connect(self) -> None:
        """Open the connection; retry only refused/timed-out connects, with bounded backoff."""
        delays = [*self.retry_delays, None]
        for delay in delays:
            self.connect_attempts += 1
            conn, policy = self._chain(self.spec)
            self.host_key_notes = policy.known.notes
            try:
                with map_ssh_errors(self.name):
                    _open(conn)
            except BoxError as exc:
                _close_chain(conn)
                if delay is None or not _retryable(exc):
                    exc.attempts = self.connect_attempts
                    raise
                time.sleep(delay)
                continue
            self._conn, self._policy = conn, policy
            break
        transport = self._conn.client.get_transport()
        # keepalives make a silently dropped network show up as a dead transport
        transport.set_keepalive(KEEPALIVE_SECONDS)
        key = transport.get_remote_server_key()
        self.host_key_fingerprint = fingerprint(key)
        self.host_key_accepted_new = policy.accepted is not None

    def _transport(self) -> paramiko.Transport:
        if self._conn is None:
            raise BoxError(self.name, "disconnected", "not connected; call connect() first")
        transport = self._conn.client.get_transport()
        if transport is None or not transport.is_active():
            raise BoxError(self.name, "disconnected", "connection lost; retry the run")
        return transport  # type: ignore[no-any-return]

    # -- commands ---------------------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        stdin: bytes | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Completed:
        """Run argv on the box; drain output while waiting; kill its process group on timeout."""
        command = remote_command(argv, cwd=cwd, env=env)
        self.stats.commands += 1
        with map_ssh_errors(self.name):
            channel = self._transport().open_session(timeout=self.io_timeout)
            try:
                return self._drive(channel, tuple(argv), command, timeout, stdin)
            finally:
                channel.close()

    def _drive(
        self,
        channel: paramiko.Channel,
        argv: tuple[str, ...],
        command: str,
        timeout: float,
        stdin: bytes | None,
    ) -> Completed:
        deadline = time.monotonic() + timeout
        channel.exec_command(command)
        out, err = bytearray(), bytearray()
        pending = memoryview(stdin or b"")
        writing = stdin is not None
        if not writing:
            channel.shutdown_write()  # like stdin=DEVNULL: readers see EOF at once
        pid: int | None = None
        while True:
            while channel.recv_ready():
                out += channel.recv(_CHUNK)
                _keep_tail(out)
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(_CHUNK)
                _keep_tail(err)
            if pid is None and b"\n" in out:
                head, _, rest = bytes(out).partition(b"\n")
                pid = int(head) if head.isdigit() else -1
                out = bytearray(rest)
            # feed stdin in window-sized pieces inside the same loop, so a command that writes
            # a lot before reading its input cannot deadlock us
            if writing and channel.send_ready():
                if pending:
                    sent = channel.send(bytes(pending[:_CHUNK]))
                    self.stats.sent += sent
                    pending = pending[sent:]
                if not pending:
                    channel.shutdown_write()
                    writing = False
            done = channel.closed or (channel.eof_received and channel.exit_status_ready())
            if done and not channel.recv_ready() and not channel.recv_stderr_ready():
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._kill_group(pid)
                self.stats.received += len(out) + len(err)
                return Completed(argv, -9, bytes(out), bytes(err), timed_out=True)
            if not self._transport_alive():
                raise BoxError(self.name, "disconnected", "connection lost during a command")
            select.select([channel], [], [], min(remaining, 0.1))
        # paramiko marks a channel closed by a dead connection as "exit status ready" with -1
        if channel.exit_status == -1 and not self._transport_alive():
            raise BoxError(self.name, "disconnected", "connection lost during a command")
        self.stats.received += len(out) + len(err)
        code = channel.recv_exit_status() if channel.exit_status_ready() else -1
        return Completed(argv, code, bytes(out), bytes(err))

    def _transport_alive(self) -> bool:
        transport = self._conn.client.get_transport() if self._conn is not None else None
        return bool(transport is not None and transport.is_active())

    def _kill_group(self, pid: int | None) -> None:
        if not pid or pid <= 1 or not self._transport_alive():
            return
        # dash's kill rejects `--` and `-s KILL -PID`; `-9 -PID` works in dash, bash and busybox
        script = 'kill -9 "-$1" 2>/dev/null || kill -9 "$1" 2>/dev/null; exit 0'
        try:
            self.run(["sh", "-c", script, "sh", str(pid)], timeout=KILL_TIMEOUT)
        except BoxError:
            pass

    # -- files ------------------------------------------------------------------------------

    def _sftp_client(self) -> paramiko.SFTPClient | None:
        if self._sftp is None and not self._sftp_missing:
            try:
                self._sftp = paramiko.SFTPClient.from_transport(
                    self._transport(), max_packet_size=_CHUNK
                )
            except paramiko.SSHException:
                # hardened boxes may have no sftp subsystem; fall back to exec channels
                self._sftp_missing = True
                return None
            if self._sftp is not None:
                self._sftp.get_channel().settimeout(self.io_timeout)  # type: ignore[union-attr]
        return self._sftp

    def put(self, data: bytes, remote_path: str) -> None:
        """Write data to remote_path atomically (temp name, then rename)."""
        directory, _, base = remote_path.rpartition("/")
        tmp = f"{directory}/.{base}.part" if directory else f".{base}.part"
        with map_ssh_errors(self.name):
            sftp = self._sftp_client()
            if sftp is None:
                script = 'cat > "$1" && mv -f -- "$1" "$2"'
                done = self.run(
                    ["sh", "-c", script, "sh", tmp, remote_path],
                    timeout=self.io_timeout + len(data) / 1_000_000,
                    stdin=data,
                )
                if done.returncode != 0 or done.timed_out:
                    raise IntegrityError(
                        f"{self.name}: writing {remote_path} failed: "
                        f"{done.stderr.decode(errors='replace').strip()}; check the box's disk"
                    )
                return
            with sftp.open(tmp, "wb") as handle:
                handle.set_pipelined(True)
                view = memoryview(data)
                for start in range(0, len(data), _CHUNK):
                    handle.write(bytes(view[start : start + _CHUNK]))
            sftp.posix_rename(tmp, remote_path)
            self.stats.sent += len(data)

    def get(self, remote_path: str, *, max_bytes: int) -> bytes:
        """Return remote_path's bytes; refuse non-regular files and files over max_bytes."""
        with map_ssh_errors(self.name):
            sftp = self._sftp_client()
            if sftp is None:
                return self._get_exec(remote_path, max_bytes)
            try:
                info = sftp.lstat(remote_path)
            except FileNotFoundError:
                raise IntegrityError(
                    f"{self.name}: {remote_path} does not exist; the box did not write it"
                ) from None
            if info.st_mode is None or not stat.S_ISREG(info.st_mode):
                raise IntegrityError(
                    f"{self.name}: {remote_path} is not a regular file; refusing it"
                )
            if (info.st_size or 0) > max_bytes:
                raise IntegrityError(
                    f"{self.name}: {remote_path} is {info.st_size} bytes, "
                    f"over the {max_bytes}-byte cap"
                )
            with sftp.open(remote_path, "rb") as handle:
                if info.st_size:
                    handle.prefetch(info.st_size)
                data = handle.read(max_bytes + 1)
            if len(data) > max_bytes:  # grew between stat and read
                raise IntegrityError(f"{self.name}: {remote_path} is over the {max_bytes}-byte cap")
            self.stats.received += len(data)
            return data

    def _get_exec(self, remote_path: str, max_bytes: int) -> bytes:
        script = 'if [ -L "$1" ] || [ ! -f "$1" ]; then exit 3; fi; exec head -c "$2" -- "$1"'
        done = self.run(
            ["sh", "-c", script, "sh", remote_path, str(max_bytes + 1)], timeout=self.io_timeout
        )
        if done.returncode == 3:
            raise IntegrityError(f"{self.name}: {remote_path} is not a regular file; refusing it")
        if done.returncode != 0 or done.timed_out:
            raise IntegrityError(f"{self.name}: reading {remote_path} failed; check the box")
        if len(done.stdout) > max_bytes:
            raise IntegrityError(f"{self.name}: {remote_path} is over the {max_bytes}-byte cap")
        return done.stdout

    # The box pipeline's preflight script finds $HOME itself, saving a round trip.
    home_on_box = True

    def home(self) -> str:
        """The remote $HOME (asked once)."""
        if self._home is None:
            done = self.run(["sh", "-c", 'printf %s "$HOME"'], timeout=self.io_timeout)
            home = done.stdout.decode(errors="replace")
            if done.returncode != 0 or not home.startswith("/"):
                raise BoxError(self.name, "disconnected", "could not read $HOME on the box")
            self._home = home
        return self._home

    def close(self) -> None:
        """Close SFTP, the connection and every jump host connection."""
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        if self._conn is not None:
            _close_chain(self._conn)
            self._conn = None

    def __enter__(self) -> SshTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_chain(conn: Any) -> None:
    while conn is not None and conn is not False:
        conn.close()
        conn = getattr(conn, "gateway", None)
        if isinstance(conn, str):
            break


def remote_command(
    argv: Sequence[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None
) -> str:
    """The shell line for argv: pid line first, then `cd` and `env` with every element quoted."""
    if not argv:
        raise UsageError("empty remote command; give at least a program name")
    parts = []
    if cwd is not None:
        parts.append(f"cd -- {shlex.quote(cwd)} &&")
    parts.append("exec")
    if env:
        for name in env:
            if is_secret_name(name) or not name.replace("_", "a").isalnum():
                raise UsageError(f"refusing to pass {name!r} on a remote command line")
        parts.append("env")
        parts.extend(shlex.quote(f"{k}={v}") for k, v in env.items())
    parts.extend(shlex.quote(arg) for arg in argv)
    script = _WRAPPER + " ".join(parts)
    # run under /bin/sh whatever the login shell is; exec keeps the session leader's pid
    return f"exec /bin/sh -c {shlex.quote(script)}"


@contextmanager
def open_box(
    spec: HostSpec,
    *,
    accept_new: bool = False,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    retry_delays: Sequence[float] = RETRY_DELAYS,
) -> Iterator[SshTransport]:
    """Connect to spec and yield the transport; always closes it."""
    transport = SshTransport(
        spec, accept_new=accept_new, connect_timeout=connect_timeout, retry_delays=retry_delays
    )
    try:
        transport.connect()
        yield transport
    finally:
        transport.close()


# Output of a remote command is read while it runs (paramiko deadlocks otherwise) but kept
# bounded: a hostile or runaway box must not grow the coordinator's memory. Test output goes to
# files on the box, so only box-script replies (small JSON) and error tails pass through here.
MAX_COMMAND_OUTPUT = 8 * 1024 * 1024


def _keep_tail(buffer: bytearray) -> None:
    """Drop the oldest bytes of buffer beyond MAX_COMMAND_OUTPUT (the end explains failures)."""
    extra = len(buffer) - MAX_COMMAND_OUTPUT
    if extra > 0:
        del buffer[:extra]
