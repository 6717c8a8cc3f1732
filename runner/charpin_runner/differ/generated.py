"""Generated inputs, run on both versions: for each changed public function, inputs made from its
annotations, its captured calls' values and its code's constants (examples.py), given to the
base, the base again and the patched version side by side, within a budget; the first input
they answer differently is shrunk and reported. Runs on boxes; stdlib only.

Three workers serve the whole job (genworker.py): base, base again, patched, each in the
read-only sandbox without network, plain (PYTHONHASHSEED=0, the real clock). Every request goes
to all three in the same order, so module state moves alike. An input is:

* not compared when the base's two answers differ (time, unseeded randomness, the outside
  world), when the base raises a network error, runs past the per-call limit, crashes its
  worker or gives an answer that cannot be compared, or when the input does not build;
* the same when the base and the patched answer alike (result, exception type and message,
  argument mutation, output, files), an exception on both included;
* differs otherwise. It is shrunk (strategies.shrink_input: base and patched only), then
  checked once more in three fresh workers, the shrunk input alone: a difference that needs
  the earlier inputs' module state is not reported (`verify --replay` could not show it).

The seed of the receipt's Differential seeds the generator (random.Random(f"{seed}:{function}")),
so the same seed and budget try the same inputs; the finding keeps its input as a value tree
(Replayed.input), which `verify --replay gen:...` runs again exactly.
"""

from __future__ import annotations

import json
import os
import random
import select
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Optional, Union

from charpin_runner.differ import replay
from charpin_runner.differ.examples import Plan
from charpin_runner.differ.strategies import Constants, Input, key, shrink_input
from charpin_runner.receipt import Replayed

# The budget, unless the job names its own (verify sends its --generated-* values).
EXAMPLES = 100  # generated inputs per function
SECONDS = 2.0  # per function, generating and comparing
TOTAL_SECONDS = 20.0  # all functions together; the shrinking of a finding is on top
SECONDS_PER_CALL = 2.0  # one call's limit in the worker
SHRINK_CALLS = 200  # candidates a shrink may try
_SLACK = 10.0  # on top of the per-call limit before a silent worker counts as hung
_TIMED_OUT = "TimeoutError: the call ran past its time budget"
_SIDES = ("base", "again", "patched")


@dataclass(frozen=True)
class Budget:
    examples: int = EXAMPLES
    seconds: float = SECONDS
    total: float = TOTAL_SECONDS

    @classmethod
    def read(cls, given: dict[str, Any]) -> Budget:
        def number(name: str, default: float) -> float:
            value = given.get(name)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
            return float(value) if ok and value is not None else default

        return cls(
            examples=int(number("examples", EXAMPLES)),
            seconds=number("seconds", SECONDS),
            total=number("total_seconds", TOTAL_SECONDS),
        )


class _Served:
    """One worker in serve mode: requests on a pipe, answers read with a deadline."""

    def __init__(self, runner: replay._Runner, tree: Path, label: str, cover: list[str]):
        self.runner, self.tree, self.label, self.cover = runner, tree, label, cover
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.requests: Optional[IO[str]] = None
        self.answers = -1
        self.buffer = b""

    def start(self) -> None:
        request_read, request_write = os.pipe()
        answer_read, answer_write = os.pipe()
        job = {
            "paths": self.runner.paths(self.tree),
            "root": str(self.tree),
            "functions": [],
            "clock": None,
            "seed": 0,
            "seconds": SECONDS_PER_CALL,
            "fd": answer_write,
            "serve": True,
            "requests": request_read,
            "cover": self.cover,
        }
        errors = open(self.runner.tmp / f"generated-{self.label}.err", "ab")
        try:
            self.proc = subprocess.Popen(
                self.runner.command(self.tree),
                cwd=str(self.tree),
                env=self.runner.environ(replay.perturbations(1)[0]),
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=errors,
                pass_fds=(request_read, answer_write),
                start_new_session=True,
            )
        finally:
            errors.close()
            os.close(request_read)
            os.close(answer_write)
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(job).encode())
            self.proc.stdin.close()
        except OSError:
            pass
        self.requests = os.fdopen(request_write, "w", encoding="utf-8")
        self.answers = answer_read
        self.buffer = b""

    def send(self, request: dict[str, Any]) -> None:
        if self.proc is None:
            self.start()
        assert self.requests is not None
        try:
            self.requests.write(json.dumps(request) + "\n")
            self.requests.flush()
        except (OSError, ValueError):
            pass  # it is gone; receive() says so

    def receive(self, ident: str, deadline: float) -> Optional[dict[str, Any]]:
        """The answer to request ident, or None (the worker died or did not answer in time)."""
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                try:
                    said = json.loads(line)
                except ValueError:
                    continue
                if isinstance(said, dict) and said.get("id") == ident:
                    return said
            left = deadline - time.monotonic()
            if left <= 0 or self.answers < 0:
                return None
            ready, _, _ = select.select([self.answers], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.answers, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk

    def stop(self) -> None:
        if self.requests is not None:
            try:
                self.requests.close()
            except OSError:
                pass
        if self.answers >= 0:
            os.close(self.answers)
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, 9)
            except OSError:
                pass
            self.proc.wait()
        self.proc, self.requests, self.answers = None, None, -1


class _Trio:
    """Base, base again and patched, asked the same things in the same order."""

    def __init__(
        self, runner: replay._Runner, base: Path, patched: Path, cover: Optional[list[str]] = None
    ):
        trees = {"base": base, "again": base, "patched": patched}
        self.sides = {
            side: _Served(runner, trees[side], side, list(cover or []) if side == "patched" else [])
            for side in _SIDES
        }
        self.count = 0
        # The lines of the changed files the patched version ran on inputs answered alike.
        self.reached: dict[str, set[int]] = {}

    def reach(self, said: Optional[dict[str, Any]]) -> None:
        lines = (said or {}).get("lines")
        if isinstance(lines, dict):
            for path, numbers in lines.items():
                mine = self.reached.setdefault(str(path), set())
                mine.update(n for n in numbers if isinstance(n, int))

    def ask(
        self, request: dict[str, Any], sides: tuple[str, ...] = _SIDES
    ) -> dict[str, Optional[dict[str, Any]]]:
        self.count += 1
        request = {**request, "id": f"{request['op']}-{self.count}"}
        for side in sides:
            self.sides[side].send(request)
        deadline = time.monotonic() + SECONDS_PER_CALL + _SLACK
        return {side: self.sides[side].receive(request["id"], deadline) for side in sides}

    def restart(self) -> None:
        for served in self.sides.values():
            served.stop()

    def close(self) -> None:
        self.restart()


def run(
    runner: replay._Runner,
    base: Path,
    patched: Path,
    wanted: dict[str, Any],
    calls: dict[str, list[dict[str, str]]],
    seed: int,
    skip: set[str],
) -> tuple[list[Replayed], list[str], dict[str, list[int]]]:
    """Generated inputs for the job's functions (wanted: verify's "generate" section), and the
    lines of its "cover" files the patched version ran on the inputs answered alike."""
    budget = Budget.read(wanted)
    names = [str(n) for n in wanted.get("functions", []) if isinstance(n, str)]
    cover = [str(c) for c in wanted.get("cover", []) if isinstance(c, str)]
    found: list[Replayed] = []
    notes: list[str] = []
    if budget.examples <= 0 or not names:
        return found, notes, {}
    trio = _Trio(runner, base, patched, cover)
    ends = time.monotonic() + budget.total
    try:
        for name in sorted(names):
            if name in skip:
                notes.append(f"{name}: no generated inputs, its captured calls already differ")
                continue
            if time.monotonic() >= ends:
                found.append(_verdict(name, "not compared", _out_of_time(budget)))
                continue
            found.append(_one(trio, name, calls.get(name, []), budget, seed, ends))
    finally:
        trio.close()
    return found, notes, {path: sorted(lines) for path, lines in sorted(trio.reached.items())}


def rerun(
    runner: replay._Runner,
    base: Path,
    patched: Path,
    inputs: list[dict[str, Any]],
    calls: dict[str, list[dict[str, str]]],
) -> list[Replayed]:
    """Each given input (id, function, input) once more on both versions, in fresh workers."""
    out = []
    trio = _Trio(runner, base, patched)
    try:
        for given in inputs:
            name, ident = str(given.get("function", "")), str(given.get("id", ""))
            try:
                tree = json.loads(str(given.get("input", "")))
            except ValueError:
                out.append(_verdict(name, "not compared", "its input is not a value tree", ident))
                continue
            trio.restart()
            described = _describe(trio, name, calls.get(name, []))
            if isinstance(described, str):
                out.append(_verdict(name, "not compared", described, ident))
                continue
            answers = trio.ask({"op": "call", "function": name, "input": tree})
            verdict, why = _judge(answers)
            a, b = answers["base"], answers["patched"]
            shown_b, shown_p = replay._shown(a), replay._shown(b)
            out.append(
                Replayed(
                    id=ident or f"gen:{name}#1",
                    function=name,
                    test="",
                    verdict={"skip": "not compared"}.get(verdict, verdict),
                    why=why,
                    base=shown_b,
                    patched=shown_p if verdict == "differs" else "",
                    call=str((a or {}).get("call") or ""),
                    input=key(tree),
                    examples=1 if verdict != "skip" else 0,
                )
            )
    finally:
        trio.close()
    return out


def _describe(trio: _Trio, name: str, calls: list[dict[str, str]]) -> Union[dict[str, Any], str]:
    """The base's description of name, with the constants both versions' code holds, or why
    no input can be made for it."""
    request = {"op": "describe", "function": name, "calls": [c["args"] for c in calls]}
    said = trio.ask(request)
    base = (said["base"] or {}).get("described")
    patched = (said["patched"] or {}).get("described")
    if not isinstance(base, dict):
        return "the base version's worker gave no answer (it crashed or hung)"
    if "load_error" in base:
        return f"the base version does not load here: {base['load_error']}"
    if "skip" in base:
        return str(base["skip"])
    if not isinstance(patched, dict) or "load_error" in patched:
        why = (patched or {}).get("load_error", "its worker gave no answer")
        return f"the patched version does not have it ({why}); its replayed calls say more"
    base["constants_both"] = Constants.read(
        dict(base.get("constants", {})), dict(patched.get("constants", {}))
    )
    return base


def _one(
    trio: _Trio,
    name: str,
    calls: list[dict[str, str]],
    budget: Budget,
    seed: int,
    ends: float,
) -> Replayed:
    described = _describe(trio, name, calls)
    if isinstance(described, str):
        return _verdict(name, "not compared", described)
    consts: Constants = described.pop("constants_both")
    plan = Plan(described, consts, random.Random(f"{seed}:{name}"))  # noqa: S311
    tried = {key(c) for c in plan.seen}  # the captured calls themselves are replayed already
    stop = min(ends, time.monotonic() + budget.seconds)
    compared, number, repeats, restarts = 0, 0, 0, 0
    skipped: Counter[str] = Counter()
    for given in plan.inputs():
        if compared + sum(skipped.values()) >= budget.examples or time.monotonic() >= stop:
            break
        mine = key(given)
        if mine in tried:
            repeats += 1
            if repeats > 50 * max(budget.examples, 1):  # a plan with nothing new to try
                break
            continue
        tried.add(mine)
        number += 1
        answers = trio.ask({"op": "call", "function": name, "input": given})
        verdict, why = _judge(answers)
        if verdict == "same":
            compared += 1
            trio.reach(answers["patched"])
            continue
        if verdict == "skip":
            skipped[why] += 1
            if any(a is None for a in answers.values()):
                restarts += 1
                trio.restart()
                if restarts > 3 or isinstance(_describe(trio, name, calls), str):
                    break
            continue
        finding = _finding(trio, name, calls, given, consts, answers, budget)
        if finding is None:
            skipped["it answered differently only after earlier generated inputs"] += 1
            if isinstance(_describe(trio, name, calls), str):
                break
            continue
        tree, said, steps = finding
        base, patched = said["base"] or {}, said["patched"] or {}
        first = str((answers["base"] or {}).get("call") or "")
        how = f"generated input {number} (seed {seed})"
        if steps:
            how += f", shrunk from {first} in {steps} step(s)"
        return Replayed(
            id=f"gen:{name}#1",
            function=name,
            test="",
            verdict="differs",
            why=f"{_judge(said)[1]}; {how}",
            base=replay._shown(base),
            patched=replay._shown(patched),
            call=str(base.get("call") or ""),
            input=key(tree),
            examples=compared + 1,
        )
    if not compared:
        why = skipped.most_common(1)[0][0] if skipped else (plan.why_not or "no input was made")
        return _verdict(name, "not compared", why)
    why = f"{compared} generated input(s) answered the same (seed {seed})"
    if skipped:
        reason, count = skipped.most_common(1)[0]
        why += f"; {sum(skipped.values())} not compared ({count}: {reason})"
    return _verdict(name, "same", why, examples=compared)


def _finding(
    trio: _Trio,
    name: str,
    calls: list[dict[str, str]],
    given: Input,
    consts: Constants,
    answers: dict[str, Optional[dict[str, Any]]],
    budget: Budget,
) -> Optional[tuple[Input, dict[str, Optional[dict[str, Any]]], int]]:
    """The differing input shrunk, what three fresh workers answer to it alone, and the steps;
    None when neither it nor the unshrunk input differs on its own."""
    shrunk, steps = _shrink(trio, name, given, consts, budget)
    for tree in [shrunk, given] if steps else [given]:
        trio.restart()
        if isinstance(_describe(trio, name, calls), str):
            return None
        said = trio.ask({"op": "call", "function": name, "input": tree})
        if _judge(said)[0] == "differs":
            return tree, said, steps if tree is shrunk else 0
    return None


def _shrink(
    trio: _Trio, name: str, given: Input, consts: Constants, budget: Budget
) -> tuple[Input, int]:
    current, steps, tries = given, 0, 0
    seen = {key(given)}
    stop = time.monotonic() + max(budget.seconds, 1.0)
    moved = True
    while moved and tries < SHRINK_CALLS and time.monotonic() < stop:
        moved = False
        for candidate in shrink_input(current, consts):
            mine = key(candidate)
            if mine in seen:
                continue
            seen.add(mine)
            tries += 1
            said = trio.ask(
                {"op": "call", "function": name, "input": candidate}, ("base", "patched")
            )
            if _judge({**said, "again": said["base"]})[0] == "differs":
                current, steps, moved = candidate, steps + 1, True
                break
            if tries >= SHRINK_CALLS or time.monotonic() >= stop:
                break
    return current, steps


def _judge(answers: dict[str, Optional[dict[str, Any]]]) -> tuple[str, str]:
    """("same" | "differs" | "skip", why) for one input's three answers."""
    base, again, patched = answers.get("base"), answers.get("again"), answers.get("patched")
    if base is None or again is None:
        return "skip", "the base version crashed or hung its worker"
    for said in (base, patched or {}):
        if "load_error" in said:
            return "skip", f"the function does not load: {said['load_error']}"
    if "skip" in base:
        return "skip", str(base["skip"])
    if base.get("uncomparable"):
        return "skip", f"its result cannot be compared: {base['uncomparable']}"
    if str(base.get("error") or "").startswith(_TIMED_OUT):
        return "skip", f"the base version ran past the {SECONDS_PER_CALL:g} s limit of a call"
    if any(base.get(k) != again.get(k) for k in replay._COMPARED):
        return "skip", (
            "the base gives a different answer each time (time, randomness not seeded, or the "
            "outside world)"
        )
    error = str(base.get("error") or "")
    if any(marker in error for marker in replay._NETWORK):
        return "skip", "it reaches the network, which the replay does not have"
    quick = float(base.get("took") or 0.0) < SECONDS_PER_CALL / 10
    if patched is None:
        if quick:
            return "differs", "the patched version crashed or hung its worker"
        return "skip", "the patched version's worker gave no answer"
    if "skip" in patched:
        return "skip", f"the input does not build on the patched version ({patched['skip']})"
    if str(patched.get("error") or "").startswith(_TIMED_OUT):
        if quick:
            took = float(base.get("took") or 0.0)
            return "differs", (
                f"the patched version ran past the {SECONDS_PER_CALL:g} s limit of a call; "
                f"the base answered in {took:.3f} s"
            )
        return "skip", f"the patched version ran past the {SECONDS_PER_CALL:g} s limit of a call"
    moved = replay._difference(base, patched)
    return ("differs", moved) if moved else ("same", "")


def _verdict(name: str, verdict: str, why: str, ident: str = "", examples: int = 0) -> Replayed:
    return Replayed(
        id=ident or f"gen:{name}", function=name, test="", verdict=verdict, why=why,
        examples=examples,
    )  # fmt: skip


def _out_of_time(budget: Budget) -> str:
    return (
        f"the generated inputs' time budget ({budget.total:g} s for all functions) ran out "
        "before it"
    )
