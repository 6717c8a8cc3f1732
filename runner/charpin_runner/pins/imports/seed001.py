"""Seed 001's output-tree manifest (golden_manifest.py `write`), read as that harness writes it.

`json.dumps(manifest, indent=2, sort_keys=True)`: returncode, stdout_sha256, stderr_sha256 and
files, a list of {path, sha256} under the harness's --output-root. Hashes only: there is no text,
and the command, its folder and its output root are not in the file (they are the harness's
arguments), so they are given to `charpin import golden-manifest` (-- COMMAND, --fixtures,
--cwd-rel). The imported pin keeps the two streams as hash-only goldens ({"sha256": HEX}): replay
compares digests, and a drift says "hash-only golden: no text to diff".
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from charpin_runner.errors import ConfigError, IntegrityError
from charpin_runner.pins.execute import Run
from charpin_runner.pins.imports.common import Draft, Plan, Settled, files_with_modes, observed
from charpin_runner.pins.model import Case
from charpin_runner.pins.store import check_rel
from charpin_runner.schema import convert

FORMAT = "seed-001 golden manifest"
# What the harness leaves out of its file list (IGNORE_NAMES, IGNORE_SUFFIXES).
_IGNORED_NAMES = frozenset({".DS_Store", "Thumbs.db"})
_IGNORED_SUFFIXES = (".log",)
_HEX = re.compile(r"[0-9a-f]{64}")

KEPT = [
    "the exit code; stdout and stderr as hash-only goldens (compared by sha256); every output "
    "file's path and sha256",
]
LOST = [
    "text: the manifest holds hashes only, so a drifting stream or file shows no diff "
    '("hash-only golden: no text to diff")',
    "file modes: not in the manifest; taken from the verification run",
    "the harness's ignore list (.DS_Store, Thumbs.db, *.log): a pin checks every file under "
    "its output folder",
    "text=True: the harness hashed decoded text with \\r\\n turned into \\n; charpin hashes "
    "the raw bytes",
]


@dataclass
class _FileEntry:
    path: str
    sha256: str


@dataclass
class _Manifest:
    returncode: int
    stdout_sha256: str
    stderr_sha256: str
    files: list[_FileEntry]


def read_manifest(path: Path, label: str) -> _Manifest:
    """Parse the manifest strictly (closed field list, 64-hex hashes, relative paths)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise IntegrityError(f"{label}: cannot read JSON ({exc}); restore the file") from None
    try:
        manifest: _Manifest = convert(data, _Manifest, "$")
    except ConfigError as exc:
        raise IntegrityError(f"{label}: {exc}; this is not a seed-001 golden manifest") from None
    hashes = [
        ("$.stdout_sha256", manifest.stdout_sha256),
        ("$.stderr_sha256", manifest.stderr_sha256),
    ]
    hashes += [(f"$.files[{i}].sha256", f.sha256) for i, f in enumerate(manifest.files)]
    for where, value in hashes:
        if not _HEX.fullmatch(value):
            raise IntegrityError(f"{label}: {value!r} is not a sha256 hex digest - at `{where}`")
    seen = set()
    for index, entry in enumerate(manifest.files):
        check_rel(entry.path, f"{label} $.files[{index}].path")
        if entry.path in seen:
            raise IntegrityError(f"{label}: path {entry.path!r} is listed twice")
        seen.add(entry.path)
    return manifest


def plan(
    path: Path,
    label: str,
    pin: str,
    argv: list[str],
    fixtures: Optional[str],
    cwd_rel: str,
    output: str,
) -> Plan:
    """One pin: the given command, judged by the manifest's hashes."""
    manifest = read_manifest(path, label)
    case = Case(id=pin, argv=tuple(argv), cwd_rel=cwd_rel, fixtures=fixtures, origin=label)
    return Plan(FORMAT, [Draft(case, label, _settler(manifest, label, output))], KEPT, LOST)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _settler(manifest: _Manifest, label: str, output: str) -> Callable[[Run], Settled]:
    def settle(run: Run) -> Settled:
        obs = run.observation
        problems = []
        if obs.exit_code != manifest.returncode:
            problems.append(
                f"{label}: the program exits {obs.exit_code}, the manifest says "
                f"{manifest.returncode}"
            )
        for name, data, want in (
            ("stdout", obs.stdout, manifest.stdout_sha256),
            ("stderr", obs.stderr, manifest.stderr_sha256),
        ):
            if _digest(data) != want:
                problems.append(_stream_problem(label, name, data, want, output))
        want_files = {f.path: f.sha256 for f in manifest.files}
        for rel in sorted(set(obs.files) - set(want_files)):
            ignored = Path(rel).name in _IGNORED_NAMES or rel.endswith(_IGNORED_SUFFIXES)
            why = (
                " (the harness ignores that name; a pin checks every file under the output "
                "folder: stop writing it there)"
                if ignored
                else ""
            )
            problems.append(f"{label}: the program writes {output}/{rel}, not in the manifest{why}")
        for rel in sorted(set(want_files) - set(obs.files)):
            problems.append(
                f"{label}: the manifest lists {rel}, the program wrote no {output}/{rel} (the "
                f"command must write its output tree into {output}/ of its work folder)"
            )
        for rel in sorted(set(want_files) & set(obs.files)):
            if obs.files[rel].sha256 != want_files[rel]:
                problems.append(
                    f"{label}: {output}/{rel} hashes to {obs.files[rel].sha256[:12]}, the "
                    f"manifest says {want_files[rel][:12]}"
                )
        if problems:
            return Settled(problems=problems)
        golden = observed(
            run,
            stdout=manifest.stdout_sha256.encode("ascii"),
            stderr=manifest.stderr_sha256.encode("ascii"),
            files=files_with_modes(want_files, {}, run),
            hashed=("stdout", "stderr"),
        )
        return Settled(golden=golden)

    return settle


def _stream_problem(label: str, name: str, data: bytes, want: str, output: str) -> str:
    head = f"{label}: {name} hashes to {_digest(data)[:12]}, the manifest says {want[:12]}"
    token = f"$WORK/{output}".encode()
    if token in data and _digest(data.replace(token, b"<OUT>")) == want:
        return (
            f"{head}; it matches once charpin's {token.decode()} is written <OUT>, as the "
            'harness wrote its output root: add the rule {name = "out-root", kind = '
            f'"regex", pattern = \'\\$WORK/{output}\', replace = "<OUT>"}} to '
            "[tool.charpin.pins] normalise (after the default rules) and import again"
        )
    if _digest(data.replace(b"\r\n", b"\n")) == want:
        return (
            f"{head}; it matches once \\r\\n is read as \\n (the harness used text=True): "
            "charpin compares bytes, so this stream cannot replay green as it is"
        )
    return f"{head}: the program's output changed since the manifest was written"
