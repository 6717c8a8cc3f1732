"""`charpin ledger`: hand over to `charpin-remote ledger`. Runs anywhere charpin runs; stdlib only.

Flake evidence (which tests flip on one box at one commit, which frozen ones re-ran clean) comes
from the run history, and the history is the coordinator's. So `charpin ledger suggest|review`
is the coordinator's command under the name people look for next to the ledger file: it starts
`charpin-remote ledger` with the same arguments, or says in one line how to get it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Any

from charpin_runner.errors import UsageError

_HOW = (
    "charpin ledger reads the run history, which charpin-remote keeps: install charpin-remote "
    "on this machine (the machine that runs `charpin-remote run` and holds .charpin/) and run "
    "`charpin-remote ledger suggest|review`"
)


def add_parsers(sub: Any) -> None:
    """Register `charpin ledger`."""
    parser = sub.add_parser(
        "ledger",
        exit_codes=(
            "those of charpin-remote ledger (0 a report), 64 usage or configuration error, "
            "130 interrupted (charpin-remote is not installed here)"
        ),
        help="flake evidence from the run history: suggest entries, review the ledger "
        "(runs charpin-remote ledger)",
        description="Runs `charpin-remote ledger ARGS`: `suggest` lists flaky tests with the "
        "receipts as evidence, `review` lists frozen entries to unfreeze, near expiry or never "
        "seen. See `charpin-remote ledger --help`.",
    )
    parser.add_argument("args", nargs=argparse.REMAINDER, help="suggest|review and options")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Replace this process with `charpin-remote ledger ARGS`."""
    program = coordinator_program()
    if program is None:
        raise UsageError(_HOW)
    sys.stdout.flush()
    os.execv(program, [program, "ledger", *args.args])  # noqa: S606 - a fixed program, argv as given


def coordinator_program() -> str | None:
    """charpin-remote from this interpreter's environment, else from PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "charpin-remote")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("charpin-remote")
