"""Load and save pins in both formats (pins.jsonl and case folders). Runs on boxes; stdlib only.

pins.jsonl: one JSON object a line, closed field list (unknown keys are refused):
  id, argv, argv0?, env, stdin, cwd_rel, fixtures?, expect_crash?, crash_frames?, exit_code,
  stdout, stderr,
  files, env_read, norm_counts (the optional ones are written only when set).
A line without exit_code is an input waiting for `charpin pins record`.
Case folders: <cases>/<name>/{target.txt, argv.json, env.json, stdin.bin, expect.json?, work/} with
the golden in <goldens>/<name>.json (the observation fields and "case_format": 2). target.txt names
what runs (a script, console script or command, or `-m MODULE`, which loads as the two words argv
starts with); argv.json is the whole process vector as seed 004 lays it out, the program's own
name (sys.argv[0], Case.argv0) first, then its arguments. Goldens without case_format were
recorded when argv.json held only the arguments after the target: such a folder is refused until
`charpin pins migrate` rewrites it (migrate_folders), never reinterpreted from its contents.
Byte fields (stdin, stdout, stderr) are UTF-8 strings, or {"b64": "..."} when not valid UTF-8.
A golden's stdout or stderr may also be {"sha256": "HEX"}: a hash-only stream (an imported golden
that kept no text), compared by digest (Observation.hashed). merge_stderr? (written only when set)
sends the program's stderr into its stdout pipe, as cram and trycmd run commands.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from charpin_runner.config import PinsConfig
from charpin_runner.errors import ConfigError, IntegrityError, UsageError
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
from charpin_runner.pins.targets import REPO_PREFIX, pythonpath_dirs
from charpin_runner.schema import convert

# The golden of a case folder whose argv.json is the whole process vector says so; one without
# it was recorded when argv.json held only the arguments after the target (charpin before #11).
CASE_FORMAT = 2
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass
class _B64:
    b64: str


@dataclass
class _Sha256:
    # A hash-only golden stream (imported): only its sha256 is known.
    sha256: str


@dataclass
class _FileJson:
    sha256: str
    mode: int
    text: Optional[str] = None


@dataclass
class _ObservationJson:
    exit_code: int
    stdout: Union[str, _B64, _Sha256] = ""
    stderr: Union[str, _B64, _Sha256] = ""
    files: dict[str, _FileJson] = field(default_factory=dict)
    env_read: Optional[list[str]] = None
    norm_counts: dict[str, int] = field(default_factory=dict)
    # Only in a case folder's golden: CASE_FORMAT, or None for the arguments-only layout.
    case_format: Optional[int] = None


@dataclass
class _ExpectJson:
    crash: bool = False
    frames: bool = False  # Case.crash_frames


@dataclass
class _PinLine:
    id: str
    argv: list[str]
    argv0: Optional[str] = None
    env: dict[str, str] = field(default_factory=dict)
    stdin: Union[str, _B64] = ""
    cwd_rel: str = "."
    fixtures: Optional[str] = None
    expect_crash: bool = False
    crash_frames: bool = False
    merge_stderr: bool = False
    exit_code: Optional[int] = None
    stdout: Union[str, _B64, _Sha256] = ""
    stderr: Union[str, _B64, _Sha256] = ""
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


def _bytes(value: Union[str, _B64, _Sha256], where: str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, _Sha256):
        if not _HEX64.fullmatch(value.sha256):
            raise IntegrityError(
                f"{where}: sha256 {value.sha256!r} is not 64 lowercase hex digits; fix or "
                "re-import the pin"
            )
        return value.sha256.encode("ascii")
    return decode_b64(value.b64, where)


def _observation(raw: Any, where: str) -> Observation:
    hashed = tuple(n for n in ("stdout", "stderr") if isinstance(getattr(raw, n), _Sha256))
    return Observation(
        exit_code=raw.exit_code,
        stdout=_bytes(raw.stdout, where),
        stderr=_bytes(raw.stderr, where),
        files={p: OutFile(f.sha256, f.mode, f.text) for p, f in raw.files.items()},
        env_read=None if raw.env_read is None else sorted(raw.env_read),
        norm_counts=dict(raw.norm_counts),
        hashed=hashed,
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
        argv0=line.argv0,
        expect_crash=line.expect_crash,
        crash_frames=line.crash_frames,
        merge_stderr=line.merge_stderr,
    )
    if not case.argv:
        raise IntegrityError(f"{where}: argv is empty - at `$.argv`; give the program to run")
    target = case.argv[: target_words(case.argv)]
    if case.argv0 is not None and not names_target(case.argv0, target):
        # The rule case folders follow (load_folder), so each format holds what the other does.
        raise IntegrityError(
            f"{where}: argv0 {case.argv0!r} does not name the target {' '.join(target)!r} - at "
            "`$.argv0`; give the program's own name (the target's file name, or its module's)"
        )
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


def _target(folder: Path, label: str) -> tuple[str, ...]:
    """target.txt as the words argv starts with: `-m MODULE` is two, anything else one."""
    target_file = folder / "target.txt"
    if not target_file.is_file():
        raise IntegrityError(f"{label}: target.txt is missing; write the script path or command")
    target = target_file.read_text(encoding="utf-8").strip()
    if not target:
        raise IntegrityError(f"{label}/target.txt is empty; write the script path or command")
    # `-m package.module` names a module (two words); anything else is one word, spaces and all.
    return tuple(target.split()) if target.startswith("-m ") else (target,)


def target_words(argv: tuple[str, ...]) -> int:
    """How many words of argv name the target (what target.txt holds): 2 for `-m MODULE`."""
    return 2 if argv[:1] == ("-m",) and len(argv) > 1 else 1


def program_name(target: tuple[str, ...]) -> str:
    """The name a new case folder gives its program (argv.json[0]): the target as written, or
    the module of `-m MODULE`."""
    return target[1] if target[0] == "-m" else target[0]


def names_target(name: str, target: tuple[str, ...]) -> bool:
    """Whether argv[0] names the program target.txt runs: the same file name (any folder, or
    $REPO/), or for `-m pkg.mod` the module (`pkg.mod`, `mod`) or its file (`mod.py`,
    `__main__.py`). A folder's first argument is never taken for a program name."""
    base = posixpath.basename(name.replace("\\", "/"))
    if target[0] == "-m":
        module = target[1]
        last = module.rsplit(".", 1)[-1]
        return name in (module, last) or base in (f"{last}.py", "__main__.py")
    return bool(base) and base == posixpath.basename(target[0].replace("\\", "/"))


def _shown(words: list[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def _read_golden(golden_path: Path, repo: Path) -> tuple[str, Any]:
    glabel = (
        golden_path.relative_to(repo).as_posix() if _inside(golden_path, repo) else str(golden_path)
    )
    return glabel, _strict(_read_json(golden_path, glabel), _ObservationJson, glabel)


def _read_expect(folder: Path, label: str) -> _ExpectJson:
    path = folder / "expect.json"
    if not path.is_file():
        return _ExpectJson()
    where = f"{label}/expect.json"
    expect: _ExpectJson = _strict(_read_json(path, where), _ExpectJson, where)
    return expect


def load_folder(repo: Path, folder: Path, goldens: Path) -> Pin:
    """Read one case folder and its golden, if recorded.

    argv.json is the whole process vector (seed 004): argv[0] the program's own name, the rest
    its arguments. A golden recorded in the older arguments-only layout is refused with the fix
    (`charpin pins migrate`), and so is an argv[0] that does not name the target: an
    arguments-only argv.json is never run as if its first argument were the program's name.
    """
    name = folder.name
    label = folder.relative_to(repo).as_posix()
    check_id(name, label)
    target = _target(folder, label)
    argv_path = folder / "argv.json"
    vector: Optional[list[str]] = None
    if argv_path.is_file():
        raw_argv = _read_json(argv_path, f"{label}/argv.json")
        vector = _strict(raw_argv, list[str], f"{label}/argv.json")
    golden_path = goldens / f"{name}.json"
    golden = None
    if golden_path.is_file():
        glabel, raw = _read_golden(golden_path, repo)
        if raw.case_format is None:
            old = _shown([*target, *(vector or [])])
            raise IntegrityError(
                f"{label}: {glabel} was recorded when argv.json held only the arguments after "
                f"the target (it ran `{old}`); run `charpin pins migrate` once to rewrite "
                "argv.json as the whole process vector, the program's name first (if argv.json "
                "already starts with it, that golden recorded the wrong argv: delete it and "
                "record again)"
            )
        if raw.case_format != CASE_FORMAT:
            raise IntegrityError(
                f"{glabel}: case_format {raw.case_format} is not one this charpin reads "
                f"({CASE_FORMAT}); upgrade charpin"
            )
        golden = _observation(raw, glabel)
    if vector is not None:
        suggestion = json.dumps([program_name(target), *vector], ensure_ascii=False)
        if not vector:
            raise IntegrityError(
                f"{label}/argv.json is empty; write the whole process vector, the program's "
                f"name first, e.g. {json.dumps([program_name(target)])}"
            )
        if not names_target(vector[0], target):
            raise IntegrityError(
                f"{label}/argv.json: argv[0] {vector[0]!r} does not name the target "
                f"{' '.join(target)!r}; argv.json is the whole process vector, the program's "
                f"name first (e.g. {suggestion}); a folder written for an older charpin "
                f"(arguments only) is rewritten once by `charpin pins migrate {name}`"
            )
    env: Any = {}
    if (folder / "env.json").is_file():
        env = _read_json(folder / "env.json", f"{label}/env.json")
    env = _strict(env, dict[str, str], f"{label}/env.json")
    stdin = (folder / "stdin.bin").read_bytes() if (folder / "stdin.bin").is_file() else b""
    work = folder / "work"
    expect = _read_expect(folder, label)
    case = Case(
        id=name,
        argv=(*target, *(vector or [])[1:]),
        env=dict(env),
        stdin=stdin,
        cwd_rel=".",
        fixtures=work.relative_to(repo).as_posix() if work.is_dir() else None,
        origin=label,
        # No argv.json: the program runs under the name its target gives it, with no arguments.
        argv0=vector[0] if vector else None,
        expect_crash=expect.crash,
        crash_frames=expect.frames,
    )
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
    """Refuse a repository that has no pins at all (exit 64), naming how to record the first
    (a bare `charpin pins record` has nothing to record either)."""
    first = "record the first with `charpin pins record --id NAME -- PROGRAM ARGS`"
    if not pins.present:
        raise ConfigError(
            f"no pins yet: neither {config.file} nor {config.cases}/ exists; {first}, or set "
            "[tool.charpin.pins] file and cases to where your pins are"
        )
    if not pins.all:
        held = [config.file] if pins.jsonl_path.is_file() else []
        held += [f"{config.cases}/"] if pins.cases_dir.is_dir() else []
        verb = "holds" if len(held) == 1 else "hold"
        raise ConfigError(f"no pins yet: {' and '.join(held)} {verb} none; {first}")


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
    """Write goldens/<id>.json atomically, marked as a golden of the process-vector layout."""
    data = observation_to_json(obs)
    data["case_format"] = CASE_FORMAT
    _write_json(goldens / f"{pin_id}.json", data)


def _write_json(path: Path, data: Any) -> None:
    text = json.dumps(data, sort_keys=True, indent=1, ensure_ascii=False)
    write_repo_file(path, (text + "\n").encode("utf-8"))


def save_expect(folder: Path, expect_crash: bool, frames: bool = False) -> None:
    """A case folder's expect.json: {"crash": true} when the pin records a crash on purpose
    (with `"frames": true` when its traceback's frames are compared too)."""
    path = folder / "expect.json"
    if expect_crash:
        write_repo_file(path, b'{"crash": true, "frames": true}\n' if frames else b'{"crash": true}\n')
    elif path.is_file():
        path.unlink()


def module_file(repo: Path, config: PinsConfig, module: str) -> Optional[str]:
    """The repo-relative file `-m module` runs from the pins' pythonpath, if it is in the
    repository (`pkg/__main__.py` for a package, `pkg/mod.py` for a module)."""
    rel = Path(*module.split("."))
    for folder in pythonpath_dirs(repo, config.pythonpath):
        for candidate in (
            Path(folder) / rel / "__main__.py",
            Path(folder) / rel.with_suffix(".py"),
        ):
            if candidate.is_file() and _inside(candidate, repo):
                return candidate.relative_to(repo).as_posix()
    return None


def folder_argv0(repo: Path, config: PinsConfig, case: Case) -> str:
    """argv.json[0] for case: its argv0, or the name under which its target starts it without
    one, so the folder runs exactly as the case did (`$REPO/` for a repository path)."""
    if case.argv0 is not None:
        return case.argv0
    first = case.argv[0]
    if first == "-m" and len(case.argv) > 1:
        found = module_file(repo, config, case.argv[1])
        # A module outside the repository (the standard library's) is named by its module.
        return REPO_PREFIX + found if found is not None else case.argv[1]
    if not os.path.isabs(first) and (first.endswith(".py") or "/" in first):
        return REPO_PREFIX + first
    return first


def save_case_folder(
    repo: Path, config: PinsConfig, case: Case, golden: Optional[Observation] = None
) -> Path:
    """Write case as the case folder <cases>/<id>/ in the process-vector layout (target.txt,
    argv.json with the program's name first, env.json, stdin.bin, expect.json when it expects a
    crash, work/ copied from its fixtures), and its golden when given. Returns the folder."""
    if case.cwd_rel != ".":
        raise UsageError(
            f"pin {case.id} runs in {case.cwd_rel!r} inside its work folder, which a case folder "
            "cannot say (work/ is its cwd); keep it in pins.jsonl"
        )
    folder = repo / config.cases / check_id(case.id, "case folder")
    split = target_words(case.argv)
    target, args = list(case.argv[:split]), list(case.argv[split:])
    name = folder_argv0(repo, config, case)
    if not names_target(name, tuple(target)):
        raise UsageError(
            f"pin {case.id}: argv0 {name!r} does not name the target {' '.join(target)!r}, "
            "which a case folder's argv.json[0] must; give the program's own name"
        )
    work = folder / "work"
    source = None if case.fixtures is None else repo / check_rel(case.fixtures, "fixtures")
    if source is not None and source.resolve() != work.resolve():
        if not source.is_dir():
            raise UsageError(f"pin {case.id}: fixtures folder {case.fixtures} is missing")
        if work.exists():
            raise UsageError(f"{work.relative_to(repo).as_posix()} exists; remove it first")
        shutil.copytree(source, work, symlinks=True)
    write_repo_file(folder / "target.txt", (" ".join(target) + "\n").encode("utf-8"))
    vector = [name, *args]
    argv_text = json.dumps(vector, ensure_ascii=False) + "\n"
    write_repo_file(folder / "argv.json", argv_text.encode("utf-8"))
    env_text = json.dumps(dict(sorted(case.env.items())), ensure_ascii=False) + "\n"
    write_repo_file(folder / "env.json", env_text.encode("utf-8"))
    write_repo_file(folder / "stdin.bin", case.stdin)
    work.mkdir(exist_ok=True)  # the recipe's layout has one, the run's cwd, even when empty
    save_expect(folder, case.expect_crash, case.crash_frames)
    if golden is not None:
        save_golden(repo / config.goldens, case.id, golden)
    return folder


@dataclass(frozen=True)
class Migrated:
    """One case folder `charpin pins migrate` rewrote: argv.json before and after."""

    label: str
    before: list[str]
    after: list[str]
    golden: Optional[str]  # the golden it marked as the process-vector layout's, if any


def migrate_folders(
    repo: Path, config: PinsConfig, names: list[str]
) -> tuple[list[Migrated], list[str]]:
    """Rewrite case folders of the arguments-only layout as whole process vectors.

    Which folders: those named, else every folder whose golden has no case_format (recorded by
    an older charpin: certain, not guessed). argv.json becomes [NAME, *arguments], NAME the one
    the program saw before (folder_argv0: `$REPO/script.py`, a module's file, a console script's
    name), and the golden is marked with case_format. Returns what was rewritten, and notes on
    folders without a golden whose argv.json does not read as a process vector."""
    cases = repo / config.cases
    goldens = repo / config.goldens
    if not cases.is_dir():
        raise UsageError(f"no {config.cases}/ folder here: there are no case folders to migrate")
    folders = {p.name: p for p in sorted(cases.iterdir()) if p.is_dir()}
    unknown = sorted(set(names) - set(folders))
    if unknown:
        raise UsageError(f"no case folder {', '.join(unknown)} under {config.cases}/")
    selected: list[tuple[Path, Optional[Path]]] = []
    notes = []
    for name, folder in folders.items():
        if names and name not in names:
            continue
        label = folder.relative_to(repo).as_posix()
        path = goldens / f"{name}.json"
        golden_path = path if path.is_file() else None
        # None: no golden yet; False: recorded in the arguments-only layout; True: migrated.
        stamped: Optional[bool] = None
        if golden_path is not None:
            stamped = _read_golden(golden_path, repo)[1].case_format is not None
        if names and stamped:
            raise UsageError(
                f"{label} is already in the process-vector layout (its golden has case_format); "
                "nothing to migrate"
            )
        if names or stamped is False:
            selected.append((folder, golden_path))
        elif stamped is None:
            try:
                load_folder(repo, folder, goldens)
            except IntegrityError:
                notes.append(
                    f"{label} has no golden and its argv.json is not a process vector; if it "
                    f"holds only the arguments, run `charpin pins migrate {name}`"
                )
    plans = []
    for folder, golden_path in selected:
        label = folder.relative_to(repo).as_posix()
        target = _target(folder, label)
        before: list[str] = []
        if (folder / "argv.json").is_file():
            raw = _read_json(folder / "argv.json", f"{label}/argv.json")
            before = _strict(raw, list[str], f"{label}/argv.json")
        case = Case(id=folder.name, argv=(*target, *before))
        plans.append(
            (label, folder, golden_path, before, [folder_argv0(repo, config, case), *before])
        )
    done = []
    for label, folder, golden_path, before, after in plans:
        argv_text = json.dumps(after, ensure_ascii=False) + "\n"
        write_repo_file(folder / "argv.json", argv_text.encode("utf-8"))
        glabel = None
        if golden_path is not None:
            glabel = _read_golden(golden_path, repo)[0]
            data = _read_json(golden_path, glabel)
            data["case_format"] = CASE_FORMAT
            _write_json(golden_path, data)
        done.append(Migrated(label, before, after, glabel))
    return done, notes


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
