"""Run one case hermetically in a fresh sandbox and observe it. Runs on boxes; stdlib only.

Sandbox layout (one per run): SANDBOX/work (copy of the case's fixtures; cwd is work/cwd_rel),
SANDBOX/home (HOME), SANDBOX/tmp (TMPDIR). The child gets only the case's env keys plus a small
fixed base, its own session, and a timeout. It is started by its own supervisor (reaper.py), a
child subreaper that kills the target's group and every daemon it double-forked once the target
exits; nothing is measured before the supervisor says so. Streams and output files are capped
(STREAM_LIMIT, FILES_LIMIT): over a cap the target is killed and the pin fails with
`output-limit`. Everything under SANDBOX except the output folder is watched: any net change
there is a write outside the output folder. Writes into the repository are caught by repoguard.py.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from charpin_runner import copying, procgroup
from charpin_runner.config import PinsConfig
from charpin_runner.errors import RunError
from charpin_runner.inventory.scripts import find_scripts
from charpin_runner.pins import reaper
from charpin_runner.pins.bootstrap import BOOTSTRAP, ENV_VAR, PATH_VAR, TRACE_VAR
from charpin_runner.pins.model import Case, Observation, OutFile
from charpin_runner.pins.normalise import Places, compile_rules, normalise_all
from charpin_runner.pins.targets import Start, pythonpath_dirs, start

DEFAULT_UMASK = 0o022
# Bytes kept of each of stdout and stderr. A target that writes more is killed at once (a pin
# printing 1 GiB used to cost minutes and gigabytes) and fails with output-limit; everything
# read is still hashed, so the message can tell two oversized outputs apart.
STREAM_LIMIT = 64 * 1024 * 1024
# Bytes read of the output folder's files, all files together, for the same reason.
FILES_LIMIT = 64 * 1024 * 1024
_CHUNK = 1 << 16
# After the target is told to stop, how long its supervisor gets to kill everything and exit.
_STOP_BOUND = reaper.SWEEP_BOUND + 5.0
# The supervisor's code, read now, before any pin runs: a pin can rewrite the runner's files (they
# are the user's), and the supervisors of later pins must still run what charpin itself runs.
_SUPERVISOR = inspect.getsource(reaper)


@dataclass(frozen=True)
class Perturbation:
    """A deliberate change to the replay conditions, used to prove a recording is stable."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    umask: Optional[int] = None
    root: Optional[Path] = None


@dataclass(frozen=True)
class Run:
    """One replay: the normalised observation plus what the sandbox saw."""

    observation: Observation
    file_bytes: dict[str, bytes]
    outside_writes: list[str]
    timed_out: bool = False
    error: Optional[str] = None
    # Set when a stream or the output files went over their limit: what, how much, its hash.
    limit: Optional[str] = None


# Supervisors alive right now, across every Session of this process. A sweep of adopted
# processes spares them, and new ones are only started under the lock, so a sweep never sees
# a supervisor that is not registered yet.
_LIVE: set[int] = set()
_LIVE_LOCK = threading.Lock()


class _Adoption:
    """Whether this process adopts pins' orphans (reaping()), and whether any reached it."""

    reaping = False
    dirty = False


@contextmanager
def reaping() -> Iterator[bool]:
    """For a CLI process that runs nothing but pins: become a child subreaper for the duration.

    Each pin's supervisor already kills everything its pin started. The supervisor can only be
    bypassed by killing it (any process of the same user can); the pin's processes are then
    re-parented here and are killed right after that pin, sparing the supervisors of pins still
    running, and once more on leaving the block. Yields whether adoption works here. Library
    callers that do not use this never kill processes they did not start.
    """
    adopts = procgroup.become_subreaper()
    previous = _Adoption.reaping
    _Adoption.reaping = previous or adopts
    try:
        yield adopts
    finally:
        if adopts and _Adoption.dirty:
            sweep_adopted()
        _Adoption.reaping = previous
        if not previous:
            _Adoption.dirty = False


def sweep_adopted() -> None:
    """Kill every process adopted by this one except live pin supervisors (see reaping())."""
    with _LIVE_LOCK:
        procgroup.kill_adopted(spare=frozenset(_LIVE))


class Session:
    """A temp folder holding the bootstrap and every sandbox of one replay batch."""

    def __init__(
        self,
        repo: Path,
        config: PinsConfig,
        python: Optional[str] = None,
        within: Optional[Path] = None,
    ) -> None:
        self.repo = repo.resolve()
        self.config = config
        chosen = python or config.python or sys.executable
        # A configured interpreter like ".venv/bin/python" is relative to the repository.
        if "/" in chosen and not os.path.isabs(chosen):
            chosen = str(self.repo / chosen)
        self.python = chosen
        # Folders of this repository (a scratch copy has its own) on every pin's PYTHONPATH.
        self.pythonpath = pythonpath_dirs(self.repo, config.pythonpath)
        self._scripts: Optional[dict[str, str]] = None
        self._scripts_lock = threading.Lock()
        self.dir = Path(tempfile.mkdtemp(prefix="charpin-pins-", dir=within))
        self.bootstrap = self.dir / "bootstrap.py"
        self.bootstrap.write_text(BOOTSTRAP, encoding="utf-8")
        self.base_path = os.environ.get("PATH", os.defpath)
        # The supervisor is charpin's own code: none of the pin's variables (LD_PRELOAD, say)
        # reach it; the target gets its environment through the spec instead.
        self.supervisor_env = {"PATH": os.defpath}
        if "LD_LIBRARY_PATH" in os.environ:  # some Python builds need it to start at all
            self.supervisor_env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
        # Removing a used sandbox costs several ms of rmdir/unlink on a busy disk; a helper
        # thread does it while the next pin runs instead of on each pin's critical path.
        self._trash: list[Path] = []
        self._trash_ready = threading.Condition()
        self._cleaner: Optional[threading.Thread] = None
        self._closing = False
        # How the supervisor's command line is wrapped, given the folder the pins write in
        # (`charpin receipt` puts pins in the tests' bubblewrap sandbox); None: as it is.
        self.wrap: Optional[Callable[[list[str], str], list[str]]] = None
        # verify's change coverage (#19): repository files whose lines the Python targets
        # record, and the lines that ran in any pin (merged under the lock).
        self.cover: dict[str, str] = {}  # real path -> repository path
        self.lines: dict[str, set[int]] = {}
        self._lines_lock = threading.Lock()

    def trace(self, paths: list[str]) -> None:
        """Record which lines of these repository files run in every Python pin."""
        self.cover = {os.path.realpath(self.repo / p): p for p in paths}

    def ran(self, found: dict[str, list[int]]) -> None:
        with self._lines_lock:
            for path, numbers in found.items():
                if path in self.cover.values():
                    self.lines.setdefault(path, set()).update(int(n) for n in numbers)

    def discard(self, sandbox: Path) -> None:
        """Remove a sandbox with a uniquely made name in the background."""
        with self._trash_ready:
            if self._cleaner is None:
                self._cleaner = threading.Thread(
                    target=self._clean, name="charpin-pins-cleaner", daemon=True
                )
                self._cleaner.start()
            self._trash.append(sandbox)
            self._trash_ready.notify()

    def _clean(self) -> None:
        while True:
            with self._trash_ready:
                while not self._trash and not self._closing:
                    self._trash_ready.wait()
                if not self._trash:
                    return
                path = self._trash.pop()
            shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        with self._trash_ready:
            self._closing = True
            self._trash_ready.notify()
        if self._cleaner is not None:
            self._cleaner.join()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def console_scripts(self) -> dict[str, str]:
        """Console-script names the repository declares -> `module:function` (read once)."""
        with self._scripts_lock:
            if self._scripts is None:
                found: dict[str, str] = {}
                for script in find_scripts(self.repo)[0]:
                    found.setdefault(script.name, script.target)
                self._scripts = found
            return self._scripts

    def start(self, case: Case, prefix: Optional[list[str]] = None) -> Start:
        """How case starts (targets.py): its argv, kind, and whether env reads are recorded."""
        return start(case, self.repo, self.python, self.bootstrap, self.console_scripts, prefix)

    def command(self, case: Case, prefix: Optional[list[str]] = None) -> tuple[list[str], bool]:
        """The argv to start, and whether env reads are recorded (Python targets only)."""
        how = self.start(case, prefix)
        return how.argv, how.records_env

    def is_python(self, case: Case) -> bool:
        """Whether the pins' Python runs case's target as a script, module or console script."""
        try:
            return self.start(case).kind in ("script", "module", "console-script")
        except RunError:
            return False

    def base_env(self, sandbox: Path) -> dict[str, str]:
        env = {
            "PATH": self.base_path,
            "LANG": "C.UTF-8",
            "TZ": "UTC",
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            # No byte code from any __pycache__ (a planted .pyc in the checkout or a venv must
            # not run in a pin): a path where no cache can be read or made.
            "PYTHONPYCACHEPREFIX": os.devnull,
            "PYTHONNOUSERSITE": "1",
            "HOME": str(sandbox / "home"),
            "TMPDIR": str(sandbox / "tmp"),
        }
        env.update(self.config.env_base)
        return env


Signature = dict[str, tuple[int, int, int, int]]


def _signature(root: str, skip: frozenset[str]) -> Signature:
    """Cheap per-entry state (type+mode, size, mtime, inode) of everything under root but skip.

    Folders record their mode only: a file made and removed again (a scratch file in TMPDIR)
    leaves nothing behind, and anything that does stay shows up as an entry of its own.
    """
    out: Signature = {}
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.path in skip:
                    continue
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    out[entry.path] = (st.st_mode, 0, 0, 0)
                    stack.append(entry.path)
                else:
                    out[entry.path] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def _outputs(out_dir: Path, budget: int) -> tuple[dict[str, tuple[bytes, int]], Optional[str]]:
    """The output folder's files (path -> bytes, mode), reading at most budget bytes in all;
    the second value describes the file that went over it (reading stops there)."""
    files: dict[str, tuple[bytes, int]] = {}
    if not out_dir.is_dir():
        return files, None
    for dirpath, dirs, filenames in os.walk(out_dir):
        dirs.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = path.relative_to(out_dir).as_posix()
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                data = b"symlink -> " + os.fsencode(os.readlink(path))
            elif not stat.S_ISREG(st.st_mode):
                # Opening a FIFO would block for ever; its type is what the pin records.
                data = f"special file of type {stat.filemode(st.st_mode)[0]}".encode()
            else:
                with open(path, "rb") as handle:
                    data = handle.read(budget + 1)
                if len(data) > budget:
                    digest = hashlib.sha256(data[:budget]).hexdigest()
                    return files, (
                        f"the output files went over the {FILES_LIMIT}-byte limit at "
                        f"{rel} ({st.st_size} bytes; sha256 of the part read: {digest})"
                    )
            budget -= len(data)
            files[rel] = (data, stat.S_IMODE(st.st_mode))
    return files, None


def run_case(
    session: Session,
    case: Case,
    perturbation: Optional[Perturbation] = None,
    sandbox: Optional[Path] = None,
    keep: bool = False,
    prefix: Optional[list[str]] = None,
) -> Run:
    """Replay case once; a given sandbox path is (re)created so a repeat sees identical paths."""
    config = session.config
    root = perturbation.root if perturbation and perturbation.root else session.dir
    unique = sandbox is None
    if sandbox is None:
        root.mkdir(parents=True, exist_ok=True)
        sandbox = Path(tempfile.mkdtemp(prefix=f"{case.id}.", dir=str(root)))
    else:
        shutil.rmtree(sandbox, ignore_errors=True)
        sandbox.mkdir(parents=True)
    try:
        return _run_in(session, case, perturbation, sandbox, config, prefix)
    finally:
        if keep:
            pass
        elif unique:
            session.discard(sandbox)
        else:
            # A caller-chosen path is reused by the next run, so it must be gone right now.
            shutil.rmtree(sandbox, ignore_errors=True)


def _run_in(
    session: Session,
    case: Case,
    perturbation: Optional[Perturbation],
    sandbox: Path,
    config: PinsConfig,
    prefix: Optional[list[str]],
) -> Run:
    """One replay in an empty sandbox: prepare it, spawn the target, observe what it did."""
    launch = _prepare(session, case, perturbation, sandbox, prefix)
    ended = _spawn(session, launch, case.stdin, config.timeout, case.merge_stderr)
    if ended.start_error is not None:
        empty = Observation(exit_code=-1, stdout=b"", stderr=b"")
        started = launch.executable or launch.argv[0]
        return Run(empty, {}, [], error=f"cannot start {started}: {ended.start_error}")
    return _observe(session, launch, ended, config)


@dataclass(frozen=True)
class _Launch:
    """Everything decided before a target starts, and the sandbox as it stood then."""

    sandbox: Path
    work: Path
    cwd: Path
    out_dir: Path
    # The bootstrap's env-reads file; None when the target is not a Python script.
    env_reads: Optional[Path]
    argv: list[str]
    # What to execute when argv[0] is the program's own name and not the file (targets.Start).
    executable: Optional[str]
    env: dict[str, str]
    umask: int
    skip: frozenset[str]
    before: Signature
    # Where the bootstrap writes the lines that ran (verify's change coverage), or None.
    lines: Optional[Path] = None


def _prepare(
    session: Session,
    case: Case,
    perturbation: Optional[Perturbation],
    sandbox: Path,
    prefix: Optional[list[str]],
) -> _Launch:
    """Fill the sandbox (work from the fixtures, HOME, TMPDIR), build argv and env, and take
    the sandbox's signature last, so everything charpin made there is not blamed on the pin."""
    work = sandbox / "work"
    if case.fixtures is not None:
        source = session.repo / case.fixtures
        real = copying.outside(session.repo, source)
        if real is not None:
            raise RunError(f"pin {case.id}: " + copying.refusal("fixtures", case.fixtures, real))
        if not source.is_dir():
            raise RunError(f"pin {case.id}: fixtures folder {case.fixtures} is missing; create it")
        copying.copy_folder(source, work)
    else:
        work.mkdir()
    (sandbox / "home").mkdir()
    (sandbox / "tmp").mkdir()
    cwd = work / case.cwd_rel
    if case.cwd_rel != ".":
        cwd.mkdir(parents=True, exist_ok=True)
    out_dir = work / session.config.output
    side = sandbox / "env-reads"
    how = session.start(case, prefix)
    argv, records_env = how.argv, how.records_env
    env = session.base_env(sandbox)
    env.update(case.env)
    if perturbation is not None:
        env.update(perturbation.env)
    if session.pythonpath and records_env:
        # Through the bootstrap, which puts them on sys.path (and PYTHONPATH, for children)
        # after it started: nothing of the checkout runs at interpreter start (#18 item 3).
        env[PATH_VAR] = os.pathsep.join(session.pythonpath)
    elif session.pythonpath:
        # The repository's own packages first, then whatever the pin or env_base gave.
        given = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
        env["PYTHONPATH"] = os.pathsep.join([*session.pythonpath, *given])
    if records_env:
        env[ENV_VAR] = str(side)
    # Named at random: the target cannot guess where its coverage goes (the bootstrap writes it
    # last, at exit, over anything there).
    lines = sandbox / f"lines-{os.urandom(8).hex()}.json"
    if records_env and session.cover:
        env[TRACE_VAR] = json.dumps({"out": str(lines), "files": session.cover})
    umask = perturbation.umask if perturbation and perturbation.umask is not None else DEFAULT_UMASK
    # The whole sandbox is watched (work, HOME, TMPDIR, and anything a target makes next to
    # them with ../), except the output folder and the bootstrap's own env-reads file.
    skip = frozenset({str(out_dir), str(side), str(lines)})
    return _Launch(
        sandbox=sandbox,
        work=work,
        cwd=cwd,
        out_dir=out_dir,
        env_reads=side if records_env else None,
        lines=lines if records_env and session.cover else None,
        argv=argv,
        executable=how.executable,
        env=env,
        umask=umask,
        skip=skip,
        before=_signature(str(sandbox), skip),
    )


def _observe(session: Session, launch: _Launch, ended: _Ended, config: PinsConfig) -> Run:
    """What the ended target left: writes outside the output folder, the output files, the
    env keys it read, all normalised into the Observation a pin stores."""
    sandbox = launch.sandbox
    after = _signature(str(sandbox), launch.skip)
    # Folders on the way to the output folder (e.g. build/ for build/out) may appear or change.
    parents = {str(p) for p in launch.out_dir.parents}
    before = launch.before
    outside = sorted(
        _display(p, sandbox)
        for p in set(before) | set(after)
        if before.get(p) != after.get(p) and p not in parents
    )
    outputs, files_over = _outputs(launch.out_dir, FILES_LIMIT)
    traced = launch.lines
    if traced is not None and traced.is_file():
        try:
            found = json.loads(traced.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            found = {}
        if isinstance(found, dict):
            session.ran(found)
    env_read: Optional[list[str]] = None
    if launch.env_reads is not None and launch.env_reads.is_file():
        text = launch.env_reads.read_text(encoding="utf-8")
        env_read = sorted(k for k in text.split("\n") if k)
    places = Places(
        work=str(launch.work),
        tmp=str(sandbox / "tmp"),
        home=str(sandbox / "home"),
        repo=str(session.repo),
    )
    rules = compile_rules(list(config.normalise), places)
    names = sorted(outputs)
    blobs, counts = normalise_all(
        rules, [ended.stdout, ended.stderr, *(outputs[n][0] for n in names)]
    )
    files: dict[str, OutFile] = {}
    file_bytes: dict[str, bytes] = {}
    for name, data in zip(names, blobs[2:]):
        file_bytes[name] = data
        files[name] = OutFile(
            sha256=hashlib.sha256(data).hexdigest(),
            mode=outputs[name][1],
            text=_text(data, config.text_limit),
        )
    obs = Observation(
        exit_code=ended.returncode,
        stdout=blobs[0],
        stderr=blobs[1],
        files=files,
        env_read=env_read,
        norm_counts=counts,
    )
    limit = ended.limit or files_over
    return Run(obs, file_bytes, outside, timed_out=ended.timed_out, error=ended.error, limit=limit)


@dataclass
class _Capture:
    """One output stream: the first `limit` bytes kept, everything seen hashed and counted."""

    name: str
    limit: int
    kept: list[bytes] = field(default_factory=list)
    size: int = 0
    seen: int = 0
    digest: Any = field(default_factory=hashlib.sha256)

    def add(self, data: bytes) -> bool:
        """Record a chunk; True once the stream is over its limit."""
        self.digest.update(data)
        self.seen += len(data)
        room = self.limit - self.size
        if room > 0:
            self.kept.append(data[:room])
            self.size += min(room, len(data))
        return self.seen > self.limit

    def over(self) -> Optional[str]:
        if self.seen <= self.limit:
            return None
        return (
            f"{self.name} went over the {self.limit}-byte limit ({self.seen} bytes read before "
            f"the target was killed; sha256 of them: {self.digest.hexdigest()})"
        )


@dataclass(frozen=True)
class _Ended:
    """How one supervised target ended."""

    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    limit: Optional[str] = None
    error: Optional[str] = None
    start_error: Optional[str] = None


def _spawn(
    session: Session, launch: _Launch, stdin: bytes, timeout: float, merge: bool = False
) -> _Ended:
    """Run the target under its own supervisor (reaper.py) and collect what it wrote.

    merge (Case.merge_stderr): the supervisor, and so the target, gets one pipe as both stdout
    and stderr, the way cram and trycmd run a command (stderr=STDOUT); stderr then reads empty.
    Returns only when the supervisor has exited, i.e. after the target and everything it started
    were killed, or after this process killed what it could itself (see _clean_up)."""
    # The target cannot reopen a socket through /proc, as it could a pipe (see reaper.py).
    channel, theirs = socket.socketpair()
    try:
        with _LIVE_LOCK:
            argv = [sys.executable, "-I", "-S", "-c", _SUPERVISOR, str(theirs.fileno())]
            proc = subprocess.Popen(
                session.wrap(argv, str(session.dir)) if session.wrap is not None else argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if merge else subprocess.PIPE,
                cwd=str(session.dir),
                env=session.supervisor_env,
                start_new_session=True,
                umask=launch.umask,
                pass_fds=(theirs.fileno(),),
            )
            _LIVE.add(proc.pid)
    except OSError as exc:
        channel.close()
        raise RunError(f"cannot start the pin supervisor {sys.executable}: {exc}") from exc
    finally:
        theirs.close()
    try:
        try:
            # The supervisor reads the spec before anything else.
            spec = reaper.encode_spec(str(launch.cwd), launch.argv, launch.env, launch.executable)
            channel.sendall(spec)
            channel.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the supervisor died; the status it never wrote says so below
        out, err, status, timed_out = _exchange(proc, channel.fileno(), stdin, timeout)
    finally:
        channel.close()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        proc.wait()
        with _LIVE_LOCK:
            _LIVE.discard(proc.pid)
    return _conclude(status, out, err, timed_out)


def _exchange(
    proc: subprocess.Popen[bytes], status_fd: int, stdin: bytes, timeout: float
) -> tuple[_Capture, _Capture, bytes, bool]:
    """Feed stdin and read stdout, stderr and the supervisor's status until all close.

    At the timeout, or as soon as a stream is over STREAM_LIMIT, the supervisor is told to kill
    the target; if it has not finished within _STOP_BOUND it is killed itself."""
    assert proc.stdin is not None and proc.stdout is not None
    out = _Capture("stdout", STREAM_LIMIT)
    err = _Capture("stderr", STREAM_LIMIT)
    status = bytearray()
    sinks: dict[int, Optional[_Capture]] = {proc.stdout.fileno(): out, status_fd: None}
    if proc.stderr is not None:  # None when stderr is merged into stdout
        sinks[proc.stderr.fileno()] = err
    pending = memoryview(stdin)
    stdin_fd = proc.stdin.fileno()
    timed_out = False
    stopping: Optional[float] = None
    with selectors.DefaultSelector() as sel:
        for fd in sinks:
            sel.register(fd, selectors.EVENT_READ)
        if pending:
            os.set_blocking(stdin_fd, False)
            sel.register(stdin_fd, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        deadline = time.monotonic() + timeout
        while sel.get_map():
            now = time.monotonic()
            if stopping is None and now >= deadline:
                timed_out = True
            if stopping is None and (timed_out or out.seen > out.limit or err.seen > err.limit):
                _signal(_supervisor(proc.pid), signal.SIGTERM)
                stopping = now + _STOP_BOUND
            if stopping is not None and now >= stopping:
                # The supervisor did not finish: kill it; _conclude cleans up after it.
                _signal(proc.pid, signal.SIGKILL)
                break
            wait = (stopping if stopping is not None else deadline) - now
            for key, _events in sel.select(max(0.0, wait)):
                fd = key.fd
                if fd == stdin_fd:
                    try:
                        pending = pending[os.write(fd, pending[:_CHUNK]) :]
                    except BlockingIOError:
                        continue
                    except OSError:  # the target closed its stdin: the rest is not wanted
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(fd)
                        proc.stdin.close()
                    continue
                data = os.read(fd, _CHUNK)
                sink = sinks[fd]
                if not data:
                    sel.unregister(fd)
                elif sink is None:
                    status += data
                else:
                    sink.add(data)
    return out, err, bytes(status), timed_out


def _supervisor(pid: int) -> int:
    """The supervisor's own pid: pid itself, or under bubblewrap (which does not pass signals
    on) the first process below it that is not bwrap."""
    seen = 0
    todo = [pid]
    while todo and seen < 16:
        current = todo.pop(0)
        seen += 1
        try:
            with open(f"/proc/{current}/comm") as handle:
                name = handle.read().strip()
        except OSError:
            return pid
        if name != "bwrap":
            return current
        todo += reaper.children(current)
    return pid


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _conclude(status: bytes, out: _Capture, err: _Capture, timed_out: bool) -> _Ended:
    """Read the supervisor's report; clean up ourselves whatever it could not vouch for."""
    fields: dict[str, str] = {}
    for line in status.decode("utf-8", "replace").splitlines():
        word, _, rest = line.partition(" ")
        fields[word] = rest
    if "error" in fields:
        return _Ended(-1, b"", b"", start_error=fields["error"])
    stdout, stderr = b"".join(out.kept), b"".join(err.kept)
    limit = out.over() or err.over()
    error: Optional[str] = None
    if "exit" not in fields:
        error = (
            "the pin's supervisor died before the target ended (was it killed?); "
            "a pin must not signal processes it did not start"
        )
    elif "unswept" in fields:
        error = "processes the pin started could not all be killed within "
        error += f"{reaper.SWEEP_BOUND:.0f}s; a pin must not start processes that outlive it"
    if "swept" not in fields:
        _clean_up(fields.get("started"))
    returncode = int(fields["exit"]) if "exit" in fields else -1
    return _Ended(returncode, stdout, stderr, timed_out, limit, error)


def _clean_up(started: Optional[str]) -> None:
    """Kill what a supervisor left behind: the target's group, and, when this process adopts
    orphans (reaping()), every adopted process but the live supervisors."""
    if started is not None and started.isdigit():
        procgroup.kill_group(int(started))
    if _Adoption.reaping:
        _Adoption.dirty = True
        sweep_adopted()


def _display(path: str, sandbox: Path) -> str:
    rel = Path(path).relative_to(sandbox).as_posix()
    for folder, token in (("work", "$WORK"), ("home", "$HOME"), ("tmp", "$TMP")):
        if rel == folder or rel.startswith(folder + "/"):
            return token + rel[len(folder) :]
    # Next to the work folder, e.g. a target in $WORK that wrote ../escaped.txt.
    return "$WORK/../" + rel


def _text(data: bytes, limit: int) -> Optional[str]:
    if len(data) > limit:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
