"""Coordinator side. The two built-in boxes: `local` (this working tree, in place) and `clean`.

`clean` is a LocalTransport box and goes through exactly the same shipping code as an SSH box
(bundle, runner.pyz, fresh checkout), with a scrubbed environment and a fresh temporary HOME.
Its cache (runners, repositories, venvs) lives in a persistent per-user folder, like an SSH box's
`~/.cache/charpin`, so the second run does not rebuild its venv; each run's folder is still
removed unless --keep. `local` runs `charpin receipt` in place, dirty state included, with this
interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import charpin_runner
from charpin_runner import seal

from charpin_coordinator.remote.boxrun import (
    GRACE_SECONDS,
    TERM_WAIT_SECONDS,
    BoxOutcome,
    BoxTarget,
    Phase,
    RunPlan,
    StepError,
    decode_sealed,
)
from charpin_coordinator.remote.transport import LocalTransport
from charpin_coordinator.report import NotEvaluated

# What a clean box keeps from this process's environment: enough to find tools, and the
# locale/time zone (differences there are real drift, not an artefact of the clean box).
_CLEAN_KEEP = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_TIME", "TZ", "TMPDIR")


def clean_cache_home() -> Path:
    """The clean box's persistent cache root: $XDG_CACHE_HOME/charpin/clean-box (or ~/.cache)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # XDG: relative = unset
    return base / "charpin" / "clean-box"


class _TempBox(LocalTransport):
    """A LocalTransport in a temporary folder (removed on close unless kept) with a lasting cache."""

    def __init__(
        self, name: str, root: Path, *, keep: bool, base_env: Mapping[str, str], cache: Path
    ):
        super().__init__(name, root, base_env=base_env)
        self._keep = keep
        self._cache = cache

    def home(self) -> str:
        """The persistent cache root: runners, repos and venvs survive between runs."""
        return str(self._cache)

    def close(self) -> None:
        """Remove the box folder (unless --keep)."""
        if not self._keep:
            shutil.rmtree(self.root, ignore_errors=True)


def clean_target(
    label: str,
    folder: str,
    *,
    keep: bool,
    python: str | None = None,
    setup: list[str] | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
) -> BoxTarget:
    """The `clean` box: a fresh folder on this machine, reached through LocalTransport."""

    def connect() -> LocalTransport:
        cache = clean_cache_home()
        cache.mkdir(parents=True, exist_ok=True, mode=0o700)
        root = Path(tempfile.mkdtemp(prefix="charpin-clean-"))
        base = {k: v for k, v in os.environ.items() if k in _CLEAN_KEEP}
        base["HOME"] = str(root)  # tests on the clean box never see the user's dotfiles
        return _TempBox(label, root, keep=keep, base_env=base, cache=cache)

    return BoxTarget(
        label=label,
        folder=folder,
        connect=connect,
        python=python or sys.executable,
        setup=setup,
        timeout=timeout,
        env=dict(env or {}),
    )


def run_local(
    label: str,
    folder: str,
    plan: RunPlan,
    phase: Phase,
    stop: threading.Event,
    *,
    timeout: float | None = None,
) -> BoxOutcome:
    """Run `charpin receipt` in the working tree itself and read back what it wrote."""
    out = BoxOutcome(label=label, folder=folder)
    phase(label, "test")
    with tempfile.TemporaryDirectory(prefix="charpin-local-") as tmp:
        work = Path(tmp)
        (work / "config.json").write_text(json.dumps(dict(plan.config_table)), encoding="utf-8")
        deadline = float(timeout or plan.timeout)
        argv = [
            sys.executable,
            "-m",
            "charpin_runner",
            "receipt",
            "--repo",
            str(plan.snap.repo),
            "--label",
            folder,
            "-o",
            str(work / "receipt.json"),
            "--config-json",
            str(work / "config.json"),
            "--run-id",
            plan.run_id,
            "--expected-commit",
            plan.snap.commit,
            "--timeout",
            str(deadline),
            "--seal-stdin",
            "--sandbox",
            plan.sandbox,
            "-q",
        ]
        key = seal.new_key()
        out.interrupted, code = _run_detached(argv, work, deadline + GRACE_SECONDS, stop, key)
        phase(label, "fetch")
        out.stdout = (work / "stdout.log").read_bytes()
        out.stderr = (work / "stderr.log").read_bytes()
        _read_receipt(out, work / "receipt.json", key=key, run_id=plan.run_id, exit_code=code)
    phase(label, "done" if out.not_evaluated is None else "not evaluated")
    return out


def _run_detached(
    argv: list[str], work: Path, limit: float, stop: threading.Event, key: str
) -> tuple[bool, int | None]:
    """Run argv in its own session, its seal key on stdin; on stop or deadline kill its group.
    Returns (stopped, the runner's exit status when it ended by itself)."""
    env = dict(os.environ)
    # The runner this coordinator imports, even when it is not installed (a source checkout).
    runner_root = str(Path(charpin_runner.__file__).parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [runner_root, env.get("PYTHONPATH")]))
    with (work / "stdout.log").open("wb") as so, (work / "stderr.log").open("wb") as se:
        proc = subprocess.Popen(
            argv, stdout=so, stderr=se, stdin=subprocess.PIPE, env=env, start_new_session=True
        )
    assert proc.stdin is not None
    with proc.stdin:
        try:
            proc.stdin.write(key.encode() + b"\n")
        except BrokenPipeError:
            pass  # the runner died at once; its missing seal says so
    ends = time.monotonic() + limit
    while proc.poll() is None:
        if stop.is_set() or time.monotonic() > ends:
            _stop_group(proc)
            return stop.is_set(), None
        stop.wait(0.05)
    return False, proc.returncode


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM first so the runner writes its receipt, SIGKILL what is left."""
    for sig, wait in ((signal.SIGTERM, TERM_WAIT_SECONDS), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the leader may be gone while its group lives on
    except ProcessLookupError:
        pass


def _read_receipt(
    out: BoxOutcome, path: Path, *, key: str, run_id: str, exit_code: int | None
) -> None:
    if not path.is_file():
        tail = " | ".join(out.stderr.decode("utf-8", "replace").strip().splitlines()[-6:])
        out.not_evaluated = NotEvaluated(
            label=out.label,
            kind="interrupted" if out.interrupted else "runner-failed",
            reason=f"{out.label}: the runner wrote no receipt; its stderr: {tail or '(empty)'}",
        )
        return
    raw = path.read_bytes()
    sealed_path = path.with_name(path.name + seal.SEAL_SUFFIX)
    sealed = sealed_path.read_bytes() if sealed_path.is_file() else b""
    out.raw_receipt = raw
    try:
        out.receipt = decode_sealed(
            raw, sealed, key=key, run_id=run_id, label=out.label, exit_code=exit_code
        )
    except StepError as exc:
        out.not_evaluated = NotEvaluated(label=out.label, kind="receipt-refused", reason=exc.reason)
