"""Coordinator side. `verify` as one call: the patch made a commit, both commits run on every box,
the gates judged, the verify folder written.

    patch or --patched REV ─▶ Patched(base, patched)          (verify/patch.py)
    [tool.charpin] of base ─▶ protected paths ─▶ the commit that runs: patched, with every
        protected path exactly as on base (nothing in the patch changes what gates it)
    static analyses of base and patched                      (verify/static.py)
    remote.run: base on every box, then that commit, both with base's config
    verify/gates.py ─▶ VerifyReport ─▶ .charpin/verify/<id>/ (base/, patched/, verify.json)

Prints nothing; the CLI (verify/cli.py) and the demo show the VerifyResult.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import msgspec
from charpin_runner.config import CharpinConfig, VerifyConfig
from charpin_runner.errors import (
    EXIT_DRIFT,
    EXIT_INTEGRITY,
    EXIT_NOT_EVALUATED,
    EXIT_VACUOUS,
    ConfigError,
    IntegrityError,
    UsageError,
)
from charpin_runner.receipt import write_atomic
from charpin_runner.runid import check_run_id, new_run_id

from charpin_coordinator.config import load_config
from charpin_coordinator.gitcmd import git_bytes
from charpin_coordinator.remote.boxrun import Phase
from charpin_coordinator.remote.run import Options, RunResult, plan, run
from charpin_coordinator.report import NotEvaluated
from charpin_coordinator.verify import evidence, gates, judged, patch, reuse, static, testside
from charpin_coordinator.verify.budget import Generate
from charpin_coordinator.verify.report import (
    VERIFY_REPORT_VERSION,
    WHOLE_PATCH,
    BoxVerdict,
    Evidence,
    Observation,
    TestSideSummary,
    VerifyGate,
    VerifyReport,
)

DEFAULT_HOSTS = "clean"
NO_DIFFERENTIAL = (
    "--no-differential: no change coverage, replayed calls or generated inputs; "
    "Behaviour is judged by the pins alone"
)
# Bits of the verdict in the exit code (design §6): REJECT is "a gate blocked".
_REFUSED = ("receipt-refused", "snapshot-integrity")


@dataclass(frozen=True)
class VerifyOptions:
    """What the reviewer asked for."""

    repo: Path
    hosts: Sequence[str] = (DEFAULT_HOSTS,)
    patch: bytes | None = None  # the patch's bytes (--patch FILE or -)
    patched_rev: str | None = None  # or an agent's branch or commit (--patched REV)
    base_rev: str | None = None
    max_changed: int = 1
    ssh_config: Path | None = None
    run_id: str | None = None
    out_dir: Path | None = None  # default <repo>/.charpin/verify
    timeout: float | None = None
    keep: bool = False
    accept_new: bool = False
    sandbox: str = "auto"
    jobs: int = 4
    # Take the base receipts from an earlier verify of the same base, config and boxes.
    reuse_base: bool = False
    # Behaviour beyond the asserts (#19): change coverage, replayed calls, generated inputs
    # (--no-differential turns all three off). The generated inputs' budget: --generate N,
    # --generate-seconds S (None: the base's [tool.charpin.verify], else the defaults).
    differential: bool = True
    generate_examples: int | None = None
    generate_seconds: float | None = None


@dataclass(frozen=True)
class VerifyResult:
    """What one verify produced; its folder is written."""

    report: VerifyReport
    patched: patch.Patched
    base_run: RunResult
    patched_run: RunResult
    folder: Path
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)
    own_run: RunResult | None = None  # the patch's own new or edited tests, when it has any

    @property
    def exit_code(self) -> int:
        return self.report.exit_code | (EXIT_NOT_EVALUATED if self.interrupted else 0)


def verify(options: VerifyOptions, *, phase: Phase | None = None) -> VerifyResult:
    """Make the patched commit, run base and patched on every box, judge, write the folder."""
    if "local" in options.hosts:
        raise UsageError(
            "verify runs commits, and `local` runs the working tree as it is: use --hosts clean "
            "or SSH hosts"
        )
    repo = options.repo
    made = _patched(options)
    base_config = load_config(repo, rev=made.base)
    pins = base_config.charpin.pins.file
    protected_paths = protected(base_config.charpin, judged.pin_inputs(repo, made.base, pins))
    how = judged.judging(repo, made.base, made.patched, made.changed)
    test_command = base_config.charpin.test_command or []
    # The judged run: the patched code with the base's test side and protected paths.
    runs = patch.restore_from_base(repo, made, [*protected_paths, *how.restore])
    own_commit = patch.restore_from_base(repo, made, protected_paths) if how.own else ""
    # Scope is the production code: the patch's tests are judged by running them.
    scope = static.scope(repo, made.base, made.patched, exclude=how.side.covers)
    facts = _facts(repo, made, base_config.table, protected_paths, options.max_changed, how, scope)
    # Behaviour beyond the asserts (#19): the base run captures the calls into the changed
    # functions; the judged run traces the changed files and replays those calls on both.
    what = evidence.changed(
        repo,
        made.base,
        runs,
        evidence.production(scope),
        scope.base_functions,
        test_side=how.side.covers,
        changed_paths=made.changed,
    )
    # Every run of the verify reads the base's pytest configuration file and no other.
    pinned = judged.config_args(how.config_file, test_command, base_config.charpin.pytest_args)
    run_id = check_run_id(options.run_id) if options.run_id else new_run_id()
    folder = (options.out_dir or repo / ".charpin" / "verify").absolute() / run_id
    if folder.exists():
        raise UsageError(f"{folder} already exists; pick another --run-id")
    off = [] if options.differential else [NO_DIFFERENTIAL]
    if off:  # nothing captured, traced or replayed: the pins and the tests alone judge
        what = evidence.Changed(cover=[], capture=[], added={}, base_files={})
    base_options = Options(
        repo=repo,
        hosts=list(options.hosts),
        commit=made.base,
        ssh_config=options.ssh_config,
        run_id="base",
        out_dir=folder,
        timeout=options.timeout,
        keep=options.keep,
        accept_new=options.accept_new,
        sandbox=options.sandbox,
        jobs=options.jobs,
        config_rev=made.base,
        # Base and patched alike: the agent's tests get no network and nothing but their
        # checkout to write, and the base is measured the same way.
        confine=True,
        capture=tuple(what.capture),
        entries=tuple(what.entries),
        entries_skip=tuple(what.entries_skip),
        pytest_args_extra=tuple(pinned),
    )
    notes: list[str] = []
    config_sha = reuse.config_sha(
        base_config.table, [*what.capture, *what.entries, *what.entries_skip]
    )
    reused = (
        _reusable_base(repo, made.base, config_sha, options, notes) if options.reuse_base else None
    )
    base_run = reused[1] if reused else run(plan(base_options), phase=phase)
    patched_options = replace(
        base_options,
        commit=runs,
        run_id="patched",
        patch_sha256=made.patch_sha256,
        capture=(),
        entries=(),
        entries_skip=(),
        cover=tuple(what.cover),
        differential=_job(base_run, what, _budget(base_config.charpin.verify, options)),
    )
    if base_run.interrupted:
        # Ctrl-C (or SIGTERM) during the base run stops the whole verify: no patched run starts.
        patched_run = _not_run(options.hosts, folder / "patched")
    else:
        patched_run = run(plan(patched_options), phase=phase)
    own_run = None
    if own_commit and not patched_run.interrupted:
        # The patch's own new or edited tests, alone, in the patched tree as it is.
        own_options = replace(
            patched_options,
            commit=own_commit,
            run_id="own",
            pytest_args_extra=(*pinned, *how.own),
            cover=(),
            differential=b"",
        )
        own_run = run(plan(own_options), phase=phase)
    found = {
        o.label: evidence.found(repo, runs, what, o.receipt)
        for o in patched_run.outcomes
        if o.receipt is not None and (what.cover or what.entries)
    }
    # The base run's collection is the evidence of what is a test module (verify/judged.py).
    collected = [n for o in base_run.outcomes if o.receipt for n in o.receipt.collection.collected]
    wrong = judged.collection_disagrees(how.side, made.changed, collected)
    facts = replace(facts, undecided=[*facts.undecided, *wrong])
    report = judge(made, base_run, patched_run, facts, ran=runs, own=own_run, how=how, beyond=found)
    report = msgspec.structs.replace(report, own_ran=own_commit)
    if reused is not None:
        report = msgspec.structs.replace(report, base_from=reused[0])
    write_atomic(folder / "patch.diff", made.patch)
    if patched_options.differential:  # what `verify --replay CALL-ID` repeats
        write_atomic(folder / "differential.json", patched_options.differential)
    write_atomic(folder / "verify.json", encode(report))
    if reused is None and not base_run.interrupted:  # a reused base stays where it was kept
        accepted = {
            o.label: o.raw_receipt
            for o in base_run.outcomes
            if o.receipt is not None and o.raw_receipt is not None
        }
        reuse.store(repo, run_id, made.base, config_sha, accepted, notes=notes)
    interrupted = base_run.interrupted or patched_run.interrupted
    interrupted = interrupted or bool(own_run and own_run.interrupted)
    return VerifyResult(
        report, made, base_run, patched_run, folder, interrupted, [*off, *notes], own_run=own_run
    )


def protected(config: CharpinConfig, pin_inputs: Sequence[str] = ()) -> list[str]:
    """The paths that decide what is gated and how, as the base's [tool.charpin] names them,
    and the folders the base's pins read as their input."""
    pins = config.pins
    paths = [pins.file, pins.cases, pins.goldens, config.ledger, config.inventory, ".charpin"]
    paths += [*config.watch, *pin_inputs]
    return sorted(dict.fromkeys(p.strip("/") for p in paths if p.strip("/")))


def touched(changed: Sequence[str], paths: Sequence[str]) -> list[str]:
    """The changed paths that are protected (a path, or anything under a protected folder)."""
    return [c for c in changed if any(c == p or c.startswith(p + "/") for p in paths)]


def judge(
    made: patch.Patched,
    base_run: RunResult,
    patched_run: RunResult,
    facts: gates.PatchFacts,
    *,
    ran: str,
    own: RunResult | None = None,
    how: judged.Judging | None = None,
    beyond: dict[str, evidence.Found] | None = None,
) -> VerifyReport:
    """The verify report from the runs and the facts about the patch. own: the run of the
    patch's own new or edited tests (a box missing from it is not evaluated); beyond: per box,
    the differential evidence of its judged run."""
    beyond = beyond or {}
    base = {o.label: o.receipt for o in base_run.outcomes if o.receipt is not None}
    after = {o.label: o.receipt for o in patched_run.outcomes if o.receipt is not None}
    mine = {o.label: o.receipt for o in (own.outcomes if own else []) if o.receipt is not None}
    missing = _not_evaluated(base_run, patched_run, own)
    found, seen = gates.patch_gates(facts)
    boxes: list[BoxVerdict] = []
    for label in [o.label for o in patched_run.outcomes]:
        b, p = base.get(label), after.get(label)
        if b is None or p is None or (own is not None and label not in mine):
            continue
        failures = _new_failures(label, base_run, patched_run)
        if own is not None:
            # What the patch's own tests did to the box counts as well (a fixture they rewrite).
            failures += [
                (f"{gate} (the patch's own tests)", detail)
                for gate, detail in _new_failures(label, base_run, own)
            ]
        box_found, box_seen = gates.box_gates(
            label, b, p, failures, own=mine.get(label), found=beyond.get(label)
        )
        found += box_found
        seen += box_seen
        ran_own = mine.get(label)
        boxes.append(
            BoxVerdict(
                label=label,
                verdict=gates.verdict([*box_found, *gates.patch_gates(facts)[0]], 1),
                base=b.exit.interpretation,
                patched=p.exit.interpretation,
                sandbox=p.environment.sandbox,
                own=ran_own.exit.interpretation if ran_own is not None else "",
            )
        )
    outcome = gates.verdict(found, len(boxes))
    code, bits = _exit(outcome, missing)
    return VerifyReport(
        version=VERIFY_REPORT_VERSION,
        verdict=outcome,
        base=made.base,
        patched=made.patched,
        ran=ran,
        patch_sha256=made.patch_sha256,
        changed=list(made.changed),
        boxes=boxes,
        not_evaluated=missing,
        gates=_ordered(found),
        observations=seen,
        scope=list(facts.scope),
        helpers=list(facts.helpers),
        drift=patched_run.report,
        base_from="",
        exit_code=code,
        exit_bits=bits,
        test_side=_summary(how) if how is not None else None,
        evidence=[_evidence(label, beyond[label]) for label in sorted(beyond)],
    )


def _evidence(label: str, found: evidence.Found) -> Evidence:
    compared = found.differential
    generated = compared.generated if compared is not None else []
    replayed = compared.replayed if compared is not None else []
    not_compared = dict(compared.not_compared) if compared is not None else {}
    not_compared.update(
        {
            r.id: r.why
            for r in replayed
            if r.verdict == "not compared" and r.function in found.changed
        }
    )
    return Evidence(
        box=label,
        compared=sum(1 for r in replayed if r.verdict in ("same", "differs")),
        same=sum(1 for r in replayed if r.verdict == "same"),
        differs=sum(1 for r in replayed if r.verdict == "differs"),
        not_compared=not_compared,
        unreached=list(found.unreached),
        untraced=found.untraced,
        seed=compared.seed if compared is not None else 0,
        seconds=compared.wall_seconds if compared is not None else 0.0,
        generated=sum(g.examples for g in generated if g.verdict in ("same", "differs")),
        generated_differs=sum(1 for g in generated if g.verdict == "differs"),
        generated_not_compared={g.id: g.why for g in generated if g.verdict == "not compared"},
    )


def _budget(config: VerifyConfig, options: VerifyOptions) -> Generate:
    return Generate.of(config, options.generate_examples, options.generate_seconds)


def _job(base_run: RunResult, what: evidence.Changed, generate: Generate) -> bytes:
    """The differential job for the judged run, from every box's base receipt ("" when the
    patch changes no function the base's tests could call)."""
    if not what.capture and not what.entries:
        return b""
    receipts = [o.receipt for o in base_run.outcomes if o.receipt is not None]
    return evidence.job(receipts, what, generate)


def _summary(how: judged.Judging) -> TestSideSummary:
    side = how.side
    harness = sorted(p for p in side.files if testside.is_harness_file(p))
    if side.config_file and side.config_file not in harness:
        harness.append(side.config_file)
    return TestSideSummary(
        roots=list(side.roots),
        config_file=side.config_file,
        harness=harness,
        test_only=list(side.test_only),
        files=len(side.files),
        edited=how.edited,
        deleted=how.deleted,
        added=how.added,
    )


# The patched run's own gates that speak about what its tests did (Collection parity compares
# boxes, and pins and the ledger have their own verify gates).
_RUN_GATES = ("Identity", "Clean tree", "Fixture integrity", "Completeness")


def _new_failures(label: str, base_run: RunResult, patched_run: RunResult) -> list[tuple[str, str]]:
    failed_before = {g.gate for g in base_run.report.gates if g.box == label and g.status == "FAIL"}
    return [
        (g.gate, g.detail)
        for g in patched_run.report.gates
        if g.box == label
        and g.status == "FAIL"
        and g.gate in _RUN_GATES
        and g.gate not in failed_before
    ]


def _not_run(hosts: Sequence[str], folder: Path) -> RunResult:
    """The patched run that never started: every box NOT EVALUATED (interrupted)."""
    from charpin_coordinator.drift import build_report
    from charpin_coordinator.remote.boxrun import BoxOutcome

    missing = [
        NotEvaluated(label=h, kind="interrupted", reason=f"{h}: interrupted before the patched run")
        for h in hosts
    ]
    outcomes = [BoxOutcome(label=ne.label, not_evaluated=ne, interrupted=True) for ne in missing]
    return RunResult(build_report([], not_evaluated=missing), outcomes, folder, interrupted=True)


def _reusable_base(
    repo: Path, base: str, config_sha: str, options: VerifyOptions, notes: list[str]
) -> tuple[str, RunResult] | None:
    """(verify id, base run) of the newest earlier verify of this base and config on exactly
    these boxes whose record authenticates (verify/reuse.py) and whose receipts decode strictly
    for this base; None, with a note, when there is none (the base then runs)."""
    from charpin_coordinator.drift import build_report
    from charpin_coordinator.receipts import load_receipt
    from charpin_coordinator.remote.boxrun import BoxOutcome

    for record in reuse.candidates(repo, base, config_sha, options.hosts, notes=notes):
        outcomes: list[BoxOutcome] = []
        for label in options.hosts:
            raw = record.receipts[label]
            try:
                receipt = load_receipt(raw, source=f"{record.folder}/{label}")
            except IntegrityError as exc:
                notes.append(f"--reuse-base: {record.folder} is not reused: {exc}")
                break
            if receipt.identity.head_before != base:
                notes.append(f"--reuse-base: {record.folder} is not reused: another commit ran")
                break
            outcomes.append(BoxOutcome(label=label, receipt=receipt, raw_receipt=raw))
        else:
            pairs = [(o.label, o.receipt) for o in outcomes if o.receipt is not None]
            report = build_report(pairs, expected_commit=base)
            result = RunResult(report, outcomes, record.folder / "base", interrupted=False)
            return record.run_id, result
    notes.append(
        f"--reuse-base: no earlier verify of base {base[:12]} with this configuration on "
        f"{', '.join(options.hosts)} to reuse; the base runs"
    )
    return None


def encode(report: VerifyReport) -> bytes:
    """The report as indented JSON, as `--json` prints it and the run folder keeps it."""
    return msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n"


def _patched(options: VerifyOptions) -> patch.Patched:
    if (options.patch is None) == (options.patched_rev is None):
        raise UsageError(
            "verify needs exactly one of --patch FILE|-, --patched REV and --replay CALL-ID"
        )
    if options.patch is not None:
        return patch.from_patch(options.repo, options.patch, options.base_rev)
    return patch.from_rev(options.repo, str(options.patched_rev), options.base_rev)


def _facts(
    repo: Path,
    made: patch.Patched,
    base_table: dict[str, Any],
    paths: Sequence[str],
    max_changed: int,
    how: judged.Judging,
    scope: static.Scope,
) -> gates.PatchFacts:
    hits = touched(made.changed, paths)
    if "pyproject.toml" in made.changed and _charpin_table(repo, made.patched) != base_table:
        hits.append("pyproject.toml [tool.charpin]")
    hits += how.harness
    return gates.PatchFacts(
        protected=hits,
        entry_points=static.entry_points(repo, made.base, made.patched),
        dependencies=static.dependencies(repo, made.base, made.patched),
        scope=[*scope.changed, *scope.unparsable],
        helpers=list(scope.helpers),
        max_changed=max_changed,
        harness_aware=how.harness_aware,
        undecided=list(how.undecided),
    )


def _charpin_table(repo: Path, commit: str) -> Any:
    """[tool.charpin] of commit as data; a file that no longer parses counts as a change."""
    try:
        data = tomllib.loads(
            git_bytes(repo, "cat-file", "blob", f"{commit}:pyproject.toml").decode()
        )
    except (OSError, ValueError, UnicodeDecodeError, ConfigError) as exc:
        return f"unreadable: {exc}"
    except Exception as exc:  # git failing (the file deleted) is a change too
        return f"unreadable: {type(exc).__name__}"
    tool = data.get("tool")
    return tool.get("charpin", {}) if isinstance(tool, dict) else {}


def _not_evaluated(
    base_run: RunResult, patched_run: RunResult, own: RunResult | None = None
) -> list[NotEvaluated]:
    """A box missing from any run, once, with the run it is missing from."""
    out: dict[str, NotEvaluated] = {}
    runs = [("base", base_run), ("patched", patched_run)]
    if own is not None:
        runs.append(("own tests", own))
    for side, result in runs:
        for o in result.outcomes:
            ne = o.not_evaluated
            if ne is not None and ne.label not in out:
                out[ne.label] = NotEvaluated(
                    label=ne.label, kind=ne.kind, reason=f"{side} run: {ne.reason}"
                )
    return list(out.values())


def _exit(outcome: str, missing: Sequence[NotEvaluated]) -> tuple[int, list[str]]:
    code, bits = 0, []
    if outcome == "REJECT":
        code |= EXIT_DRIFT
        bits.append(f"{EXIT_DRIFT} REJECT: a verify gate failed")
    if missing:
        code |= EXIT_NOT_EVALUATED
        bits.append(f"{EXIT_NOT_EVALUATED} a box was not evaluated")
    if any(ne.kind in _REFUSED for ne in missing):
        code |= EXIT_INTEGRITY
        bits.append(f"{EXIT_INTEGRITY} a receipt or snapshot was refused")
    if outcome == "INCOMPLETE" and not missing:
        code |= EXIT_VACUOUS
        bits.append(f"{EXIT_VACUOUS} INCOMPLETE: the evidence cannot decide")
    return code, bits


def _ordered(found: Sequence[VerifyGate]) -> list[VerifyGate]:
    order = {name: i for i, name in enumerate(gates.GATE_ACTIONS)}
    return sorted(found, key=lambda g: (order[g.gate], g.box != WHOLE_PATCH, g.box))


__all__ = ["Observation", "VerifyOptions", "VerifyResult", "verify"]
