"""Run the test command once, with the probe's record coming back through the parent's pipe.
Runs on boxes; stdlib only.

The configured command (testcommand.py) is started through the boot script (probehost.py) so
the probe loads before anything of the checkout, inside the run's sandbox (sandbox.py), in its
own process group (procgroup.py); the probe writes its record into a pipe the parent drains as
the run goes (recordpipe.py), so nothing the tests do afterwards can rewrite it.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from charpin_runner import probehost, testcommand
from charpin_runner import sandbox as sandbox_mod
from charpin_runner.interpret import Ending
from charpin_runner.probe import ProbeData, read_record
from charpin_runner.procgroup import StopFlag, run_child
from charpin_runner.recordpipe import MAX_RECORD_BYTES, RecordPipe

if TYPE_CHECKING:
    from charpin_runner.run_receipt import Request


@dataclass(frozen=True)
class TestRun:
    """One run of the test command: what ran, how it ended, what the probe sent."""

    command: list[str]
    ending: Ending
    wall: float
    probe: ProbeData
    # Findings about the record's channel itself (cut at its cap, held open after the run).
    findings: list[str] = field(default_factory=list)


def run_tests(
    request: Request,
    ledger: Optional[str],
    stop: StopFlag,
    guard: sandbox_mod.Guard,
    *,
    frozen_only: bool = False,
    timeout: Optional[float] = None,
) -> TestRun:
    """Run the test command with the probe recording into a pipe this process reads."""
    pipe = RecordPipe()
    command: Optional[probehost.Command] = None
    try:
        with tempfile.TemporaryDirectory(prefix="charpin-tests-") as scratch:
            argv = testcommand.build(
                request.config,
                request.repo,
                pipe.option,
                ledger,
                request.today,
                request.extra,
                frozen_only=frozen_only,
                # The side run of frozen tests is no evidence about the patch's code.
                cover=[] if frozen_only else request.cover,
                capture=[] if frozen_only else request.capture,
                entries=([], []) if frozen_only else (request.entries, request.entries_skip),
            )
            env = testcommand.environment(request.config, scratch, request.pass_env)
            path = env.get("PATH", os.defpath)
            testcommand.check_startable(argv[0], request.repo, env)
            configured = list(request.config.test_command or [])
            command = probehost.rewrite(argv, request.repo, path, shown=configured)
            python = probehost.interpreter_of(command.argv[0], request.repo, path)
            # PYTHONPATH's folders are part of what the tests import (read-only in the view).
            given = [Path(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
            wrapped = sandbox_mod.wrap(
                guard,
                command.argv,
                scratch=scratch,
                visible=(command.root, *(p for p in given if p.is_absolute())),
                pythons=(python,),
            )
            began = time.monotonic()
            ending = run_child(
                wrapped,
                request.repo,
                probehost.environment(env, pipe.write_fd),
                request.timeout if timeout is None else timeout,
                stop,
                request.kill_adopted,
                pass_fds=(pipe.write_fd,),
                started=pipe.started,
            )
            wall = round(time.monotonic() - began, 3)
    finally:
        raw = pipe.finish()
        if command is not None:
            probehost.discard(command)
    return TestRun(
        command=testcommand.recorded(argv, request.repo),
        ending=ending,
        wall=wall,
        probe=read_record(raw),
        findings=_channel_findings(pipe),
    )


def _channel_findings(pipe: RecordPipe) -> list[str]:
    found = []
    if pipe.overflowed:
        found.append(
            f"the probe's record passed {MAX_RECORD_BYTES >> 20} MiB and was cut there; "
            "the outcomes after the cut are unknown"
        )
    if pipe.open_after_run:
        found.append(
            "a process outside the test run still held the probe's record open after the run: "
            "it was started so as to outlive the run (systemd-run, at, ssh), and anything it "
            "sent later is not part of the record"
        )
    return found
