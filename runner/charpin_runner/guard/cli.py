"""CLI glue for `charpin guard`. Runs on any box; stdlib only. May print; library code may not."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Optional

from charpin_runner.errors import EXIT_CLEAN, EXIT_DRIFT, UsageError
from charpin_runner.guard import gitio
from charpin_runner.guard.check import Verdict, check_range, check_staged
from charpin_runner.guard.hook import install_hook


def add_parsers(sub: Any) -> None:
    """Register `charpin guard` and `charpin guard install`."""
    parser = sub.add_parser(
        "guard",
        help="refuse commits that change pins together with production code",
        description=(
            "Refuse a change set that touches protected paths (pins file, case and golden "
            "folders, ledger, inventory, [tool.charpin]) and production code together. "
            "Exit 2 when refused."
        ),
    )
    parser.add_argument("--repo", default=".", help="a path inside the repository (default: .)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--staged", action="store_true", help="check the index (pre-commit)")
    what.add_argument("--range", metavar="REV..REV", help="check each commit of a range (CI)")
    actions = parser.add_subparsers(dest="guard_action", metavar="[install]")
    install = actions.add_parser("install", help="write .git/hooks/pre-commit (core.hooksPath)")
    install.add_argument("--force", action="store_true", help="replace a foreign hook (keeps .bak)")
    install.set_defaults(handler=_install)
    parser.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    repo = gitio.toplevel(Path(args.repo))
    if args.range:
        verdicts = check_range(repo, args.range)
        commits = "commit" if len(verdicts) == 1 else "commits"
        scope = f"{len(verdicts)} {commits} in {args.range}"
    elif args.staged:
        verdicts = [check_staged(repo, _index_being_committed())]
        scope = "the staged change"
    else:
        raise UsageError("charpin guard: pass --staged, --range REV..REV, or `install`")
    refused = [v for v in verdicts if v.refused]
    for verdict in refused:
        print(render_refusal(verdict), file=sys.stderr)
    if refused:
        fixes = []
        if any(v.mixes for v in refused):
            fixes.append("put pin updates and code changes in separate commits")
        if any(v.links for v in refused):
            fixes.append("keep protected paths regular files and folders, not symlinks")
        # "refused 1 of 3 commits in A..B", or for the index "refused the staged change".
        what = f"{len(refused)} of {scope}" if args.range else scope
        print(f"charpin guard: refused {what}; {' and '.join(fixes)}", file=sys.stderr)
        return EXIT_DRIFT
    print(f"charpin guard: ok, {scope}: no pins changed together with production code")
    return EXIT_CLEAN


def _index_being_committed() -> Optional[str]:
    """The index `git commit` runs the pre-commit hook for: GIT_INDEX_FILE names it (a temporary
    one for `commit -a` or `commit PATH`), relative to the folder git started the hook in. The
    only git variable the guard reads, and only for --staged."""
    named = os.environ.get("GIT_INDEX_FILE")
    return os.path.abspath(named) if named else None


def render_refusal(verdict: Verdict) -> str:
    """Why, then the lists, one path a line."""
    reasons = []
    if verdict.mixes:
        reasons.append("it changes pins and production code")
    if verdict.links:
        reasons.append("it adds or retargets a symlink at, in or to a protected path")
    lines = [f"charpin guard: refused {verdict.label}: {'; '.join(reasons)}"]
    if verdict.mixes:
        lines.append("  protected (pins, cases, goldens, ledger, inventory, [tool.charpin]):")
        lines += [f"    {p}" for p in verdict.protected]
        lines.append("  production code:")
        lines += [f"    {p}" for p in verdict.code]
    if verdict.links:
        lines.append(
            "  symlinks (protected paths must be regular files and folders; commit the real file):"
        )
        lines += [f"    {p}" for p in verdict.links]
    return "\n".join(lines)


def _install(args: argparse.Namespace) -> int:
    if args.staged or args.range:
        raise UsageError("charpin guard install takes no --staged/--range; run it on its own")
    repo = gitio.toplevel(Path(args.repo))
    hook, backup = install_hook(repo, force=args.force)
    if backup is not None:
        print(f"charpin guard: moved the previous hook to {backup}")
    print(f"charpin guard: installed {hook}; it runs `charpin guard --staged` before each commit")
    return EXIT_CLEAN
