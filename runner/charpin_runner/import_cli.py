"""CLI glue for `charpin import FORMAT ...`. Runs on any box; stdlib only. May print.

Each format is read as its own tool writes it (pins/imports/), converted to charpin's format and,
for pins, replayed from disk against the unchanged program: the import reports success only when
that replay is green. Exit codes: 0 imported (green); 2 a case cannot be carried over green
(nothing written, or the pins file restored), with one line per problem on stderr; 8 the source
file is corrupt or was edited by hand (a stdin_sha256 or mutated list that does not match);
64 usage or configuration.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional

from charpin_runner import config as charpin_config
from charpin_runner.config import CharpinConfig
from charpin_runner.errors import EXIT_CLEAN, EXIT_DRIFT, CharpinError, UsageError
from charpin_runner.pins.execute import reaping
from charpin_runner.pins.imports import cram, seed000, seed001, seed002, seed003, trycmd
from charpin_runner.pins.imports.common import (
    ImportRefusedError,
    Plan,
    repo_relative,
    run_import,
    summary_lines,
)
from charpin_runner.pins.replay import jobs_for
from charpin_runner.pins.store import check_rel, write_repo_file
from charpin_runner.receipt import write_atomic

_EXIT_CODES = (
    "0 imported (replayed green), 2 a case cannot be carried over green (nothing kept), 8 "
    "a corrupt or hand-edited source, 64 usage or configuration error, 130 interrupted"
)


def add_parsers(sub: Any) -> None:
    """Register `charpin import` and one subcommand per format."""
    parser = sub.add_parser(
        "import",
        exit_codes=_EXIT_CODES,
        help="convert another harness's pins, goldens, ledger or evidence into charpin's",
        description="Read a hand-made harness's files as its tool writes them, convert them "
        "to charpin's format, and (for pins) replay them against the unchanged program: the "
        "import succeeds only when that replay is green. Exit 0 imported, 2 not green "
        "(nothing kept), 8 corrupt or hand-edited source, 64 usage.",
    )
    formats = parser.add_subparsers(dest="import_format", metavar="FORMAT")
    # What follows `--` (golden-manifest's command) reaches the handler as args.extra.
    parser.set_defaults(handler=lambda _args: _usage(parser), accepts_extra=True)

    def common(p: argparse.ArgumentParser, prefix: bool = True) -> None:
        p.add_argument("--repo", default=".", help="repository root (default: .)")
        p.add_argument("--config-json", default=None, help="resolved [tool.charpin] as JSON")
        if prefix:
            p.add_argument("--jobs", type=int, default=None, help="parallel runs (default: CPUs)")
            p.add_argument("--prefix", default="", help="put this before every imported pin id")

    p = formats.add_parser(
        "pins-jsonl",
        exit_codes=_EXIT_CODES,
        help="a pins.jsonl of recorded runs (argv, env, stdin, exit code, stdout, stderr a line), as a record_pins.py recorder writes it",
    )
    common(p)
    p.add_argument("file", help="the recorder's pins.jsonl")
    p.add_argument(
        "--target",
        default=None,
        help="the script the recorder ran (default: [tool.charpin.pins] target)",
    )
    p.set_defaults(handler=_pins_jsonl)

    p = formats.add_parser(
        "golden-manifest",
        exit_codes=_EXIT_CODES,
        help="an output-tree manifest (golden.json: returncode, stream and file sha256s), as a golden_manifest.py harness writes it",
        usage="charpin import golden-manifest FILE --id ID [--fixtures DIR] [--cwd-rel REL] "
        "-- COMMAND [ARG...]",
        description="The manifest holds hashes, not the command: give the command the harness "
        "ran (its --cmd) after --; it must write its output tree into the output folder (out/).",
    )
    common(p)
    p.add_argument("file", help="the manifest (golden.json)")
    p.add_argument("--id", dest="pin_id", required=True, help="the new pin's id")
    p.add_argument("--fixtures", default=None, help="repository folder copied as the work folder")
    p.add_argument("--cwd-rel", default=".", help="the command's folder inside the work folder")
    p.set_defaults(handler=_golden_manifest)

    p = formats.add_parser(
        "golden-matrix",
        exit_codes=_EXIT_CODES,
        help="a command-matrix harness (char_harness.py: its CASES and one golden/<case>.json each)",
    )
    common(p)
    p.add_argument("harness", help="the harness (its CASES and golden/ folder are read)")
    p.add_argument("--target", default=None, help="the program the harness runs")
    p.add_argument(
        "--work-dir",
        default=None,
        help="repository folder made to hold the harness's fixtures/ (default: "
        "<harness folder>/charpin-work)",
    )
    p.set_defaults(handler=_golden_matrix)

    p = formats.add_parser("cram", exit_codes=_EXIT_CODES, help="cram or prysk .t files")
    common(p)
    p.add_argument("files", nargs="+", help=".t files or folders holding them")
    p.add_argument("--dialect", choices=sorted(cram.DIALECTS), default="cram")
    p.add_argument("--indent", type=int, default=2, help="indentation of commands (default: 2)")
    p.set_defaults(handler=_cram)

    p = formats.add_parser(
        "trycmd", exit_codes=_EXIT_CODES, help="trycmd .toml, .trycmd and .md cases"
    )
    common(p)
    p.add_argument("files", nargs="+", help="case files")
    p.add_argument(
        "--bin",
        action="append",
        default=[],
        metavar="NAME=PROGRAM",
        help="what charpin runs for bin.name NAME (default: NAME itself, if charpin can run it)",
    )
    p.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="[NAME]=VALUE",
        help="a variable the Rust test registers with insert_var (repeatable)",
    )
    p.set_defaults(handler=_trycmd)

    p = formats.add_parser(
        "ledger",
        exit_codes=_EXIT_CODES,
        help='a flake ledger of frozen test ids ({"frozen": [...], "rule": ...})',
    )
    common(p, prefix=False)
    p.add_argument("file", help="the flake-ledger.json to convert")
    p.add_argument("--owner", required=True, help="who will unfreeze these tests")
    p.add_argument("--expires", required=True, help="YYYY-MM-DD: the entries' expiry")
    p.add_argument("--reason", default=None, help="each entry's reason (default: the rule)")
    p.add_argument("--out", default=None, help="where to write (default: [tool.charpin] ledger)")
    p.add_argument("--replace", action="store_true", help="overwrite --out, even the source")
    p.set_defaults(handler=_ledger)

    p = formats.add_parser(
        "evidence",
        exit_codes=_EXIT_CODES,
        help="test-run evidence manifests (.evidence/run-*.json), converted to receipts",
    )
    common(p, prefix=False)
    p.add_argument("files", nargs="+", help="evidence manifests")
    p.add_argument("--label", default=None, help="the box label (one file only; default: stem)")
    p.add_argument(
        "--out-dir", default=".charpin/imported", help="where receipts go (default: %(default)s)"
    )
    p.set_defaults(handler=_evidence)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    raise UsageError(
        "charpin import: choose a format: pins-jsonl, golden-manifest, golden-matrix, cram, "
        "trycmd, ledger or evidence"
    )


def _load(args: argparse.Namespace) -> tuple[Path, CharpinConfig]:
    repo = Path(args.repo).resolve()
    if not repo.is_dir():
        raise UsageError(f"--repo {args.repo} is not a folder; pass the repository root")
    if args.config_json:
        return repo, charpin_config.load_json(Path(args.config_json))
    return repo, charpin_config.load(repo)


def _path(repo: Path, given: str) -> Path:
    """A path given on the command line, relative to the current folder."""
    path = Path(given)
    if not path.exists():
        raise UsageError(f"{given} does not exist")
    return path.resolve()


def _no_extra(args: argparse.Namespace) -> None:
    if args.extra:
        raise UsageError(f"unexpected arguments after --: {' '.join(args.extra)}")


def _run(args: argparse.Namespace, repo: Path, cfg: CharpinConfig, plan: Plan) -> int:
    try:
        with reaping():
            result = run_import(repo, cfg.pins, plan, jobs_for(cfg.pins, args.jobs))
    except ImportRefusedError as exc:
        for line in exc.lines:
            print(line, file=sys.stderr)
        raise
    for line in result.warnings:
        print(f"warning: {line}", file=sys.stderr)
    for line in summary_lines(result):
        print(line)
    if result.refused:
        # One file per shell session (cram): the good ones are written, each bad one said.
        for line in result.refused:
            print(line, file=sys.stderr)
        sources = sum(1 for line in result.refused if not line.startswith(" "))
        print(
            f"charpin: error: {result.fmt}: {sources} file(s) not imported (above); the "
            f"{len(result.imported)} others are written and replay green",
            file=sys.stderr,
        )
        return EXIT_DRIFT
    return EXIT_CLEAN


def _target(given: Optional[str], cfg: CharpinConfig, what: str) -> str:
    target = given or cfg.pins.target
    if not target:
        raise UsageError(
            f"{what} does not name the program it ran; pass --target FILE or set "
            "[tool.charpin.pins] target"
        )
    return target


def _pins_jsonl(args: argparse.Namespace) -> int:
    _no_extra(args)
    repo, cfg = _load(args)
    source = _path(repo, args.file)
    label = repo_relative(repo, source, "pins file")
    target = _target(args.target, cfg, f"the recorded runs of {label}")
    replace = source == (repo / cfg.pins.file).resolve()
    plan = seed000.plan(source, label, target, replace, args.prefix)
    return _run(args, repo, cfg, plan)


def _golden_manifest(args: argparse.Namespace) -> int:
    repo, cfg = _load(args)
    source = _path(repo, args.file)
    label = repo_relative(repo, source, "manifest")
    if not args.extra:
        raise UsageError(
            "the manifest does not hold the command; give it after --, e.g. "
            "-- python report_gen.py --in input --out out"
        )
    fixtures = None
    if args.fixtures is not None:
        fixtures = repo_relative(repo, _path(repo, args.fixtures), "--fixtures")
    try:
        cwd_rel = check_rel(args.cwd_rel, "--cwd-rel")
    except CharpinError as exc:
        raise UsageError(str(exc)) from None
    plan = seed001.plan(
        source,
        label,
        args.prefix + args.pin_id,
        list(args.extra),
        fixtures,
        cwd_rel,
        cfg.pins.output,
    )
    return _run(args, repo, cfg, plan)


def _golden_matrix(args: argparse.Namespace) -> int:
    _no_extra(args)
    repo, cfg = _load(args)
    harness = _path(repo, args.harness)
    repo_relative(repo, harness, "harness")
    target = _target(args.target, cfg, "the command-matrix harness")
    work = Path(args.work_dir).resolve() if args.work_dir else harness.parent / "charpin-work"
    repo_relative(repo, work, "--work-dir")
    plan = seed002.plan(repo, harness, target, work, cfg.pins.output, args.prefix)
    return _run(args, repo, cfg, plan)


def _expand(repo: Path, given: list[str], suffixes: tuple[str, ...]) -> list[Path]:
    """Files as given; a folder stands for its matching files (hidden ones skipped, sorted)."""
    out: list[Path] = []
    for item in given:
        path = _path(repo, item)
        if path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and p.suffix in suffixes
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            out.extend(found)
        else:
            out.append(path)
    return list(dict.fromkeys(out))


def _cram(args: argparse.Namespace) -> int:
    _no_extra(args)
    repo, cfg = _load(args)
    if args.indent < 1:
        raise UsageError("--indent must be at least 1")
    files = _expand(repo, args.files, (".t",))
    plan = cram.plan(repo, cfg.pins, files, args.dialect, args.indent, args.prefix)
    return _run(args, repo, cfg, plan)


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} {item!r} is not NAME=VALUE")
        out[key] = value
    return out


def _trycmd(args: argparse.Namespace) -> int:
    _no_extra(args)
    repo, cfg = _load(args)
    variables = _pairs(args.var, "--var")
    for name in variables:
        inner = name[1:-1]
        if not (name.startswith("[") and name.endswith("]") and inner) or not all(
            c.isupper() or c == "_" for c in inner
        ):
            raise UsageError(f"--var {name!r}: a trycmd variable is [A-Z_]+ in brackets")
    files = _expand(repo, args.files, (".toml", ".trycmd", ".md"))
    plan = trycmd.plan(repo, cfg.pins, files, _pairs(args.bin, "--bin"), variables, args.prefix)
    return _run(args, repo, cfg, plan)


def _ledger(args: argparse.Namespace) -> int:
    _no_extra(args)
    repo, cfg = _load(args)
    source = _path(repo, args.file)
    label = repo_relative(repo, source, "ledger")
    out = (Path(args.out) if args.out else repo / cfg.ledger).resolve()
    out_label = repo_relative(repo, out, "--out")
    if out.exists() and not args.replace:
        same = " (the seed's own ledger: its conftest stops working)" if out == source else ""
        raise UsageError(
            f"{out_label} exists{same}; pass --replace to overwrite it, or --out PATH and set "
            "[tool.charpin] ledger to that path"
        )
    data, ledger = seed003.convert_ledger(source, label, args.owner, args.expires, args.reason)
    write_repo_file(out, data)
    for line in seed003.LEDGER_KEPT:
        print(f"kept: {line}")
    for line in seed003.LEDGER_LOST:
        print(f"not carried over: {line}")
    print(
        f"{seed003.LEDGER_FORMAT}: {len(ledger.entries)} entr(y/ies) written to {out_label} "
        f"(sha256 {ledger.sha256[:12]}), read back by charpin's ledger loader"
    )
    return EXIT_CLEAN


def _evidence(args: argparse.Namespace) -> int:
    _no_extra(args)
    repo, _cfg = _load(args)
    if args.label and len(args.files) > 1:
        raise UsageError("--label names one box: give one manifest with it")
    out_dir = Path(args.out_dir)
    if not out_dir.is_absolute():
        out_dir = repo / out_dir
    written = []
    for given in args.files:
        source = _path(repo, given)
        receipt = seed003.evidence_receipt(source, given, args.label)
        safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in receipt.label)
        target = out_dir / f"{receipt.run_id}.{safe}.receipt.json"
        try:
            write_atomic(target, seed003.receipt_bytes(receipt))
        except FileExistsError:
            raise UsageError(f"{target} exists; receipts are never overwritten") from None
        written.append(target)
        print(f"wrote {target} (box {receipt.label})")
    for line in seed003.EVIDENCE_KEPT:
        print(f"kept: {line}")
    for line in seed003.EVIDENCE_LOST:
        print(f"not carried over: {line}")
    shown = " ".join(str(p) for p in written)
    print(
        f"{seed003.EVIDENCE_FORMAT}: {len(written)} receipt(s); compare them with "
        f"`charpin-remote compare {shown}` (gates needing what they lack are INCOMPLETE)"
    )
    return EXIT_CLEAN
