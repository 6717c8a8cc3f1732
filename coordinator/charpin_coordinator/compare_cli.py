"""CLI glue for `charpin-remote compare`. Coordinator side; prints and picks the exit code."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from charpin_runner.errors import UsageError
from charpin_runner.receipt import Receipt

from charpin_coordinator.drift import build_report
from charpin_coordinator.receipts import read_receipt_file
from charpin_coordinator.render import encode_json, render_markdown, render_text


def add_parsers(sub: Any) -> None:
    """Register `compare`."""
    parser = sub.add_parser(
        "compare",
        help="decode 2..N receipts, report drift by dimension and the gate table",
        description="Compare receipts. Exit code: bitmask of 1 tests failed, 2 drift or a gate "
        "blocked, 4 a box not evaluated, 8 receipt integrity, 16 vacuous, 64 usage.",
    )
    parser.add_argument("receipts", nargs="+", type=Path, metavar="RECEIPT")
    parser.add_argument(
        "--baseline", metavar="LABEL", help="box to compare against (default: first)"
    )
    parser.add_argument("--commit", metavar="SHA", help="the commit under review (Identity gate)")
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the drift report as JSON")
    fmt.add_argument("--markdown", action="store_true", help="print Markdown (PR comment)")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    parser.set_defaults(handler=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    """Decode, compare, render; return the report's bitmask."""
    labeled = _load_all(args.receipts)
    report = build_report(labeled, baseline=args.baseline, expected_commit=args.commit)
    if args.json:
        sys.stdout.buffer.write(encode_json(report))
    elif args.markdown:
        sys.stdout.write(render_markdown(report))
    else:
        color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
        sys.stdout.write(render_text(report, color=color))
    sys.stdout.flush()
    return report.exit_code


def _load_all(paths: list[Path]) -> list[tuple[str, Receipt]]:
    labeled: list[tuple[str, Receipt]] = []
    used: set[str] = set()
    seen: dict[tuple[str, str], Path] = {}
    for path in paths:
        receipt = read_receipt_file(path)
        key = (receipt.run_id, receipt.label)
        if key in seen:
            # The same run given twice must not count as two boxes that agree.
            raise UsageError(
                f"{path} and {seen[key]} are the same run ({receipt.label}, run id "
                f"{receipt.run_id}); compare receipts from different boxes or runs"
            )
        seen[key] = path
        label = receipt.label
        if label in used:
            # Two receipts from boxes with the same label stay apart in the report.
            label = f"{label}#{sum(1 for lb in used if lb.split('#')[0] == receipt.label) + 1}"
        used.add(label)
        labeled.append((label, receipt))
    if not labeled:
        raise UsageError("compare needs at least one receipt file")
    return labeled
