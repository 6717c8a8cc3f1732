"""Coordinator side; pure (data in, data out). The verify gates: base against patched per box,
and what the patch itself changes (judged once, from the two commits).

Each gate is PASS, FAIL or INCOMPLETE with the action to take; each failing observation carries
the seeds' decision-table line for its kind of drift. A box whose base run is not green judges
nothing about its patched run (Base health INCOMPLETE, the box's other gates INCOMPLETE too);
the gates about the patch itself still count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from charpin_runner.receipt import PinResult, Receipt, Replayed

from charpin_coordinator.report import GateStatus
from charpin_coordinator.verify.evidence import Found
from charpin_coordinator.verify.report import (
    WHOLE_PATCH,
    Observation,
    Verdict,
    VerifyGate,
    VerifyGateName,
)

# The seeds' decision table: what a reviewer does about each kind of pin drift.
PIN_ACTIONS = {
    "exit-code": "exit code drift: stop and inspect the traceback",
    "stdout": "stdout drift: stop, unless changing the output format was the goal",
    "whitespace": "stdout/stderr whitespace drift: stop, unless the format was the goal",
    "stderr": "stderr drift: a contract unless documented; stop",
    "file-content": "output file drift: compare the text; a one-cent drift is a failed extract",
    "file-set": "output files appeared or vanished: stop and inspect what the program writes",
    "file-mode": "output file modes changed: stop and inspect",
    "env-read": "the program reads other environment keys now: it depends on new input",
    "normalisation-count": "a normalised value moved: compare the raw outputs",
    "write-outside-output": "the program writes outside its output folder now: stop",
    "timeout": "the pin timed out on the patched code: inspect what now hangs",
    "output-limit": "the output grew past the limit: inspect what now floods",
    "error": "the pin could not run on the patched code: inspect the error",
}
GATE_ACTIONS: dict[VerifyGateName, str] = {
    "Base health": "make the base green first (or verify against a --base whose run is green)",
    "Protected paths": "reject: a patch must not change what gates it; send the change separately",
    "Behaviour": "reject, or re-record the pins in a separate, reviewed change",
    "Tests": "reject: restore the tests, or make the failing ones pass",
    "Quarantine": "reject: the patch must not take tests out of the run",
    "Entry points": "review the new entry point or environment read; it widens what runs",
    "Dependencies": "review the dependency change on its own",
    "Scope": "split the patch: one function body (or an extract from it) per change",
    "Harness awareness": "reject: production code must not look at the harness that judges it",
}
# What a reviewer does about a call the two versions answer differently (the differential).
DIFFERS_ACTION = (
    "reject, unless the new answer is the goal: then keep the case as a test "
    "(verify --replay CALL-ID prints one)"
)
UNREACHED_ACTION = "add a pin or a test that reaches {where}"
UNTRACED_ACTION = (
    "run verify where the tests can be traced (Python 3.12+, or a test command without "
    "coverage.py's tracer)"
)
UNDECIDED_ACTION = (
    "keep tests out of production modules (a module production imports must not hold tests), "
    "then verify again"
)
_RED = ("failed", "error")
_COMPLETE = ("ok", "failed")


@dataclass(frozen=True)
class PatchFacts:
    """What the two commits say, judged on this machine."""

    protected: list[str] = field(default_factory=list)  # protected paths the patch touches
    entry_points: list[str] = field(default_factory=list)
    dependencies: list[str] = field(default_factory=list)
    scope: list[str] = field(default_factory=list)  # changed functions, file:qualname
    helpers: list[str] = field(default_factory=list)
    max_changed: int = 1
    # Harness-aware lines the patch adds to production code (verify/harness.py), as shown.
    harness_aware: list[str] = field(default_factory=list)
    # Changed files verify cannot place on the test side or in production, `path (why)`.
    undecided: list[str] = field(default_factory=list)


Judged = tuple[list[VerifyGate], list[Observation]]


def patch_gates(facts: PatchFacts) -> Judged:
    """The gates about the patch itself, once for every box."""
    gates: list[VerifyGate] = []
    seen: list[Observation] = []
    listed: list[tuple[VerifyGateName, list[str], str, str]] = [
        ("Protected paths", facts.protected, "touched", "the patch touches no protected path"),
        (
            "Entry points",
            facts.entry_points,
            "moved",
            "the same entry points, reading the same keys",
        ),
        ("Dependencies", facts.dependencies, "changed", "no dependency declaration changed"),
    ]
    for gate, items, verb, clean in listed:
        if items:
            gates.append(_gate(gate, WHOLE_PATCH, "FAIL", f"{verb}: {_few(items)}"))
            seen += [_seen(gate, WHOLE_PATCH, item, verb, GATE_ACTIONS[gate]) for item in items]
        else:
            gates.append(_gate(gate, WHOLE_PATCH, "PASS", clean))
    count = len(facts.scope)
    extract = f" (+{len(facts.helpers)} extracted helper(s))" if facts.helpers else ""
    if count > facts.max_changed:
        detail = f"{count} functions changed, more than --max-changed {facts.max_changed}"
        gates.append(_gate("Scope", WHOLE_PATCH, "FAIL", f"{detail}: {_few(facts.scope)}"))
        seen += [
            _seen("Scope", WHOLE_PATCH, item, "changed", GATE_ACTIONS["Scope"])
            for item in facts.scope
        ]
    elif facts.undecided:
        detail = f"cannot tell test code from production in: {_few(facts.undecided)}"
        gates.append(
            VerifyGate(
                gate="Scope", box=WHOLE_PATCH, status="INCOMPLETE", detail=detail,
                action=UNDECIDED_ACTION,
            )
        )
        seen += [
            _seen("Scope", WHOLE_PATCH, item.split(" (", 1)[0], item, UNDECIDED_ACTION)
            for item in facts.undecided
        ]
    else:
        gates.append(_gate("Scope", WHOLE_PATCH, "PASS", f"{count} function(s) changed{extract}"))
    if facts.harness_aware:
        action = GATE_ACTIONS["Harness awareness"]
        detail = f"production code added that looks at the harness: {_few(facts.harness_aware)}"
        gates.append(_gate("Harness awareness", WHOLE_PATCH, "FAIL", detail))
        seen += [
            _seen("Harness awareness", WHOLE_PATCH, line.split(": ", 1)[0], line, action)
            for line in facts.harness_aware
        ]
    else:
        clean = "no added production line looks at pytest, charpin or the replay"
        gates.append(_gate("Harness awareness", WHOLE_PATCH, "PASS", clean))
    return gates, seen


def box_gates(
    label: str,
    base: Receipt,
    patched: Receipt,
    run_gates: Sequence[tuple[str, str]] = (),
    own: Receipt | None = None,
    found: Found | None = None,
) -> Judged:
    """Base against patched on one box. patched: the judged run (the patched code with the
    base's test side); own: the run of the patch's own new or edited tests, when it has any.
    run_gates: the drift gates (Clean tree, Fixture integrity, ...) that failed on the patched
    run but not on the base run, with their detail: what the patched tests did to the box
    counts against the patch. found: the differential evidence of the judged run (None: the
    patch changes no production Python, or the run was not asked to trace)."""
    health = _base_health(base)
    if health is not None:
        rest = "not judged: " + health
        gates = [_gate("Base health", label, "INCOMPLETE", health)]
        gates += [_gate(g, label, "INCOMPLETE", rest) for g in ("Behaviour", "Tests", "Quarantine")]
        return gates, []
    gates = [_gate("Base health", label, "PASS", f"base ok: {_passed(base)} passed")]
    seen: list[Observation] = []
    for rule in (_behaviour, _tests, _quarantine):
        gate, seen_here = rule(label, base, patched)
        if rule is _behaviour and found is not None:
            gate, seen_here = beyond_asserts(label, gate, seen_here, found)
        if rule is _tests:
            extra = [
                _seen(
                    "Tests",
                    label,
                    name,
                    f"the patched run failed its {name} gate: {detail}",
                    GATE_ACTIONS["Tests"],
                )
                for name, detail in run_gates
            ]
            extra += own_tests(label, own) if own is not None else []
            if extra:
                seen_here += extra
                items = [f"{o.item}: {o.what}" for o in seen_here]
                gate = _gate("Tests", label, "FAIL", _few(items))
        gates.append(gate)
        seen += seen_here
    return gates, seen


def beyond_asserts(
    label: str, pins: VerifyGate, seen: list[Observation], found: Found
) -> tuple[VerifyGate, list[Observation]]:
    """The Behaviour gate with the differential evidence added to what the pins say: a call the
    two versions answer differently fails it; a changed statement no test ran (or a run that
    could not be traced) leaves it INCOMPLETE, never PASS."""
    compared = found.differential
    differs = [r for r in compared.replayed if r.verdict == "differs"] if compared else []
    made = [g for g in compared.generated if g.verdict == "differs"] if compared else []
    seed = compared.seed if compared else 0
    seen = list(seen) + [_differs(label, r) for r in differs]
    seen += [_generated(label, g, seed) for g in made]
    if seen:
        ids = [o.item for o in seen]
        detail = f"green on base, red on patched: {_few(ids)}"
        if differs or made:
            parts = [f"{len(differs)} call(s)"] if differs else []
            parts += [f"{len(made)} generated input(s)"] if made else []
            detail = f"{' and '.join(parts)} answered differently: {_few(ids)}"
            if len(differs) + len(made) == len(seen):  # only the differential: its own action
                gate = VerifyGate(
                    gate="Behaviour", box=label, status="FAIL", detail=detail, action=DIFFERS_ACTION
                )
                return gate, seen
        return _gate("Behaviour", label, "FAIL", detail), seen
    if found.untraced:
        detail = f"the changed code could not be traced: {found.untraced}"
        gate = VerifyGate(
            gate="Behaviour", box=label, status="INCOMPLETE", detail=detail, action=UNTRACED_ACTION
        )
        return gate, seen
    if found.unreached:
        where = ", ".join(g.split(" lines ", 1)[0] for g in found.unreached[:3])
        action = UNREACHED_ACTION.format(where=where)
        gaps = [
            Observation(
                gate="Behaviour",
                box=label,
                item=gap.split(" lines ", 1)[0],
                what=f"changed, and no test ran it: {gap}",
                action=UNREACHED_ACTION.format(where=gap.split(" lines ", 1)[0]),
                detail=[],
            )
            for gap in found.unreached
        ]
        detail = f"changed code no test reached: {_few(found.unreached)}"
        gate = VerifyGate(
            gate="Behaviour", box=label, status="INCOMPLETE", detail=detail, action=action
        )
        return gate, gaps
    same = [r for r in compared.replayed if r.verdict == "same"] if compared else []
    skipped = len(compared.replayed) - len(same) if compared else 0
    parts = [pins.detail]
    if compared is not None and (same or skipped):
        part = f"{len(same)} captured call(s) answer the same on both versions"
        if skipped:
            part += f" ({skipped} not compared)"
        parts.append(part)
    elif compared is not None:
        parts.append("no captured call to compare")
    if compared is not None and compared.generated:
        alike = [g for g in compared.generated if g.verdict == "same"]
        part = (
            f"{sum(g.examples for g in alike)} generated input(s) answer the same for "
            f"{len(alike)} function(s) (seed {seed})"
        )
        missed = len(compared.generated) - len(alike)
        parts.append(part + (f" ({missed} function(s) not compared)" if missed else ""))
    parts.append("every changed line ran")
    return _gate("Behaviour", label, "PASS", "; ".join(parts)), seen


def _generated(label: str, made: Replayed, seed: int) -> Observation:
    """A generated input the two versions answer differently: the shrunk input, both answers,
    the seed, and the command that runs that input again."""
    call = made.call or made.function.replace("::", ":") + "(...)"
    base, patched = made.base, made.patched
    if base.startswith("returned ") and patched.startswith("returned "):
        patched = patched[len("returned ") :]
    detail = [
        f"found by: a generated input, run on both versions (seed {seed}; {made.why})",
        f"input: {made.input}",
        f"reproduce: charpin-remote verify --replay {made.id}",
    ]
    return Observation(
        gate="Behaviour",
        box=label,
        item=made.id,
        what=f"{call} {base} on base, {patched} on patched (a generated input)",
        action=DIFFERS_ACTION,
        detail=detail,
    )


def _differs(label: str, replayed: Replayed) -> Observation:
    call = replayed.call or replayed.function.replace("::", ":") + "(...)"
    base, patched = replayed.base, replayed.patched
    if base.startswith("returned ") and patched.startswith("returned "):
        patched = patched[len("returned ") :]
    what = f"{call} {base} on base, {patched} on patched"
    if replayed.test:
        what += f" (called from {replayed.test})"
    if replayed.perturbation:
        what += f", under {replayed.perturbation}"
    detail = [f"found by: the base's captured call replayed on both versions ({replayed.why})"]
    detail.append(f"reproduce: charpin-remote verify --replay {replayed.id}")
    return Observation(
        gate="Behaviour",
        box=label,
        item=replayed.id,
        what=what,
        action=DIFFERS_ACTION,
        detail=detail,
    )


def verdict(gates: Sequence[VerifyGate], evaluated: int) -> Verdict:
    """ACCEPT: every gate PASS on at least one evaluated box; REJECT: any FAIL; else INCOMPLETE."""
    if any(g.status == "FAIL" for g in gates):
        return "REJECT"
    if evaluated == 0 or any(g.status == "INCOMPLETE" for g in gates):
        return "INCOMPLETE"
    return "ACCEPT"


def _base_health(base: Receipt) -> str | None:
    """Why the base run cannot serve as the reference, or None when it can."""
    interpretation = base.exit.interpretation
    if interpretation != "ok":
        return f"the base run is {interpretation}; a patch cannot be judged against a red base"
    red = [r.id for r in base.pins.results if r.status != "passed"]
    if red:
        return f"pin(s) already red on base: {_few(red)}"
    return None


def _behaviour(label: str, base: Receipt, patched: Receipt) -> tuple[VerifyGate, list[Observation]]:
    before = {r.id: r for r in base.pins.results}
    after = {r.id: r for r in patched.pins.results}
    seen: list[Observation] = []
    if set(before) != set(after):
        added, removed = sorted(set(after) - set(before)), sorted(set(before) - set(after))
        what = f"the pin set differs: added {_few(added)}, removed {_few(removed)}"
        seen.append(_seen("Behaviour", label, "<pins>", what, GATE_ACTIONS["Behaviour"]))
    for pin_id in sorted(set(before) & set(after)):
        result = after[pin_id]
        if result.status != "passed":
            seen.append(_pin_drift(label, result))
    if seen:
        ids = [o.item for o in seen]
        return _gate(
            "Behaviour", label, "FAIL", f"green on base, red on patched: {_few(ids)}"
        ), seen
    if not before:
        return _gate("Behaviour", label, "PASS", "no pins declared"), []
    return _gate("Behaviour", label, "PASS", f"{len(after)} pin(s) byte for byte as on base"), []


# A program that now returns another exit code cleanly left no traceback to inspect.
CLEAN_EXIT_ACTION = (
    "exit code drift: the program now exits {code} without a traceback; stop and see why"
)


def _pin_drift(label: str, result: PinResult) -> Observation:
    kind = result.failure_class or "error"
    action = PIN_ACTIONS.get(kind, PIN_ACTIONS["error"])
    if kind == "exit-code" and not _crashed(result):
        action = CLEAN_EXIT_ACTION.format(code=result.exit_code)
    what = f"{result.status} ({kind})"
    return Observation(
        gate="Behaviour", box=label, item=result.id, what=what, action=action, detail=result.detail
    )


def _crashed(result: PinResult) -> bool:
    """Whether the patched pin's stderr, as the box brought it back, holds a traceback."""
    stderr = [a for a in result.actual if a.name == "stderr"]
    if not stderr:
        return True  # nothing came back: the traceback may be there, say so
    return "Traceback (most recent call last)" in stderr[0].text


def _tests(label: str, base: Receipt, patched: Receipt) -> tuple[VerifyGate, list[Observation]]:
    """Strict outcomes (PASS_TO_PASS): every test that passed on base must pass on patched.
    Skipped, xfailed, deselected, filtered, not collected or not executed: each is a failure,
    named with what became of it (`passed → skipped`)."""
    seen: list[Observation] = []
    action = GATE_ACTIONS["Tests"]
    if patched.exit.interpretation not in _COMPLETE:
        what = f"the patched run is {patched.exit.interpretation}"
        seen.append(_seen("Tests", label, "<run>", what, "the evidence is incomplete: reject"))
    for test in sorted(t for t, o in base.outcomes.items() if o == "passed"):
        became = fate(patched, test)
        if became != "passed":
            sub = patched.subtests.get(test)
            failing = (
                f" (failing subtests: {', '.join(sub.failing)})" if sub and sub.failing else ""
            )
            seen.append(_seen("Tests", label, test, f"passed → {became}{failing}", action))
    passed = {t for t, o in base.outcomes.items() if o == "passed"}
    gone = sorted(set(base.collection.collected) - set(patched.collection.collected) - passed)
    seen += [_seen("Tests", label, t, "collected on base, gone on patched", action) for t in gone]
    for test in sorted(patched.outcomes):
        now, was = patched.outcomes[test], base.outcomes.get(test)
        if now in _RED and was is None and test not in base.collection.collected:
            seen.append(_seen("Tests", label, test, f"new test, {now}", action))
    if seen:
        return _gate("Tests", label, "FAIL", _few([f"{o.item}: {o.what}" for o in seen])), seen
    added = len(set(patched.collection.collected) - set(base.collection.collected))
    more = f", {added} new" if added else ""
    return _gate("Tests", label, "PASS", f"{_passed(patched)} passed{more}; none lost"), []


def fate(receipt: Receipt, test: str) -> str:
    """What became of a test in a run: its outcome, or why it has none."""
    outcome = receipt.outcomes.get(test)
    if outcome is not None:
        return outcome
    col = receipt.collection
    if any(d.nodeid == test for d in col.deselected):
        return "deselected by the ledger"
    if test in col.filtered:
        return "deselected (-k, -m, --deselect)"
    if test in col.dropped:
        return "dropped by a collection hook"
    if test in col.collected and test not in col.executed:
        return "not executed"
    return "not collected"


def own_tests(label: str, own: Receipt) -> list[Observation]:
    """The run of the patch's own new or edited tests: each that did not pass, and a run that
    did not complete, is a Tests failure (the patch's own claims must hold)."""
    action = GATE_ACTIONS["Tests"]
    seen: list[Observation] = []
    if own.exit.interpretation not in _COMPLETE:
        what = f"the run of the patch's own tests is {own.exit.interpretation}"
        seen.append(_seen("Tests", label, "<own tests>", what, action))
    for test in sorted(own.outcomes):
        outcome = own.outcomes[test]
        if outcome in _RED:
            seen.append(_seen("Tests", label, test, f"the patch's own test: {outcome}", action))
    return seen


def _quarantine(
    label: str, base: Receipt, patched: Receipt
) -> tuple[VerifyGate, list[Observation]]:
    before = set(base.quarantine.frozen) | {d.nodeid for d in base.collection.deselected}
    after = set(patched.quarantine.frozen) | {d.nodeid for d in patched.collection.deselected}
    extra = sorted(after - before)
    if not extra:
        return _gate("Quarantine", label, "PASS", "nothing frozen or deselected beyond base"), []
    action = GATE_ACTIONS["Quarantine"]
    seen = [_seen("Quarantine", label, t, "out of the run on patched only", action) for t in extra]
    return _gate("Quarantine", label, "FAIL", f"taken out on patched: {_few(extra)}"), seen


def _passed(receipt: Receipt) -> int:
    return sum(1 for outcome in receipt.outcomes.values() if outcome == "passed")


def _gate(gate: VerifyGateName, box: str, status: GateStatus, detail: str) -> VerifyGate:
    action = "" if status == "PASS" else GATE_ACTIONS[gate]
    return VerifyGate(gate=gate, box=box, status=status, detail=detail, action=action)


def _seen(gate: VerifyGateName, box: str, item: str, what: str, action: str) -> Observation:
    return Observation(gate=gate, box=box, item=item, what=what, action=action, detail=[])


def _few(items: Sequence[str], shown: int = 5) -> str:
    head = ", ".join(items[:shown])
    return head + (f" and {len(items) - shown} more" if len(items) > shown else "")
