"""The per-pin supervisor process that outlives a pin target to kill what it left. Runs on boxes as
`python -I -S -c SOURCE CHANNEL_FD`, where SOURCE is this file's text as charpin read it at its own
start (execute.py): no file a pin could have rewritten since is read again, which is also why it
imports only the stdlib. The /proc walk and kill loop live here, and procgroup.py imports them from
here, rather than the other way round: importing procgroup would also read charpin's files again,
and its imports (subprocess, charpin_runner.interpret) would add ~25 ms to the start of every pin.

Why a process of its own: pins replay in parallel threads of one charpin process, so charpin
cannot tell which pin an orphaned daemon came from, and killing "every adopted child" would kill
the other pins still running. Each pin instead gets this small supervisor, a Linux child
subreaper: a daemon the target double-forks (setsid) is re-parented to the supervisor of its own
pin, which, once the target has exited, SIGKILLs the target's group and every descendant until it
has no child left, and only then reports the exit status. So when charpin sees "swept", nothing
the pin started is alive and the pin's outputs can be measured.

Protocol: CHANNEL_FD is one end of a Unix socket pair. A socket, not a pipe: any process of the
same user, the pin target included, can reopen a pipe through /proc/PID/fd/N and write a forged
report into it, while a socket cannot be opened that way. Charpin first sends NUL-separated
fields, cwd, the file to execute (empty: argv[0]), argc, argv..., then KEY=VALUE env entries, and
shuts its sending side down. The
supervisor answers with lines: "started PID", and after the sweep "exit CODE" (negative: killed by
that signal) followed by "swept" (every descendant is dead), "noreap" (the target's group is
dead, but without a subreaper here daemons went elsewhere) or "unswept" (the kill loop hit its
bound); or "error MESSAGE" when the target cannot start. SIGTERM asks the supervisor to SIGKILL
the target's group early (timeout, output limit). The target inherits stdin, stdout, stderr,
umask; the supervisor drops its own copies so the pipes close when the last holder dies.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Collection, Iterator

_PR_SET_CHILD_SUBREAPER = 36
# How long the supervisor keeps killing before it gives up and says "unswept".
SWEEP_BOUND = 10.0


class _State:
    """What the SIGTERM handler needs: the target's pid once known, or a note to kill it."""

    target = 0
    stop_early = False


def become_subreaper() -> bool:
    """Linux: adopt orphaned descendants (PR_SET_CHILD_SUBREAPER), so that a daemon which
    setsid()s out of its process group is re-parented to us and kill_children() finds it.
    Only for a process whose other children are known (spare). False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes  # here only: some minimal Pythons lack it

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (ImportError, OSError, AttributeError):
        return False


def _read_all(fd: int) -> bytes:
    parts: list[bytes] = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)


def encode_spec(
    cwd: str, argv: list[str], env: dict[str, str], executable: str | None = None
) -> bytes:
    """The spec charpin sends (execute.py); NUL cannot occur in argv, env or paths.

    executable, when given, is the file run with argv (whose argv[0] is then the program's own
    name, as a case folder's argv.json gives it)."""
    head = [cwd, executable or "", str(len(argv))]
    fields = [*head, *argv, *(f"{k}={v}" for k, v in env.items())]
    return b"\0".join(os.fsencode(f) for f in fields)


def _decode_spec(data: bytes) -> tuple[bytes, bytes, list[bytes], dict[bytes, bytes]]:
    fields = data.split(b"\0")
    argc = int(fields[2])
    argv = fields[3 : 3 + argc]
    env = {}
    for item in fields[3 + argc :]:
        key, _, value = item.partition(b"=")
        env[key] = value
    return fields[0], fields[1] or argv[0], argv, env


def _on_term(signum: int, frame: object) -> None:
    _State.stop_early = True
    if _State.target:
        _killpg(_State.target)


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def _spawn(cwd: bytes, file: bytes, argv: list[bytes], env: dict[bytes, bytes]) -> int:
    """fork + exec in a new session; an exec failure comes back as OSError."""
    err_r, err_w = os.pipe()  # both close-on-exec: EOF on err_r means exec succeeded
    pid = os.fork()
    if pid == 0:
        try:
            os.close(err_r)
            os.setsid()
            # Python ignores these at start-up; a plain program expects the defaults.
            for name in ("SIGPIPE", "SIGXFSZ"):
                if hasattr(signal, name):
                    signal.signal(getattr(signal, name), signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.chdir(cwd)
            # The argv is the pin's own, passed as a list: no shell is involved.
            os.execvpe(file, argv, env)  # noqa: S606
        except OSError as exc:
            message = f"{exc.errno}:{exc.strerror or exc}"
            os.write(err_w, message.encode("utf-8", "replace"))
        finally:
            os._exit(127)
    os.close(err_w)
    failure = _read_all(err_r)
    os.close(err_r)
    if failure:
        os.waitpid(pid, 0)
        code, _, text = failure.decode("utf-8", "replace").partition(":")
        raise OSError(int(code), text)
    return pid


def _quiet() -> None:
    """Drop the supervisor's own copies of the target's pipes."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def processes() -> Iterator[tuple[int, int, int, str]]:
    """(pid, parent pid, process group, state letter) of every process visible in /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                text = handle.read()
        except OSError:
            continue
        # The command name may contain spaces and parentheses; fields resume after the last ')'.
        fields = text.rsplit(")", 1)[-1].split()
        if len(fields) > 2:
            yield int(name), int(fields[1]), int(fields[2]), fields[0]


def children(pid: int) -> list[int]:
    """The children of process pid (of all its threads), zombies included."""
    try:
        found: list[int] = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as handle:
                found += [int(p) for p in handle.read().split()]
        return found
    except (OSError, ValueError):  # no such file in this kernel, or a thread just ended
        return [p for p, parent, _, _ in processes() if parent == pid]


def kill_children(spare: Collection[int] = (), bound: float = SWEEP_BOUND) -> bool:
    """SIGKILL and reap every child of this process but those in spare, repeatedly: each kill can
    orphan that process's own children onto us (a child subreaper). True once none is left,
    False after bound seconds. Without spare, "none left" is waitpid's word (no child at all),
    which no race with /proc can fake; with spare, the caller must keep new children from
    appearing outside spare meanwhile."""
    me = os.getpid()
    until = time.monotonic() + bound
    while True:
        found = [pid for pid in children(me) if pid not in spare]
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not spare:
            if _reap_all():
                return True
        elif not found:
            return True
        else:
            for pid in found:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except OSError:
                    pass
        if time.monotonic() >= until:
            return False
        time.sleep(0.002)


def _reap_all() -> bool:
    """Reap every dead child; True when this process has no child left at all."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return False


def _sweep(pgid: int) -> bool:
    """SIGKILL the target's group and every child (adopted orphans included) until none is left:
    every living descendant has a living parent chain ending in one of our children."""
    _killpg(pgid)
    return kill_children()


def main(argv: list[str]) -> int:
    """Run one pin target as described in the module docstring."""
    channel = int(argv[1])
    os.set_inheritable(channel, False)
    reaps = become_subreaper()
    signal.signal(signal.SIGTERM, _on_term)

    def report(line: str) -> None:
        try:
            os.write(channel, (line + "\n").encode("utf-8", "replace"))
        except OSError:
            pass  # charpin gave up on us; the sweep below must still happen

    cwd, file, target_argv, env = _decode_spec(_read_all(channel))
    try:
        pid = _spawn(cwd, file, target_argv, env)
    except OSError as exc:
        report(f"error {exc.strerror or exc}")
        return 0
    _State.target = pid
    _quiet()
    report(f"started {pid}")
    if _State.stop_early:
        _killpg(pid)
    _, status = os.waitpid(pid, 0)
    swept = _sweep(pid)
    report(f"exit {os.waitstatus_to_exitcode(status)}")
    report("unswept" if not swept else "swept" if reaps else "noreap")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
