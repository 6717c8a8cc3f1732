"""What a reviewer reads for a pin that drifted: golden against actual, the way its source
would show it. Runs on boxes; stdlib only.

Every drift detail (`pins check`, the receipt's pin detail, an import's replay) comes from
describe_pin: a crash pin's streams as the caller sees them (crash.compared), and an imported
cram test's merged stream in cram's own form (cramview), `[1]` -> `[3]` at the line of its `.t`
instead of the marker lines the shell script prints.
"""

from __future__ import annotations

from dataclasses import replace

from charpin_runner.pins import compare as cmp
from charpin_runner.pins.cramview import cram_diff, cram_file
from charpin_runner.pins.crash import compared
from charpin_runner.pins.model import Observation, Pin


def describe_pin(pin: Pin, golden: Observation, actual: Observation, cap: int) -> list[str]:
    """Detail lines for pin's drift from golden to actual (compare.describe's, re-rendered)."""
    want, got = compared(pin, golden), compared(pin, actual)
    case = pin.case
    if case.merge_stderr and want.stdout != got.stdout and "stdout" not in want.hashed:
        shown = cram_diff(want.stdout, got.stdout, case.stdin, cram_file(case), cap)
        if shown is not None:
            # The rest (exit code, files, env keys) as ever, the stream said once, cram's way.
            return shown + cmp.describe(replace(want, stdout=got.stdout), got, cap)
    return cmp.describe(want, got, cap)
