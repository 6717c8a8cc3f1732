"""Prove the comparator can fail, and warn about pins that assert nothing distinctive. Stdlib only.

For every pin that replayed green, each golden is perturbed in memory (one byte of stdout, one
byte of stderr, the exit code, one output file's hash) and the comparator must call every
perturbed golden drift. A comparator that stays quiet is blind to that part of the pin.
"""

from __future__ import annotations

import dataclasses

from charpin_runner.pins import compare as cmp
from charpin_runner.pins.crash import compared
from charpin_runner.pins.model import Observation, Pin
from charpin_runner.pins.replay import Outcome


def _flip(data: bytes) -> bytes:
    if not data:
        return b"\x00"
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1 :]


def mutants(golden: Observation) -> list[tuple[str, Observation]]:
    """One-step perturbations of a golden, each named."""
    out = [
        ("one stdout byte", dataclasses.replace(golden, stdout=_flip(golden.stdout))),
        ("one stderr byte", dataclasses.replace(golden, stderr=_flip(golden.stderr))),
        ("the exit code", dataclasses.replace(golden, exit_code=golden.exit_code + 1)),
    ]
    if golden.files:
        path = sorted(golden.files)[0]
        entry = golden.files[path]
        flipped = ("0" if entry.sha256[0] != "0" else "1") + entry.sha256[1:]
        files = dict(golden.files)
        files[path] = dataclasses.replace(entry, sha256=flipped)
        out.append((f"the hash of {path}", dataclasses.replace(golden, files=files)))
    return out


def prove(outcomes: list[Outcome], comparator: cmp.Comparator = cmp.compare) -> list[str]:
    """Problems found: each names a pin and the perturbation the comparator missed."""
    problems = []
    for outcome in outcomes:
        if outcome.classes or outcome.pin.golden is None:
            continue
        # What replay compares: a crash pin's caller view (crash.compared), perturbed there.
        pin = outcome.pin
        actual = compared(pin, outcome.run.observation)
        for label, mutant in mutants(compared(pin, outcome.pin.golden)):
            if not comparator(mutant, actual):
                problems.append(
                    f"pin {outcome.pin.case.id}: the comparator did not notice a change to {label}"
                )
    return problems


def weak_pins(pins: list[Pin]) -> list[str]:
    """Warnings for pins that would pass for almost any program."""
    warnings = []
    seen: dict[tuple[int, bytes, bytes, tuple[tuple[str, str], ...]], str] = {}
    for pin in pins:
        golden = pin.golden
        if golden is None:
            continue
        if golden.exit_code == 0 and not golden.stdout and not golden.stderr and not golden.files:
            warnings.append(
                f"pin {pin.case.id} asserts nothing distinctive (exit 0, empty streams, no files)"
            )
            continue
        key = (
            golden.exit_code,
            golden.stdout,
            golden.stderr,
            tuple(sorted((p, f.sha256) for p, f in golden.files.items())),
        )
        other = seen.get(key)
        if other is not None:
            warnings.append(
                f"pins {other} and {pin.case.id} have identical outputs for different inputs"
            )
        else:
            seen[key] = pin.case.id
    return warnings
