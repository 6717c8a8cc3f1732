"""The probe record: what the pytest plugin saw, as JSON lines. Runs on boxes; stdlib only.

The plugin (plugin.py) appends one JSON object per line to the path given by --charpin-receipt;
the parent (`charpin receipt`) reads it back with read_probe() and folds it into the receipt.
Lines are written as the run goes, so a run killed by os._exit() still leaves its collection
behind, while the missing "finish" line tells the parent the session never ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from charpin_runner.receipt import Deselected, Widening


@dataclass
class LedgerReport:
    """How the flake ledger applied, as the probe resolved it against the collected ids."""

    path: Optional[str] = None
    sha256: Optional[str] = None
    entries: int = 0
    deselected: List[Deselected] = field(default_factory=list)
    frozen: List[str] = field(default_factory=list)
    stale: List[str] = field(default_factory=list)
    widening: List[Widening] = field(default_factory=list)
    expired: List[str] = field(default_factory=list)
    leaked: List[str] = field(default_factory=list)


@dataclass
class ProbeData:
    """Everything read back from one probe file; empty lists when a line never arrived."""

    started: bool = False
    collection_done: bool = False
    session_finished: bool = False
    pytest_status: Optional[int] = None
    collected: List[str] = field(default_factory=list)
    order: List[str] = field(default_factory=list)
    filtered: List[str] = field(default_factory=list)
    dropped: List[str] = field(default_factory=list)
    selected: List[str] = field(default_factory=list)
    executed: List[str] = field(default_factory=list)
    outcomes: Dict[str, str] = field(default_factory=dict)
    durations: Dict[str, float] = field(default_factory=dict)
    ledger: LedgerReport = field(default_factory=LedgerReport)
    plugins: List[str] = field(default_factory=list)
    pytest_version: Optional[str] = None
    conftests: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)


def read_probe(path: Path) -> ProbeData:
    """Read a probe file; a missing or truncated file yields what could be read (never raises)."""
    raise NotImplementedError("filled in by the probe work")
