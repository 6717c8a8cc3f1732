"""CLI glue for `charpin-remote run`, `hosts check` and `hosts gc` (and `demo`, if built).
Coordinator side.

The only module of remote/ that prints and picks exit codes. `run` returns the drift report's
bitmask (design §6); when Ctrl-C cut the run short, the partial report is still written and
printed and bit 4 (a box was not evaluated) is always set.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from charpin_runner.colors import add_color_option, paint, wanted
from charpin_runner.errors import EXIT_CLEAN, EXIT_NOT_EVALUATED, CharpinError, UsageError

from charpin_coordinator.config import load_config
from charpin_coordinator.gitcmd import git_run, repo_root
from charpin_coordinator.history import hooks as history_hooks
from charpin_coordinator.remote import snapshot
from charpin_coordinator.remote.builtin import trusted_python
from charpin_coordinator.remote.display import make_progress
from charpin_coordinator.remote.hosts import (
    BUILTIN_BOXES,
    HostExtras,
    decode_host_extras,
    parse_host_list,
    resolve_hosts,
)
from charpin_coordinator.remote.run import (
    DEFAULT_TIMEOUT,
    Options,
    Planned,
    RunResult,
    plan,
    run,
)

DEFAULT_HOSTS = "local,clean"
# The FILE of --markdown that means standard output.
STDOUT = Path("-")


def add_parsers(sub: Any) -> None:
    """Register `run`, `hosts` and (from demo_cli) `demo`."""
    from charpin_coordinator.remote import demo_cli

    _add_run(sub)
    hosts = sub.add_parser(
        "hosts",
        help="inspect boxes before a run",
        exit_codes="0 every box is fine, 4 a box is not, 64 usage or configuration error, 130 interrupted",
    )
    hosts_sub = hosts.add_subparsers(
        dest="hosts_command", metavar="SUBCOMMAND", parser_class=type(hosts)
    )
    check = hosts_sub.add_parser(
        "check",
        help="preflight: reach, host key, python, git, disk",
        exit_codes="0 every box is fine, 4 a box is not, 64 usage or configuration error, 130 interrupted",
        description="Check every box once. Exit 0 when all are fine, 4 when any is not.",
    )
    check.add_argument(
        "--hosts",
        default=DEFAULT_HOSTS,
        metavar="A,B",
        help=f"boxes to check (default {DEFAULT_HOSTS}, like run)",
    )
    check.add_argument("--ssh-config", type=Path, metavar="FILE", help="ssh_config to read")
    check.add_argument(
        "--accept-new",
        action="store_true",
        help="trust an unknown host key and record it in known_hosts",
    )
    check.add_argument("--repo", type=Path, metavar="DIR", help="repository (host extras)")
    check.add_argument(
        "--json", action="store_true", help="print every box's checks as JSON, nothing else"
    )
    add_color_option(check)
    check.set_defaults(handler=run_hosts_check)
    _add_gc(hosts_sub)
    hosts.set_defaults(handler=_hosts_usage)
    demo_cli.add_parsers(sub)


def _add_gc(hosts_sub: Any) -> None:
    gc = hosts_sub.add_parser(
        "gc",
        help="show and free what charpin keeps on boxes (caches, left-over run folders)",
        description="Show what charpin keeps on each box (venvs, cache repositories, runner "
        "folders, run folders an interrupted run left) and free it down to the cap: left-overs "
        "first, then entries unused for longer than --max-days, then the least recently used "
        "until under --max-mb. Nothing a run uses now is removed; every run keeps the cap by "
        "itself too (cache_max_mb, cache_max_days under [tool.charpin.hosts.NAME]). Exit code: "
        "0 every box collected, 4 a box could not be reached or collected, 64 usage.",
    )
    add = gc.add_argument
    add("--hosts", default="clean", metavar="A,B", help="boxes to collect (default clean)")
    add("--max-mb", type=int, metavar="N", help="size cap in MB (default: the host's, else 5120)")
    add(
        "--max-days",
        type=float,
        metavar="D",
        help="remove entries unused for longer (default: the host's, else 14)",
    )
    add("--dry-run", action="store_true", help="only show what would be freed")
    add("--json", action="store_true", help="print the result as JSON")
    add("--ssh-config", type=Path, metavar="FILE", help="ssh_config to read")
    add("--accept-new", action="store_true", help="trust an unknown host key and record it")
    add("--repo", type=Path, metavar="DIR", help="repository (host extras)")
    gc.set_defaults(handler=run_hosts_gc)


def _add_run(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        help="run one pinned snapshot on many boxes and report the drift",
        exit_codes="0 clean; bits OR-ed: 1 tests failed, 2 drift or a gate blocked, 4 a box "
        "not evaluated (or Ctrl-C), 8 snapshot or receipt integrity, 16 vacuous; 64 usage or configuration error, 130 interrupted",
        description="Ship the commit and the runner to every box, run `charpin receipt` there, "
        "fetch the receipts and report drift and gates. Exit code: bitmask of 1 tests failed, "
        "2 drift or a gate blocked, 4 a box not evaluated (or Ctrl-C), 8 integrity, "
        "16 vacuous, 64 usage.",
    )
    add = run.add_argument
    add(
        "--hosts",
        default=DEFAULT_HOSTS,
        metavar="A,B",
        help=f"boxes: built-in local/clean or ssh_config names (default {DEFAULT_HOSTS})",
    )
    add("--commit", default="HEAD", metavar="REV", help="commit to run (default HEAD)")
    add("--baseline", metavar="LABEL", help="box to compare against (default: the first)")
    add("--json", action="store_true", help="print the drift report as JSON")
    add(
        "--markdown",
        type=Path,
        nargs="?",
        const=STDOUT,
        metavar="FILE",
        help="also write the report as Markdown to FILE; `-` or no FILE prints it instead of "
        "the text report, as `compare --markdown` does",
    )
    add("--junit", type=Path, metavar="FILE", help="also write JUnit XML (box x gate)")
    add_color_option(run)
    add(
        "--against",
        metavar="REF",
        help="also compare each box with its own earlier receipt: last (the newest earlier run "
        "folder with that box), a run id, or a commit (its newest earlier run); shown as its "
        "own section, never gating unless --gate-against-last",
    )
    add(
        "--gate-against-last",
        action="store_true",
        help="a box that changed since its --against reference (default last) sets exit bit 2",
    )
    add(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run each box N times in a row (1..20), each a fresh checkout (local: the working "
        "tree each time): repeat 1 is the "
        "receipt of record (gates, drift, exit code); the others are flake evidence only, "
        "listed in the report's Repeats section and kept under <box>/repeats/<k>/",
    )
    add(
        "--include-frozen",
        action="store_true",
        help="also re-run the flake ledger's frozen tests on the side on each box, after the "
        "gated run is measured; shown in the report and kept for `ledger review`, never gating",
    )
    add(
        "--notify",
        metavar="CMD",
        help="after the report, run the shell command CMD with the Markdown report on stdin and "
        "CHARPIN_EXIT, CHARPIN_RUN_DIR set (60 s at most); its failure is one line on stderr "
        "and never changes the exit code",
    )
    add_box_options(run, folders="run folders go here (default <repo>/.charpin/runs)")
    run.set_defaults(handler=run_remote)


def add_box_options(parser: argparse.ArgumentParser, *, folders: str) -> None:
    """The options every command that runs boxes takes (`run`, `verify`), said one way."""
    add = parser.add_argument
    add("--ssh-config", type=Path, metavar="FILE", help="ssh_config to read (like ssh -F)")
    add("--jobs", type=int, default=4, metavar="N", help="boxes at once (default 4)")
    add(
        "--timeout",
        type=float,
        metavar="S",
        help=f"per-box deadline in seconds (default: config, else {DEFAULT_TIMEOUT:.0f})",
    )
    add(
        "--accept-new",
        action="store_true",
        help="trust unknown host keys; the fingerprint is recorded in the receipt",
    )
    add("--keep", action="store_true", help="keep remote run folders and the clean box")
    add(
        "--sandbox",
        choices=("auto", "required", "off"),
        default="auto",
        help="run the tests under bubblewrap with caches and the runner read-only: auto (where "
        "bwrap works; the default), required (a box without it is not evaluated), off",
    )
    add("--repo", type=Path, metavar="DIR", help="repository (default: git toplevel of cwd)")
    add("--run-id", metavar="ID", help="id of the folder (default: UTC time plus 6 hex digits)")
    add("--out", type=Path, metavar="DIR", help=folders)
    add("--quiet", "-q", action="store_true", help="no progress display")
    add(
        "--history",
        type=Path,
        metavar="PATH",
        help="run history database to add this run to (default [tool.charpin] history, else "
        "<repo>/.charpin/history.sqlite)",
    )


def _hosts_usage(args: argparse.Namespace) -> int:
    raise UsageError(
        "charpin-remote hosts needs a subcommand: hosts check --hosts A,B, or hosts gc --hosts A,B"
    )


def run_remote(args: argparse.Namespace) -> int:
    """Handle `charpin-remote run`: plan, run with progress, print, return the bitmask."""
    _check_flags(args)
    names = parse_host_list(args.hosts)
    options = Options(
        repo=repo_root(args.repo),
        hosts=names,
        commit=args.commit,
        ssh_config=args.ssh_config,
        run_id=args.run_id,
        out_dir=args.out,
        timeout=args.timeout,
        keep=args.keep,
        accept_new=args.accept_new,
        sandbox=args.sandbox,
        baseline=args.baseline,
        jobs=args.jobs,
        against=args.against or ("last" if args.gate_against_last else None),
        gate_against=args.gate_against_last,
        repeat=args.repeat,
        include_frozen=args.include_frozen,
    )
    history = history_hooks.locate(options.repo, args.history, lenient=True)
    history_hooks.check(history, [args.run_id] if args.run_id else [])
    planned = plan(options)
    _warn_local_commit(options.repo, names, args.commit, planned.plan.snap.commit)
    _warn_uncommitted_config(options.repo, planned.plan.snap.commit, planned.plan.config_table)
    _note_clean_interpreter(planned)
    with make_progress(names, quiet=args.quiet or args.json) as progress:
        result = run(planned, phase=progress.phase, history=history)
    from charpin_coordinator.remote.output import emit, warn_disposals  # imported meanwhile

    emit(result, json=args.json, markdown=args.markdown, junit=args.junit, color=args.color)
    code = result.exit_code | warn_disposals([result])
    code |= history_hooks.record_after(history, [result.folder], repo=options.repo)
    if args.notify is not None:
        _notify(args.notify, result, code)
    return code


def _notify(command: str, result: RunResult, code: int) -> None:
    """Run the --notify hook; its failure is one line on stderr, never the exit code."""
    from charpin_coordinator.remote.notify import notify
    from charpin_coordinator.reports.markdown import render_markdown

    summary = render_markdown(result.report).encode()
    problem = notify(command, summary, exit_code=code, run_dir=result.folder)
    if problem is not None:
        sys.stderr.write(f"charpin-remote: warning: {problem}; the exit code is the run's\n")


def _warn_local_commit(repo: Path, names: list[str], rev: str, commit: str) -> None:
    """`local` runs the working tree as it is: say so when --commit asks for another commit."""
    if "local" not in names or rev == "HEAD":
        return
    head = snapshot.resolve(repo, "HEAD").commit
    if head != commit:
        sys.stderr.write(
            f"charpin-remote: warning: local runs the working tree at HEAD {head[:12]}, not "
            f"--commit {rev} ({commit[:12]}), so its Identity gate will fail; drop local from "
            "--hosts to compare only shipped snapshots\n"
        )


def _note_clean_interpreter(planned: Planned) -> None:
    """Without `setup`, the clean box has no venv of its own: say whose packages it sees."""
    for target in planned.targets:
        setup = planned.plan.setup if target.setup is None else target.setup
        if target.label == "clean" and not setup:
            sys.stderr.write(
                f"charpin-remote: note: clean has no `setup`, so its tests run with "
                f"{target.python} and every package installed there (this coordinator's own "
                'included); add setup = ["pip install -r requirements.txt"] (or your install '
                "line) for a venv with only the project's dependencies\n"
            )


def _warn_uncommitted_config(
    repo: Path, commit: str, used: Mapping[str, Any], *, what: str = "run"
) -> None:
    """The configuration comes from the commit: say so when the working tree's differs, instead
    of ignoring an edit the user just made (#10)."""
    if not (repo / "pyproject.toml").is_file():
        return
    try:
        mine = load_config(repo).table
    except CharpinError:
        return  # a broken working-tree file is not what runs; the commit's config is used
    if dict(mine) != dict(used):
        sys.stderr.write(
            f"charpin-remote: warning: [tool.charpin] is read from commit {commit[:12]}; your "
            f"uncommitted changes to it are not used by {what} (commit them to use them)\n"
        )


def _check_flags(args: argparse.Namespace) -> None:
    if args.json and args.markdown == STDOUT:
        raise UsageError(
            "--json and --markdown - would both print on stdout; write one to a file, e.g. "
            "--markdown drift.md"
        )
    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs} must be at least 1; e.g. --jobs 4")
    if getattr(args, "notify", None) is not None and not args.notify.strip():
        raise UsageError(
            "--notify needs a command, e.g. --notify 'mail -s charpin ops@example.invalid'"
        )
    if getattr(args, "repeat", 1) != 1:
        from charpin_coordinator.remote.repeats import check_count

        check_count(args.repeat)
    if args.timeout is not None and not 0 < args.timeout < float("inf"):
        raise UsageError(f"--timeout {args.timeout} must be a positive number of seconds")


def run_hosts_check(args: argparse.Namespace) -> int:
    """Handle `charpin-remote hosts check`: one line per box and check."""
    from charpin_coordinator.remote.hostcheck import check_hosts

    names = parse_host_list(args.hosts)
    extras: Mapping[str, HostExtras] = {}
    setup: list[str] = []
    repo, committed = _hosts_repo(args.repo)
    if repo is not None and (repo / "pyproject.toml").is_file():
        # In a repository, the committed settings only (rule 1): a host `python` named by an
        # uncommitted edit would start outside any sandbox. Outside one, the folder's own file.
        loaded = load_config(repo, rev="HEAD" if committed else None)
        if committed:
            _warn_uncommitted_config(repo, "HEAD", loaded.table, what="hosts check")
        extras = decode_host_extras(loaded.hosts)
        setup = list(loaded.charpin.setup)
        for name, extra in extras.items():
            if name in BUILTIN_BOXES:
                trusted_python(extra.python, repo, name)
    specs = resolve_hosts(names, ssh_config=args.ssh_config, extras=extras)
    bad = False
    color = wanted(args.color, sys.stdout) and not args.json
    found = []
    for result in check_hosts(specs, accept_new=args.accept_new, default_setup=setup):
        found.append(result)
        if not args.json:
            for item in result.items:
                mark = paint("ok ", "green", color) if item.ok else paint("BAD", "red", color)
                print(f"[{result.host}] {mark} {item.name}: {item.message}", flush=True)
        bad = bad or not result.ok
    code = EXIT_NOT_EVALUATED if bad else EXIT_CLEAN
    if args.json:
        import json

        doc = {
            "exit_code": code,
            "hosts": [
                {
                    "host": r.host,
                    "ok": r.ok,
                    "host_key_fingerprint": r.host_key_fingerprint,
                    "error_kind": r.error_kind,
                    "checks": [{"name": i.name, "ok": i.ok, "message": i.message} for i in r.items],
                }
                for r in found
            ],
        }
        print(json.dumps(doc, indent=2), flush=True)
    return code


def run_hosts_gc(args: argparse.Namespace) -> int:
    """Handle `charpin-remote hosts gc`: per box, what it keeps and what was (would be) freed."""
    import json

    from charpin_coordinator.remote.hostgc import describe, gc_hosts

    if args.max_mb is not None and args.max_mb < 0:
        raise UsageError(f"--max-mb {args.max_mb} must be 0 or more, e.g. --max-mb 2048")
    if args.max_days is not None and not 0 <= args.max_days < float("inf"):
        raise UsageError(f"--max-days {args.max_days:g} must be 0 or more, e.g. --max-days 14")
    names = parse_host_list(args.hosts)
    extras: Mapping[str, HostExtras] = {}
    repo, committed = _hosts_repo(args.repo)
    if repo is not None and (repo / "pyproject.toml").is_file():
        # The committed settings only, as for `hosts check` (rule 1).
        extras = decode_host_extras(load_config(repo, rev="HEAD" if committed else None).hosts)
        for name, extra in extras.items():
            if name in BUILTIN_BOXES:
                trusted_python(extra.python, repo, name)
    specs = resolve_hosts(names, ssh_config=args.ssh_config, extras=extras)
    cap: dict[str, Any] = {}
    if args.max_mb is not None:
        cap["max_mb"] = args.max_mb
    if args.max_days is not None:
        cap["max_days"] = args.max_days
    results = gc_hosts(specs, cap=cap, dry_run=args.dry_run, accept_new=args.accept_new)
    if args.json:
        print(json.dumps({"hosts": [r.as_dict() for r in results]}, indent=2), flush=True)
    else:
        for result in results:
            for line in describe(result):
                print(line, flush=True)
    return EXIT_NOT_EVALUATED if any(not r.ok for r in results) else EXIT_CLEAN


def _hosts_repo(given: Path | None) -> tuple[Path | None, bool]:
    """The folder whose pyproject.toml `hosts check` reads, and whether it is a repository
    (then its HEAD is read): the top of the repository holding --repo (or the current folder),
    else that folder itself when it has a pyproject.toml. When there is none, the boxes are
    still checked, and a note says that no [tool.charpin] was read and why, so an all-ok check
    is not mistaken for one of the project's configuration."""
    try:
        top = repo_root(given)
    except UsageError as exc:
        folder = given or Path.cwd()
        if (folder / "pyproject.toml").is_file():
            return folder, False
        sys.stderr.write(
            "charpin-remote: note: no [tool.charpin] read, so the hosts are checked without the "
            f"project's host settings and setup: {exc}\n"
        )
        return None, False
    if git_run(top, "rev-parse", "--verify", "--quiet", "HEAD^{commit}").returncode != 0:
        return top, False  # no commit yet: the tree is all there is
    return top, True
