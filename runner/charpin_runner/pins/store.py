"""Load and save pins in both formats (pins.jsonl and case folders). Runs on boxes; stdlib only.

pins.jsonl: one JSON object a line, closed field list (unknown keys are refused):
  id, argv, env, stdin, cwd_rel, fixtures?, exit_code, stdout, stderr, files, env_read, norm_counts.
A line without exit_code is an input waiting for `charpin pins record`.
Case folders: <cases>/<name>/{target.txt, argv.json, env.json, stdin.bin, work/} with the golden in
<goldens>/<name>.json (the observation fields only). target.txt holds argv[0] (a script, console
script or command), or `-m MODULE`, which loads as the two words argv starts with.
Byte fields (stdin, stdout, stderr) are UTF-8 strings, or {"b64": "..."} when not valid UTF-8.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from charpin_runner.config import PinsConfig
from charpin_runner.errors import ConfigError, IntegrityError
from charpin_runner.pins.model import (
    Case,
    Observation,
    OutFile,
    Pin,
    case_to_json,
    check_id,
    decode_b64,
    observation_to_json,
)
from charpin_runner.schema import convert


@dataclass
class _B64:
    b64: str


@dataclass
class _FileJson:
    sha256: str
    mode: int
    text: Optional[str] = None


@dataclass
class _ObservationJson:
    exit_code: int
    stdout: Union[str, _B64] = ""
    stderr: Union[str, _B64] = ""
    files: dict[str, _FileJson] = field(default_factory=dict)
    env_read: Optional[list[str]] = None
    norm_counts: dict[str, int] = field(default_factory=dict)


@dataclass
class _PinLine:
    id: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stdin: Union[str, _B64] = ""
    cwd_rel: str = "."
    fixtures: Optional[str] = None
    exit_code: Optional[int] = None
    stdout: Union[str, _B64] = ""
    stderr: Union[str, _B64] = ""
    files: dict[str, _FileJson] = field(default_factory=dict)
    env_read: Optional[list[str]] = None
    norm_counts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PinSet:
    """Every pin of a repository, with where each format lives."""

    jsonl: list[Pin]
    folders: list[Pin]
    jsonl_path: Path
    cases_dir: Path
    goldens_dir: Path

    @property
    def all(self) -> list[Pin]:
        return [*self.jsonl, *self.folders]

    @property
    def present(self) -> bool:
        return self.jsonl_path.is_file() or self.cases_dir.is_dir()


def _strict(data: Any, cls: Any, where: str) -> Any:
    """schema.convert, but a bad pins file is an integrity failure (exit 8), not a config error."""
    try:
        return convert(data, cls, "$")
    except ConfigError as exc:
        raise IntegrityError(f"{where}: {exc}; fix or re-record it") from None


def _bytes(value: Union[str, _B64], where: str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    return decode_b64(value.b64, where)


def _observation(raw: Any, where: str) -> Observation:
    return Observation(
        exit_code=raw.exit_code,
        stdout=_bytes(raw.stdout, where),
        stderr=_bytes(raw.stderr, where),
        files={p: OutFile(f.sha256, f.mode, f.text) for p, f in raw.files.items()},
        env_read=None if raw.env_read is None else sorted(raw.env_read),
        norm_counts=dict(raw.norm_counts),
    )


def check_rel(rel: str, where: str) -> str:
    parts = Path(rel).parts
    if Path(rel).is_absolute() or ".." in parts:
        raise IntegrityError(
            f"{where}: path {rel!r} leaves its root; use a relative path without '..'"
        )
    return rel


def parse_line(text: str, where: str) -> Pin:
    """Parse one pins.jsonl line; errors name the line and the `$.path`."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise IntegrityError(f"{where}: not JSON ({exc}); fix or re-record the line") from None
    line = _strict(data, _PinLine, where)
    case = Case(
        id=check_id(line.id, where),
        argv=tuple(line.argv),
        env=dict(line.env),
        stdin=_bytes(line.stdin, where),
        cwd_rel=check_rel(line.cwd_rel, where),
        fixtures=None if line.fixtures is None else check_rel(line.fixtures, where),
        origin=where,
    )
    if not case.argv:
        raise IntegrityError(f"{where}: argv is empty - at `$.argv`; give the program to run")
    golden = None if line.exit_code is None else _observation(line, where)
    return Pin(case, golden)


def load_jsonl(path: Path, label: str) -> list[Pin]:
    """Read pins.jsonl; blank lines are skipped; a corrupt line is refused with its number."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise IntegrityError(f"{label} is not UTF-8; restore it from version control") from None
    pins = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{label} line {number}"
        try:
            pins.append(parse_line(raw, where))
        except IntegrityError as exc:
            message = str(exc)
            if not message.startswith(where):
                message = f"{where}: {message}"
            raise IntegrityError(message) from None
    return pins


def _read_json(path: Path, label: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise IntegrityError(f"{label}: cannot read JSON ({exc}); fix or re-record it") from None


def load_folder(repo: Path, folder: Path, goldens: Path) -> Pin:
    """Read one case folder and its golden, if recorded."""
    name = folder.name
    label = folder.relative_to(repo).as_posix()
    check_id(name, label)
    target_file = folder / "target.txt"
    if not target_file.is_file():
        raise IntegrityError(f"{label}: target.txt is missing; write the script path or command")
    target = target_file.read_text(encoding="utf-8").strip()
    if not target:
        raise IntegrityError(f"{label}/target.txt is empty; write the script path or command")
    argv: Any = []
    if (folder / "argv.json").is_file():
        argv = _read_json(folder / "argv.json", f"{label}/argv.json")
    argv = _strict(argv, list[str], f"{label}/argv.json")
    env: Any = {}
    if (folder / "env.json").is_file():
        env = _read_json(folder / "env.json", f"{label}/env.json")
    env = _strict(env, dict[str, str], f"{label}/env.json")
    stdin = (folder / "stdin.bin").read_bytes() if (folder / "stdin.bin").is_file() else b""
    work = folder / "work"
    # `-m package.module` names a module (two words); anything else is one word, spaces and all.
    head = tuple(target.split()) if target.startswith("-m ") else (target,)
    case = Case(
        id=name,
        argv=(*head, *argv),
        env=dict(env),
        stdin=stdin,
        cwd_rel=".",
        fixtures=work.relative_to(repo).as_posix() if work.is_dir() else None,
        origin=label,
    )
    golden_path = goldens / f"{name}.json"
    golden = None
    if golden_path.is_file():
        glabel = (
            golden_path.relative_to(repo).as_posix()
            if _inside(golden_path, repo)
            else str(golden_path)
        )
        raw = _strict(_read_json(golden_path, glabel), _ObservationJson, glabel)
        golden = _observation(raw, glabel)
    return Pin(case, golden)


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def load_pins(repo: Path, config: PinsConfig) -> PinSet:
    """Load both formats into one list; ids must be unique across them."""
    jsonl_path = repo / config.file
    cases_dir = repo / config.cases
    goldens_dir = repo / config.goldens
    jsonl = load_jsonl(jsonl_path, config.file) if jsonl_path.is_file() else []
    folders = []
    if cases_dir.is_dir():
        for folder in sorted(p for p in cases_dir.iterdir() if p.is_dir()):
            try:
                folders.append(load_folder(repo, folder, goldens_dir))
            except IntegrityError as exc:
                label = folder.relative_to(repo).as_posix()
                message = str(exc)
                raise IntegrityError(
                    message if label in message else f"{label}: {message}"
                ) from None
    seen: dict[str, str] = {}
    for pin in [*jsonl, *folders]:
        if pin.case.id in seen:
            raise IntegrityError(
                f"pin id {pin.case.id!r} appears in {seen[pin.case.id]} and {pin.case.origin}; "
                "rename one of them"
            )
        seen[pin.case.id] = pin.case.origin
    return PinSet(jsonl, folders, jsonl_path, cases_dir, goldens_dir)


def require_pins(pins: PinSet, config: PinsConfig) -> None:
    """Refuse a repository that declares no pins at all (exit 64)."""
    if not pins.present:
        raise ConfigError(
            f"no pins: neither {config.file} nor {config.cases}/ exists; "
            "record some with `charpin pins record` or set [tool.charpin.pins]"
        )


def pin_line(pin: Pin) -> str:
    """One pins.jsonl line (fields in the documented order, UTF-8, no trailing newline)."""
    data = case_to_json(pin.case)
    if pin.golden is not None:
        data.update(observation_to_json(pin.golden))
    return json.dumps(data, ensure_ascii=False)


def save_jsonl(path: Path, pins: list[Pin]) -> None:
    """Rewrite pins.jsonl atomically, keeping pin order."""
    text = "".join(pin_line(pin) + "\n" for pin in pins)
    write_repo_file(path, text.encode("utf-8"))


def save_golden(goldens: Path, pin_id: str, obs: Observation) -> None:
    """Write goldens/<id>.json atomically."""
    text = json.dumps(observation_to_json(obs), sort_keys=True, indent=1, ensure_ascii=False)
    write_repo_file(goldens / f"{pin_id}.json", (text + "\n").encode("utf-8"))


def current_umask() -> int:
    """This process's umask, read without changing it where Linux allows."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    # Elsewhere the umask can only be read by setting it: briefly, and back at once.
    old = os.umask(0o077)
    os.umask(old)
    return old


def write_repo_file(path: Path, data: bytes) -> None:
    """Replace path atomically (temp file + rename) with the mode a plain write would give.

    The temp file alone would be 0600: a file the user commits must honour their umask, and an
    existing file keeps its mode.
    """
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~current_umask()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=str(path.parent))
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
