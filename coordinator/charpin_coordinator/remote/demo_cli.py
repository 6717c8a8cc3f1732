"""CLI glue for `charpin-remote demo`, the built-in tour. Coordinator side; may print.

The demo builds the example repository (remote/demo.py), then runs exactly what a user would:
`charpin-remote run --repo <example> --hosts local,clean`, through the same run.plan and run.run
the `run` command calls, and explains the RunResult it gets back.
The demo succeeds (exit 0) when it catches what it planted: the run's own exit code (3: tests
failed on a box, plus drift) is printed, not returned, since that failure is the point. When the
planted drift is NOT caught the demo failed to demonstrate and exits 1. The control run
(`--no-stale`) returns the run's own exit code.
"""

from __future__ import annotations

import argparse
import importlib.util
import secrets
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from charpin_runner.colors import add_color_option
from charpin_runner.errors import EXIT_CLEAN, UsageError

from charpin_coordinator.remote.demo import build_demo_repo, explain
from charpin_coordinator.remote.display import make_progress
from charpin_coordinator.remote.output import emit
from charpin_coordinator.remote.run import Options, RunResult, plan, run
from charpin_coordinator.report import DriftReport

_HOSTS = "local,clean"
# The demo's own failure: the drift it planted was not caught (not a bit of the run's bitmask).
EXIT_DEMO_MISSED = 1


def add_parsers(sub: Any) -> None:
    """Register `charpin-remote demo`."""
    parser = sub.add_parser(
        "demo",
        exit_codes=(
            "0 the demo caught the drift and the patch it planted, 1 it missed one (a bug: "
            "please report it), 64 usage or configuration error, 130 interrupted"
        ),
        help="the built-in tour: an example repository checked with --hosts local,clean",
        description=(
            "Build a small example repository (an invoice exporter with pins, tests, a fixture "
            "and a flake ledger) in a temporary folder, leave a stale fixture in its working "
            f"tree, run `charpin-remote run --hosts {_HOSTS}` on it and explain what was caught. "
            "Exits 0 when the planted drift is caught, 1 when it is not."
        ),
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the example repository and print its path"
    )
    parser.add_argument(
        "--dir",
        metavar="DIR",
        type=Path,
        default=None,
        help="create the temporary folder inside DIR (default: the system temporary folder)",
    )
    # Builds the example without the stale fixture: the control run, used by the tests.
    parser.add_argument("--no-stale", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--no-verify", action="store_true", help="skip the second act (an agent's patch verified)"
    )
    add_color_option(parser)
    parser.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    """Build the example, run it on local and clean, print the report and the explanation."""
    parent = args.dir
    if parent is not None and not parent.is_dir():
        raise UsageError(f"--dir {parent} is not a folder; create it or leave --dir out")
    _require_pytest()
    root = Path(tempfile.mkdtemp(prefix="charpin-demo-", dir=parent)).resolve()
    try:
        demo = build_demo_repo(root / "invoice-export", stale=not args.no_stale)
        print(f"charpin-remote demo: example repository at commit {demo.commit[:12]}", flush=True)
        if demo.stale:
            print(f"  left uncommitted in its working tree: {', '.join(demo.stale)}", flush=True)
        run_id = f"demo-{secrets.token_hex(4)}"
        print(f"  running: charpin-remote run --repo {demo.path} --hosts {_HOSTS}", flush=True)
        outcome = _run(demo.path, run_id)
        # The folder is removed with the example unless --keep.
        emit(outcome, show_folder=args.keep, color=args.color)
        report, code = outcome.report, outcome.exit_code
        receipts = [(o.label, o.receipt) for o in outcome.outcomes if o.receipt is not None]
        lines = explain(report, receipts)
        _print_explanation(lines, report)
        result, verdict = demo_verdict(lines, code, report.exit_bits, stale=bool(demo.stale))
        if verdict:
            print(verdict, flush=True)
        if demo.stale and not args.no_verify:
            result = max(result, _act_two(demo.path, run_id))
        if args.keep:
            print(f"kept the example repository: {demo.path}")
            if demo.stale:
                discard = " ".join(demo.stale)
                print(f"  next: cd {demo.path} && git checkout -- {discard} && charpin-remote run")
        else:
            print("(the example repository and its run folder are removed; --keep keeps them)")
        return result
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


# Act two: the change an agent proposes to "round the way the bank does"; one cent moves.
AGENT_PATCH_OLD = "rounding=rounding)"
AGENT_PATCH_NEW = "rounding=ROUND_DOWN)"


def _act_two(repo: Path, run_id: str) -> int:
    """Verify an agent's patch on the clean box: base against patched, the verdict explained.
    Returns 0 when the patch is rejected for the behaviour it changes, else EXIT_DEMO_MISSED."""
    from charpin_coordinator.verify.pipeline import VerifyOptions, verify
    from charpin_coordinator.verify.render import render_text

    patch = demo_patch(repo)
    print()
    print("Act two: an agent proposes a patch (the rounding of export_invoices.gross).")
    print("  running: charpin-remote verify --patch agent.diff --hosts clean", flush=True)
    with make_progress(["clean"]) as progress:
        result = verify(
            VerifyOptions(repo=repo, patch=patch, run_id=f"{run_id}-verify"), phase=progress.phase
        )
    report = result.report
    sys.stdout.write(render_text(report))
    moved = [o for o in report.observations if o.gate == "Behaviour"]
    if report.verdict == "REJECT" and moved:
        first = moved[0]
        gone = next((d[1:] for d in first.detail if d.startswith("-INV")), "")
        came = next((d[1:] for d in first.detail if d.startswith("+INV")), "")
        print()
        print("What verify caught:")
        print(
            f"  On the clean box, where the base commit's pins were green, the patched code moved "
            f"pin {first.item}'s output: {gone} became {came}."
        )
        print(
            "  One cent is a money change: a refactor that moves it is a failed extract. The "
            f"verdict is {report.verdict}, and the patch never touched your working tree."
        )
        return EXIT_CLEAN
    print(
        f"charpin-remote demo: the agent's rounding change was NOT rejected for its behaviour "
        f"(verdict {report.verdict}); the demo failed to demonstrate, please report this"
    )
    return EXIT_DEMO_MISSED


def demo_patch(repo: Path) -> bytes:
    """The agent's patch for act two, as `git diff` prints it (the repository is not touched)."""
    source = (repo / "export_invoices.py").read_text(encoding="utf-8")
    patched = source.replace(AGENT_PATCH_OLD, AGENT_PATCH_NEW, 1).replace(
        "from decimal import ", "from decimal import ROUND_DOWN, ", 1
    )
    before = source.splitlines(keepends=True)
    after = patched.splitlines(keepends=True)
    import difflib

    body = "".join(
        difflib.unified_diff(before, after, "a/export_invoices.py", "b/export_invoices.py")
    )
    return f"diff --git a/export_invoices.py b/export_invoices.py\n{body}".encode()


def _require_pytest() -> None:
    """Both built-in boxes run the example's tests with this interpreter, so it needs pytest."""
    if importlib.util.find_spec("pytest") is None:
        raise UsageError(
            f"the demo runs the example's tests with pytest, which {sys.executable} cannot "
            "import; install it (pip install pytest) and run the demo again"
        )


def demo_verdict(caught: list[str], code: int, bits: list[str], *, stale: bool) -> tuple[int, str]:
    """The demo's exit code and closing line, given what the run caught and how it exited."""
    if not stale:
        return code, ""  # the control run: its own exit code is the answer
    shown = "; ".join(bits) or "no bits"
    if caught and code & 2:
        return (
            EXIT_CLEAN,
            f"the run itself exited {code} ({shown}) — that is what it is meant to catch",
        )
    return EXIT_DEMO_MISSED, (
        f"charpin-remote demo: the planted stale fixture was NOT caught (the run exited {code}: "
        f"{shown}); the demo failed to demonstrate, please report this with the output above"
    )


def _run(repo: Path, run_id: str) -> RunResult:
    """What `charpin-remote run --repo <example> --hosts local,clean` does, progress included."""
    hosts = _HOSTS.split(",")
    planned = plan(Options(repo=repo, hosts=hosts, run_id=run_id))
    with make_progress(hosts) as progress:
        return run(planned, phase=progress.phase)


def _print_explanation(lines: list[str], report: DriftReport) -> None:
    print()
    if lines:
        print("What the demo caught:")
        for line in lines:
            print(f"  {line}")
        return
    if report.exit_code == 0:
        boxes = ", ".join(box.label for box in report.boxes)
        print(f"Nothing was caught: {boxes} agree on the commit, the tree and the fixtures.")
        return
    bits = "; ".join(report.exit_bits)
    print(
        f"No stale fixture was caught; the report above explains exit {report.exit_code} ({bits})."
    )
