"""CLI glue for `charpin guard`. Runs on any box; stdlib only. May print; library code may not."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

from charpin_runner.colors import add_color_option, paint, wanted
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
            "Exit codes: 0 clean, 2 refused, 64 usage (bad range, not a repository)."
        ),
    )
    parser.add_argument("--repo", default=".", help="a path inside the repository (default: .)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--staged", action="store_true", help="check the index (pre-commit)")
    what.add_argument("--range", metavar="REV..REV", help="check each commit of a range (CI)")
    what.add_argument(
        "--pre-commit",
        action="store_true",
        help="what the pre-commit framework asks for: each commit of "
        "$PRE_COMMIT_FROM_REF..$PRE_COMMIT_TO_REF when it sets them (`pre-commit run --from-ref "
        "A --to-ref B` in CI, and pre-push), else the staged change",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the verdicts as JSON on stdout, nothing else"
    )
    add_color_option(parser)
    actions = parser.add_subparsers(dest="guard_action", metavar="[install]")
    install = actions.add_parser(
        "install",
        exit_codes=(
            "0 installed, 64 usage or configuration error, 130 interrupted (not a "
            "repository, a foreign hook without --force)"
        ),
        help="write .git/hooks/pre-commit (core.hooksPath)",
    )
    install.add_argument("--force", action="store_true", help="replace a foreign hook (keeps .bak)")
    install.set_defaults(handler=_install)
    parser.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    repo = gitio.toplevel(Path(args.repo))
    spec = args.range or (_pre_commit_range() if args.pre_commit else None)
    if spec:
        verdicts = check_range(repo, spec)
        commits = "commit" if len(verdicts) == 1 else "commits"
        scope = f"{len(verdicts)} {commits} in {spec}"
    elif args.staged or args.pre_commit:
        verdicts = [check_staged(repo, _index_being_committed())]
        scope = "the staged change"
    else:
        raise UsageError(
            "charpin guard: pass --staged, --range REV..REV, --pre-commit, or `install`"
        )
    refused = [v for v in verdicts if v.refused]
    if args.json:
        print(json.dumps(_as_json(scope, verdicts), indent=2))
        return EXIT_DRIFT if refused else EXIT_CLEAN
    color = wanted(args.color, sys.stderr)
    for verdict in refused:
        print(render_refusal(verdict, color), file=sys.stderr)
    if refused:
        fixes = []
        if any(v.mixes for v in refused):
            fixes.append("put pin updates and code changes in separate commits")
        if any(v.links for v in refused):
            fixes.append("keep protected paths regular files and folders, not symlinks")
        # "refused 1 of 3 commits in A..B", or for the index "refused the staged change".
        what = f"{len(refused)} of {scope}" if spec else scope
        said = paint(f"refused {what}", "red", color)
        print(f"charpin guard: {said}; {' and '.join(fixes)}", file=sys.stderr)
        return EXIT_DRIFT
    ok = paint("ok", "green", wanted(args.color, sys.stdout))
    print(f"charpin guard: {ok}, {scope}: no pins changed together with production code")
    return EXIT_CLEAN


def _pre_commit_range() -> Optional[str]:
    """FROM..TO from the variables the pre-commit framework sets for `run --from-ref --to-ref`
    and for pre-push hooks; None when it set neither (a commit: the staged change)."""
    start = os.environ.get("PRE_COMMIT_FROM_REF", "")
    end = os.environ.get("PRE_COMMIT_TO_REF", "")
    if not start and not end:
        return None
    if not start or not end:
        raise UsageError(
            "PRE_COMMIT_FROM_REF and PRE_COMMIT_TO_REF come together; run "
            "`pre-commit run --from-ref A --to-ref B`, or unset both to check the staged change"
        )
    return f"{start}..{end}"


def _as_json(scope: str, verdicts: list[Verdict]) -> dict[str, Any]:
    refused = [v for v in verdicts if v.refused]
    return {
        "scope": scope,
        "refused": len(refused),
        "checked": len(verdicts),
        "exit_code": EXIT_DRIFT if refused else EXIT_CLEAN,
        "verdicts": [
            {
                "label": v.label,
                "refused": v.refused,
                "mixes": v.mixes,
                "protected": v.protected,
                "code": v.code,
                "links": v.links,
            }
            for v in verdicts
        ],
    }


def _index_being_committed() -> Optional[str]:
    """The index `git commit` runs the pre-commit hook for: GIT_INDEX_FILE names it (a temporary
    one for `commit -a` or `commit PATH`), relative to the folder git started the hook in. The
    only git variable the guard reads, and only for --staged."""
    named = os.environ.get("GIT_INDEX_FILE")
    return os.path.abspath(named) if named else None


def render_refusal(verdict: Verdict, color: bool = False) -> str:
    """Why, then the lists, one path a line."""
    reasons = []
    if verdict.mixes:
        reasons.append("it changes pins and production code")
    if verdict.links:
        reasons.append("it adds or retargets a symlink at, in or to a protected path")
    lines = [
        f"charpin guard: {paint('refused', 'red', color)} {verdict.label}: {'; '.join(reasons)}"
    ]
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
    if args.staged or args.range or args.pre_commit:
        raise UsageError(
            "charpin guard install takes no --staged/--range/--pre-commit; run it on its own"
        )
    repo = gitio.toplevel(Path(args.repo))
    hook, backup = install_hook(repo, force=args.force)
    if backup is not None:
        print(f"charpin guard: moved the previous hook to {backup}")
    print(f"charpin guard: installed {hook}; it runs `charpin guard --staged` before each commit")
    return EXIT_CLEAN
