"""CLI glue for `charpin-remote run` and `hosts check` (and `demo`, if built). Coordinator side.

The only module of remote/ that prints and picks exit codes. `run` returns the drift report's
bitmask (design §6); when Ctrl-C cut the run short, the partial report is still written and
printed and bit 4 (a box was not evaluated) is always set.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from charpin_runner.errors import EXIT_NOT_EVALUATED, IntegrityError, UsageError

from charpin_coordinator.config import load_config
from charpin_coordinator.drift import build_report
from charpin_coordinator.receipts import load_receipt
from charpin_coordinator.redact import Redactor
from charpin_coordinator.remote import results, snapshot
from charpin_coordinator.remote.boxrun import (
    MAX_RECEIPT_BYTES,
    BoxOutcome,
    BoxTarget,
    RunPlan,
    run_box,
)
from charpin_coordinator.remote.builtin import clean_target, run_local
from charpin_coordinator.remote.bundle import runner_bundle
from charpin_coordinator.remote.display import make_progress
from charpin_coordinator.remote.hosts import (
    HostExtras,
    HostSpec,
    decode_host_extras,
    parse_host_list,
    resolve_hosts,
)
from charpin_coordinator.remote.junit import to_junit
from charpin_coordinator.remote.orchestrate import FanOut, Job, run_all
from charpin_coordinator.render import encode_json, render_markdown, render_text
from charpin_coordinator.report import DriftReport, NotEvaluated, map_strings

DEFAULT_HOSTS = "local,clean"
DEFAULT_TIMEOUT = 1800.0


def add_parsers(sub: Any) -> None:
    """Register `run` and `hosts`; `demo` comes from demo_cli when it exists."""
    _add_run(sub)
    hosts = sub.add_parser("hosts", help="inspect boxes before a run")
    hosts_sub = hosts.add_subparsers(
        dest="hosts_command", metavar="SUBCOMMAND", parser_class=type(hosts)
    )
    check = hosts_sub.add_parser(
        "check",
        help="preflight: reach, host key, python, git, disk",
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
    check.set_defaults(handler=run_hosts_check)
    hosts.set_defaults(handler=_hosts_usage)
    try:
        from charpin_coordinator.remote import demo_cli  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return
    demo_cli.add_parsers(sub)


def _add_run(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        help="run one pinned snapshot on many boxes and report the drift",
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
    add("--ssh-config", type=Path, metavar="FILE", help="ssh_config to read (like ssh -F)")
    add("--commit", default="HEAD", metavar="REV", help="commit to run (default HEAD)")
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
    add("--baseline", metavar="LABEL", help="box to compare against (default: the first)")
    add("--json", action="store_true", help="print the drift report as JSON")
    add("--markdown", type=Path, metavar="FILE", help="also write the report as Markdown")
    add("--junit", type=Path, metavar="FILE", help="also write JUnit XML (box x gate)")
    add("--repo", type=Path, metavar="DIR", help="repository (default: git toplevel of cwd)")
    add("--run-id", metavar="ID", help="run id (default: UTC time plus 6 hex digits)")
    add(
        "--out", type=Path, metavar="DIR", help="run folders go here (default <repo>/.charpin/runs)"
    )
    add("--quiet", "-q", action="store_true", help="no progress display")
    run.set_defaults(handler=run_remote)


def _hosts_usage(args: argparse.Namespace) -> int:
    raise UsageError("charpin-remote hosts needs a subcommand: hosts check --hosts A,B")


def run_remote(args: argparse.Namespace) -> int:
    """Handle `charpin-remote run`."""
    _check_numbers(args)
    repo = _toplevel(args.repo)
    names = parse_host_list(args.hosts)
    snap = snapshot.resolve(repo, args.commit)
    _warn_local_commit(repo, names, args.commit, snap.commit)
    loaded = load_config(repo, rev=snap.commit)
    specs = resolve_hosts(
        names, ssh_config=args.ssh_config, extras=decode_host_extras(loaded.hosts)
    )
    if args.baseline is not None and args.baseline not in names:
        raise UsageError(f"--baseline {args.baseline!r} is not one of --hosts {args.hosts}")
    run_id = results.check_run_id(args.run_id) if args.run_id else results.new_run_id()
    out_dir = (args.out or repo / ".charpin" / "runs").absolute()
    if (out_dir / run_id).exists():
        raise UsageError(f"{out_dir / run_id} already exists; pick another --run-id")
    plan = RunPlan(
        run_id=run_id,
        snap=snap,
        config_table=loaded.table,
        setup=list(loaded.charpin.setup),
        timeout=args.timeout or loaded.charpin.timeout or DEFAULT_TIMEOUT,
        keep=args.keep,
        runner=runner_bundle(),
        repo_key=snapshot.repo_key(repo),
        sandbox=args.sandbox,
    )
    folders = results.safe_folders(names)
    jobs = [
        _job(spec, folders[spec.name], plan, accept_new=args.accept_new, timeout=args.timeout)
        for spec in specs
    ]
    with make_progress(names, quiet=args.quiet or args.json) as progress:
        fan = run_all(jobs, max_workers=args.jobs, phase=progress.phase)
    for outcome in fan.outcomes:
        outcome.phases = progress.seconds.get(outcome.label, {})
    # Secrets of this environment are masked before anything is written or printed (§8).
    redactor = Redactor.from_env(os.environ)
    for outcome in fan.outcomes:
        _redact_outcome(outcome, redactor)
    # Masked value by value before anything is encoded: a secret holding `"`, `|` or `<` is no
    # longer itself once JSON, Markdown or XML has escaped it.
    report = map_strings(_report(fan, baseline=args.baseline, commit=snap.commit), redactor.text)
    folder = results.write_run(
        out_dir,
        run_id,
        fan.outcomes,
        results.ReportFiles(
            drift_json=redactor.data(encode_json(report)),
            drift_md=redactor.data(render_markdown(report).encode()),
        ),
    )
    _emit(args, report, folder, redactor)
    return report.exit_code | (EXIT_NOT_EVALUATED if fan.interrupted else 0)


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


def _check_numbers(args: argparse.Namespace) -> None:
    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs} must be at least 1; e.g. --jobs 4")
    if args.timeout is not None and not 0 < args.timeout < float("inf"):
        raise UsageError(f"--timeout {args.timeout} must be a positive number of seconds")


def _toplevel(repo: Path | None) -> Path:
    where = (repo or Path.cwd()).absolute()
    done = subprocess.run(
        ["git", "-C", str(where), "rev-parse", "--show-toplevel"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise UsageError(f"{where} is not inside a git repository; pass --repo DIR")
    return Path(done.stdout.strip())


def _job(
    spec: HostSpec, folder: str, plan: RunPlan, *, accept_new: bool, timeout: float | None
) -> Job:
    extras = spec.extras
    # --timeout on the command line beats a host's configured timeout, which beats the default.
    box_timeout = timeout or extras.timeout
    env = _passed_env(extras)
    if spec.builtin and spec.name == "local":
        return Job(
            spec.name,
            folder,
            lambda phase, stop: run_local(
                spec.name, folder, plan, phase, stop, timeout=box_timeout
            ),
        )
    if spec.builtin:
        target = clean_target(
            spec.name,
            folder,
            keep=plan.keep,
            python=extras.python,
            setup=extras.setup,
            timeout=box_timeout,
            env=env,
        )
    else:
        target = BoxTarget(
            label=spec.name,
            folder=folder,
            connect=lambda: _ssh_connect(spec, accept_new),
            python=extras.python or "python3",
            setup=extras.setup,
            timeout=box_timeout,
            env=env,
        )
    return Job(spec.name, folder, lambda phase, stop: run_box(target, plan, phase, stop))


def _ssh_connect(spec: HostSpec, accept_new: bool) -> Any:
    from charpin_coordinator.remote.ssh import SshTransport  # only SSH runs pay for paramiko

    box = SshTransport(spec, accept_new=accept_new)
    try:
        box.connect()
    except BaseException:
        box.close()
        raise
    return box


def _passed_env(extras: HostExtras) -> dict[str, str]:
    """The allow-listed names (already checked not to look like secrets) that are set here."""
    return {name: os.environ[name] for name in extras.env if name in os.environ}


def _report(fan: FanOut, *, baseline: str | None, commit: str) -> DriftReport:
    receipts = [(o.label, o.receipt) for o in fan.outcomes if o.receipt is not None]
    missing = [o.not_evaluated for o in fan.outcomes if o.not_evaluated is not None]
    if baseline is not None and baseline not in {label for label, _ in receipts}:
        baseline = None  # the requested baseline was not evaluated; its NOT EVALUATED row says so
    return build_report(receipts, baseline=baseline, not_evaluated=missing, expected_commit=commit)


def _redact_outcome(outcome: BoxOutcome, redactor: Redactor) -> None:
    """Mask secrets in what one box gave back; a changed receipt is decoded again."""
    outcome.stdout = redactor.data(outcome.stdout)
    outcome.stderr = redactor.data(outcome.stderr)
    ne = outcome.not_evaluated
    if ne is not None:
        outcome.not_evaluated = NotEvaluated(
            label=ne.label, kind=ne.kind, reason=redactor.text(ne.reason)
        )
    raw = outcome.raw_receipt
    if raw is None:
        return
    # The run folder keeps the receipt with its strings masked, encoded again.
    masked = redactor.json_document(raw)
    if masked == raw:
        return
    outcome.raw_receipt = masked
    if outcome.receipt is None:
        return
    try:
        outcome.receipt = load_receipt(
            masked, source=f"{outcome.label}:receipt.json", max_bytes=MAX_RECEIPT_BYTES
        )
    except IntegrityError:
        pass  # keep the decoded original; the report built from it is masked value by value


def _emit(args: argparse.Namespace, report: DriftReport, folder: Path, redactor: Redactor) -> None:
    if args.markdown:
        _write_file(args.markdown, redactor.data(render_markdown(report).encode()))
    if args.junit:
        _write_file(args.junit, redactor.data(to_junit(report)))
    if args.json:
        sys.stdout.buffer.write(redactor.data(encode_json(report)))
    else:
        sys.stdout.write(redactor.text(render_text(report, color=sys.stdout.isatty())))
        if getattr(args, "show_folder", True):  # the demo hides a folder it is about to delete
            sys.stdout.write(f"run folder: {_shown(folder)}\n")
    sys.stdout.flush()


def _write_file(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}; pass a writable path") from exc


def _shown(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def run_hosts_check(args: argparse.Namespace) -> int:
    """Handle `charpin-remote hosts check`: one line per box and check."""
    from charpin_coordinator.remote.hostcheck import check_hosts

    names = parse_host_list(args.hosts)
    extras: Mapping[str, HostExtras] = {}
    setup: list[str] = []
    try:
        repo = _toplevel(args.repo)
    except UsageError:  # not a git checkout: use the folder as given
        repo = args.repo or Path.cwd()
    if (repo / "pyproject.toml").is_file():
        # The working tree's settings: a preflight checks boxes as you are configuring them.
        loaded = load_config(repo)
        extras = decode_host_extras(loaded.hosts)
        setup = list(loaded.charpin.setup)
    specs = resolve_hosts(names, ssh_config=args.ssh_config, extras=extras)
    bad = False
    for result in check_hosts(specs, accept_new=args.accept_new, default_setup=setup):
        for item in result.items:
            mark = "ok " if item.ok else "BAD"
            print(f"[{result.host}] {mark} {item.name}: {item.message}", flush=True)
        bad = bad or not result.ok
    return EXIT_NOT_EVALUATED if bad else 0


__all__ = ["BoxOutcome", "add_parsers"]
