"""Coordinator side. One box's pipeline over one agent session -> BoxOutcome.

connect -> start the agent -> prepare -> ship (bundle + install) -> setup -> launch (wait for the
runner's end) -> fetch (receipt, seal, logs) -> clean. Never raises for a box-side problem:
whatever goes wrong becomes the outcome's NotEvaluated (errors.py has the kinds), so one bad box
never hides the others. The `local` box runs the same steps in place, skipping ship and setup.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from charpin_runner import seal
from charpin_runner.box.launch import GRACE_SECONDS, TERM_WAIT_SECONDS
from charpin_runner.errors import EXIT_INTERRUPTED, CharpinError, IntegrityError
from charpin_runner.receipt import Receipt

from charpin_coordinator.redact import Redactor
from charpin_coordinator.remote import session as sessions
from charpin_coordinator.remote import snapshot
from charpin_coordinator.remote.bundle import RunnerBundle
from charpin_coordinator.remote.errors import BoxError, last_lines
from charpin_coordinator.remote.transport import Transport
from charpin_coordinator.report import NotEvaluated

STEP_SECONDS = 120.0  # one short step (prepare, fetch, clean), never past the box's deadline
_SHIP_SECONDS = 300.0
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")

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
    patch_sha256: str = ""  # `verify`: the patch this snapshot applies, recorded in receipts
    confine: bool = False  # `verify`: no network, only the checkout writable (under bwrap)
    # Commands run in every shipped checkout after setup, in a per-run venv (`prepare`).
    prepare: Sequence[str] = ()
    # `run --include-frozen`: the runner also re-runs the ledger's frozen tests on the side,
    # after everything gated is measured (the receipt's frozen_rerun; never gated).
    include_frozen: bool = False
    # Secrets of the coordinator's environment, masked in all a box gives back (design §8).
    redactor: Redactor = field(default_factory=lambda: Redactor.from_env(os.environ))
    # `verify` (#19): what the probe traces, and the differential job for the judged run.
    cover: Sequence[str] = ()
    capture: Sequence[str] = ()
    differential: bytes = b""


@dataclass(frozen=True)
class BoxTarget:
    """One requested box: its alias, how to reach it, and its per-host extras."""

    label: str
    connect: Callable[[], Transport]
    python: str = "python3"
    setup: Sequence[str] | None = None
    timeout: float | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    # The working tree this box runs in place (`local`); None ships the snapshot.
    in_place: str | None = None
    # Paths of this machine the box's tests get read-only under bwrap (`local`, `clean`).
    read_only: Sequence[str] = ()
    # ... and hidden from them (this machine's secrets).
    hidden: Sequence[str] = ()


@dataclass
class BoxOutcome:
    """What one box gave back: a decoded receipt, or why it could not be evaluated."""

    label: str
    receipt: Receipt | None = None
    raw_receipt: bytes | None = None  # as stored in the run folder: secrets masked
    stdout: bytes = b""
    stderr: bytes = b""
    not_evaluated: NotEvaluated | None = None
    interrupted: bool = False
    sent: int = 0
    received: int = 0
    channels: int = 0  # channels opened to the box: one per run
    phases: dict[str, float] = field(default_factory=dict)
    # `run --repeat N`: 1 is the receipt of record; the record carries repeats 2..N, each an
    # independent run of the whole pipeline (evidence only, never gating).
    repeat: int = 1
    repeats: list[BoxOutcome] = field(default_factory=list)


def receipt_label(alias: str) -> str:
    """The label a box's receipt carries: its alias, made safe for the runner's --label."""
    if _LABEL.fullmatch(alias):
        return alias
    return re.sub(r"[^A-Za-z0-9._@+-]+", "_", alias).strip("._@+-")[:64] or "box"


def run_box(target: BoxTarget, plan: RunPlan, phase: Phase, stop: threading.Event) -> BoxOutcome:
    """Run the whole pipeline on one box; always return an outcome."""
    out = BoxOutcome(label=target.label)
    box: Transport | None = None
    try:
        phase(target.label, "connect")
        # One deadline per box, counted from before the connection: every step shares it.
        ends = time.monotonic() + float(target.timeout or plan.timeout)
        box = target.connect()
        if stop.is_set():  # Ctrl-C while connecting (or while a server was being made)
            out.interrupted = True
            raise BoxError(target.label, "interrupted", "interrupted before the tests ran")
        _Pipeline(box, target, plan, phase, stop, out, ends).run()
    except BoxError as exc:
        out.not_evaluated = exc.not_evaluated()
    except Exception as exc:  # a bug or a surprise on one box must not hide the others
        out.not_evaluated = NotEvaluated(
            label=target.label, kind="runner-failed", reason=f"{target.label}: {_one_line(exc)}"
        )
    finally:
        if box is not None:
            out.sent, out.received = box.stats.sent, box.stats.received
            out.channels = box.stats.channels
            _close(box)
    if out.not_evaluated is not None:
        ne = out.not_evaluated
        out.not_evaluated = NotEvaluated(
            label=ne.label, kind=ne.kind, reason=plan.redactor.text(ne.reason)
        )
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
        self.box, self.target, self.plan = box, target, plan
        self.phase, self.stop, self.out, self.ends = phase, stop, out, ends
        self.label = target.label
        self.launched = False
        self.session: sessions.BoxSession | None = None
        self.seal_key = ""

    def run(self) -> None:
        self.session = self._start()
        try:
            facts = self._prepare()
            sha = None
            if self.target.in_place is None:
                self.phase(self.label, "ship")
                sha = self._ship(facts)
                self._check_stop()
                self.phase(self.label, "setup")
                self._setup(facts)
            self._check_stop()
            self.phase(self.label, "test")
            status, ended = self._launch(sha)
            self.phase(self.label, "fetch")
            self._fetch(status, ended)
        finally:
            self._clean()
            self.session.close()

    def _start(self) -> sessions.BoxSession:
        # Every box, `local` included, starts the runner this coordinator carries from the
        # box's own runner cache (python -I, content-checked): never a `python -m` that the
        # working tree's own `charpin_runner/` could answer.
        argv = sessions.shipped_agent(self.target.python, self.box.home, self.plan.runner)
        return sessions.BoxSession.start(
            self.box,
            argv,
            python=self.target.python,
            runner=self.plan.runner,
            timeout=self._step_seconds(),
            deadline=self.ends,
        )

    def _call(
        self, op: str, fields: Mapping[str, Any], payload: bytes = b"", **kw: Any
    ) -> tuple[dict[str, Any], bytes]:
        assert self.session is not None
        return self.session.call(op, fields, payload, **kw)

    def _prepare(self) -> dict[str, Any]:
        fields = {
            "run_id": self.plan.run_id,
            "folder": receipt_label(self.label).replace("@", "_").replace("+", "_"),
            "repo_key": self.plan.repo_key,
            "commit": self.plan.snap.commit,
            "need_venv": bool(self._setup_commands() or self.plan.prepare)
            and self.target.in_place is None,
            "keep": self.plan.keep,
            "in_place": self.target.in_place or "",
            "python": self.target.python,
        }
        config = json.dumps(dict(self.plan.config_table)).encode()
        facts, _ = self._call("prepare", fields, config, timeout=self._step_seconds())
        if self.plan.sandbox == "required" and not facts.get("bwrap"):
            raise BoxError(
                self.label,
                "no-sandbox",
                "--sandbox required, but the box has no bubblewrap; install it there "
                "(apt-get install bubblewrap) or use --sandbox auto",
            )
        return facts

    def _ship(self, facts: Mapping[str, Any]) -> str | None:
        snap = self.plan.snap
        bundle = None
        if not facts.get("has"):
            bundle = snapshot.build_bundle(snap, [str(sha) for sha in facts.get("haves", [])])
        fields = {
            "bundle_sha256": bundle.sha256 if bundle else "",
            "commit": snap.commit,
            "ref": snapshot.BUNDLE_REF,
            "tree": snap.tree,
        }
        got, _ = self._call(
            "install",
            fields,
            bundle.data if bundle else b"",
            timeout=min(_SHIP_SECONDS, self._left()),
        )
        snapshot.check_identity(snap, str(got.get("head")), str(got.get("tree")), self.label)
        return bundle.sha256 if bundle else None

    def _setup_commands(self) -> list[str]:
        extra = self.target.setup
        return list(self.plan.setup if extra is None else extra)

    def _setup(self, facts: Mapping[str, Any]) -> None:
        commands = self._setup_commands()
        prepare = list(self.plan.prepare)
        if not commands:
            if not facts.get("has_pytest"):
                raise BoxError(
                    self.label,
                    "setup-failed",
                    f"{self.target.python} cannot import pytest; add "
                    'setup = ["pip install pytest"] to [tool.charpin] (or the host\'s table)',
                )
            if not prepare:
                return
        seconds = self._left()
        self._call(
            "setup",
            {"commands": commands, "prepare": prepare, "seconds": seconds},
            timeout=seconds + STEP_SECONDS,
        )

    def _launch(self, sha: str | None) -> tuple[int | None, str]:
        seconds = self._left()
        # On `local` and `clean` the tests run as this user, beside this process and its key.
        seal.not_dumpable()
        key = seal.new_key()
        self.seal_key = key
        fields = {
            "label": receipt_label(self.label),
            "run_id": self.plan.run_id,
            "commit": self.plan.snap.commit,
            "timeout": seconds,
            "sandbox": self.plan.sandbox,
            "snapshot_sha256": sha or "",
            "patch_sha256": self.plan.patch_sha256,
            "confine": self.plan.confine,
            "include_frozen": self.plan.include_frozen,
            "host_key_fingerprint": self.box.host_key_fingerprint or "",
            "host_key_accepted_new": self.box.host_key_accepted_new,
            # Values travel in the frame, never in argv (ps, /proc/PID/cmdline on the box).
            "env": [f"{k}={v}" for k, v in sorted(self.target.env.items())],
            "key": key,
            "read_only": list(self.target.read_only),
            "hidden": list(self.target.hidden),
            "cover": list(self.plan.cover),
            "capture": list(self.plan.capture),
        }
        self.launched = True
        # The agent enforces the deadline itself; this wait only outlives it.
        wait = seconds + GRACE_SECONDS + TERM_WAIT_SECONDS + STEP_SECONDS
        reply, _ = self._call(
            "launch", fields, self.plan.differential, timeout=wait, stop=self.stop
        )
        ended = str(reply.get("ended"))
        self.out.interrupted = ended == "stopped"
        status = reply.get("status")
        return (status if isinstance(status, int) else None), ended

    def _fetch(self, status: int | None, ended: str) -> None:
        reply, data = self._call("fetch", {}, timeout=self._step_seconds(floor=STEP_SECONDS))
        parts = _split(reply, data)
        redact = self.plan.redactor
        self.out.stdout = _log("stdout", parts, redact)
        self.out.stderr = _log("stderr", parts, redact)
        raw, problem = parts["receipt"][0], parts["receipt"][1]
        if problem is not None:
            raise BoxError(self.label, *self._no_receipt(ended, problem))
        sealed = parts["seal"][0]
        # Kept in the run folder even when refused: the evidence of what was planted.
        self.out.raw_receipt = redact.data(raw)
        masked, receipt = accept_receipt(
            raw,
            sealed,
            key=self.seal_key,
            run_id=self.plan.run_id,
            label=self.label,
            exit_code=status if ended == "exit" else None,
            redactor=redact,
        )
        self.out.raw_receipt, self.out.receipt = masked, receipt

    def _no_receipt(self, ended: str, problem: str) -> tuple[Any, str]:
        if ended == "stopped":
            return "interrupted", "interrupted before it wrote a receipt"
        if ended == "deadline":
            return "timeout", (
                f"killed at the {float(self.target.timeout or self.plan.timeout):.0f}s box "
                "deadline before it wrote a receipt; raise --timeout or the host's timeout"
            )
        return "runner-failed", (
            f"the runner wrote no receipt (receipt.json {problem}); its stderr: "
            f"{last_lines(self.out.stderr)}"
        )

    def _clean(self) -> None:
        # The test command started but no sealed receipt vouches for the caches after it.
        discard = self.launched and self.out.receipt is None
        if self.session is None:
            return
        # Past the deadline the run folder gets a short wait (what is left is removed when the
        # agent sees the channel end); caches to discard always get the whole step.
        seconds = STEP_SECONDS if discard else self.session.closing_seconds(STEP_SECONDS)
        try:
            self._call("clean", {"discard": discard}, timeout=seconds)
        except BoxError:
            pass  # the agent also cleans up when the channel ends without a goodbye

    def _left(self) -> float:
        """Seconds left of this box's one deadline (setup and tests share it)."""
        return max(1.0, round(self.ends - time.monotonic(), 1))

    def _step_seconds(self, floor: float = 1.0) -> float:
        return max(floor, min(STEP_SECONDS, self.ends - time.monotonic()))

    def _check_stop(self) -> None:
        if self.stop.is_set():
            self.out.interrupted = True
            raise BoxError(self.label, "interrupted", "interrupted before the tests ran")


def accept_receipt(
    raw: bytes,
    sealed: bytes,
    *,
    key: str,
    run_id: str,
    label: str,
    exit_code: int | None,
    redactor: Redactor,
) -> tuple[bytes, Receipt]:
    """The one place a box's receipt is accepted; returns (masked bytes, decoded receipt).

    Its seal is checked against this run's key over the bytes the runner wrote (so the test
    command cannot have planted them), the exit status the runner sealed is reconciled with the
    one the agent saw it end with, the bytes are decoded once, strictly, as untrusted input,
    and reconciled with the sealed status; the bytes returned have the coordinator's secrets
    masked, for the run folder."""
    from charpin_coordinator.receipts import load_receipt  # imported while the boxes ran

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
        receipt = load_receipt(raw, source=source)
        if exit_code is None and receipt.exit.interpretation not in ("interrupted", "timed-out"):
            # The agent stopped the runner (deadline, Ctrl-C): a runner stopped so writes an
            # interrupted or timed-out receipt; anything else was not written by its end.
            raise IntegrityError(
                f"{source}: the runner was stopped, yet its receipt reads "
                f"{receipt.exit.interpretation}; the receipt is refused"
            )
        expected = seal.runner_status(receipt, interrupted=code == EXIT_INTERRUPTED)
        if code != expected:
            raise IntegrityError(
                f"{source}: the runner sealed exit {code}, but its receipt "
                f"({receipt.exit.interpretation}) means {expected}; the receipt is refused"
            )
    except IntegrityError as exc:
        raise BoxError(label, "receipt-refused", str(exc)) from exc
    # Stored masked; the decoded receipt is not decoded again from the masked bytes (masking
    # can merge two test ids into one), and the report built from it is masked value by value.
    return redactor.json_document(raw), receipt


def _split(reply: Mapping[str, Any], data: bytes) -> dict[str, tuple[bytes, str | None, bool]]:
    """The fetch reply's parts by name: (bytes, problem or None, truncated)."""
    parts: dict[str, tuple[bytes, str | None, bool]] = {}
    offset = 0
    for part in reply.get("parts") or []:
        size = int(part["size"])
        problem = part.get("problem")
        parts[str(part["name"])] = (
            data[offset : offset + size],
            None if problem is None else str(problem),
            bool(part.get("truncated")),
        )
        offset += size
    if offset != len(data) or not {"receipt", "seal", "stdout", "stderr"} <= set(parts):
        raise IntegrityError("box protocol: the fetch reply's parts do not add up")
    return parts


def _log(
    name: str, parts: Mapping[str, tuple[bytes, str | None, bool]], redact: Redactor
) -> bytes:
    """A fetched log, masked; a capped one from its first whole line (rule 6: the cap must
    never leave half of a secret unmasked)."""
    data, problem, truncated = parts[name]
    if problem is not None:
        return f"(charpin-remote: {name}.log not fetched: {problem})\n".encode()
    if truncated:
        note = f"(charpin-remote: {name}.log is over {len(data)} bytes; its end, from a line:)\n"
        return note.encode() + redact.tail(data)
    return redact.data(data)


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
