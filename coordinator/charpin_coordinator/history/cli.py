"""CLI glue for `charpin-remote history`. Coordinator side; prints and picks the exit code.

    history [--limit N]            recent runs: time, run, kind, commit, result, boxes
    history show RUN               one run: boxes, gates, failing tests
    history test NODEID            a test's outcomes per box, with commits
    history box NAME               a box's runs
    history prune --keep 90d|N     drop old runs (never a box's last clean run, nor what a kept
                                   run needs)
    history rebuild [DIR...]       recreate the database from run and verify folders
    history html DIR               (html_cli.py) the HTML index over run folders

Every one takes --history PATH, --repo DIR and --json. Exit 0; 64 for usage (an unknown run,
test or box, no database yet); 8 for a database that is not ours or is corrupt (the message
names `history rebuild`), and for a rebuild that had to skip a folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import msgspec
from charpin_runner.errors import EXIT_CLEAN, EXIT_INTEGRITY, UsageError

from charpin_coordinator.history import hooks

_EXIT_CODES = (
    "0 done, 8 a database that is not charpin's or is corrupt (see history rebuild; "
    "rebuild: a folder it had to skip), 64 usage or configuration error (no database yet, "
    "an unknown run, test or box), 130 interrupted"
)


def add_parsers(sub: Any) -> None:
    """Register `history` and its subcommands."""
    history = sub.add_parser(
        "history",
        exit_codes=_EXIT_CODES,
        help="past runs: list, show, test, box, prune, rebuild (SQLite); html (run folders)",
        description="Query the run history (SQLite, default .charpin/history.sqlite). Without a "
        "subcommand: the most recent runs.",
    )
    _common(history, top=True, limit=True)
    history.set_defaults(handler=run_list)
    subs = history.add_subparsers(
        dest="history_command", metavar="SUBCOMMAND", parser_class=type(history)
    )
    show = subs.add_parser(
        "show", exit_codes=_EXIT_CODES, help="one run in full (a unique prefix of its id will do)"
    )
    show.add_argument("run", metavar="RUN")
    _common(show)
    show.set_defaults(handler=run_show)
    test = subs.add_parser(
        "test", exit_codes=_EXIT_CODES, help="a test's outcome timeline per box, with commits"
    )
    test.add_argument("nodeid", metavar="NODEID")
    _common(test, limit=True)
    test.set_defaults(handler=run_test)
    box = subs.add_parser("box", exit_codes=_EXIT_CODES, help="a box's runs, newest first")
    box.add_argument("name", metavar="NAME")
    _common(box, limit=True)
    box.set_defaults(handler=run_box)
    prune = subs.add_parser(
        "prune",
        exit_codes=_EXIT_CODES,
        help="remove old runs from the database (run folders stay on disk)",
        description="Keep the runs of the last N days (90d) or the newest N runs (30), and "
        "always the last clean run of every box and every run a kept run needs.",
    )
    prune.add_argument("--keep", required=True, metavar="90d|N", help="days (90d) or runs (30)")
    prune.add_argument("--dry-run", action="store_true", help="only say what would go")
    _common(prune)
    prune.set_defaults(handler=run_prune)
    rebuild = subs.add_parser(
        "rebuild",
        exit_codes=_EXIT_CODES,
        help="recreate the database from run and verify folders",
        description="Read every run folder and verify folder under the DIRs (default "
        "<repo>/.charpin/runs and <repo>/.charpin/verify) and swap a new database in; the old "
        "one, even a corrupt one, is replaced only once the new one is complete. Exit 8 when a "
        "folder had to be skipped (each is named on stderr).",
    )
    rebuild.add_argument("dirs", nargs="*", type=Path, metavar="DIR")
    _common(rebuild)
    rebuild.set_defaults(handler=run_rebuild)
    from charpin_coordinator.reports import html_cli

    html_cli.add_html_parser(subs)  # `history html DIR`: the HTML index over run folders


def _common(parser: argparse.ArgumentParser, *, top: bool = False, limit: bool = False) -> None:
    # Given before or after the subcommand; a subcommand's own default must not hide the top's.
    unset: Any = None if top else argparse.SUPPRESS
    add = parser.add_argument
    add(
        "--history",
        type=Path,
        metavar="PATH",
        default=unset,
        help="the database (default [tool.charpin] history, else <repo>/.charpin/history.sqlite)",
    )
    add("--repo", type=Path, metavar="DIR", default=unset, help="repository (default: cwd's)")
    add(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="print the answer as JSON",
    )
    if limit:
        add("--limit", type=int, metavar="N", default=unset, help="rows (per box for test)")


def _path(args: argparse.Namespace) -> Path:
    repo = hooks.repo_or_cwd(args.repo)
    return hooks.locate(repo, args.history)


def _limit(args: argparse.Namespace, default: int) -> int:
    limit = default if args.limit is None else int(args.limit)
    if limit < 1:
        raise UsageError(f"--limit {limit} must be at least 1")
    return limit


def _emit_json(value: object) -> int:
    sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(value), indent=2) + b"\n")
    sys.stdout.flush()
    return EXIT_CLEAN


def _emit_text(text: str) -> int:
    sys.stdout.write(text)
    sys.stdout.flush()
    return EXIT_CLEAN


def run_list(args: argparse.Namespace) -> int:
    from charpin_coordinator.history import query, render

    path = _path(args)
    runs = query.recent_runs(path, _limit(args, 20))
    return _emit_json(runs) if args.json else _emit_text(render.recent(runs, str(path)))


def run_show(args: argparse.Namespace) -> int:
    from charpin_coordinator.history import query, render

    found = query.show_run(_path(args), args.run)
    return _emit_json(found) if args.json else _emit_text(render.detail(found))


def run_test(args: argparse.Namespace) -> int:
    from charpin_coordinator.history import query, render

    found = query.outcome_timeline(_path(args), args.nodeid, _limit(args, 30))
    return _emit_json(found) if args.json else _emit_text(render.timeline(found))


def run_box(args: argparse.Namespace) -> int:
    from charpin_coordinator.history import query, render

    found = query.box_runs(_path(args), args.name, _limit(args, 30))
    return _emit_json(found) if args.json else _emit_text(render.box_history(found))


def run_prune(args: argparse.Namespace) -> int:
    from charpin_coordinator.history import prune, render

    keep = prune.parse_keep(args.keep)
    result = prune.prune(_path(args), keep, dry_run=args.dry_run)
    return _emit_json(result) if args.json else _emit_text(render.pruned(result))


def run_rebuild(args: argparse.Namespace) -> int:
    from charpin_coordinator.history import record

    repo = hooks.repo_or_cwd(args.repo)
    path = hooks.locate(repo, args.history)
    dirs = list(args.dirs)
    if not dirs:
        dirs = [d for d in (repo / ".charpin" / "runs", repo / ".charpin" / "verify") if d.is_dir()]
        if not dirs:
            raise UsageError(
                f"no run folders under {repo / '.charpin'}; pass the folders to read: "
                "charpin-remote history rebuild DIR..."
            )
    hooks.prepare_folder(repo, path)
    result = record.rebuild(path, dirs)
    for problem in result.problems:
        print(f"charpin-remote: warning: {problem}", file=sys.stderr)
    code = EXIT_INTEGRITY if result.problems else EXIT_CLEAN
    if args.json:
        _emit_json(
            {
                "history": str(path),
                "runs": result.runs,
                "boxes": result.boxes,
                "outcomes": result.outcomes,
                "problems": result.problems,
            }
        )
        return code
    _emit_text(
        f"history: rebuilt {path} from {len(dirs)} folder(s): {result.runs} run(s), "
        f"{result.boxes} box result(s), {result.outcomes} outcome(s)"
        + (f", {len(result.problems)} folder(s) skipped" if result.problems else "")
        + "\n"
    )
    return code
