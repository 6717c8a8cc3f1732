"""Differential replay: the calls the base's tests made into the changed functions, replayed on
the base and the patched version side by side, plain and perturbed. Runs on boxes; stdlib only.

`charpin receipt --differential JOB` (what verify's judged run gets) runs this after the run is
measured, like the frozen side run: the patched checkout is the run's own; the base checkout is
made beside it from the same files with the patch's changed files put back as the base has them
(hard links, so a large tree costs little). Each function's calls are replayed by a worker
(worker.py) in each checkout, in the sandbox, without network, read-only but for its own
temporary folder:

* twice on the base, plainly: a call whose two results differ depends on time, unseeded
  randomness or the outside world, and is reported "not compared", never "same";
* on both versions under each perturbation: plain, another hash seed, a clock frozen far in the
  future, the C locale. Any difference is "differs", with both results and the perturbation.

Then, when the job asks (its "generate" section), the changed public functions get generated
inputs on both versions (generated.py); the job's "inputs" instead repeat given ones exactly.
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from charpin_runner import sandbox as sandbox_mod
from charpin_runner.differ.genworker import SERVE
from charpin_runner.differ.worker import WORKER
from charpin_runner.errors import UsageError
from charpin_runner.receipt import Differential, Replayed

# The clock of the "far future" perturbation: 2100-01-01T00:00:00Z (a time bomb set for next
# year goes off there; a calendar that ends in 2038 too).
FUTURE = 4102444800.0
SECONDS_PER_CALL = 10.0
MAX_JOB_BYTES = 64 * 1024 * 1024
_NETWORK = (
    "ConnectionError",
    "ConnectionRefusedError",
    "gaierror",
    "URLError",
    "Network is unreachable",
    "Name or service not known",
    "Temporary failure in name resolution",
)


@dataclass(frozen=True)
class Perturbation:
    name: str
    env: dict[str, str]
    clock: Optional[float] = None


def perturbations(seed: int) -> list[Perturbation]:
    return [
        Perturbation("", {"PYTHONHASHSEED": "0"}),
        Perturbation(f"hash seed {seed}", {"PYTHONHASHSEED": str(seed)}),
        Perturbation("clock frozen at 2100-01-01", {"PYTHONHASHSEED": "0"}, FUTURE),
        Perturbation("locale C", {"PYTHONHASHSEED": "0", "LANG": "C", "LC_ALL": "C"}),
    ]


def load_job(path: Path) -> dict[str, Any]:
    """The job verify sent: calls per function, the base's versions of the changed files."""
    try:
        raw = path.read_bytes()
        if len(raw) > MAX_JOB_BYTES:
            raise ValueError("too large")
        job = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"--differential {path}: not a job file ({exc}); it comes from verify"
        ) from None
    if not isinstance(job, dict) or not isinstance(job.get("calls"), list):
        raise UsageError(f"--differential {path}: not a job file; it comes from verify")
    return job


def run(
    repo: Path,
    job: dict[str, Any],
    guard: sandbox_mod.Guard,
    python: str,
    env: dict[str, str],
    seed: Optional[int] = None,
) -> Differential:
    """Replay the job's calls on both versions and say what each did."""
    began = time.monotonic()
    # A hash seed for one perturbation, recorded so the finding can be replayed; not a secret.
    # The job may name it (`verify --replay` repeats a finding with the seed it had).
    if seed is None and isinstance(job.get("seed"), int) and job["seed"] > 0:
        seed = int(job["seed"])
    seed = seed if seed is not None else random.randrange(1, 2**31)  # noqa: S311
    calls: dict[str, list[dict[str, str]]] = {}
    for call in job["calls"]:
        if isinstance(call, dict) and isinstance(call.get("function"), str):
            calls.setdefault(call["function"], []).append(call)
    not_compared = {str(name): str(why) for name, why in dict(job.get("not_compared", {})).items()}
    replayed: list[Replayed] = []
    generated: list[Replayed] = []
    notes: list[str] = []
    reached: dict[str, list[int]] = {}
    wanted, inputs = job.get("generate"), job.get("inputs")
    with tempfile.TemporaryDirectory(prefix="charpin-differ-") as scratch:
        base = _base_tree(repo, job.get("base_files", {}), Path(scratch) / "base")
        worker = Path(scratch) / "worker" / "charpin_replay_worker.py"
        worker.parent.mkdir()
        worker.write_text(WORKER + SERVE, encoding="utf-8")
        read_only = sandbox_mod.Guard(
            plan=replace(guard.plan, writable=(), confine=True), used=guard.used
        )
        runner = _Runner(read_only, python, env, worker, Path(scratch))
        if calls and not inputs:
            replayed, why = _compare(runner, base, repo, calls, seed)
            not_compared.update(why)
        if isinstance(inputs, list) and inputs:  # `verify --replay gen:...`: those inputs only
            from charpin_runner.differ import generated as gen

            generated = gen.rerun(
                runner, base, repo, [i for i in inputs if isinstance(i, dict)], calls
            )
        elif isinstance(wanted, dict):
            from charpin_runner.differ import generated as gen

            differing = {r.function for r in replayed if r.verdict == "differs"}
            generated, notes, reached = gen.run(runner, base, repo, wanted, calls, seed, differing)
    return Differential(
        replayed=replayed,
        generated=generated,
        not_compared=dict(sorted(not_compared.items())),
        seed=seed,
        wall_seconds=round(time.monotonic() - began, 3),
        notes=notes,
        reached=reached,
    )


def _base_tree(repo: Path, files: dict[str, Any], dest: Path) -> Path:
    """The checkout as the base has it: repo's files (hard links, .git left out) with the
    patch's changed files as the base has them (None: absent in the base)."""

    def link(source: str, target: str) -> None:
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)

    ignore = shutil.ignore_patterns(".git", ".charpin")
    shutil.copytree(repo, dest, symlinks=True, ignore=ignore, copy_function=link)
    for rel, data in sorted(files.items()):
        parts = str(rel).split("/")
        if not rel or str(rel).startswith("/") or ".." in parts:
            continue
        target = dest / rel
        if target.is_symlink() or target.exists():
            target.unlink()
        if data is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(base64.b64decode(str(data)))
    return dest


class _Runner:
    """Starts workers in the read-only sandbox and reads their lines."""

    def __init__(
        self, guard: sandbox_mod.Guard, python: str, env: dict[str, str], worker: Path, tmp: Path
    ):
        self.guard, self.python, self.env, self.worker, self.tmp = guard, python, env, worker, tmp

    def environ(self, how: Perturbation) -> dict[str, str]:
        env = {k: v for k, v in self.env.items() if k != "PYTHONPATH"}
        env.update(how.env)
        os.makedirs(self.tmp / "run", exist_ok=True)
        # Byte code of this replay only: no __pycache__ the commit's code planted is read.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="pycache-", dir=str(self.tmp / "run"))
        return env

    def command(self, tree: Path) -> list[str]:
        """The worker's argv for a checkout: in the read-only sandbox, with its own scratch."""
        os.makedirs(self.tmp / "run", exist_ok=True)
        return sandbox_mod.wrap(
            self.guard,
            [self.python, str(self.worker)],
            scratch=str(self.tmp / "run"),
            visible=(tree, self.worker.parent),
            pythons=(self.python,),
        )

    def paths(self, tree: Path) -> list[str]:
        return [str(tree)] + ([str(tree / "src")] if (tree / "src").is_dir() else [])

    def replay(
        self, tree: Path, functions: dict[str, list[dict[str, str]]], how: Perturbation
    ) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        """(call id -> what the worker said of it, function -> why it did not load)."""
        read, write = os.pipe()
        job = {
            "paths": self.paths(tree),
            "root": str(tree),
            "functions": [
                [name, [{"id": c["id"], "args": c["args"]} for c in calls]]
                for name, calls in sorted(functions.items())
            ],
            "clock": how.clock,
            "seed": 0,
            "seconds": SECONDS_PER_CALL,
            "fd": write,
        }
        env = self.environ(how)
        argv = self.command(tree)
        count = sum(len(calls) for calls in functions.values())
        try:
            proc = subprocess.Popen(
                argv,
                cwd=str(tree),
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(write,),
                start_new_session=True,
            )
        except OSError as exc:
            os.close(read)
            os.close(write)
            why = f"the replay worker did not start ({exc.strerror})"
            return {}, dict.fromkeys(functions, why)
        os.close(write)
        try:
            _, err = proc.communicate(
                json.dumps(job).encode(), timeout=SECONDS_PER_CALL * count + 30
            )
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            _, err = proc.communicate()
        with os.fdopen(read, "rb") as handle:
            lines = handle.read().decode("utf-8", "replace").splitlines()
        said: dict[str, dict[str, Any]] = {}
        broken: dict[str, str] = {}
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict):
                continue
            if "load_error" in record and isinstance(record.get("function"), str):
                broken[record["function"]] = str(record["load_error"])
            elif isinstance(record.get("id"), str):
                said.setdefault(record["id"], record)
        if not said and not broken and count:
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
            broken = dict.fromkeys(functions, f"the replay worker said nothing ({tail[0]})")
        return said, broken


def _compare(
    runner: _Runner,
    base: Path,
    patched: Path,
    functions: dict[str, list[dict[str, str]]],
    seed: int,
) -> tuple[list[Replayed], dict[str, str]]:
    """Each call's verdict, and the functions none of whose calls could be compared (why)."""
    plain, *others = perturbations(seed)
    first, broken = runner.replay(base, functions, plain)
    again, _ = runner.replay(base, functions, plain)
    verdicts: dict[str, Replayed] = {}
    calls = [c for name, mine in sorted(functions.items()) if name not in broken for c in mine]
    for call in calls:
        reason = _not_comparable(first.get(call["id"]), again.get(call["id"]))
        if reason:
            verdicts[call["id"]] = _replayed(call, "not compared", reason)
    for how in (plain, *others):
        left = first if how is plain else runner.replay(base, functions, how)[0]
        right, gone = runner.replay(patched, functions, how)
        for call in calls:
            if call["id"] in verdicts:
                continue
            a, b = left.get(call["id"]), right.get(call["id"])
            missing = gone.get(call["function"])
            moved = (
                f"the patched version does not load: {missing}" if missing else _difference(a, b)
            )
            if moved:
                left_text, right_text = _shown(a), missing or _shown(b)
                if left_text == right_text:  # alike as repr shows them: the canonical forms
                    left_text, right_text = _shown(a, canonical=True), _shown(b, canonical=True)
                verdicts[call["id"]] = _replayed(
                    call, "differs", moved, left_text, right_text, how.name
                )
    found = []
    for call in calls:
        same = _replayed(call, "same", "", _shown(first.get(call["id"])))
        said = first.get(call["id"]) or {}
        found.append(replace(verdicts.get(call["id"], same), call=str(said.get("call") or "")))
    why = {name: f"the base version does not load here: {text}" for name, text in broken.items()}
    return found, why


_COMPARED = ("result", "error", "mutated", "stdout", "stderr", "files")


def _not_comparable(one: Optional[dict[str, Any]], two: Optional[dict[str, Any]]) -> str:
    if one is None or two is None:
        return "the base replay gave no result for it (it crashed or hung the worker)"
    if "skip" in one:
        return str(one["skip"])
    if one.get("uncomparable"):
        return f"its result cannot be compared: {one['uncomparable']}"
    if any(one.get(k) != two.get(k) for k in _COMPARED):
        return (
            "the base gives a different answer each time (time, randomness not seeded, or the "
            "outside world)"
        )
    error = str(one.get("error") or "")
    if any(marker in error for marker in _NETWORK):
        return f"it reaches the network, which the replay does not have ({error[:120]})"
    return ""


def _difference(a: Optional[dict[str, Any]], b: Optional[dict[str, Any]]) -> str:
    if a is None or b is None:
        return "" if a is b else "one version gave no result (it crashed or hung)"
    labels = {
        "result": "returned",
        "error": "raised",
        "mutated": "changed its arguments",
        "stdout": "printed",
        "stderr": "wrote to stderr",
        "files": "wrote files",
    }
    for key in _COMPARED:
        if a.get(key) != b.get(key):
            return f"{labels[key]} differently"
    return ""


def _shown(said: Optional[dict[str, Any]], canonical: bool = False) -> str:
    """One line of what a version did: the value as repr shows it (canonical: as compared, for
    two values repr shows alike: a float's last digits, an object's fields)."""
    if said is None:
        return "(no result)"
    if said.get("error"):
        text = f"raised {said['error']}"
    else:
        value = said.get("result") if canonical else said.get("shown") or said.get("result")
        text = f"returned {_short(str(value))}"
    if said.get("mutated"):
        text += f"; arguments became {_short(str(said['mutated']))}"
    if said.get("stdout"):
        text += f"; printed {_short(repr(said['stdout']))}"
    return text


def _short(text: str, most: int = 300) -> str:
    return text if len(text) <= most else text[:most] + "..."


def _replayed(
    call: dict[str, str], verdict: str, why: str, base: str = "", patched: str = "", how: str = ""
) -> Replayed:
    return Replayed(
        id=call["id"],
        function=call["function"],
        test=call.get("test", ""),
        verdict=verdict,
        why=why,
        base=base,
        patched=patched,
        perturbation=how,
    )
