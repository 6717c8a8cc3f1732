"""Run one case hermetically in a fresh sandbox and observe it. Runs on boxes; stdlib only.

Sandbox layout (one per run): SANDBOX/work (copy of the case's fixtures; cwd is work/cwd_rel),
SANDBOX/home (HOME), SANDBOX/tmp (TMPDIR). The child gets only the case's env keys plus a small
fixed base, its own session (so the whole process group is killed afterwards), and a timeout.
Everything under SANDBOX except the output folder is watched: any net change there is a write
outside the output folder. Writes into the repository itself are caught by repoguard.py.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from charpin_runner.errors import RunError
from charpin_runner.pins.bootstrap import BOOTSTRAP, ENV_VAR
from charpin_runner.pins.config import PinsConfig
from charpin_runner.pins.model import Case, Observation, OutFile
from charpin_runner.pins.normalise import Places, compile_rules, normalise_all

DEFAULT_UMASK = 0o022


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


class Session:
    """A temp folder holding the bootstrap and every sandbox of one replay batch."""

    def __init__(self, repo: Path, config: PinsConfig, python: Optional[str] = None) -> None:
        self.repo = repo.resolve()
        self.config = config
        chosen = python or config.python or sys.executable
        # A configured interpreter like ".venv/bin/python" is relative to the repository.
        if "/" in chosen and not os.path.isabs(chosen):
            chosen = str(self.repo / chosen)
        self.python = chosen
        self.dir = Path(tempfile.mkdtemp(prefix="charpin-pins-"))
        self.bootstrap = self.dir / "bootstrap.py"
        self.bootstrap.write_text(BOOTSTRAP, encoding="utf-8")
        self.base_path = os.environ.get("PATH", os.defpath)
        # Removing a used sandbox costs several ms of rmdir/unlink on a busy disk; a helper
        # thread does it while the next pin runs instead of on each pin's critical path.
        self._trash: list[Path] = []
        self._trash_ready = threading.Condition()
        self._cleaner: Optional[threading.Thread] = None
        self._closing = False

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

    def command(self, case: Case, prefix: Optional[list[str]] = None) -> tuple[list[str], bool]:
        """The argv to start, and whether env reads are recorded (Python targets only)."""
        target = case.argv[0]
        if target.endswith(".py"):
            script = self.repo / target
            if not script.is_file():
                raise RunError(
                    f"pin {case.id}: script {target} not found in the repository; fix argv[0]"
                )
            if prefix is not None:
                return [self.python, *prefix, str(script), *case.argv[1:]], False
            return [self.python, str(self.bootstrap), str(script), *case.argv[1:]], True
        if "/" in target and not os.path.isabs(target):
            target = str(self.repo / target)
        return [target, *case.argv[1:]], False

    def base_env(self, sandbox: Path) -> dict[str, str]:
        env = {
            "PATH": self.base_path,
            "LANG": "C.UTF-8",
            "TZ": "UTC",
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
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


def _outputs(out_dir: Path) -> dict[str, tuple[bytes, int]]:
    files: dict[str, tuple[bytes, int]] = {}
    if not out_dir.is_dir():
        return files
    for dirpath, _dirs, filenames in os.walk(out_dir):
        for name in filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(out_dir).as_posix()
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                data = b"symlink -> " + os.fsencode(os.readlink(path))
            else:
                data = path.read_bytes()
            files[rel] = (data, stat.S_IMODE(st.st_mode))
    return files


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


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
    work = sandbox / "work"
    if case.fixtures is not None:
        source = session.repo / case.fixtures
        if not source.is_dir():
            raise RunError(f"pin {case.id}: fixtures folder {case.fixtures} is missing; create it")
        shutil.copytree(source, work, symlinks=True)
    else:
        work.mkdir()
    (sandbox / "home").mkdir()
    (sandbox / "tmp").mkdir()
    cwd = work / case.cwd_rel
    if case.cwd_rel != ".":
        cwd.mkdir(parents=True, exist_ok=True)
    out_dir = work / config.output
    side = sandbox / "env-reads"
    argv, records_env = session.command(case, prefix)
    env = session.base_env(sandbox)
    env.update(case.env)
    if perturbation is not None:
        env.update(perturbation.env)
    if records_env:
        env[ENV_VAR] = str(side)
    # The whole sandbox is watched (work, HOME, TMPDIR, and anything a target makes next to
    # them with ../), except the output folder and the bootstrap's own env-reads file.
    skip = frozenset({str(out_dir), str(side)})
    before = _signature(str(sandbox), skip)
    umask = perturbation.umask if perturbation and perturbation.umask is not None else DEFAULT_UMASK
    timed_out = False
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(cwd),
            env=env,
            start_new_session=True,
            umask=umask,
        )
    except OSError as exc:
        empty = Observation(exit_code=-1, stdout=b"", stderr=b"")
        return Run(empty, {}, [], error=f"cannot start {argv[0]}: {exc.strerror or exc}")
    try:
        stdout, stderr = proc.communicate(case.stdin, timeout=config.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc.pid)
        stdout, stderr = proc.communicate()
    finally:
        # Children left behind must not keep writing after we look.
        _kill_group(proc.pid)
    after = _signature(str(sandbox), skip)
    # Folders on the way to the output folder (e.g. build/ for build/out) may appear or change.
    parents = {str(p) for p in out_dir.parents}
    outside = sorted(
        _display(p, sandbox)
        for p in set(before) | set(after)
        if before.get(p) != after.get(p) and p not in parents
    )
    outputs = _outputs(out_dir)
    env_read: Optional[list[str]] = None
    if records_env and side.is_file():
        text = side.read_text(encoding="utf-8")
        env_read = sorted(k for k in text.split("\n") if k)
    places = Places(
        work=str(work), tmp=str(sandbox / "tmp"), home=str(sandbox / "home"), repo=str(session.repo)
    )
    rules = compile_rules(list(config.normalise), places)
    names = sorted(outputs)
    blobs, counts = normalise_all(rules, [stdout, stderr, *(outputs[n][0] for n in names)])
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
        exit_code=proc.returncode,
        stdout=blobs[0],
        stderr=blobs[1],
        files=files,
        env_read=env_read,
        norm_counts=counts,
    )
    return Run(obs, file_bytes, outside, timed_out=timed_out)


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
