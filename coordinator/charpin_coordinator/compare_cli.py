"""CLI glue for `charpin-remote compare`. Coordinator side; prints and picks the exit code."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from charpin_runner.colors import add_color_option, wanted
from charpin_runner.errors import UsageError
from charpin_runner.receipt import Receipt

from charpin_coordinator.drift import build_report
from charpin_coordinator.evidence import REPEATS_FOLDER
from charpin_coordinator.receipts import read_receipt_file
from charpin_coordinator.report import DriftReport
from charpin_coordinator.reports.common import encode_json
from charpin_coordinator.reports.markdown import render_markdown
from charpin_coordinator.reports.text import render_text

# The FILE of --markdown that means standard output.
STDOUT = "-"


def add_parsers(sub: Any) -> None:
    """Register `compare`."""
    parser = sub.add_parser(
        "compare",
        exit_codes="0 clean; bits OR-ed: 1 tests failed, 2 drift or a gate blocked, 4 a box "
        "not evaluated, 8 receipt integrity, 16 vacuous; 64 usage or configuration error, 130 interrupted",
        help="decode 2..N receipts, report drift by dimension and the gate table",
        description="Compare receipts. Exit code: bitmask of 1 tests failed, 2 drift or a gate "
        "blocked, 4 a box not evaluated, 8 receipt integrity, 16 vacuous, 64 usage.",
    )
    parser.add_argument(
        "receipts",
        nargs="+",
        type=Path,
        metavar="RECEIPT",
        help="a receipt file, or a folder standing for every receipt*.json under it (a CI "
        "fleet's downloaded artifacts; their labels must then be unique)",
    )
    parser.add_argument(
        "--baseline", metavar="LABEL", help="box to compare against (default: first)"
    )
    parser.add_argument("--commit", metavar="SHA", help="the commit under review (Identity gate)")
    parser.add_argument("--json", action="store_true", help="print the drift report as JSON")
    parser.add_argument(
        "--markdown",
        nargs="?",
        const=STDOUT,
        metavar="FILE",
        help="also write the report as Markdown (a PR comment) to FILE; `-` or no FILE prints "
        "it instead of the text report, as `run --markdown` does",
    )
    add_color_option(parser)
    parser.add_argument(
        "--junit",
        type=Path,
        metavar="FILE",
        help="also write JUnit XML: per box a suite of gates, one of every test, one of pins",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="keep the receipts and the report as a run folder and add it to the run history",
    )
    parser.add_argument(
        "--history",
        type=Path,
        metavar="PATH",
        help="with --record: the history database (default [tool.charpin] history, else "
        "<repo>/.charpin/history.sqlite)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="with --record: where the run folder goes (default <repo>/.charpin/runs)",
    )
    parser.set_defaults(handler=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    """Decode, compare, render; return the report's bitmask."""
    receipts, markdown = _markdown_target(args.receipts, args.markdown)
    if args.json and markdown == STDOUT:
        raise UsageError(
            "--json and --markdown - would both print on stdout; write one to a file, e.g. "
            "--markdown drift.md"
        )
    if (args.history or args.out) and not args.record:
        raise UsageError("--history and --out go with --record; add --record to keep this compare")
    history = _history_before(args) if args.record else None
    receipts, fleet = _expand(receipts)
    labeled = _load_all(receipts, unique=fleet)
    report = build_report(labeled, baseline=args.baseline, expected_commit=args.commit)
    report = _with_frozen(report, labeled)
    if markdown is not None and markdown != STDOUT:
        from charpin_coordinator.remote.output import write_file

        write_file(Path(markdown), render_markdown(report).encode())
    if args.junit:
        from charpin_coordinator.remote.output import write_file
        from charpin_coordinator.reports.junit import receipt_cases, to_junit

        cases = {label: receipt_cases(receipt) for label, receipt in labeled}
        write_file(args.junit, to_junit(report, cases))
    if args.json:
        sys.stdout.buffer.write(encode_json(report))
    elif markdown == STDOUT:
        sys.stdout.write(render_markdown(report))
    else:
        sys.stdout.write(render_text(report, color=wanted(args.color, sys.stdout)))
    sys.stdout.flush()
    if history is not None:
        return report.exit_code | _record(args, history, receipts, labeled, report)
    return report.exit_code


def _history_before(args: argparse.Namespace) -> tuple[Path, Path]:
    """(repository or working folder, history database), checked usable before comparing."""
    from charpin_coordinator.history import hooks

    repo = hooks.repo_or_cwd(None)
    history = hooks.locate(repo, args.history)
    hooks.check(history, [])
    return repo, history


def _record(
    args: argparse.Namespace,
    history: tuple[Path, Path],
    paths: list[Path],
    labeled: list[tuple[str, Receipt]],
    report: DriftReport,
) -> int:
    """`--record`: the compare as a run folder, added to the history."""
    from charpin_runner.owndir import ensure_folder
    from charpin_runner.runid import new_run_id

    from charpin_coordinator.history import hooks
    from charpin_coordinator.history.compare_folder import write_compare
    from charpin_coordinator.remote.output import shown_path

    repo, database = history
    out_dir = (args.out or repo / ".charpin" / "runs").absolute()
    boxes = [(label, receipt, path) for (label, receipt), path in zip(labeled, paths, strict=True)]
    run_id = new_run_id()
    page = _compare_html(report, database, run_id, labeled)
    try:
        ensure_folder(repo, out_dir)
        folder = write_compare(
            out_dir, run_id, boxes, encode_json(report), render_markdown(report).encode(), page
        )
    except OSError as exc:
        raise UsageError(f"cannot write under {out_dir}: {exc.strerror}; pass --out DIR") from exc
    sys.stderr.write(f"charpin-remote: compare kept in {shown_path(folder)}\n")
    return hooks.record_after(database, [folder], repo=repo)


def _compare_html(
    report: DriftReport, database: Path, run_id: str, labeled: list[tuple[str, Receipt]]
) -> bytes:
    """drift.html for the kept compare: the run id, when its receipts were made, links to each
    box's receipt (a fleet compare has no logs), and the trend and flaky tests from the history
    it is about to join."""
    from charpin_coordinator.remote.results import safe_folders
    from charpin_coordinator.reports.html_history import history_sections
    from charpin_coordinator.reports.html_report import RunPage, render_html

    starts = sorted(receipt.started_at for _, receipt in labeled)
    started = starts[0] if len(set(starts)) == 1 else f"{starts[0]} to {starts[-1]}"
    page = RunPage(
        run_id,
        f"{started} (receipts), compared {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
        safe_folders(label for label, _ in labeled),
        logs=False,
    )
    trend, flaky = history_sections(database, report, run_id)
    return render_html(report, trend=trend, flaky=flaky, run=page).encode()


def _markdown_target(receipts: list[Path], markdown: str | None) -> tuple[list[Path], str | None]:
    """The receipts and where the Markdown goes. `compare --markdown A.json B.json`, written
    when --markdown took no FILE, still prints: an existing `.json` file after --markdown is
    the first receipt (Markdown written over it would destroy it)."""
    if markdown is None or markdown == STDOUT:
        return receipts, markdown
    if markdown.endswith(".json") and Path(markdown).is_file():
        return [Path(markdown), *receipts], STDOUT
    return receipts, markdown


# A folder RECEIPT stands for these files under it: `receipt-<label>.json` (the CI fleet
# convention, see deploy/ci/) and a run folder's `<box>/receipt.json`.
FOLDER_PATTERN = "receipt*.json"


def _expand(paths: list[Path]) -> tuple[list[Path], bool]:
    """The receipt files, each folder replaced by its receipts (sorted by path); and whether a
    folder was given: a fleet, whose labels must be unique."""
    files: list[Path] = []
    fleet = False
    for path in paths:
        if not path.is_dir():
            files.append(path)
            continue
        fleet = True
        found = sorted(p for p in path.rglob(FOLDER_PATTERN) if p.is_file() and not _is_repeat(p))
        if not found:
            raise UsageError(f"no {FOLDER_PATTERN} under {path}")
        files.extend(found)
    return files, fleet


def _is_repeat(path: Path) -> bool:
    """A run folder's `<box>/repeats/<k>/receipt.json` (`run --repeat`): evidence kept beside
    the box's receipt of record, not a box of its own."""
    repeats = path.parent.parent
    return repeats.name == REPEATS_FOLDER and (repeats.parent / "box.json").is_file()


def _with_frozen(report: DriftReport, labeled: list[tuple[str, Receipt]]) -> DriftReport:
    """The frozen re-run section when a receipt carries one (`charpin receipt --include-frozen`
    on a fleet's jobs); never gating."""
    from charpin_coordinator.evidence import (
        Attempt,
        frozen_section,
        has_frozen_rerun,
        with_evidence,
    )

    boxes = [(label, [Attempt(1, receipt.run_id, receipt)]) for label, receipt in labeled]
    if not has_frozen_rerun(boxes):
        return report
    return with_evidence(report, frozen=frozen_section(boxes))


def _load_all(paths: list[Path], *, unique: bool = False) -> list[tuple[str, Receipt]]:
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
        if label in used and unique:
            first = next(p for p, (lb, _) in zip(paths, labeled, strict=False) if lb == label)
            raise UsageError(
                f"label {label!r} is in both {first} and {path}; give each box (matrix job) "
                "its own --label"
            )
        if label in used:
            # Two receipts from boxes with the same label stay apart in the report.
            label = f"{label}#{sum(1 for lb in used if lb.split('#')[0] == receipt.label) + 1}"
        used.add(label)
        labeled.append((label, receipt))
    if not labeled:
        raise UsageError("compare needs at least one receipt file")
    return labeled
