"""CLI glue for `charpin pins record|check|cover|migrate`. Runs on any box; stdlib only. May print.

Exit codes: check 0 green, 2 drift (or --prove found a blind spot), 64 usage or configuration
(no pins), 8 a corrupt pins file. record 0 written, 2 an unstable pin was refused, 64 refused to
overwrite a golden without --update, --update while CI is set, an unknown id, or no pins at all.
cover 0, 64 without coverage.py or for a --file/--entry that is not a repository file.
record also exits 2 for a crash the pin does not expect (crash.py). migrate 0, 64 for an unknown
or already migrated folder name, 8 for an unreadable golden.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from charpin_runner import config as charpin_config
from charpin_runner import owndir, sandbox
from charpin_runner.colors import add_color_option, paint, wanted
from charpin_runner.config import PinsConfig
from charpin_runner.errors import (
    EXIT_CLEAN,
    EXIT_DRIFT,
    CharpinError,
    ConfigError,
    UsageError,
)
from charpin_runner.pins import compare as cmp
from charpin_runner.pins.crash import (
    crashed_goldens,
    pythonpath_rels,
    unexpected_crashes,
    with_crash_flags,
)
from charpin_runner.pins.detail import describe_pin
from charpin_runner.pins.execute import Session, reaping
from charpin_runner.pins.model import Case, Pin, check_id
from charpin_runner.pins.prove import prove, weak_pins
from charpin_runner.pins.record import Recorded, changes, record_pins, save_recordings
from charpin_runner.pins.replay import (
    Outcome,
    jobs_for,
    replay,
    unexplained_note,
    write_actual,
)
from charpin_runner.pins.store import (
    CASE_FORMAT,
    PinSet,
    check_rel,
    load_pins,
    migrate_folders,
    program_name,
    require_pins,
    save_case_folder,
    target_words,
)

_ALL = "*"


def add_parsers(sub: Any) -> None:
    """Register `charpin pins` with its record, check, cover and migrate subcommands."""
    parser = sub.add_parser(
        "pins",
        exit_codes=(
            "0 green or done, 2 drift or a refused pin, 8 a corrupt pins file or golden "
            "(each subcommand's --help says which), 64 usage or configuration error, "
            "130 interrupted"
        ),
        help="record, replay and cover characterization pins",
    )
    pins_sub = parser.add_subparsers(dest="pins_command", metavar="SUBCOMMAND")
    parser.set_defaults(handler=lambda _args: _usage(parser))

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--repo", default=".", help="repository root (default: .)")
        p.add_argument("--jobs", type=int, default=None, help="parallel pins (default: CPUs)")
        p.add_argument("--config-json", default=None, help="resolved [tool.charpin] as JSON")
        p.add_argument(
            "--sandbox",
            default="auto",
            choices=sandbox.MODES,
            help="run each pin target under bubblewrap in the allow-list view (the code under "
            "test sees no home folder, keys or other repositories): auto (when bwrap works "
            "here; the default), required, off",
        )

    rec = pins_sub.add_parser(
        "record",
        exit_codes=(
            "0 written, 2 an unstable pin or a crash the pin does not expect was refused, "
            "64 usage or configuration error, 130 interrupted (a golden kept without "
            "--update, --update under CI, an unknown id, no pins)"
        ),
        help="run the current program as the oracle, write pins",
    )
    common(rec)
    rec.add_argument(
        "--update",
        nargs="?",
        const=_ALL,
        action="append",
        metavar="ID",
        help="re-record existing goldens (all, or the pin ID; repeatable); refused when CI is set",
    )
    rec.add_argument(
        "--id", dest="pin_id", help="add a new pins.jsonl pin (a case folder with --folder)"
    )
    rec.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="env of the new pin"
    )
    rec.add_argument("--stdin", default=None, metavar="FILE", help="stdin of the new pin")
    rec.add_argument("--cwd-rel", default=".", help="cwd of the new pin, inside its work folder")
    rec.add_argument("--fixtures", default=None, help="repo folder copied as the work folder")
    rec.add_argument(
        "--folder",
        action="store_true",
        help="write the new pin as a case folder <cases>/<id>/ (argv.json: the program's name, "
        "then its arguments) instead of a pins.jsonl line",
    )
    rec.add_argument(
        "--expect-crash",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the pin of --id or --update ID records a crash on purpose (an uncaught exception "
        "or a signal), which record otherwise refuses; --no-expect-crash takes that back",
    )
    rec.add_argument(
        "--crash-frames",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --expect-crash: compare the traceback's frames (files, line numbers) too; by "
        "default a crash pin compares what the caller sees (exception, message, exit code)",
    )
    rec.add_argument(
        "command", nargs="*", help="after --: the script (*.py) or command and its args"
    )
    rec.set_defaults(handler=_record)

    mig = pins_sub.add_parser(
        "migrate",
        exit_codes=(
            "0 migrated (or nothing to do), 8 an unreadable golden, 64 usage or "
            "configuration error, 130 interrupted (an unknown or already migrated folder)"
        ),
        help="rewrite case folders whose argv.json holds only the arguments (older charpin) "
        "as whole process vectors",
    )
    mig.add_argument("--repo", default=".", help="repository root (default: .)")
    mig.add_argument("--config-json", default=None, help="resolved [tool.charpin] as JSON")
    mig.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="these case folders (default: every folder whose golden an older charpin recorded)",
    )
    mig.set_defaults(handler=_migrate)

    chk = pins_sub.add_parser(
        "check",
        exit_codes=(
            "0 green, 2 drift (or --prove found a blind spot), 8 a corrupt pins file, 64 "
            "usage or configuration error, 130 interrupted (no pins)"
        ),
        help="replay every pin; exit 0 green, 2 drift",
    )
    common(chk)
    chk.add_argument("--prove", action="store_true", help="also prove the comparator can fail")
    chk.add_argument(
        "--json",
        action="store_true",
        help="print each pin's result as JSON on stdout (the human report goes to stderr)",
    )
    add_color_option(chk)
    chk.add_argument(
        "--id", dest="ids", action="append", default=[], help="only this pin (repeatable)"
    )
    chk.set_defaults(handler=_check)

    cov = pins_sub.add_parser(
        "cover",
        exit_codes=(
            "0 reported, 64 usage or configuration error, 130 interrupted (no coverage.py, "
            "a --file or --entry that is not a repository file)"
        ),
        help="per repository module: lines and branches the pins run, and which pins",
    )
    common(cov)
    cov.add_argument(
        "--entry",
        action="append",
        default=[],
        metavar="FILE",
        help="also report this repo-relative Python file (repeatable)",
    )
    cov.add_argument(
        "--pins-only",
        action="store_true",
        help="report only the pins' own targets, not every entry point of `charpin inventory`",
    )
    cov.add_argument(
        "--full", action="store_true", help="list every line and branch no pin ran (no cap)"
    )
    cov.add_argument(
        "--file",
        dest="files",
        action="append",
        default=[],
        metavar="PATH",
        help="report only this repo-relative module, every line of it (repeatable)",
    )
    cov.set_defaults(handler=_cover)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    raise UsageError("charpin pins: choose a subcommand: record, check, cover or migrate")


def _load(args: argparse.Namespace) -> tuple[Path, PinsConfig]:
    repo = Path(args.repo).resolve()
    if not repo.is_dir():
        raise UsageError(f"--repo {args.repo} is not a folder; pass the repository root")
    if args.config_json:
        cfg = charpin_config.load_json(Path(args.config_json))
    else:
        cfg = charpin_config.load(repo)
    return repo, cfg.pins


def _check(args: argparse.Namespace) -> int:
    if not args.json:
        return _check_report(args)[0]
    # The JSON is the only thing on stdout; what a person reads goes to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        status, outcomes = _check_report(args)
    doc = {
        "exit_code": status,
        "passed": sum(1 for o in outcomes if not o.classes),
        "drifted": sum(1 for o in outcomes if o.classes),
        "pins": [
            {
                "id": o.pin.case.id,
                "status": "drifted" if o.classes else "passed",
                "failure_class": o.failure_class if o.classes else None,
                "classes": list(o.classes),
            }
            for o in outcomes
        ],
    }
    print(json.dumps(doc, indent=2))
    return status


def _check_report(args: argparse.Namespace) -> tuple[int, list[Outcome]]:
    repo, config = _load(args)
    color = wanted(args.color, sys.stdout)
    pin_set = load_pins(repo, config)
    require_pins(pin_set, config)
    pins = pin_set.all
    if args.ids:
        known = {p.case.id for p in pins}
        unknown = sorted(set(args.ids) - known)
        if unknown:
            raise UsageError(f"unknown pin id {', '.join(unknown)}; see the ids in {config.file}")
        pins = [p for p in pins if p.case.id in set(args.ids)]
    actual_root = _actual_root(repo, config)
    notes: list[str] = []
    with reaping(), Session(repo, config) as session:
        session.wrap = sandbox.for_pins(repo, session.python, args.sandbox)
        outcomes = replay(session, pins, jobs_for(config, args.jobs), notes=notes)
    crashes = _crashes(repo, outcomes, pythonpath_rels(repo, session.pythonpath))
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    for crash_note in crashes:
        if not (args.prove and crash_note.blind):  # --prove reports those itself
            print(f"warning: {crash_note.text}", file=sys.stderr)
    failed = [o for o in outcomes if o.classes]
    for outcome in failed:
        _report_failure(outcome, write_actual(actual_root, outcome), repo, config, color)
    for outcome in outcomes:
        golden = outcome.pin.golden
        fewer = [] if golden is None else cmp.fewer_env_reads(golden, outcome.run.observation)
        if fewer and not outcome.classes:
            print(
                f"note: pin {outcome.pin.case.id} no longer reads env {', '.join(fewer)} (no new "
                f"input, not drift); `charpin pins record --update {outcome.pin.case.id}` "
                "records the narrower set"
            )
    passed = len(outcomes) - len(failed)
    drifted = paint(f"{len(failed)} drifted", "red", color) if failed else "0 drifted"
    print(f"pins: {passed} passed, {drifted}, of {len(outcomes)}")
    status = EXIT_DRIFT if failed else EXIT_CLEAN
    if args.prove:
        status |= _prove(outcomes, pins)
        status |= _prove_not_crashes(crashes)
    return status, outcomes


@dataclass(frozen=True)
class _CrashNote:
    """A golden that records a crash (crash.py): the warning, and whether `--prove` fails on it
    (green, and an import crash of the repository's own code, or a crash the pin does not
    expect: kind "import" or "unexpected")."""

    text: str
    blind: bool
    kind: str = "import"


def _crashes(repo: Path, outcomes: list[Outcome], pythonpath: list[str]) -> list[_CrashNote]:
    green = {o.pin.case.id for o in outcomes if not o.classes}
    found = []
    for pin, crash in crashed_goldens(repo, [o.pin for o in outcomes]):
        pin_id = pin.case.id
        update = f"`charpin pins record --update {pin_id}`"
        if pin_id in green:
            text = f"{crash.message(pin_id, pythonpath)}; then {update}"
            found.append(_CrashNote(text, blind=crash.root is not None))
        else:
            text = (
                f"pin {pin_id}'s golden is a crash, not the program ({crash.line!r}), and it no "
                f"longer replays that way; check the new output, then {update}"
            )
            found.append(_CrashNote(text, blind=False))
    for pin, fatal in unexpected_crashes(repo, [o.pin for o in outcomes]):
        pin_id = pin.case.id
        head = f"pin {pin_id}'s golden records a crash the pin does not expect (it {fatal.what})"
        if pin_id in green:
            text = (
                f"{head}; if that crash is the behaviour to pin, `charpin pins record --update "
                f"{pin_id} --expect-crash`, else fix it and `charpin pins record --update {pin_id}`"
            )
        else:
            text = (
                f"{head}, and it no longer replays that way; check the new output, then "
                f"`charpin pins record --update {pin_id}`"
            )
        found.append(_CrashNote(text, blind=pin_id in green, kind="unexpected"))
    return found


def _prove_not_crashes(crashes: list[_CrashNote]) -> int:
    """A green golden of the repository's own code failing to import proves nothing, and one of
    a crash nobody said was expected is not a proven behaviour: fail on both."""
    status = EXIT_CLEAN
    for kind, what in (
        ("import", "an import crash, not the program"),
        ("unexpected", "a crash the pin does not expect (no expect_crash)"),
    ):
        blind = [note.text for note in crashes if note.blind and note.kind == kind]
        for text in blind:
            print(f"prove: {text}")
        if blind:
            print(f"prove: FAILED, {len(blind)} golden(s) record {what}")
            status = EXIT_DRIFT
    return status


_MARKER = ".charpin-pins-actual"


def _actual_root(repo: Path, config: PinsConfig) -> Path:
    """The folder for failing pins' outputs, emptied first; refuse to empty anything else."""
    rel = Path(config.actual_dir)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts or rel.parts[0] in (".", ""):
        raise ConfigError(
            f"[tool.charpin.pins] actual_dir {config.actual_dir!r} must be a relative folder "
            "inside the repository, e.g. '.charpin/pins-actual'"
        )
    root = repo / rel
    if root.exists():
        if not (root / _MARKER).is_file() and any(root.iterdir()):
            raise ConfigError(
                f"{config.actual_dir} exists and was not made by charpin; "
                "remove it or point [tool.charpin.pins] actual_dir elsewhere"
            )
        shutil.rmtree(root)
    owndir.ensure_folder(repo, root)
    (root / _MARKER).write_text("made by charpin pins check; emptied on every run\n")
    return root


def _prove(outcomes: list[Outcome], pins: list[Pin]) -> int:
    for warning in weak_pins(pins):
        print(f"warning: {warning}", file=sys.stderr)
    problems = prove(outcomes)
    for problem in problems:
        print(f"prove: {problem}")
    checked = sum(1 for o in outcomes if not o.classes)
    if problems:
        print(f"prove: FAILED, the comparator missed {len(problems)} perturbation(s)")
        return EXIT_DRIFT
    print(f"prove: every perturbation of {checked} green pin(s) was caught")
    return EXIT_CLEAN


def _report_failure(
    outcome: Outcome, folder: Path, repo: Path, config: PinsConfig, color: bool = False
) -> None:
    case = outcome.pin.case
    print(
        f"{paint('DRIFT', 'red', color)} {case.id} [{outcome.failure_class}]  classes: {', '.join(outcome.classes)}"
    )
    print(f"  argv: {list(case.argv)}  cwd: $WORK/{case.cwd_rel}  env: {sorted(case.env)}")
    run = outcome.run
    if run.error:
        print(f"  error: {run.error}")
    if outcome.pin.golden is None:
        print("  no golden yet: run `charpin pins record`")
    if run.timed_out:
        print(f"  timed out after {config.timeout}s")
    if run.limit is not None:
        print(f"  output limit: {run.limit}")
    # A killed run's sandbox is partial and not judged, but files it left in the repository
    # are still named: the user has to clean them up either way.
    judged = run.error is None and not run.timed_out and run.limit is None
    _report_outside([p for p in run.outside_writes if judged or p.startswith("$REPO/")], config)
    if outcome.pin.golden is not None and judged:
        for line in describe_pin(
            outcome.pin, outcome.pin.golden, run.observation, config.diff_lines
        ):
            print(f"  {line}")
    try:
        shown = folder.relative_to(repo).as_posix()
    except ValueError:
        shown = str(folder)
    print(f"  actual outputs: {shown}/")


def _report_outside(paths: list[str], config: PinsConfig) -> None:
    in_repo = [p[len("$REPO/") :] for p in paths if p.startswith("$REPO/")]
    for path in paths:
        if not path.startswith("$REPO/"):
            print(f"  wrote outside {config.output}/: {path}")
    for path in in_repo:
        print(f"  wrote into the repository: {path}")
    if in_repo:
        # Nothing in the user's tree is restored behind their back; say what to clean up.
        print("  (charpin left these repository files as they are; check and remove them)")


def _parse_env(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--env {item!r} is not KEY=VALUE; write it as KEY=VALUE")
        env[key] = value
    return env


def _new_case(args: argparse.Namespace, config: PinsConfig) -> Optional[Case]:
    if args.pin_id is None:
        if args.command:
            raise UsageError("a command needs --id NAME to name the new pin")
        return None
    if not args.command:
        raise UsageError(f"--id {args.pin_id} needs the command after --, e.g. -- app.py --flag")
    stdin = b""
    if args.stdin is not None:
        try:
            stdin = Path(args.stdin).read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read --stdin {args.stdin}: {exc.strerror}") from None
    try:
        cwd_rel = check_rel(args.cwd_rel, "--cwd-rel")
        fixtures = None if args.fixtures is None else check_rel(args.fixtures, "--fixtures")
        pin_id = check_id(args.pin_id, "--id")
    except CharpinError as exc:
        raise UsageError(str(exc)) from None
    case = Case(
        id=pin_id,
        argv=tuple(args.command),
        env=_parse_env(args.env),
        stdin=stdin,
        cwd_rel=cwd_rel,
        fixtures=fixtures,
        origin=config.file,
    )
    if not args.folder:
        return case
    if cwd_rel != ".":
        raise UsageError("--cwd-rel is not for --folder: a case folder runs in its work/")
    # The recipe's layout: argv.json is the process vector, the target's name first.
    name = program_name(case.argv[: target_words(case.argv)])
    origin = f"{config.cases.rstrip('/')}/{pin_id}"
    if fixtures is None and (Path(args.repo) / origin / "work").is_dir():
        fixtures = f"{origin}/work"  # re-recording a folder: its own work/ stays its cwd
    return dataclasses.replace(case, origin=origin, argv0=name, fixtures=fixtures)


def _select(args: argparse.Namespace, pin_set: PinSet, new: Optional[Case]) -> list[Pin]:
    """Pins to record: pending ones, plus those named by --update; refuse silent overwrites."""
    updates: list[str] = args.update or []
    if updates and os.environ.get("CI"):
        raise UsageError(
            "refusing --update while CI is set; re-record pins locally and commit them"
        )
    existing = {p.case.id: p for p in pin_set.all}
    for pin_id in updates:
        if pin_id != _ALL and pin_id not in existing:
            raise UsageError(
                f"--update {pin_id}: no such pin; see the ids in {pin_set.jsonl_path.name}"
            )
    wanted = [p for p in pin_set.all if p.golden is None]
    if new is not None:
        old = existing.get(new.id)
        if (
            old is not None
            and old.golden is not None
            and new.id not in updates
            and _ALL not in updates
        ):
            raise UsageError(
                f"pin {new.id} already has a golden; pass --update {new.id} to replace it"
            )
        if old is not None and (old in pin_set.folders) != bool(args.folder):
            kind = "a case folder" if old in pin_set.folders else "a pins.jsonl pin"
            raise UsageError(f"pin {new.id} is {kind} ({old.case.origin}); pick another id")
        wanted = [p for p in wanted if p.case.id != new.id]
        wanted.append(Pin(new, old.golden if old else None))
    for pin in pin_set.all:
        if pin.golden is not None and (_ALL in updates or pin.case.id in updates):
            if new is None or pin.case.id != new.id:
                wanted.append(pin)
    return wanted


def _expecting(args: argparse.Namespace, wanted: list[Pin], new: Optional[Case]) -> list[Pin]:
    """--expect-crash / --no-expect-crash on the pins it names: --id's, or --update ID's."""
    flag: Optional[bool] = args.expect_crash
    frames: Optional[bool] = args.crash_frames
    if flag is None and frames is None:
        return wanted
    named = {u for u in args.update or [] if u != _ALL} | ({new.id} if new is not None else set())
    if not named:
        option = "--expect-crash" if flag is not None else "--crash-frames"
        raise UsageError(
            f"{option} is said of one pin: name it with --id NAME (a new pin) or "
            "--update ID (a recorded or pending one)"
        )
    return with_crash_flags(wanted, named, flag, frames)


def _record(args: argparse.Namespace) -> int:
    repo, config = _load(args)
    pin_set = load_pins(repo, config)
    new = _new_case(args, config)
    wanted = _expecting(args, _select(args, pin_set, new), new)
    if not wanted:
        require_pins(pin_set, config)
        print("pins: nothing to record (every pin has a golden; use --update [ID] to re-record)")
        return EXIT_CLEAN

    def say(pin: Pin, recorded: Recorded) -> None:
        _say_recorded(pin, recorded, config.diff_lines)

    with reaping(), Session(repo, config) as session:
        session.wrap = sandbox.for_pins(repo, session.python, args.sandbox)
        batch = record_pins(session, wanted, jobs_for(config, args.jobs), say)
    if batch.unexplained:
        print(f"warning: {unexplained_note(batch.unexplained)}", file=sys.stderr)
    if new is not None and args.folder:
        got = batch.recorded.pop(new.id, None)
        if got is not None:
            save_case_folder(repo, config, got.case, got.observation)
        save_recordings(pin_set, None, batch.recorded)
    else:
        save_recordings(pin_set, new, batch.recorded)
    for reason in batch.refused:
        print(f"refused: {reason}", file=sys.stderr)
    return EXIT_DRIFT if batch.refused else EXIT_CLEAN


def _say_recorded(pin: Pin, recorded: Recorded, cap: int) -> None:
    if pin.golden is None:
        print(f"recorded {pin.case.id}")
    elif what := changes(pin.golden, recorded.observation):
        # The categories, then the old golden against the new one (capped like check's diffs).
        print(f"updated {pin.case.id}: {', '.join(what)}")
        for line in cmp.describe(pin.golden, recorded.observation, cap):
            print(f"  {line}")
    else:
        print(f"{pin.case.id}: unchanged (the golden already matches)")
    if recorded.warning is not None:
        print(f"warning: {recorded.warning}", file=sys.stderr)


def _migrate(args: argparse.Namespace) -> int:
    """`charpin pins migrate [NAME...]`: case folders of the arguments-only layout, rewritten."""
    repo, config = _load(args)
    done, notes = migrate_folders(repo, config, list(args.names))
    for item in done:
        marked = f"; {item.golden} marked case_format {CASE_FORMAT}" if item.golden else ""
        before, after = (json.dumps(x, ensure_ascii=False) for x in (item.before, item.after))
        print(f"migrated {item.label}: argv.json {before} -> {after}{marked}")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if not done:
        print(
            "pins migrate: nothing to migrate (no case folder has a golden recorded in the "
            "arguments-only layout; name a folder without one to rewrite it)"
        )
        return EXIT_CLEAN
    print(
        f"pins migrate: {len(done)} case folder(s) rewritten as whole process vectors; each "
        "program keeps the name it ran under ($REPO/ is the checkout), so `charpin pins check` "
        "replays them as before"
    )
    return EXIT_CLEAN


def _cover(args: argparse.Namespace) -> int:
    from charpin_runner.pins.cover import cover, render

    repo, config = _load(args)
    pin_set = load_pins(repo, config)
    require_pins(pin_set, config)
    only = [_module_path(repo, path) for path in args.files]
    entries = list(args.entry) + only
    if not args.pins_only:
        entries += _inventoried_files(repo)
    with reaping(), Session(repo, config) as session:
        session.wrap = sandbox.for_pins(repo, session.python, args.sandbox)
        report = cover(session, pin_set.all, jobs_for(config, args.jobs), sorted(set(entries)))
    if only:
        report = [entry for entry in report if entry.path in only]
    for line in render(report, full=args.full or bool(only)):
        print(line)
    return EXIT_CLEAN


def _module_path(repo: Path, given: str) -> str:
    """A --file PATH as the report names it (relative to the repository, normalised)."""
    path = Path(given) if os.path.isabs(given) else repo / given
    try:
        rel = path.resolve().relative_to(repo).as_posix()
    except ValueError:
        rel = ""
    if not rel or not (repo / rel).is_file():
        raise UsageError(f"--file {given} is not a file in the repository; fix the path")
    return rel


def _inventoried_files(repo: Path) -> list[str]:
    """The Python files of the entry points `charpin inventory` finds, pinned or not."""
    from charpin_runner.inventory.build import build_inventory

    try:
        config = charpin_config.load(repo)
    except CharpinError:  # the pins' own targets are still covered; inventory is a bonus here
        config = charpin_config.CharpinConfig()
    files = []
    for entry in build_inventory(repo, config).entries:
        rel = entry.source or entry.file
        if rel.endswith(".py") and (repo / rel).is_file():
            files.append(rel)
    return files
