"""Helpers for the pins tests (a uniquely named module: several conftest.py files exist)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

# `charpin ARGS...` run in-process, returning (exit code, stdout, stderr).
Runner = Callable[..., "tuple[int, str, str]"]

MESSY = Path(__file__).resolve().parents[2] / "data" / "messy"

# stdin for the invoice exporter: 0.125 rounds differently under HALF_EVEN and HALF_UP.
INVOICE_STDIN = "acme,10.005,3\ncheap,0.125,1\n# comment\nbad line\n"
SALES = "north;jan;100\nsouth;jan;50\nnorth;feb;70\n"

PINS: list[dict[str, object]] = [
    {
        "id": "inv-usd",
        "argv": ["export_invoices.py"],
        "env": {"CURRENCY": "USD"},
        "stdin": INVOICE_STDIN,
    },
    {
        "id": "inv-exempt",
        "argv": ["export_invoices.py", "--tax-exempt"],
        "env": {"TAX_RATE": "0.2"},
        "stdin": "acme,1.00,2\n",
    },
    {"id": "report", "argv": ["make_report.py"], "fixtures": "fixtures/report"},
    {"id": "legacy", "argv": ["legacy_sync.py", "alpha", "beta"], "env": {"SYNC_MODE": "live"}},
    {"id": "legacy-empty", "argv": ["legacy_sync.py"]},
]


def write_pins(repo: Path, pins: Sequence[Mapping[str, object]]) -> None:
    """Write pending (unrecorded) pins.jsonl lines."""
    text = "".join(json.dumps(p) + "\n" for p in pins)
    (repo / "pins.jsonl").write_text(text, encoding="utf-8")


def build_messy_repo(root: Path) -> Path:
    """A repository with the three messy programs, a fixture tree and pending pins."""
    repo = root / "repo"
    repo.mkdir()
    for name in ("export_invoices.py", "make_report.py", "legacy_sync.py", "unstable.py"):
        shutil.copy(MESSY / name, repo / name)
    data = repo / "fixtures" / "report" / "data"
    data.mkdir(parents=True)
    (data / "sales.csv").write_text(SALES, encoding="utf-8")
    write_pins(repo, PINS)
    return repo


def edit(path: Path, old: str, new: str) -> None:
    """Replace exactly one occurrence of old in path (fails loudly if the edit does not apply)."""
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} must occur once in {path.name}"
    path.write_text(text.replace(old, new), encoding="utf-8")
