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
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

import paramiko
from charpin_runner.errors import UsageError
from fabric import Config, Connection
from paramiko.ssh_exception import NoValidConnectionsError

from charpin_coordinator.remote.errors import BoxError
from charpin_coordinator.remote.hostkeys import (
    HostKeyRefused,
    HostKeyVerifier,
    StrictClient,
    fingerprint,
)
from charpin_coordinator.remote.hosts import HostSpec
from charpin_coordinator.remote.transport import (
    STDERR_KEEP,
    TERM_GRACE,
    Finished,
    TransferStats,
    watchdog,
)

# paramiko logs transport-thread failures at ERROR; without a handler Python's last-resort
# handler would print tracebacks. Errors reach the user as BoxError lines instead.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

DEFAULT_CONNECT_TIMEOUT: Final = 10.0
DEFAULT_IO_TIMEOUT: Final = 60.0  # one SFTP read or write, one channel open
RETRY_DELAYS: Final = (0.5, 1.0)  # connect only: 3 attempts in all
KEEPALIVE_SECONDS: Final = 15
_CHUNK: Final = 32768

_STDERR_LOOK: Final = 0.2


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
        self.home = ""  # the agent finds the box user's home itself

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
        if isinstance(transport.sock, socket.socket):
            # The box protocol is request and reply; paramiko writes a window adjustment and then
            # our next request, and Nagle would hold the request until the box's delayed ACK
            # (40 ms on Linux) of the adjustment.
            transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
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

    # -- the channel -----------------------------------------------------------------------

    def open(self, argv: Sequence[str], *, deadline: float | None = None) -> SshChannel:
        """Start argv on the box (under /bin/sh, every element quoted) and return its channel.
        deadline: seconds after which the box ends argv itself (`timeout`, where installed)."""
        command = remote_command(argv, deadline)
        with map_ssh_errors(self.name):
            channel = self._transport().open_session(timeout=self.io_timeout)
            channel.settimeout(self.io_timeout)  # bounds each send while the window is full
            channel.exec_command(command)
        self.stats.channels += 1
        return SshChannel(self, channel)

    def alive(self) -> bool:
        """True while the SSH connection is up."""
        transport = self._conn.client.get_transport() if self._conn is not None else None
        return bool(transport is not None and transport.is_active())

    def close(self) -> None:
        """Close the connection and every jump host connection."""
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


# Says the program's process group (its shell's pid: sshd starts every session command as a
# session leader, and `exec` keeps the pid) on stderr first, so a second channel can signal it.
_PID_LINE = b"charpin-pid "
_PROLOGUE = 'printf "charpin-pid %s\\n" "$$" >&2; '


def remote_command(argv: Sequence[str], deadline: float | None = None) -> str:
    """The shell line for argv, every element quoted, run by /bin/sh whatever the login shell:
    it first says its process group on stderr, and with a deadline runs argv under `timeout`
    when the box has it. argv travels as the shell's positional parameters."""
    if not argv:
        raise UsageError("empty remote command; give at least a program name")
    guard = watchdog(deadline)
    script = _PROLOGUE
    if guard:
        script += f"command -v timeout >/dev/null 2>&1 && exec {shlex.join(guard)} \"$@\"; "
    script += 'exec "$@"'
    return "exec /bin/sh -c " + " ".join(shlex.quote(a) for a in (script, "sh", *argv))


class SshChannel:
    """An exec channel's stdin and stdout as a byte stream; its stderr drained into a bounded
    tail while we read (paramiko stalls a channel whose stderr nobody reads)."""

    def __init__(self, owner: SshTransport, channel: paramiko.Channel):
        self._owner, self._channel = owner, channel
        self._stderr = bytearray()
        self._pid: int | None = None  # the program's process group on the box, once said
        self._head: bytearray | None = bytearray()  # stderr until the pid line is complete

    def send(self, data: bytes) -> None:
        """Write all of data; a box that stopped reading for io_timeout is a lost connection."""
        with map_ssh_errors(self._owner.name):
            if self._channel.closed or self._channel.exit_status_ready():
                return  # the program ended; the next recv reports how
            self._channel.sendall(data)
        self._owner.stats.sent += len(data)

    def recv(self, size: int, timeout: float) -> bytes | None:
        """Up to size bytes of stdout; b"" at its end; None after timeout seconds of nothing."""
        channel = self._channel
        ends = time.monotonic() + timeout
        with map_ssh_errors(self._owner.name):
            while True:
                self._drain_stderr()
                if channel.recv_ready():
                    data: bytes = channel.recv(size)
                    self._owner.stats.received += len(data)
                    return data
                if not self._owner.alive():
                    # paramiko closes the channels of a dead connection without an EOF
                    raise BoxError(
                        self._owner.name, "disconnected", "connection lost; retry the run"
                    )
                if channel.eof_received or channel.closed:
                    return b""
                left = ends - time.monotonic()
                if left <= 0:
                    return None
                # stderr does not wake select on a paramiko channel: look again at least every
                # _STDERR_LOOK seconds.
                select.select([channel], [], [], min(left, _STDERR_LOOK))

    def finish(self, timeout: float, *, kill: bool = True) -> Finished:
        """Close our side, wait at most timeout for the exit status, keep stderr's end. A program
        still running then (it hangs, or ignores the end of its input) is stopped through a
        second channel: SIGTERM to its process group, SIGKILL after TERM_GRACE."""
        channel = self._channel
        status: int | None = None
        try:
            if not channel.closed:
                channel.shutdown_write()
            ended = self._wait_exit(timeout)
            if not ended and kill:
                for name in ("TERM", "KILL"):
                    if self._pid is None or not self._signal(name):
                        break
                    if self._wait_exit(TERM_GRACE):
                        break
            self._drain_stderr()
            if self._head is not None:  # shorter than a pid line: it was the program's own
                self._stderr += self._head
                self._head = None
            if channel.exit_status_ready() and channel.exit_status != -1:
                status = channel.exit_status
        except (OSError, EOFError, paramiko.SSHException, BoxError):
            pass
        finally:
            channel.close()
        return Finished(status, bytes(self._stderr))

    def _wait_exit(self, seconds: float) -> bool:
        channel = self._channel
        ends = time.monotonic() + seconds
        while not channel.exit_status_ready() and time.monotonic() < ends:
            if not self._owner.alive():
                return False
            self._drain_stderr()
            channel.status_event.wait(min(0.2, max(0.0, ends - time.monotonic())))
        return bool(channel.exit_status_ready())

    def _signal(self, name: str) -> bool:
        """Send signal name to the program's process group through a second channel."""
        if not self._owner.alive():
            return False
        pid = self._pid
        line = f"kill -s {name} -- -{pid} 2>/dev/null || kill -s {name} {pid} 2>/dev/null; true"
        other = self._owner.open(["/bin/sh", "-c", line])
        other.finish(TERM_GRACE, kill=False)
        return True

    def _drain_stderr(self) -> None:
        while self._channel.recv_stderr_ready():
            data = self._channel.recv_stderr(_CHUNK)
            if self._head is not None:
                data = self._take_pid(data)
            self._stderr += data
            extra = len(self._stderr) - STDERR_KEEP
            if extra > 0:
                del self._stderr[:extra]

    def _take_pid(self, data: bytes) -> bytes:
        """Strip the prologue's pid line from the start of stderr and keep the pid."""
        assert self._head is not None
        self._head += data
        if b"\n" not in self._head and len(self._head) < 64:
            return b""
        head, self._head = bytes(self._head), None
        line, newline, rest = head.partition(b"\n")
        number = line[len(_PID_LINE) :]
        if newline and line.startswith(_PID_LINE) and number.isdigit():
            self._pid = int(number)
            return rest
        return head


def connector(spec: HostSpec, *, accept_new: bool = False) -> Callable[[], SshTransport]:
    """A call that opens a connected SshTransport to spec (run on the box's own worker)."""

    def connect() -> SshTransport:
        box = SshTransport(spec, accept_new=accept_new)
        try:
            box.connect()
        except BaseException:
            box.close()
            raise
        return box

    return connect


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
