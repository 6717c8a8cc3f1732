"""CLI glue for `charpin-remote verify` and `verify-bundle`. Coordinator side; prints and picks
the exit code (0 ACCEPT; REJECT sets bit 2; see verify/pipeline.py for the rest)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from charpin_runner.colors import add_color_option, paint, wanted
from charpin_runner.errors import EXIT_CLEAN, EXIT_DRIFT, UsageError

from charpin_coordinator.gitcmd import repo_root
from charpin_coordinator.history import hooks as history_hooks
from charpin_coordinator.remote.cli import add_box_options
from charpin_coordinator.remote.hosts import parse_host_list
from charpin_coordinator.verify.budget import Generate

MAX_PATCH_BYTES = 64 * 1024 * 1024
# The FILE of --markdown that means standard output.
STDOUT = Path("-")
_VERDICT_STYLE = {"ACCEPT": "green", "REJECT": "red", "INCOMPLETE": "yellow"}


def add_parsers(sub: Any) -> None:
    """Register `verify` and `verify-bundle`."""
    verify = sub.add_parser(
        "verify",
        help="judge a patch: run base and base+patch on every box and gate the difference",
        exit_codes="0 ACCEPT; bits OR-ed: 2 REJECT, 4 a box not evaluated, 8 integrity, "
        "16 INCOMPLETE; 64 usage or configuration error, 130 interrupted",
        description="Apply the patch to the base commit (never to your working tree), run both "
        "commits on every box with the base's configuration, and judge: ACCEPT (exit 0), REJECT "
        "(bit 2) or INCOMPLETE (bit 16, or 4 when a box was not evaluated).",
    )
    add = verify.add_argument
    given = verify.add_mutually_exclusive_group()
    given.add_argument(
        "--patch", metavar="FILE", help="the patch: a diff or format-patch file, - for stdin"
    )
    given.add_argument("--patched", metavar="REV", help="or the agent's branch or commit")
    given.add_argument(
        "--replay",
        metavar="CALL-ID",
        help="or repeat one finding of an earlier verify here (a call id it printed, e.g. "
        "pricing.py::discount#1, or a generated input's, gen:pricing.py::discount#1; --run-id "
        "picks the verify, default the newest that has it)",
    )
    add("--base", metavar="REV", help="the base (default: a format-patch's base-commit, else HEAD)")
    add("--hosts", default="clean", metavar="A,B", help="boxes (default clean; not local)")
    add(
        "--max-changed",
        type=int,
        default=1,
        metavar="N",
        help="functions a patch may change (default 1)",
    )
    add("--json", action="store_true", help="print the verify report as JSON")
    add(
        "--markdown",
        type=Path,
        nargs="?",
        const=STDOUT,
        metavar="FILE",
        help="also write the report as Markdown to FILE; `-` or no FILE prints it instead of "
        "the text report, as `run --markdown` and `compare --markdown` do",
    )
    add(
        "--python",
        metavar="PATH",
        default=sys.executable,
        help="--replay: the interpreter with the project's dependencies (default: this one)",
    )
    add_color_option(verify)
    add("--junit", type=Path, metavar="FILE", help="also write JUnit XML")
    add(
        "--bundle",
        type=Path,
        metavar="FILE",
        help="write the evidence bundle (patch, receipts, verdict)",
    )
    add(
        "--sign", type=Path, metavar="KEY", help="sign the bundle with this SSH key (ssh-keygen -Y)"
    )
    add(
        "--no-differential",
        dest="differential",
        action="store_false",
        help="judge Behaviour by the pins alone: no change coverage, replayed calls or "
        "generated inputs (faster; the verdict is weaker)",
    )
    add(
        "--generate",
        type=int,
        metavar="N",
        help=f"generated inputs per changed public function (default {Generate.examples}, or "
        "[tool.charpin.verify] generate; 0: none)",
    )
    add(
        "--generate-seconds",
        type=float,
        metavar="S",
        help=f"seconds of generated inputs per function (default {Generate.seconds:g}, or "
        f"[tool.charpin.verify] generate_seconds; {Generate.total_seconds:g} s for all together)",
    )
    add(
        "--reuse-base",
        action="store_true",
        help="reuse the base receipts of an earlier verify of the same base, config and boxes",
    )
    add_box_options(verify, folders="verify folders go here (default <repo>/.charpin/verify)")
    # The sandbox is part of the verdict: on Linux a box without bubblewrap is not evaluated
    # unless the reviewer asks for less (--sandbox auto or off), and the verdict then says so.
    verify.set_defaults(
        handler=run_verify, sandbox="required" if sys.platform.startswith("linux") else "auto"
    )
    check = sub.add_parser(
        "verify-bundle",
        help="re-check an evidence bundle's hashes, bindings and signature; print its verdict",
        exit_codes="0 the bundle checks (whatever its verdict), 8 refused, 64 usage or configuration error, 130 interrupted",
        description="Exit 0 when the bundle checks (its verdict is printed, whatever it is), 8 when "
        "it is refused, 64 on usage errors.",
    )
    check.add_argument("bundle", type=Path, metavar="FILE")
    check.add_argument(
        "--allowed-signers", type=Path, metavar="FILE", help="require a signature by one of these"
    )
    check.add_argument("--json", action="store_true", help="print the bundle's verify report")
    add_color_option(check)
    check.set_defaults(handler=run_verify_bundle)


def run_verify(args: argparse.Namespace) -> int:
    """Handle `charpin-remote verify`."""
    from charpin_coordinator.remote.display import make_progress
    from charpin_coordinator.remote.output import shown_path, write_file
    from charpin_coordinator.verify.pipeline import VerifyOptions, encode, verify
    from charpin_coordinator.verify.render import render_junit, render_markdown, render_text

    if args.replay:
        return _replay(args)
    if args.max_changed < 0:
        raise UsageError(f"--max-changed {args.max_changed} must be 0 or more")
    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs} must be at least 1; e.g. --jobs 4")
    if args.generate is not None and args.generate < 0:
        raise UsageError(f"--generate {args.generate} must be 0 or more; 0 turns them off")
    if args.generate_seconds is not None and not 0 < args.generate_seconds <= 3600:
        raise UsageError(
            f"--generate-seconds {args.generate_seconds:g} must be more than 0 and at most "
            "3600; e.g. --generate-seconds 2"
        )
    if args.json and args.markdown == STDOUT:
        raise UsageError(
            "--json and --markdown - would both print on stdout; write one to a file, e.g. "
            "--markdown verdict.md"
        )
    if args.sign and not args.bundle:
        raise UsageError("--sign signs the evidence bundle: pass --bundle FILE too")
    repo = repo_root(args.repo)
    names = parse_host_list(args.hosts)
    options = VerifyOptions(
        repo=repo,
        hosts=names,
        patch=_read_patch(args.patch) if args.patch else None,
        patched_rev=args.patched,
        base_rev=args.base,
        max_changed=args.max_changed,
        ssh_config=args.ssh_config,
        run_id=args.run_id,
        out_dir=args.out,
        timeout=args.timeout,
        keep=args.keep,
        accept_new=args.accept_new,
        sandbox=args.sandbox,
        jobs=args.jobs,
        reuse_base=args.reuse_base,
        differential=args.differential,
        generate_examples=args.generate,
        generate_seconds=args.generate_seconds,
    )
    history = history_hooks.locate(repo, args.history, lenient=True)
    if args.run_id:
        history_hooks.check(history, [f"{args.run_id}/base", f"{args.run_id}/patched"])
    else:
        history_hooks.check(history, [])
    with make_progress(names, quiet=args.quiet or args.json) as progress:
        result = verify(options, phase=progress.phase)
    for note in result.notes:  # --reuse-base: what was not reused, and why
        print(f"charpin-remote: note: {note}", file=sys.stderr)
    report = result.report
    if args.markdown and args.markdown != STDOUT:
        write_file(args.markdown, render_markdown(report).encode())
    if args.junit:
        write_file(args.junit, render_junit(report))
    if args.bundle:
        _bundle(args.bundle, result, args.sign)
    if args.json:
        sys.stdout.buffer.write(encode(report))
    elif args.markdown == STDOUT:
        sys.stdout.write(render_markdown(report))
        sys.stderr.write(f"verify folder: {shown_path(result.folder)}\n")
    else:
        text = render_text(report)
        if wanted(args.color, sys.stdout):
            verdict = f"· {report.verdict} ·"
            text = text.replace(verdict, paint(verdict, _VERDICT_STYLE[report.verdict], True), 1)
        sys.stdout.write(text)
        sys.stdout.write(f"verify folder: {shown_path(result.folder)}\n")
    sys.stdout.flush()
    from charpin_coordinator.remote.output import warn_disposals

    code = result.exit_code | warn_disposals([result.base_run, result.patched_run])
    return code | history_hooks.record_after(history, [result.folder], repo=repo)


def _replay(args: argparse.Namespace) -> int:
    """`verify --replay CALL-ID`: the call on both versions again, here; exit 2 when they still
    answer differently, 0 when they agree here (the finding did not reproduce)."""
    from charpin_coordinator.remote.output import shown_path
    from charpin_coordinator.verify import replaycall

    repo = repo_root(args.repo)
    verify_dir = (args.out or repo / ".charpin" / "verify").absolute()
    folder = replaycall.find_folder(verify_dir, args.replay, args.run_id)
    done = replaycall.repeat(repo, folder, args.replay, args.python, args.sandbox)
    found = done.result
    lines = [
        f"{found.id}  {found.call or found.function}",
        f"  called from  {found.test or '(unknown)'}"
        if not found.id.startswith(replaycall.GENERATED)
        else f"  input        {found.input} (a generated input)",
        f"  base         {found.base or '-'}",
        f"  patched      {found.patched or found.base or '-'}",
        f"  verdict      {found.verdict}" + (f" ({found.why})" if found.why else ""),
    ]
    if found.perturbation:
        lines.append(f"  under        {found.perturbation}")
    lines.append(f"  hash seed    {done.seed} · verify folder {shown_path(folder)}")
    if done.test:
        lines += ["", "keep the case as a test (the base's answer):", ""]
        lines += [f"    {line}" if line else "" for line in done.test.splitlines()]
    print("\n".join(lines))
    return EXIT_DRIFT if found.verdict == "differs" else EXIT_CLEAN


def run_verify_bundle(args: argparse.Namespace) -> int:
    """Handle `charpin-remote verify-bundle`: refuse (exit 8) or print the verdict (exit 0)."""
    from charpin_coordinator.verify.bundle import read_bundle

    checked = read_bundle(args.bundle, allowed_signers=args.allowed_signers)
    if args.json:
        sys.stdout.buffer.write(checked.verdict)
        return EXIT_CLEAN
    manifest = checked.manifest
    if checked.signer:
        signer = f"signed by {checked.signer}"
    elif checked.signed:
        signer = "signed (not checked: pass --allowed-signers)"
    else:
        signer = "unsigned"
    outcome = paint(
        checked.outcome,
        _VERDICT_STYLE.get(checked.outcome, "bold"),
        wanted(args.color, sys.stdout),
    )
    print(
        f"{args.bundle}: checks · {outcome}{_unconfined(checked.verdict)} · base "
        f"{str(manifest.get('base'))[:12]} · patched {str(manifest.get('patched'))[:12]} · {signer}"
    )
    return EXIT_CLEAN


def _unconfined(verdict: bytes) -> str:
    """The bundle's own word on its patched runs' sandbox (the verify report's boxes)."""
    import json

    try:
        boxes = json.loads(verdict).get("boxes", [])
    except (ValueError, AttributeError):
        return ""
    loose = [
        str(b.get("label"))
        for b in boxes
        if isinstance(b, dict) and b.get("sandbox") and b.get("sandbox") != "bwrap-confined"
    ]
    return f" (patched run NOT confined on {', '.join(loose)})" if loose else ""


def _bundle(path: Path, result: Any, sign: Path | None) -> None:
    from charpin_coordinator.verify.bundle import Evidence, write_bundle
    from charpin_coordinator.verify.pipeline import encode

    receipts: dict[str, tuple[bytes, bytes]] = {}
    # Only boxes whose two receipts were both accepted (sealed, decoded) are evidence.
    base = {o.label: o.raw_receipt for o in result.base_run.outcomes if o.receipt is not None}
    for outcome in result.patched_run.outcomes:
        before, after = base.get(outcome.label), outcome.raw_receipt
        if before is not None and after is not None and outcome.receipt is not None:
            receipts[outcome.label] = (before, after)
    evidence = Evidence(
        base=result.patched.base,
        patched=result.report.ran,  # the commit the patched receipts ran
        patch=result.patched.patch,
        receipts=receipts,
        verdict=encode(result.report),
        outcome=result.report.verdict,
    )
    write_bundle(path, evidence, sign_key=sign)


def _read_patch(value: str) -> bytes:
    if value == "-":
        data = sys.stdin.buffer.read(MAX_PATCH_BYTES + 1)
    else:
        try:
            with open(value, "rb") as handle:
                data = handle.read(MAX_PATCH_BYTES + 1)
        except OSError as exc:
            raise UsageError(
                f"cannot read --patch {value}: {exc.strerror}; pass a patch file or -"
            ) from exc
    if len(data) > MAX_PATCH_BYTES:
        raise UsageError(
            f"--patch {value} is over {MAX_PATCH_BYTES} bytes; that is not a reviewable patch"
        )
    return data


__all__ = ["add_parsers"]
