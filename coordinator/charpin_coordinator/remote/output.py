"""CLI output of a run: the report as text or JSON on stdout, and the extra report files.
Coordinator side; may print (only the CLIs call it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from charpin_runner.colors import wanted
from charpin_runner.errors import EXIT_NOT_EVALUATED, UsageError

from charpin_coordinator.redact import Redactor
from charpin_coordinator.remote.run import RunResult
from charpin_coordinator.reports.common import encode_json
from charpin_coordinator.reports.junit import receipt_cases, to_junit
from charpin_coordinator.reports.markdown import render_markdown
from charpin_coordinator.reports.text import render_text


def emit(
    result: RunResult,
    *,
    json: bool = False,
    markdown: Path | None = None,
    junit: Path | None = None,
    show_folder: bool = True,
    color: str = "auto",
) -> None:
    """Print a run's report (text, JSON, or Markdown when markdown is `-`) and write the extra
    report files asked for. The run folder's line goes to stderr when stdout is Markdown.
    color: --color's value (colors.wanted decides, NO_COLOR and FORCE_COLOR included)."""
    report = result.report
    markdown_out = markdown is not None and str(markdown) == "-"
    if markdown and not markdown_out:
        write_file(markdown, render_markdown(report).encode())
    if junit:
        cases = {
            o.label: receipt_cases(o.receipt, result.redact)
            for o in result.outcomes
            if o.receipt is not None
        }
        write_file(junit, to_junit(report, cases))
    if json:
        sys.stdout.buffer.write(encode_json(report))
    elif markdown_out:
        sys.stdout.write(render_markdown(report))
        if show_folder:
            sys.stderr.write(f"run folder: {shown_path(result.folder)}\n")
    else:
        sys.stdout.write(render_text(report, color=wanted(color, sys.stdout)))
        if show_folder:
            sys.stdout.write(f"run folder: {shown_path(result.folder)}\n")
    sys.stdout.flush()


def write_file(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}; pass a writable path") from exc


def shown_path(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def warn_disposals(results: Sequence[RunResult]) -> int:
    """Say loudly which disposable servers could not be removed; EXIT_NOT_EVALUATED if any."""
    failed = [f for result in results for f in result.disposals.failed]
    redact = Redactor.from_env(os.environ).text  # a provider CLI may print its token
    for alias, box_id, reason in failed:
        reason = redact(reason)
        sys.stderr.write(
            f"charpin-remote: DISPOSE FAILED for {alias}: server {box_id!r} may still be running "
            f"(and billed); remove it by hand. Reason: {reason}\n"
        )
    return EXIT_NOT_EVALUATED if failed else 0
