"""Coordinator side; stdlib only. The budget of verify's generated inputs (#19), which the
CLI's defaults and the differential job share; kept apart so the CLI loads it cheaply."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Generate:
    """The budget of generated inputs (`verify --generated N --generated-seconds S`); the box
    stops a function at whichever comes first."""

    examples: int = 100  # generated inputs per changed public function (0: none)
    seconds: float = 2.0  # per function, generating and comparing (its shrinking on top)
    total_seconds: float = 20.0  # all the patch's functions together
