"""CLI glue for `charpin receipt`. Runs on any box; stdlib only. May print; library code may not.

Exit codes (design §6 meanings): ok 0, failed 1, incomplete 2, timed-out 4, no-tests 16,
usage or configuration error 64, interrupted 130, pytest internal error 1.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import replace
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import charpin_runner
from charpin_runner import config as config_mod
from charpin_runner import gitstate, interpreters, probehost, sandbox, seal
from charpin_runner.errors import ConfigError, UsageError
from charpin_runner.procgroup import become_subreaper, stop_on_signals
from charpin_runner.receipt import OUTCOMES, Receipt, dumps, write_atomic
from charpin_runner.run_receipt import (
    Request,
    ensure_receipt_folder,
    produce,
    watch_given,
)
from charpin_runner.runid import RUN_ID, new_run_id

_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")
_COMMIT = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_FINGERPRINT = re.compile(r"[\x21-\x7e]{1,200}")
_SHOWN = 3


def add_parsers(sub: Any) -> None:
    """Register `charpin receipt`."""
    parser = sub.add_parser(
        "receipt",
        exit_codes=(
            "0 ok, 1 tests failed, 2 incomplete, 4 timed out or could not start, 16 no "
            "tests, 64 usage or configuration error, 130 interrupted"
        ),
        help="run the tests once and write a receipt of what this box observed",
        description="Run the test command with the charpin probe and write a receipt. "
        "Arguments after `--` go to pytest.",
    )
    add = parser.add_argument
    add("--repo", metavar="DIR", help="repository to run in (default: git toplevel of cwd)")
    add("--label", default="local", help="name of this box in the receipt (default: local)")
    add("-o", "--output", metavar="PATH", help="receipt path (default .charpin/receipts/ID.json)")
    add("--config-json", metavar="FILE", help="resolved [tool.charpin] table as JSON")
    add("--run-id", metavar="ID", help="run id (default: UTC time plus 6 hex digits)")
    add("--expected-commit", metavar="SHA", help="commit the coordinator sent")
    add("--snapshot-sha256", metavar="HEX", help="sha256 of the shipped snapshot")
    add("--patch-sha256", metavar="HEX", help="sha256 of the patch under review")
    add("--host-key-fingerprint", metavar="FP", help="SSH host key fingerprint of this box")
    add("--host-key-accepted-new", action="store_true", help="the host key was accepted new")
    add("--timeout", metavar="SECONDS", help="kill the test command after this long")
    add("--today", metavar="YYYY-MM-DD", help="date used for ledger expiry (default: UTC today)")
    add("--no-pins", action="store_true", help="do not replay pins")
    add(
        "--include-frozen",
        action="store_true",
        help="after the run is measured, run the tests the flake ledger freezes on their own "
        "and record their outcomes as frozen_rerun (evidence for unfreezing; never gated)",
    )
    add(
        "--prepared",
        action="store_true",
        help="the checkout was verified equal to the commit before `prepare` ran in it: what "
        "is uncommitted now, prepare wrote (listed as tree.prepared, not as dirt)",
    )
    add(
        "--sandbox",
        default="auto",
        choices=sandbox.MODES,
        help="run the tests under bubblewrap with the protected paths read-only: auto (when "
        "bwrap works here; the default), required (refuse to run without it), off",
    )
    add(
        "--confine",
        action="store_true",
        help="under bwrap, also: no network, everything read-only but the checkout, a private "
        "/tmp and HOME (charpin-remote verify runs both sides so)",
    )
    add(
        "--protect",
        metavar="PATH",
        action="append",
        default=[],
        help="a path the tests must not change (read-only under bwrap; checked after the run)",
    )
    add(
        "--disposable",
        metavar="PATH",
        action="append",
        default=[],
        help="like --protect, and removed when the run changed it (a cache the next run rebuilds)",
    )
    add(
        "--cache-root",
        metavar="PATH",
        action="append",
        default=[],
        help="a folder of caches later runs read (a box's venvs, repositories, runners): "
        "read-only under bwrap, and each entry the run changed or added is removed",
    )
    add(
        "--read-only",
        metavar="PATH",
        action="append",
        default=[],
        help="read-only for the tests under bwrap (not checked after the run)",
    )
    add(
        "--hide",
        metavar="PATH",
        action="append",
        default=[],
        help="hidden from the tests under bwrap (a secret of this machine)",
    )
    add(
        "--seal-stdin",
        action="store_true",
        help="read a 64-hex-digit key from stdin and write PATH.seal next to the receipt "
        "(how charpin-remote knows the receipt came from this runner)",
    )
    add(
        "--cover",
        metavar="PATH",
        action="append",
        default=[],
        help="record which lines of this repository file the tests run (verify's change "
        "coverage; repeatable)",
    )
    add(
        "--capture",
        metavar="PATH::QUALNAME",
        action="append",
        default=[],
        help="record the arguments of the tests' calls into this function (verify's captured "
        "calls; repeatable)",
    )
    add(
        "--differential",
        metavar="JOB",
        type=Path,
        help="after the run, replay the calls of this job (from verify) on the base and this "
        "version side by side (the receipt's differential)",
    )
    add("-q", "--quiet", action="store_true", help="do not print the summary")
    parser.set_defaults(handler=run, accepts_extra=True)


def run(args: argparse.Namespace) -> int:
    """Handle `charpin receipt`."""
    # First, before anything is started: no child may inherit the key's pipe.
    key = seal.read_key_from_stdin() if args.seal_stdin else None
    repo = gitstate.find_toplevel(Path(args.repo or os.getcwd()))
    request = replace(_request(args, repo), kill_adopted=become_subreaper())
    output = _output_path(args.output, repo, request.run_id)
    request = replace(request, sandbox=sandbox_plan(args, repo, request.config))
    warning = inside_repo_warning(output, repo)
    if warning:
        print(f"charpin: warning: {warning}", file=sys.stderr, flush=True)
    with stop_on_signals() as stop:
        receipt = produce(request, stop)
        code = seal.runner_status(receipt, stop.requested)
        data = dumps(receipt)
        try:
            ensure_receipt_folder(repo, output.parent)
            write_atomic(output, data)
            if key is not None:
                sealed = output.with_name(output.name + seal.SEAL_SUFFIX)
                write_atomic(sealed, seal.make(key, request.run_id, data, code))
        except FileExistsError:
            # Something else (the test command) created the path while the tests ran: no
            # receipt and no seal come from this run, so nobody can take a planted one for ours.
            raise UsageError(
                f"{output} (or its seal) appeared during the run; pass another -o PATH"
            ) from None
    if not args.quiet:
        print("\n".join(summary_lines(receipt, _shown_path(output))), flush=True)
    for reason in receipt.exit.reasons:
        print(f"charpin: {reason}", file=sys.stderr)
    return code


def sandbox_plan(
    args: argparse.Namespace, repo: Path, config: config_mod.CharpinConfig
) -> sandbox.Plan:
    """What the tests may not write: the given paths, every interpreter environment the run
    uses (rule 3: this runner's, the test command's, the pins', each venv inside the checkout)
    and the runner's code. The receipt itself needs no read-only folder: a planted one lacks
    the seal."""
    disposable = [os.path.abspath(p) for p in args.disposable]
    protect = [os.path.abspath(p) for p in args.protect] + disposable
    for python in _interpreters(repo, config):
        protect += interpreters.watch_roots(python)
    # A venv inside the checkout (`.venv/` made by hand on `local`): read-only under bwrap and
    # watched without it; never removed (it is the user's).
    protect += [
        p for p in sandbox.protected_inside([str(repo)]) if os.path.basename(p) != ".git"
    ]
    code = Path(charpin_runner.__file__).resolve().parent
    protect.append(str(code.parent if code.parent.is_file() else code))
    # A runner folder shipped by charpin-remote (it has __main__.py) runs from byte code
    # compiled when it was placed: its caches are watched like its sources.
    shipped = (code.parent,) if (code.parent / "__main__.py").is_file() else ()
    return sandbox.Plan(
        containers=tuple(os.path.abspath(p) for p in args.cache_root),
        read_only=tuple(os.path.abspath(p) for p in args.read_only),
        hidden=tuple(os.path.abspath(p) for p in args.hide),
        mode=sandbox.check_mode(args.sandbox),
        protect=tuple(dict.fromkeys(protect)),
        disposable=tuple(disposable),
        writable=(str(repo),),
        strict=tuple(str(p) for p in shipped),
        confine=bool(args.confine),
    )


def _interpreters(repo: Path, config: config_mod.CharpinConfig) -> list[str]:
    """The Pythons a run starts: this runner's (the default test and pins interpreter), the
    test command's (or the one its console script names) and the pins' own."""
    path = os.environ.get("PATH", os.defpath)
    found = [sys.executable]
    if config.test_command:
        found.append(probehost.interpreter_of(config.test_command[0], repo, path))
    if config.pins.python:
        chosen = config.pins.python
        found.append(str(repo / chosen) if "/" in chosen and not os.path.isabs(chosen) else chosen)
    return list(dict.fromkeys(found))


def inside_repo_warning(output: Path, repo: Path) -> str | None:
    """A warning when the receipt lands in the work tree, where git sees it as untracked."""
    target, top = Path(os.path.realpath(output)), Path(os.path.realpath(repo))
    if top not in target.parents or top / ".charpin" in (target, *target.parents):
        return None
    return (
        f"{_shown_path(output)} is inside the repository, so the next receipt will count it "
        "as an uncommitted file; write receipts outside the tree or under .charpin/"
    )


def _request(args: argparse.Namespace, repo: Path) -> Request:
    if args.config_json:
        cfg = config_mod.load_json(Path(args.config_json))
    else:
        cfg = config_mod.load(repo)
    extra = list(args.extra or [])
    timeout = _timeout(args.timeout) if args.timeout is not None else cfg.timeout
    if timeout is not None and not timeout > 0:
        raise ConfigError(
            f"[tool.charpin] timeout {timeout!r} must be positive; fix pyproject.toml"
        )
    return Request(
        repo=repo,
        config=cfg,
        run_id=_checked(args.run_id, RUN_ID, "--run-id", "letters, digits, '.', '_', '-'")
        or new_run_id(),
        label=_checked(args.label, _LABEL, "--label", "letters, digits, '.', '_', '@', '+', '-'")
        or "local",
        today=_today(args.today),
        timeout=timeout,
        expected_commit=_checked(args.expected_commit, _COMMIT, "--expected-commit", "hex sha"),
        snapshot_sha256=_checked(args.snapshot_sha256, _SHA256, "--snapshot-sha256", "64 hex"),
        patch_sha256=_checked(args.patch_sha256, _SHA256, "--patch-sha256", "64 hex"),
        host_key_fingerprint=_checked(
            args.host_key_fingerprint, _FINGERPRINT, "--host-key-fingerprint", "printable ASCII"
        ),
        host_key_accepted_new=bool(args.host_key_accepted_new),
        replay_pins=not args.no_pins,
        prepared=bool(args.prepared),
        include_frozen=bool(args.include_frozen),
        cover=[_repo_path(p, "--cover") for p in args.cover],
        capture=[_capture(p) for p in args.capture],
        differential=args.differential,
        watch_given=watch_given(repo, Path(args.config_json) if args.config_json else None),
        extra=extra,
    )


def _repo_path(value: str, flag: str) -> str:
    """A repository-relative path as the probe records it (no `..`, not absolute)."""
    parts = value.split("/")
    if not value or value.startswith("/") or ".." in parts or "\0" in value:
        raise UsageError(f"{flag} {value!r} is not a path inside the repository; e.g. {flag} src/app.py")
    return value


def _capture(value: str) -> str:
    path, sep, qualname = value.partition("::")
    if not sep or not qualname:
        raise UsageError(f"--capture {value!r} is not PATH::QUALNAME; e.g. --capture app.py::total")
    return f"{_repo_path(path, '--capture')}::{qualname}"


def _checked(value: str | None, pattern: re.Pattern[str], flag: str, allowed: str) -> str | None:
    if value is None or pattern.fullmatch(value):
        return value
    raise UsageError(f"{flag} {value!r} is not valid; use {allowed}")


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise UsageError(
            f"--timeout {text!r} is not a positive number of seconds; e.g. --timeout 600"
        )
    return value


def _today(text: str | None) -> str:
    if text is None:
        return datetime.now(timezone.utc).date().isoformat()
    try:
        if len(text) == 10:
            return date.fromisoformat(text).isoformat()
    except ValueError:
        pass
    raise UsageError(f"--today {text!r} is not a date; use YYYY-MM-DD, e.g. --today 2026-11-30")


def _output_path(option: str | None, repo: Path, run_id: str) -> Path:
    if option is None:
        path = repo / ".charpin" / "receipts" / f"{run_id}.json"
    else:
        path = Path(option).absolute()
    if os.path.lexists(path):
        raise UsageError(
            f"{path} already exists and receipts are never overwritten; pass another -o"
        )
    return path


def _shown_path(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def summary_lines(receipt: Receipt, path: str) -> list[str]:
    """The five-line summary printed after a run; one more line when pins were replayed, and
    one when the frozen tests were re-run on the side."""
    col, fx, ex = receipt.collection, receipt.fixtures, receipt.exit
    dirty = len(receipt.tree.dirty_before)
    counts = [(o, sum(1 for v in receipt.outcomes.values() if v == o)) for o in OUTCOMES]
    outcomes = " · ".join(f"{n} {o}" for o, n in counts if n) or "none reported"
    subtests = receipt.subtests.values()
    if subtests:
        sub = [(k, sum(getattr(s, k) for s in subtests)) for k in ("passed", "failed", "skipped")]
        outcomes += " · subtests " + ", ".join(f"{n} {k}" for k, n in sub if n)
    return (
        [
            f"charpin receipt {receipt.run_id} · label {receipt.label} · "
            f"commit {receipt.identity.head_before[:7]} · {dirty} dirty path{_plural(dirty)}",
            f"tests     collected {len(col.collected)} · ledger-deselected {len(col.deselected)}"
            f" · selected {len(col.selected)} · executed {len(col.executed)}",
            f"outcomes  {outcomes}",
            f"fixtures  {', '.join(fx.roots) or 'none watched'}: {len(fx.after)} file"
            f"{_plural(len(fx.after))} · " + _fixture_changes(receipt),
            f"exit      {ex.status} → {ex.interpretation} · receipt {path}",
        ]
        + ([_pins_line(receipt)] if receipt.pins.replayed else [])
        + _frozen_line(receipt)
    )


def _frozen_line(receipt: Receipt) -> list[str]:
    side = receipt.frozen_rerun
    if side is None:
        return []
    passed = sum(1 for nodeid in side.requested if side.outcomes.get(nodeid) == "passed")
    verdict = "clean" if side.clean else f"not clean: {side.reasons[0] if side.reasons else '?'}"
    return [
        f"frozen    re-run outside the gate: {passed} of {len(side.requested)} passed · {verdict}"
    ]


def _pins_line(receipt: Receipt) -> str:
    results = receipt.pins.results
    passed = sum(1 for r in results if r.status == "passed")
    drifted = [r.id for r in results if r.status == "failed"]
    errored = [r.id for r in results if r.status == "error"]
    line = f"pins      {passed} passed · {len(drifted)} drifted"
    line += f" ({_few(drifted)})" if drifted else ""
    return line + (f" · {len(errored)} errored ({_few(errored)})" if errored else "")


def _fixture_changes(receipt: Receipt) -> str:
    fx = receipt.fixtures
    groups = [
        ("changed", fx.changed),
        ("added", fx.added),
        ("removed", fx.removed),
        ("type-changed", fx.type_changed),
        ("mode-changed", fx.mode_changed),
        ("escaping symlinks", fx.escaping_symlinks),
        ("missing roots", fx.missing_roots),
    ]
    parts = [f"{len(items)} {name} ({_few(items)})" for name, items in groups if items]
    return " · ".join(parts) or "unchanged"


def _few(items: list[str]) -> str:
    more = len(items) - _SHOWN
    return ", ".join(items[:_SHOWN]) + (f", +{more} more" if more > 0 else "")


def _plural(count: int) -> str:
    return "" if count == 1 else "s"
