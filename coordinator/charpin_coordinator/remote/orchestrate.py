"""Coordinator side. Bounded fan-out over boxes; every requested box ends with an outcome.

One box failing never cancels the others. On Ctrl-C the shared stop event tells every running
box to send its agent a stop request (the agent stops the runner, which still writes a
sealed receipt), fetch what it can and clean up;
boxes that never started are reported NOT EVALUATED ("interrupted").
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from charpin_coordinator.remote.boxrun import BoxOutcome, Phase
from charpin_coordinator.report import NotEvaluated

# After Ctrl-C, how long running boxes get to kill, fetch and clean before we stop waiting.
STOP_GRACE_SECONDS = 60.0


@dataclass(frozen=True)
class Job:
    """One box to run: its alias and the call that runs its pipeline."""

    label: str
    run: Callable[[Phase, threading.Event], BoxOutcome]


@dataclass
class FanOut:
    """The outcomes in the order the boxes were requested, and whether Ctrl-C cut the run."""

    outcomes: list[BoxOutcome]
    interrupted: bool


def run_all(jobs: Sequence[Job], *, max_workers: int, phase: Phase) -> FanOut:
    """Run jobs with at most max_workers at once; Ctrl-C stops them all cleanly."""
    stop = threading.Event()
    pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="charpin-box")
    futures = {pool.submit(job.run, phase, stop): job for job in jobs}
    interrupted = False
    previous = _terminate_like_ctrl_c()
    try:
        pending = set(futures)
        while pending:
            # Short waits keep the main thread responsive to KeyboardInterrupt.
            _, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
        for future in futures:
            future.cancel()
        wait(futures, timeout=STOP_GRACE_SECONDS)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        pool.shutdown(wait=not interrupted, cancel_futures=True)
    return FanOut([_outcome(f, futures[f], phase) for f in futures], interrupted)


def _terminate_like_ctrl_c() -> Any:
    """SIGTERM (`systemctl stop`, a CI job's cancel) winds the run down as Ctrl-C does: boxes
    stop their runners, disposable servers are disposed, the partial report is written.
    Returns the handler it replaced (None off the main thread, where nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, interrupt)


def _outcome(future: Future[BoxOutcome], job: Job, phase: Phase) -> BoxOutcome:
    if future.done() and not future.cancelled():
        error = future.exception()
        if error is None:
            return future.result()
        reason = f"{job.label}: internal error: {type(error).__name__}: {error}"
        missing = NotEvaluated(label=job.label, kind="runner-failed", reason=reason)
    else:
        reason = f"{job.label}: the run was interrupted before this box finished"
        missing = NotEvaluated(label=job.label, kind="interrupted", reason=reason)
        phase(job.label, "not evaluated")
    return BoxOutcome(
        label=job.label,
        not_evaluated=missing,
        interrupted=missing.kind == "interrupted",
    )
