"""Coordinator side; stdlib, msgspec and the runner's differ and sandbox. `verify --replay
CALL-ID`: one finding of an earlier verify repeated on this machine, in one command.

The verify folder keeps the differential job (`differential.json`: the base's captured calls and
the base's versions of the changed files) and the report (the commit that ran, the hash seed).
The replay takes the job's one call, checks out the commit that ran into a temporary folder, and
runs the same replay the box ran (differ/replay.py: the base and the patched version, plain and
under each perturbation, in the sandbox). It returns what each version did and, when both the
call and the base's answer are plain literals, a pytest test that keeps the case.
"""

from __future__ import annotations

import ast
import json
import os
import posixpath
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from charpin_runner import sandbox as sandbox_mod
from charpin_runner.differ import replay
from charpin_runner.errors import CharpinError, UsageError
from charpin_runner.receipt import Differential, Replayed

from charpin_coordinator.receipts import read_receipt_file
from charpin_coordinator.verify import gitread
from charpin_coordinator.verify.report import VerifyReport

JOB = "differential.json"
GENERATED = "gen:"  # the ids of generated inputs: gen:PATH::QUALNAME#N


@dataclass(frozen=True)
class Repeated:
    """One call replayed again here."""

    folder: Path
    call: dict[str, str]  # the job's call: id, function, test, args
    result: Replayed
    seed: int
    test: str  # a pytest test keeping the base's answer, or "" when it cannot be written


def find_folder(verify_dir: Path, call_id: str, run_id: str | None) -> Path:
    """The verify folder holding call_id: --run-id's, else the newest that has it."""
    if run_id:
        folder = verify_dir / run_id
        if not (folder / "verify.json").is_file():
            raise UsageError(f"no verify folder {folder}; pass the --run-id a verify printed")
        return folder
    folders = sorted(
        (p for p in verify_dir.glob("*") if (p / JOB).is_file()),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for folder in folders:
        if call_id.startswith(GENERATED):
            if _generated(folder, call_id) is not None:
                return folder
        elif any(call.get("id") == call_id for call in _job(folder).get("calls", [])):
            return folder
    raise UsageError(
        f"no verify under {verify_dir} captured the call {call_id}; pass --run-id (and --out) "
        "of the verify that printed it"
    )


def repeat(repo: Path, folder: Path, call_id: str, python: str, sandbox: str = "auto") -> Repeated:
    """Replay call_id of the verify in folder on both versions, here (a generated input's id:
    that input, exactly as the box ran it)."""
    job = _job(folder)
    if call_id.startswith(GENERATED):
        return _repeat_generated(repo, folder, job, call_id, python, sandbox)
    calls = [c for c in job.get("calls", []) if isinstance(c, dict) and c.get("id") == call_id]
    if not calls:
        known = ", ".join(str(c.get("id")) for c in job.get("calls", [])[:5])
        raise UsageError(f"{folder.name} captured no call {call_id} (it has {known or 'none'})")
    report = _report(folder)
    seed = next((e.seed for e in report.evidence if e.seed), 0)
    one = {**job, "calls": calls, "seed": seed, "not_compared": {}, "generate": None}
    done = _run(repo, report, one, python, sandbox, seed)
    if not done.replayed:
        why = next(iter(done.not_compared.values()), "the replay gave nothing back")
        raise UsageError(f"{call_id} could not be replayed here: {why}")
    result = done.replayed[0]
    return Repeated(folder, calls[0], result, done.seed, keep_as_test(calls[0], result))


def _repeat_generated(
    repo: Path, folder: Path, job: dict[str, Any], call_id: str, python: str, sandbox: str
) -> Repeated:
    """The generated input call_id, as the box's receipt keeps it, on both versions here."""
    found = _generated(folder, call_id)
    if found is None:
        raise UsageError(
            f"{folder.name} has no generated input {call_id} (only a differing one is kept); "
            "pass the --run-id of the verify that printed it"
        )
    made, seed = found
    report = _report(folder)
    given = {"id": made.id, "function": made.function, "input": made.input}
    mine = [c for c in job.get("calls", []) if isinstance(c, dict)]
    one = {**job, "calls": mine, "seed": seed, "not_compared": {}, "inputs": [given]}
    one.pop("generate", None)
    done = _run(repo, report, one, python, sandbox, seed)
    if not done.generated:
        raise UsageError(f"{call_id} could not be run here: the replay gave nothing back")
    result = done.generated[0]
    call = {"id": made.id, "function": made.function, "test": ""}
    return Repeated(folder, call, result, seed, keep_as_test(call, result))


def _generated(folder: Path, call_id: str) -> tuple[Replayed, int] | None:
    """The generated input call_id that a box of this verify reported, with its seed."""
    for path in sorted(folder.glob("patched/*/receipt.json")):
        try:
            receipt = read_receipt_file(path)
        except CharpinError:
            continue
        compared = receipt.differential
        for made in compared.generated if compared is not None else []:
            if made.id == call_id and made.input:
                return made, compared.seed if compared is not None else 0
    return None


def _report(folder: Path) -> VerifyReport:
    try:
        return msgspec.json.decode((folder / "verify.json").read_bytes(), type=VerifyReport)
    except (OSError, msgspec.DecodeError) as exc:
        raise UsageError(f"{folder}/verify.json is not a verify report ({exc})") from None


def _run(
    repo: Path, report: VerifyReport, job: dict[str, Any], python: str, sandbox: str, seed: int
) -> Differential:
    """The job run here, on the commit that ran exported from the object store."""
    with tempfile.TemporaryDirectory(prefix="charpin-replay-") as tmp:
        checkout = Path(tmp, "checkout")
        _export(repo, report.ran, checkout)
        guard = sandbox_mod.begin(
            sandbox_mod.Plan(mode=sandbox_mod.check_mode(sandbox), writable=(str(checkout),))
        )
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        return replay.run(checkout, job, guard, python, env, seed=seed or None)


def keep_as_test(call: dict[str, str], result: Replayed) -> str:
    """A pytest test asserting the base's answer for this call, when the call as shown and the
    base's result are Python literals (else "": the reviewer writes it from the replay)."""
    path, _, qualname = call["function"].partition("::")
    shown = result.call
    if not path.endswith(".py") or "." in qualname or not shown.startswith(qualname + "("):
        return ""
    arguments = shown[len(qualname) :]
    answer = result.base.removeprefix("returned ")
    if not result.base.startswith("returned ") or ";" in answer or "..." in shown + answer:
        return ""
    try:
        node = ast.parse(f"_{arguments}", mode="eval").body
        if not isinstance(node, ast.Call):
            return ""
        for value in [*node.args, *(k.value for k in node.keywords)]:
            ast.literal_eval(value)
        ast.literal_eval(answer)
    except (ValueError, SyntaxError, TypeError, RecursionError):
        return ""
    parts = path[:-3].split("/")
    if parts[0] in ("src", "lib") and len(parts) > 1:
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    module = ".".join(parts)
    name = re.sub(r"\W+", "_", f"{qualname}{arguments}").strip("_").lower()[:60]
    return (
        f"from {module} import {qualname}\n\n\n"
        f"def test_{name}_keeps_its_answer():\n"
        f"    # kept by `charpin-remote verify --replay {call['id']}`"
        f" (from {call.get('test') or 'a generated input'})\n"
        f"    assert {shown} == {answer}\n"
    )


def _job(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / JOB).read_bytes())
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"{folder} has no readable {JOB} ({exc}); only a verify whose patch changed "
            "functions the base's tests call keeps one"
        ) from None
    if not isinstance(data, dict):
        raise UsageError(f"{folder}/{JOB} is not a differential job")
    return data


def _export(repo: Path, commit: str, dest: Path) -> None:
    """commit's tree into dest, byte for byte from the object store (no attributes, filters,
    hooks or replace refs apply; links are made only when they stay inside the tree)."""
    tree = gitread.tree_files(repo, commit)
    blobs = gitread.blobs(repo, [sha for mode, sha in tree.values() if mode != "160000"])
    dest.mkdir(parents=True)
    for path, (mode, sha) in sorted(tree.items()):
        parts = path.split("/")
        if path.startswith("/") or ".." in parts or ".git" in parts or sha not in blobs:
            continue
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if mode == gitread.LINK:
            link = blobs[sha].decode("utf-8", "surrogateescape")
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), link))
            if not link.startswith("/") and not resolved.startswith(".."):
                os.symlink(link, target)
            continue
        target.write_bytes(blobs[sha])
        if mode == "100755":
            target.chmod(0o755)
