"""The one internal model of a pin: inputs (Case) and outputs (Observation). Stdlib only.

Both on-disk formats (pins.jsonl and case folders) load into these classes; see store.py.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from charpin_runner.errors import IntegrityError

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class Case:
    """What to run: argv[0] is a Python script (`*.py` or a Python shebang, repo-relative),
    `-m` followed by a module, a console script the repository declares, or any command
    (targets.py)."""

    id: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes = b""
    cwd_rel: str = "."
    # Repo-relative folder copied as the fresh work folder (a case folder's work/).
    fixtures: Optional[str] = None
    origin: str = ""
    # The program's own name, sys.argv[0] as it sees it (a case folder's argv.json[0]); None:
    # as its target starts it (a script's path, a module's file, a console script's name).
    argv0: Optional[str] = None
    # The pin records a crash on purpose (an uncaught exception or a signal): crash.py.
    expect_crash: bool = False
    # With expect_crash: compare the traceback's frames (files, line numbers, source lines)
    # too. Without, replay compares what the caller sees: the exception, its message, the exit
    # code (crash.caller_view), so a refactor that only moves lines stays green.
    crash_frames: bool = False
    # stderr goes into the stdout pipe, as cram, prysk and trycmd's `.trycmd` cases run their
    # commands (one interleaved stream); the golden's stderr is then empty (imports/).
    merge_stderr: bool = False


@dataclass(frozen=True)
class OutFile:
    """One file under the declared output folder, after normalisation."""

    sha256: str
    mode: int
    text: Optional[str] = None


@dataclass(frozen=True)
class Observation:
    """What one run did at its process boundary, after normalisation."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    files: dict[str, OutFile] = field(default_factory=dict)
    # Sorted env keys a Python target read; None for other commands (not observable).
    env_read: Optional[list[str]] = None
    norm_counts: dict[str, int] = field(default_factory=dict)
    # Streams ("stdout", "stderr") of a hash-only golden (imported from a harness that kept only
    # a sha256, written {"sha256": HEX}): that field holds the hex digest as ASCII bytes, and
    # replay compares the digest of the actual stream with it. There is no text to diff.
    hashed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pin:
    """A case and its golden observation (None until recorded)."""

    case: Case
    golden: Optional[Observation]


def check_id(pin_id: str, where: str) -> str:
    """Refuse ids that cannot name a folder under .charpin/pins-actual/."""
    if not _ID.fullmatch(pin_id):
        raise IntegrityError(
            f"{where}: pin id {pin_id!r} is not a plain name; "
            "use letters, digits, '.', '_' or '-' (at most 128)"
        )
    return pin_id


def encode_bytes(data: bytes) -> Union[str, dict[str, str]]:
    """UTF-8 text stays a string; anything else becomes {"b64": ...} so nothing is lost."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(data).decode("ascii")}


def decode_b64(text: str, where: str) -> bytes:
    """Decode the b64 form of a byte field, refusing anything that is not strict base64."""
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise IntegrityError(f"{where}: invalid base64; re-record the pin") from None


def _stream_json(obs: Observation, name: str, data: bytes) -> Union[str, dict[str, str]]:
    if name in obs.hashed:
        return {"sha256": data.decode("ascii")}
    return encode_bytes(data)


def observation_to_json(obs: Observation) -> dict[str, Any]:
    """The observation fields of a pin as JSON-ready data."""
    files: dict[str, Any] = {}
    for path, entry in sorted(obs.files.items()):
        item: dict[str, Any] = {"sha256": entry.sha256, "mode": entry.mode}
        if entry.text is not None:
            item["text"] = entry.text
        files[path] = item
    return {
        "exit_code": obs.exit_code,
        "stdout": _stream_json(obs, "stdout", obs.stdout),
        "stderr": _stream_json(obs, "stderr", obs.stderr),
        "files": files,
        "env_read": obs.env_read,
        "norm_counts": dict(sorted(obs.norm_counts.items())),
    }


def case_to_json(case: Case) -> dict[str, Any]:
    """The input fields of a pin as JSON-ready data (pins.jsonl form)."""
    data: dict[str, Any] = {"id": case.id, "argv": list(case.argv)}
    # Optional fields are written only when set, so older files and older charpins agree.
    if case.argv0 is not None:
        data["argv0"] = case.argv0
    data.update(
        {
            "env": dict(sorted(case.env.items())),
            "stdin": encode_bytes(case.stdin),
            "cwd_rel": case.cwd_rel,
        }
    )
    if case.fixtures is not None:
        data["fixtures"] = case.fixtures
    if case.expect_crash:
        data["expect_crash"] = True
    if case.crash_frames:
        data["crash_frames"] = True
    if case.merge_stderr:
        data["merge_stderr"] = True
    return data
