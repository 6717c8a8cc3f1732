"""Coordinator side. One box's pipeline: connect, ship, setup, test, fetch -> BoxOutcome.

Never raises for box-side problems: whatever goes wrong becomes a NotEvaluated with a kind and
a one-line reason, so one bad box never hides the others. Every remote step is a short Python
script (stdlib, Python >= 3.9) run with `python3 -I -c`, its values passed as argv, never pasted
into the source; the test run itself is detached with its own session and writes to files.
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from charpin_runner import seal
from charpin_runner.errors import EXIT_INTERRUPTED, CharpinError, IntegrityError
from charpin_runner.receipt import Receipt

from charpin_coordinator.receipts import load_receipt
from charpin_coordinator.remote import snapshot
from charpin_coordinator.remote.boxscripts import CLEAN, KILL, LAUNCH, PREP, SETUP, TAIL, WAIT
from charpin_coordinator.remote.bundle import RunnerBundle
from charpin_coordinator.remote.transport import Completed, Transport
from charpin_coordinator.report import NotEvaluated, NotEvaluatedKind

MAX_LOG_BYTES = 8 * 1024 * 1024
MAX_RECEIPT_BYTES = 64 * 1024 * 1024
GRACE_SECONDS = 20.0  # past the runner's own --timeout before the coordinator kills the group
TERM_WAIT_SECONDS = 8.0  # time the runner gets after SIGTERM to write its receipt
_STEP_TIMEOUT = 120.0
_POLL_SECONDS = 2.0

Phase = Callable[[str, str], None]


@dataclass(frozen=True)
class RunPlan:
    """What every box of one run shares."""

    run_id: str
    snap: snapshot.Snapshot
    config_table: Mapping[str, Any]
    setup: Sequence[str]
    timeout: float
    keep: bool
    runner: RunnerBundle
    repo_key: str
    sandbox: str = "auto"  # the runner's --sandbox: auto, required or off


@dataclass(frozen=True)
class BoxTarget:
    """One requested box: its label, how to reach it and its per-host extras."""

    label: str
    folder: str
    connect: Callable[[], Transport]
    python: str = "python3"
    setup: Sequence[str] | None = None
    timeout: float | None = None
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass
class BoxOutcome:
    """What one box gave back: a decoded receipt, or why it could not be evaluated."""

    label: str
    folder: str
    receipt: Receipt | None = None
    raw_receipt: bytes | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    not_evaluated: NotEvaluated | None = None
    interrupted: bool = False
    sent: int = 0
    received: int = 0
    phases: dict[str, float] = field(default_factory=dict)


class StepError(Exception):
    """A box-side problem with its NotEvaluated kind (internal to this module)."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


def run_box(target: BoxTarget, plan: RunPlan, phase: Phase, stop: threading.Event) -> BoxOutcome:
    """Run the whole pipeline on one box; always return an outcome."""
    out = BoxOutcome(label=target.label, folder=target.folder)
    box: Transport | None = None
    try:
        phase(target.label, "connect")
        # One deadline per box, counted from before the connection: every step shares it.
        ends = time.monotonic() + float(target.timeout or plan.timeout)
        box = target.connect()
        _Pipeline(box, target, plan, phase, stop, out, ends).run()
    except StepError as exc:
        out.not_evaluated = _not_evaluated(target.label, exc.kind, exc.reason)
    except Exception as exc:
        out.not_evaluated = _not_evaluated(target.label, _kind_of(exc), _one_line(exc))
    finally:
        if box is not None:
            out.sent, out.received = box.stats.sent, box.stats.received
            _close(box)
    phase(target.label, "done" if out.not_evaluated is None else "not evaluated")
    return out


class _Pipeline:
    """The steps for one connected box, each small and named."""

    def __init__(
        self,
        box: Transport,
        target: BoxTarget,
        plan: RunPlan,
        phase: Phase,
        stop: threading.Event,
        out: BoxOutcome,
        ends: float,
    ):
        self.box, self.target, self.plan, self.phase, self.stop, self.out = (
            box,
            target,
            plan,
            phase,
            stop,
            out,
        )
        self.python = target.python
        self.ends = ends
        # Caches the untrusted test command could have written; removed unless a sealed
        # receipt says the runner watched them through the whole run.
        self.caches: list[str] = []
        self.launched = False
        self.killed_at_deadline = False
        self.paths: dict[str, str] = {}
        # Fresh per box and run; travels on the launcher's stdin, never in argv.
        self.seal_key = seal.new_key()

    def run(self) -> None:
        prep = self._prepare()
        try:
            self.phase(self.target.label, "ship")
            sha = self._ship(prep)
            self._check_stop()
            self.phase(self.target.label, "setup")
            python = self._setup(prep)
            self._check_stop()
            self.phase(self.target.label, "test")
            self._test(python, sha)
            self.phase(self.target.label, "fetch")
            self._fetch()
        finally:
            # The test command started but no sealed receipt vouches for the caches after it.
            discard = self.caches if self.launched and self.out.receipt is None else []
            if discard or not self.plan.keep:
                run_folder = "" if self.plan.keep else self.paths["run"]
                self._step(
                    [self.python, "-I", "-c", CLEAN, run_folder, *discard],
                    "cleaning up",
                    timeout=_STEP_TIMEOUT,
                )

    def _prepare(self) -> dict[str, Any]:
        setup = self._setup_commands()
        # One round trip: the box finds its home (SSH) and cache state and stores the config.
        home = "" if getattr(self.box, "home_on_box", False) else self.box.home()
        done = self.box.run(
            [
                self.python,
                "-I",
                "-c",
                PREP,
                home,
                self.plan.run_id,
                self.target.folder,
                self.plan.repo_key,
                self.plan.runner.name,
                "1" if setup else "0",
                self.plan.snap.commit,
                str(snapshot.MAX_HAVES),
            ],
            timeout=self._step_timeout(),
            stdin=json.dumps(dict(self.plan.config_table)).encode(),
        )
        if done.timed_out:
            raise StepError(
                "timeout",
                f"{self.target.label}: {self.python} did not answer within the box's "
                f"{float(self.target.timeout or self.plan.timeout):g}s deadline; check the box "
                "or raise --timeout / the host's timeout",
            )
        if done.returncode != 0 or not done.stdout.strip():
            raise StepError("unsupported-box", _unsupported(self.target, done.stderr))
        prep: dict[str, Any] = json.loads(done.stdout)
        if prep.get("problem"):
            raise StepError("unsupported-box", f"{self.target.label}: {prep['problem']}")
        if self.plan.sandbox == "required" and not prep.get("bwrap"):
            raise StepError(
                "no-sandbox",
                f"{self.target.label}: --sandbox required, but the box has no bubblewrap; "
                "install it there (apt-get install bubblewrap) or use --sandbox auto",
            )
        self.paths = {k: str(v) for k, v in prep["paths"].items()}
        self.caches.append(self.paths["cache_repo"])
        return prep

    def _ship(self, prep: dict[str, Any]) -> str | None:
        if prep["runner_sha256"] != self.plan.runner.sha256:
            self.box.put(self.plan.runner.data, self.paths["runner"])
        snap = self.plan.snap
        has, haves = bool(prep["has"]), [str(sha) for sha in prep["haves"]]
        bundle = None if has else snapshot.build_bundle(snap, haves)
        if bundle is not None:
            self.box.put(bundle.data, self.paths["bundle"])
        try:
            got = snapshot.install(
                self.box,
                self.python,
                cache_repo=self.paths["cache_repo"],
                bundle_path=self.paths["bundle"] if bundle else None,
                bundle_sha256=bundle.sha256 if bundle else None,
                commit=snap.commit,
                dest=self.paths["src"],
                tree=snap.tree,
                runner=self.paths["runner"],
            )
            snapshot.check_identity(snap, got, self.target.label)
        except IntegrityError as exc:
            raise StepError("snapshot-integrity", str(exc)) from exc
        return bundle.sha256 if bundle else None

    def _setup_commands(self) -> list[str]:
        extra = self.target.setup
        return list(self.plan.setup if extra is None else extra)

    def _setup(self, prep: dict[str, Any]) -> str:
        commands = self._setup_commands()
        if not commands:
            if not prep["has_pytest"]:
                raise StepError(
                    "setup-failed",
                    (
                        f"{self.target.label}: {self.python} cannot import pytest; add "
                        'setup = ["pip install pytest"] to [tool.charpin] (or the host\'s table)'
                    ),
                )
            return self.python
        done = self.box.run(
            [
                self.python,
                "-I",
                "-c",
                SETUP,
                self.paths["venvs"],
                self.paths["src"],
                json.dumps(commands),
                str(self._deadline()),
            ],
            timeout=self._deadline() + 30,
        )
        if done.timed_out:
            raise StepError(
                "timeout", f"{self.target.label}: setup ran past the box deadline: {_tail(done.stderr)}"
            )
        if done.returncode != 0:
            raise StepError(
                "setup-failed", f"{self.target.label}: setup failed: {_tail(done.stderr)}"
            )
        made = json.loads(done.stdout)
        self.caches.append(str(made["venv"]))
        return str(made["python"])

    def _step_timeout(self) -> float:
        """A short step's limit: its own cap, never past the box's deadline."""
        return max(1.0, min(_STEP_TIMEOUT, self.ends - time.monotonic()))

    def _deadline(self) -> float:
        """Seconds left of this box's one deadline (setup and tests share it)."""
        return max(1.0, round(self.ends - time.monotonic(), 1))

    def _receipt_argv(self, python: str, sha: str | None) -> list[str]:
        p = self.paths
        argv = [
            python,
            p["runner"],
            "receipt",
            "--repo",
            p["src"],
            "--label",
            self.target.folder,
            "-o",
            p["receipt"],
            "--config-json",
            p["config"],
            "--run-id",
            self.plan.run_id,
            "--expected-commit",
            self.plan.snap.commit,
            "--timeout",
            str(self._deadline()),
            "--seal-stdin",
            "--sandbox",
            self.plan.sandbox,
            "--protect",
            p["runner"],
            "-q",
        ]
        # Caches later runs read: watched through the run, removed by the runner if changed.
        for cache in self.caches:
            argv += ["--disposable", cache]
        if sha:
            argv += ["--snapshot-sha256", sha]
        fingerprint = getattr(self.box, "host_key_fingerprint", None)
        if fingerprint:
            argv += ["--host-key-fingerprint", str(fingerprint)]
            if getattr(self.box, "host_key_accepted_new", False):
                argv.append("--host-key-accepted-new")
        return argv

    def _test(self, python: str, sha: str | None) -> None:
        env = [f"{k}={v}" for k, v in sorted(self.target.env.items())]
        launch = [
            self.python,
            "-I",
            "-c",
            LAUNCH,
            self.paths["run"],
            *self._receipt_argv(python, sha),
        ]
        given = {"env": env, "key": self.seal_key}
        done = self._step(launch, "starting the runner", stdin=json.dumps(given).encode())
        self.launched = True
        pid = int(done.stdout.strip())
        ends = self.ends + GRACE_SECONDS
        while not self._finished(pid):
            if self.stop.is_set() or time.monotonic() > ends:
                self.out.interrupted = self.stop.is_set()
                self.killed_at_deadline = not self.out.interrupted
                self._step(
                    [self.python, "-I", "-c", KILL, str(pid), str(TERM_WAIT_SECONDS)],
                    "killing the run",
                    timeout=TERM_WAIT_SECONDS + 30,
                )
                return

    def _finished(self, pid: int) -> bool:
        done = self._step(
            [self.python, "-I", "-c", WAIT, str(pid), str(_POLL_SECONDS)],
            "waiting for the runner",
            timeout=_POLL_SECONDS + 60,
        )
        return done.stdout.strip() == b"gone"

    def _fetch(self) -> None:
        self.out.stdout = self._get_log("stdout")
        self.out.stderr = self._get_log("stderr")
        try:
            raw = self.box.get(self.paths["receipt"], max_bytes=MAX_RECEIPT_BYTES)
        except (IntegrityError, OSError) as exc:
            if self.out.interrupted:
                kind, why = "interrupted", "interrupted before it wrote a receipt"
            elif self.killed_at_deadline:
                kind, why = (
                    "timeout",
                    f"killed at the {self._deadline():.0f}s box deadline "
                    + ("before it wrote a receipt; raise --timeout or the host's timeout"),
                )
            else:
                kind = "runner-failed"
                why = (
                    f"the runner wrote no receipt ({_one_line(exc)}); its stderr: "
                    f"{_tail(self.out.stderr)}"
                )
            raise StepError(kind, f"{self.target.label}: {why}") from exc
        try:
            sealed = self.box.get(self.paths["receipt"] + seal.SEAL_SUFFIX, max_bytes=seal.MAX_SEAL_BYTES)
        except (IntegrityError, OSError):
            sealed = b""
        self.out.raw_receipt = raw
        self.out.receipt = decode_sealed(
            raw, sealed, key=self.seal_key, run_id=self.plan.run_id, label=self.target.label
        )

    def _get_log(self, name: str) -> bytes:
        try:
            return self.box.get(self.paths[name], max_bytes=MAX_LOG_BYTES)
        except (IntegrityError, OSError) as exc:
            tail = self._log_tail(name)
            if tail is not None:  # a verbose failing suite: its end says what went wrong
                note = f"(charpin-remote: {name}.log is over {MAX_LOG_BYTES} bytes; its end:)\n"
                return note.encode() + tail
            return f"(charpin-remote: {name}.log not fetched: {_one_line(exc)})\n".encode()

    def _log_tail(self, name: str) -> bytes | None:
        """The last MAX_LOG_BYTES of a log that is too big to fetch whole, or None."""
        done = self.box.run(
            [self.python, "-I", "-c", TAIL, self.paths[name], str(MAX_LOG_BYTES)],
            timeout=_STEP_TIMEOUT,
        )
        if done.returncode != 0 or done.timed_out:
            return None
        return done.stdout[-MAX_LOG_BYTES:]

    def _step(
        self,
        argv: list[str],
        what: str,
        *,
        timeout: float = _STEP_TIMEOUT,
        stdin: bytes | None = None,
    ) -> Completed:
        done = self.box.run(argv, timeout=timeout, stdin=stdin)
        if done.returncode != 0 or done.timed_out:
            raise StepError(
                "runner-failed", f"{self.target.label}: {what} failed: {_tail(done.stderr)}"
            )
        return done

    def _check_stop(self) -> None:
        if self.stop.is_set():
            self.out.interrupted = True
            raise StepError("interrupted", f"{self.target.label}: interrupted before the tests ran")


def decode_sealed(
    raw: bytes, sealed: bytes, *, key: str, run_id: str, label: str, exit_code: int | None = None
) -> Receipt:
    """The one place a box's receipt is accepted: its seal checked against this run's key (so
    the test command cannot have planted it), then decoded strictly as untrusted input, then its
    exit status reconciled with the one the runner sealed (and, where the coordinator saw the
    runner's process end, with that too)."""
    source = f"{label}:receipt.json"
    try:
        if not sealed:
            raise IntegrityError(
                f"{source} has no seal: the runner did not finish writing it (something created "
                "the receipt path during the run, or the runner was killed); the receipt is refused"
            )
        code = seal.check(key, run_id, raw, sealed, source)
        if exit_code is not None and exit_code != code:
            raise IntegrityError(
                f"{source}: the runner exited {exit_code} but sealed {code}; the receipt is refused"
            )
        receipt = load_receipt(raw, source=source, max_bytes=MAX_RECEIPT_BYTES)
        expected = seal.runner_status(receipt, interrupted=code == EXIT_INTERRUPTED)
        if code != expected:
            raise IntegrityError(
                f"{source}: the runner sealed exit {code}, but its receipt "
                f"({receipt.exit.interpretation}) means {expected}; the receipt is refused"
            )
        return receipt
    except IntegrityError as exc:
        raise StepError("receipt-refused", str(exc)) from exc


def _not_evaluated(label: str, kind: str, reason: str) -> NotEvaluated:
    known = kind if kind in get_args(NotEvaluatedKind) else "runner-failed"
    return NotEvaluated(label=label, kind=known, reason=reason)  # type: ignore[arg-type]


def _kind_of(exc: BaseException) -> str:
    kind = getattr(exc, "kind", None)
    if isinstance(kind, str):
        return kind
    if isinstance(exc, (TimeoutError, EOFError, ConnectionError)):
        return "timeout" if isinstance(exc, TimeoutError) else "refused"
    return "runner-failed"


def _unsupported(target: BoxTarget, stderr: bytes) -> str:
    return (
        f"{target.label}: {target.python} did not start ({_tail(stderr)}); install python3 "
        '>= 3.9 or set python = "/path/to/python3" under [tool.charpin.hosts.'
        f"{shlex.quote(target.label)}]"
    )


def _close(box: Transport) -> None:
    try:
        box.close()
    except Exception:  # noqa: S110 - closing a dead connection is best effort
        pass


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, CharpinError):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _tail(data: bytes, lines: int = 6) -> str:
    text = data.decode("utf-8", "replace").strip().splitlines()
    return " | ".join(line.strip() for line in text[-lines:]) or "(no output)"
