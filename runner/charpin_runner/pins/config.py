"""`[tool.charpin.pins]` as a dataclass. Runs on boxes; stdlib only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class PinsConfig:
    """Where pins live and how they replay."""

    file: str = "pins.jsonl"
    cases: str = "cases"
    goldens: str = "goldens"
    python: Optional[str] = None
    timeout: float = 30.0
