"""Coordinator side; stdlib and charpin_runner only. One conversation with one box's agent.

A session is one channel: the bootstrap below starts on the box with `python3 -I -c`, checks
the interpreter, makes sure the runner this coordinator carries is in the box's cache (asking for
the zipapp's bytes on the same channel when it is not, then unpacking and compiling it once in
the staging folder and publishing it by a rename into a folder named by its content hash, under
its publish lock and journaled, as charpin_runner.caches does for every cache entry), takes a
lease on it that the agent keeps, and replaces itself with the agent (`python3 -I -B RUNNER box
serve`). From then on every step is one request frame and one reply frame
(charpin_runner.box.wire). While the tests run the session waits on the channel; when the run
must stop (Ctrl-C) it sends one `stop` frame, and the agent stops the runner and replies.

The bootstrap is the only box-side code kept as a string: it has to run before the runner is
there. It must stay valid on any Python 3 so that a too-old one still answers in frames.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from charpin_runner.box import wire
from charpin_runner.errors import IntegrityError

from charpin_coordinator.remote.bundle import RunnerBundle
from charpin_coordinator.remote.errors import BoxError, kind_named, last_lines
from charpin_coordinator.remote.transport import Channel, Finished, Transport

_WAIT_SLICE = 0.25  # how often a waiting session looks at the stop event
_FINISH_SECONDS = 10.0  # at most, for goodbye and the program's end; never past the deadline
_CLEANUP_FLOOR = 1.0  # what goodbye and the end still get once the box's deadline has passed
# Past the box's deadline, the most the coordinator still talks to its agent (the runner's
# grace, fetch and clean) before the box's own watchdog ends it.
_BOX_SLACK = 300.0

BOOTSTRAP = r"""
import fcntl, hashlib, json, os, shutil, stat, sys, time
def say(**fields):
    fields["size"] = 0
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()
if sys.version_info < (3, 9):
    say(ok=False, kind="unsupported-box", error="%s is Python %d.%d; charpin needs 3.9 or newer: "
        "install it or set python = \"/path/to/python3\" for this host"
        % ((sys.executable,) + tuple(sys.version_info[:2])))
    sys.exit(0)
home, name, content, sha, size = sys.argv[1:6]
root = os.path.join(home or os.path.expanduser("~"), ".cache", "charpin")
folder, locks = os.path.join(root, "runners"), os.path.join(root, "locks", "runners")
def hold(path, mode):
    # As charpin_runner.caches.locks.hold: locked, and still the file at its path.
    os.makedirs(os.path.dirname(path), exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, mode)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
def lock(entry, what):
    return os.path.join(locks, "%s.%s" % (entry, what))
def digest(top):
    # The runner's content hash, as the coordinator computed it: sorted (path, bytes) pairs of
    # the package's files, compiled bytecode left out.
    package, found, names = os.path.join(top, "charpin_runner"), hashlib.sha256(), []
    for where, dirs, files in os.walk(package):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        names += [os.path.relpath(os.path.join(where, f), package) for f in files]
    for rel in sorted(n.replace(os.sep, "/") for n in names):
        with open(os.path.join(package, rel), "rb") as handle:
            found.update(rel.encode() + b"\0" + handle.read() + b"\0")
    return found.hexdigest()
def state(top):
    # As charpin_runner.caches.journal.state: the entry's stat snapshot, byte code included.
    if not os.path.lexists(top):
        return "-"
    items = []
    for where, dirs, files in os.walk(top):
        for n in dirs + files:
            items.append(os.path.relpath(os.path.join(where, n), top))
    found = hashlib.sha256()
    for rel in sorted([""] + items):
        st = os.lstat(os.path.join(top, rel) if rel else top)
        if stat.S_ISDIR(st.st_mode):
            value = (st.st_ino, st.st_mode)
        else:
            value = (st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        found.update(os.fsencode(rel) + b"\0" + ",".join(map(str, value)).encode() + b"\n")
    return found.hexdigest()
def journal(entry, before, after, what):
    line = json.dumps({"from": before, "to": after, "what": what, "pid": os.getpid(),
                       "t": round(time.time(), 3)}, separators=(",", ":"))
    fd = os.open(lock(entry, "journal"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, line.encode("ascii") + b"\n")
    os.close(fd)
def newest(entry):
    try:
        with open(lock(entry, "journal"), "rb") as handle:
            return json.loads(handle.read().splitlines()[-1])["to"]
    except (OSError, ValueError, IndexError, KeyError):
        return None
def usable(entry):
    # Whole, the runner this coordinator carries, and as its last journal record left it.
    path = os.path.join(folder, entry)
    return (not os.path.islink(path) and os.path.isdir(path)
            and not os.path.exists(lock(entry, "condemned"))
            and digest(path) == content and newest(entry) == state(path))
def lease(entry):
    fd = hold(lock(entry, "lease"), fcntl.LOCK_SH)
    os.utime(lock(entry, "lease"))
    os.set_inheritable(fd, True)  # held by the agent, through exec, until it ends
    return fd
publish = hold(lock(name, "lock"), fcntl.LOCK_SH)
if usable(name):
    lease(name)
    os.close(publish)
else:
    os.close(publish)
    say(need=True)
    data = bytearray()
    while len(data) < int(size):
        chunk = os.read(0, int(size) - len(data))
        if not chunk:
            sys.exit(3)
        data += chunk
    if hashlib.sha256(data).hexdigest() != sha:
        say(ok=False, kind="runner-failed", error="the runner zipapp arrived corrupted; run again")
        sys.exit(0)
    import compileall, io, secrets, zipfile
    part = os.path.join(root, "stage", "%s.part-%d" % (name, os.getpid()))
    shutil.rmtree(part, ignore_errors=True)
    os.makedirs(os.path.dirname(part), exist_ok=True)
    zipfile.ZipFile(io.BytesIO(bytes(data))).extractall(part)
    # Compiled once here: a zipapp is compiled again by every process that imports it.
    compileall.compile_dir(part, quiet=2)
    os.makedirs(folder, exist_ok=True)
    publish = hold(lock(name, "lock"), fcntl.LOCK_EX)
    if usable(name):  # another run placed it meanwhile
        shutil.rmtree(part, ignore_errors=True)
    else:
        path = os.path.join(folder, name)
        if os.path.lexists(path):
            # Changed since it was placed, condemned, or half-placed by an older charpin.
            free = hold(lock(name, "lease"), fcntl.LOCK_EX | fcntl.LOCK_NB)
            if free is None:  # in use: this run places a one-off runner of its own
                name = "%s~%s" % (name, secrets.token_hex(4))
                path = os.path.join(folder, name)
                os.close(publish)
                publish = hold(lock(name, "lock"), fcntl.LOCK_EX)
            else:
                trash = os.path.join(root, "trash", "runners-%s-%d" % (name, os.getpid()))
                os.makedirs(os.path.dirname(trash), exist_ok=True)
                before = state(path)
                os.rename(path, trash)
                journal(name, before, "-", "remove")
                shutil.rmtree(trash, ignore_errors=True)
                os.close(free)
        os.rename(part, path)
        journal(name, "-", state(path), "publish")
    lease(name)
    os.close(publish)
path = os.path.join(folder, name)
os.execv(sys.executable, [sys.executable, "-I", "-B", path, "box", "serve", "--home", home])
"""


def shipped_agent(python: str, home: str, runner: RunnerBundle) -> list[str]:
    """The argv that starts the agent on a box through the bootstrap."""
    size = str(len(runner.data))
    return [python, "-I", "-c", BOOTSTRAP, home, runner.name, runner.content, runner.sha256, size]


class BoxSession:
    """Requests and replies with one box's agent over one channel."""

    def __init__(
        self, box: Transport, channel: Channel, *, python: str, deadline: float | None = None
    ):
        self.box, self.channel, self.python = box, channel, python
        # The box's one deadline (time.monotonic()): closing never waits much past it.
        self.deadline = deadline
        self.label = box.name
        self.agent_python = ""
        self._ready = False
        self._ends = 0.0
        self._stop: threading.Event | None = None
        self._stop_sent = False
        self._reader = wire.Reader(self._recv)
        self._finished: Finished | None = None

    @classmethod
    def start(
        cls,
        box: Transport,
        argv: list[str],
        *,
        python: str,
        runner: RunnerBundle | None,
        timeout: float,
        deadline: float | None = None,
    ) -> BoxSession:
        """Start the agent (through the bootstrap when runner is given) and wait until ready.
        deadline: the box's one deadline (time.monotonic()), which closing respects."""
        # The box ends the agent by itself a while after the deadline (when nobody is left to
        # stop it); the coordinator's own clean-up after the deadline fits in that while.
        watchdog = None if deadline is None else deadline - time.monotonic() + _BOX_SLACK
        session = cls(box, box.open(argv, deadline=watchdog), python=python, deadline=deadline)
        try:
            header, _ = session._read(timeout, "starting the box agent")
            if header.get("need") and runner is not None:
                session.channel.send(runner.data)
                header, _ = session._read(timeout, "installing the runner")
            if not header.get("ok"):
                raise session._refusal(header)
        except BaseException:
            session.close(polite=False)
            raise
        session._ready = True
        session.agent_python = str(header.get("python", ""))
        return session

    def call(
        self,
        op: str,
        fields: Mapping[str, Any] | None = None,
        payload: bytes = b"",
        *,
        timeout: float,
        stop: threading.Event | None = None,
    ) -> tuple[dict[str, Any], bytes]:
        """Send one request and return its reply; BoxError with the agent's kind if it failed.
        With stop, a set event sends the agent one `stop` frame while waiting for the reply."""
        self.channel.send(wire.encode({"op": op, **(fields or {})}, payload))
        header, data = self._read(timeout, op, stop)
        if not header.get("ok"):
            raise self._refusal(header)
        return header, data

    def close(self, *, polite: bool = True) -> Finished:
        """Say goodbye (when the agent is still listening) and end the channel."""
        if self._finished is not None:
            return self._finished
        if polite and self._ready:
            try:
                self.channel.send(wire.encode({"op": "bye"}))
                self._read(self.closing_seconds(), "saying goodbye")
            except (BoxError, IntegrityError, OSError):
                pass
        self._finished = self.channel.finish(self.closing_seconds())
        return self._finished

    def closing_seconds(self, most: float = _FINISH_SECONDS) -> float:
        """How long one closing wait may take: at most `most`, and no longer than what is left
        of the box's deadline, with a short floor for cleanup (the channel's program is killed
        after it)."""
        if self.deadline is None:
            return most
        return min(most, max(_CLEANUP_FLOOR, self.deadline - time.monotonic()))

    # -- reading ----------------------------------------------------------------------------

    def _read(
        self, timeout: float, what: str, stop: threading.Event | None = None
    ) -> tuple[dict[str, Any], bytes]:
        self._ends = time.monotonic() + timeout
        self._stop, self._stop_sent = stop, False
        self._what, self._timeout = what, timeout
        try:
            frame = self._reader.read()
        except IntegrityError as exc:
            raise BoxError(self.label, "runner-failed", f"{what}: {exc}") from exc
        finally:
            self._stop = None
        if frame is None:
            raise self._ended(what)
        return frame

    def _recv(self, size: int) -> bytes:
        while True:
            left = self._ends - time.monotonic()
            if left <= 0:
                raise BoxError(
                    self.label,
                    "timeout",
                    f"{self._what}: the box did not answer within {self._timeout:g}s; check the "
                    "box or raise --timeout / the host's timeout",
                )
            if self._stop is not None and self._stop.is_set() and not self._stop_sent:
                self.channel.send(wire.encode({"op": "stop"}))
                self._stop_sent = True
            data = self.channel.recv(size, min(left, _WAIT_SLICE))
            if data is not None:
                return data

    def _ended(self, what: str) -> BoxError:
        """The agent's stream ended: say how the program ended and what it printed last."""
        finished = self.channel.finish(self.closing_seconds())
        self._finished = finished
        tail = last_lines(finished.stderr)
        if not self._ready:
            return BoxError(
                self.label,
                "unsupported-box",
                f"{self.python} did not start ({tail}); install python3 >= 3.9 or set python = "
                f'"/path/to/python3" under [tool.charpin.hosts.{self.label}]',
            )
        status = "" if finished.status is None else f" (exit {finished.status})"
        return BoxError(self.label, "runner-failed", f"{what}: the box agent ended{status}: {tail}")

    def _refusal(self, header: dict[str, Any]) -> BoxError:
        return BoxError(
            self.label, kind_named(header.get("kind")), str(header.get("error") or "no reason")
        )
