"""The box agent: one process per box and run that answers the coordinator's frames. Runs on
boxes; stdlib only.

Started by the bootstrap as `python3 -I -B RUNNER box serve --home H`, it owns the one channel
the coordinator opened: requests arrive on stdin, replies leave on stdout (both framed, see
wire.py), and nothing else may write there, so fd 1 is moved aside at once. The steps are
prepare, install, setup, launch (which waits for the runner's end and can be told to stop),
fetch, clean and probe; `bye` ends the session. When the stream ends without `bye` (the
coordinator died or the connection dropped) a running test is stopped and the run folder and the
caches it may have written are removed, as after a failed run.
"""

from __future__ import annotations

import os
import select
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

from charpin_runner import checkout, seal
from charpin_runner.box import files, launch, layout, venv, wire
from charpin_runner.errors import EXIT_CLEAN, BoxStepError, CharpinError, IntegrityError, UsageError

Reply = tuple[dict[str, Any], bytes]


class Agent:
    """One session: the state a run builds up step by step on this box."""

    def __init__(self, home: str, proto_in: int, proto_out: int) -> None:
        self.home = home
        self.proto_in, self.proto_out = proto_in, proto_out
        self.reader = wire.Reader(lambda size: os.read(proto_in, size))
        self.layout: Optional[layout.Layout] = None
        self.keep = False
        self.caches: list[Path] = []
        self.python = sys.executable
        self.launched = False
        # Set when prepare ran in this run's fresh checkout (see setup()).
        self.prepared = False
        self.gone = False  # the stream ended while a step was running
        self.steps: dict[str, Callable[[dict[str, Any], bytes], Reply]] = {
            "prepare": self.prepare,
            "install": self.install,
            "setup": self.setup,
            "launch": self.launch,
            "fetch": self.fetch,
            "clean": self.clean,
            "probe": self.probe,
        }

    def serve(self) -> int:
        """Answer frames until `bye` or the end of the stream; the exit status of the agent."""
        self._send({"ok": True, "ready": True, "python": sys.version.split()[0]})
        while True:
            try:
                frame = self.reader.read()
            except IntegrityError as exc:
                self._send({"ok": False, "kind": "runner-failed", "error": str(exc)})
                frame = None
            if frame is None:
                self._abandon()
                return EXIT_CLEAN
            header, payload = frame
            if header.get("op") == "bye":
                self._send({"ok": True})
                return EXIT_CLEAN
            reply, data = self._answer(header, payload)
            if self.gone:
                self._abandon()
                return EXIT_CLEAN
            self._send(reply, data)

    def _answer(self, header: dict[str, Any], payload: bytes) -> Reply:
        op = header.get("op")
        step = self.steps.get(op) if isinstance(op, str) else None
        try:
            if step is None:
                raise UsageError(
                    f"box protocol: unknown step {op!r}; the coordinator and this runner differ"
                )
            reply, data = step(header, payload)
            return {"ok": True, **reply}, data
        except BoxStepError as exc:
            return {"ok": False, "kind": exc.kind, "error": str(exc)}, b""
        except CharpinError as exc:
            return {"ok": False, "kind": "runner-failed", "error": str(exc)}, b""
        except Exception as exc:  # one box's surprise must still reach the coordinator as a reply
            text = " ".join(str(exc).split())
            return {"ok": False, "kind": "runner-failed", "error": f"{type(exc).__name__}: {text}"}, b""

    # -- steps ------------------------------------------------------------------------------

    def prepare(self, header: dict[str, Any], payload: bytes) -> Reply:
        self.layout, facts = layout.prepare(self.home, header, payload)
        self.keep = bool(header.get("keep"))
        # The interpreter the host is configured with runs the tests (it may be a wrapper that
        # sets up more than the agent's own interpreter has), unless setup makes a venv.
        self.python = str(header.get("python") or sys.executable)
        if self.layout.cache_repo is not None:
            self.caches.append(self.layout.cache_repo)
        return facts, b""

    def install(self, header: dict[str, Any], payload: bytes) -> Reply:
        where = self._layout()
        if where.cache_repo is None:
            raise UsageError("box protocol: install in a run in place")
        bundle = None
        if payload:
            where.bundle.write_bytes(payload)
            bundle = where.bundle
        try:
            got = checkout.install(
                where.cache_repo,
                bundle,
                str(header.get("bundle_sha256") or ""),
                str(header["commit"]),
                where.src,
                str(header["ref"]),
                str(header["tree"]),
            )
        except IntegrityError as exc:
            raise BoxStepError("snapshot-integrity", str(exc)) from exc
        return dict(got), b""

    def setup(self, header: dict[str, Any], payload: bytes) -> Reply:
        commands = header.get("commands")
        if not isinstance(commands, list) or not all(isinstance(c, str) for c in commands):
            raise UsageError("box protocol: setup commands must be a list of strings")
        prepare = header.get("prepare") or []
        if not isinstance(prepare, list) or not all(isinstance(c, str) for c in prepare):
            raise UsageError("box protocol: prepare commands must be a list of strings")
        where = self._layout()
        ends = time.monotonic() + float(header["seconds"])
        made: dict[str, Any] = {"cached": True}
        if commands:
            made = venv.build(where.venvs, where.src, commands, float(header["seconds"]))
            self.caches.append(Path(made["venv"]))
            self.python = str(made["python"])
        if prepare:
            left = max(ends - time.monotonic(), 1.0)
            self.python = venv.prepare(where.run, self.python, where.src, prepare, left)
            # The checkout was verified equal to the commit before: what is uncommitted in it
            # now, prepare wrote (the receipt lists it apart from the user's dirt).
            self.prepared = True
        made["python"] = self.python
        return made, b""

    def launch(self, header: dict[str, Any], payload: bytes) -> Reply:
        where = self._layout()
        argv = launch.receipt_argv(self.python, where, header, self.caches)
        if payload:
            # verify's differential job: what the runner replays after the run (#19).
            job = where.run / "differential.json"
            job.write_bytes(payload)
            argv += ["--differential", str(job)]
        if self.prepared:
            argv.append("--prepared")
        env = dict(os.environ)
        for item in header.get("env") or []:
            name, _, value = str(item).partition("=")
            env[name] = value
        self.launched = True
        # The runner stops its own tests at `timeout`; `grace` later the agent stops the runner.
        grace = float(header.get("grace", launch.GRACE_SECONDS))
        status, ended = launch.run(
            argv, where, env, str(header["key"]), float(header["timeout"]), self._wake, grace
        )
        return {"status": status, "ended": ended}, b""

    def fetch(self, header: dict[str, Any], payload: bytes) -> Reply:
        parts, data = files.gather(self._layout())
        return {"parts": parts}, data

    def clean(self, header: dict[str, Any], payload: bytes) -> Reply:
        if self.layout is not None:
            discard = self.caches if header.get("discard") else []
            files.remove(self.layout, keep=self.keep, discard=discard)
            self.layout = None
        return {}, b""

    def probe(self, header: dict[str, Any], payload: bytes) -> Reply:
        return layout.probe(self.home), b""

    # -- plumbing ---------------------------------------------------------------------------

    def _layout(self) -> layout.Layout:
        if self.layout is None:
            raise UsageError("box protocol: a step before prepare")
        return self.layout

    def _wake(self, ended: int, timeout: float) -> str:
        """launch.run's wait: the runner's end, or the coordinator's stop request or absence."""
        if not self.reader.buffered():
            ready, _, _ = select.select([ended, self.proto_in], [], [], max(timeout, 0.0))
            if ended in ready:
                return "ended"
            if self.proto_in not in ready:
                return "idle"
        try:
            frame = self.reader.read()
        except IntegrityError:
            frame = None
        if frame is None:
            self.gone = True
        return "stop"  # `stop`, or anything else mid-run: nothing is served while tests run

    def _abandon(self) -> None:
        """The coordinator left: remove what an unverified run may have written."""
        if self.layout is not None:
            files.remove(self.layout, keep=self.keep, discard=self.caches if self.launched else [])
            self.layout = None

    def _send(self, header: dict[str, Any], payload: bytes = b"") -> None:
        view = memoryview(wire.encode(header, payload))
        while view:
            view = view[os.write(self.proto_out, view) :]


def serve(home: str) -> int:
    """Run the agent on this process's stdin/stdout; returns the exit status."""
    # The agent holds the run's seal key: the tests must not read it out of its memory.
    seal.not_dumpable()
    proto_in, proto_out = os.dup(0), os.dup(1)
    # Children (git, setup commands, the runner) must never inherit the protocol stream, and a
    # stray print must not corrupt it: fd 0 reads nothing, fd 1 is stderr from here on.
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    try:
        return Agent(home, proto_in, proto_out).serve()
    except BrokenPipeError:
        return EXIT_CLEAN  # the coordinator left while we answered
