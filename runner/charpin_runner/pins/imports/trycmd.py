"""trycmd cases (`.toml`, `.trycmd`, `.md`), read exactly as trycmd's schema.rs reads them.

`.toml` (one command; keys as trycmd's OneShot, kebab-case): `bin.name`, `bin.path` or
`bin = "ignore"`; `args` (a list, or one string split like a shell); `env.add`, `env.remove`,
`env.inherit`; `stdin`, `stdout`, `stderr` (inline text), `stderr-to-stdout`, `status`
("success" by default, "failed", "interrupted", "skipped", or `status.code = N`), `binary`,
`timeout`, `fs.cwd`, `fs.base`, `fs.sandbox`. Beside X.toml: X.stdin, X.stdout, X.stderr (used
when the inline key is absent), X.in/ (the folder the command runs in) and X.out/. trycmd ignores
keys it does not know; the importer refuses them (it cannot carry what it does not understand).

`.trycmd`/`.md` (literate): fenced blocks with no info string, `trycmd` or `console` (not
`ignore`); `$ ` starts a command (leading KEY=VALUE words are its env), `> ` continues it,
`? STATUS` gives its status, and the lines up to the next `$ ` or the fence are stdout and stderr
merged, the last newline dropped. Each command is one step; each step becomes one pin, with
merge_stderr. A step's id is the line of its `$`, as trycmd names it.

Comparison, as trycmd does in text mode: both sides' newlines normalised, the actual's
backslashes read as `/`, the actual's [ROOT], [CWD] and --var values redacted to their
placeholders, then `...` lines and `[..]` in a line elide, [EXE] is empty. An absent stdout or
stderr is not checked by trycmd; the pin checks what the unchanged program prints. `binary =
true` compares bytes. One verification run settles each case; the golden is that run, exact.
"""

from __future__ import annotations

import difflib
import shlex
import shutil
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

from charpin_runner import tomlread
from charpin_runner.config import PinsConfig
from charpin_runner.errors import IntegrityError, UsageError
from charpin_runner.inventory.scripts import find_scripts
from charpin_runner.pins.execute import Run
from charpin_runner.pins.imports.common import Draft, Plan, Settled, pin_id, repo_relative
from charpin_runner.pins.model import Case

FORMAT = "trycmd"

_TOP = frozenset(
    {
        "bin",
        "args",
        "env",
        "stdin",
        "stdout",
        "stderr",
        "stderr-to-stdout",
        "status",
        "binary",
        "timeout",
        "fs",
    }
)
_STATUSES = ("success", "failed", "interrupted", "skipped")
Status = Union[str, int]


@dataclass
class Step:
    """One command as trycmd holds it (schema.rs Step), before charpin resolves its program."""

    where: str
    bin_name: Optional[str] = None
    bin_path: Optional[str] = None
    ignore: bool = False
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    stdin: Optional[bytes] = None
    merge: bool = False
    status: Status = "success"
    stdout: Optional[bytes] = None
    stderr: Optional[bytes] = None
    binary: bool = False
    notes: list[str] = field(default_factory=list)


# -- snapbox's text comparison -------------------------------------------------------------------


def normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def normalize_paths(text: str) -> str:
    return text.replace("\\", "/")


def redact(text: str, values: dict[str, str]) -> str:
    """Replace each value with its placeholder: longer values first, as snapbox orders them."""
    by_value: dict[str, list[str]] = {}
    for placeholder, value in values.items():
        if value:
            by_value.setdefault(value, []).append(placeholder)
    for value in sorted(by_value, key=lambda v: (-len(v), v)):
        for placeholder in sorted(by_value[value]):
            text = text.replace(value, placeholder)
    return text


def _lines(text: str) -> list[str]:
    """Lines with their terminators, split at \n only (snapbox's LinesWithTerminator)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _is_elide(line: str) -> bool:
    return line in ("...\n", "...")


def line_matches(line: str, pattern: str, values: dict[str, str]) -> bool:
    """snapbox's line_matches: a literal match first, then the line's [ROOT], [CWD] and --var
    values redacted to their placeholders, [EXE] dropped from the pattern, and `[..]` matching
    anything within the line. (Redacting line by line after the literal check is trycmd 0.14's
    order; 0.15 redacts the whole output first, so a line that keeps a literal value fails
    there and passes here.)"""
    if line == pattern:
        return True
    line = redact(line, values)
    unused = [name for name, value in values.items() if not value]
    if "[" in pattern:
        for name in unused:
            pattern = pattern.replace(name, "")
    sections = pattern.split("[..]")
    for index, section in enumerate(sections):
        if not line.startswith(section):
            return False
        remainder = line[len(section) :]
        if index + 1 < len(sections):
            following = sections[index + 1]
            if not following:
                line = ""
            else:
                found = remainder.find(following)
                if found >= 0:
                    line = remainder[found:]
        else:
            return remainder == ""
    return False


def normalize_to_pattern(text: str, pattern: str, values: dict[str, str]) -> str:
    """snapbox's normalize_str_to_redactions: actual text rewritten to the pattern where it
    matches, so that comparing the result with the pattern decides."""
    if text == pattern:
        return text
    normalized: list[str] = []
    index = 0
    inputs = _lines(text)
    patterns = _lines(pattern)
    p = 0
    while p < len(patterns):
        pattern_line = patterns[p]
        p += 1
        if _is_elide(pattern_line):
            if p < len(patterns):
                following = patterns[p]
                for offset, line in enumerate(inputs[index:]):
                    if line_matches(line, following, values):
                        normalized.append(pattern_line)
                        index += offset
                        break
                else:
                    break
                continue
            normalized.append(pattern_line)
            index = len(inputs)
            break
        if index >= len(inputs):
            break
        line = inputs[index]
        index += 1
        matched = line_matches(line, pattern_line, values)
        normalized.append(pattern_line if matched else redact(line, values))
    normalized.extend(inputs[index:])
    return "".join(normalized)


def text_matches(actual: bytes, expected: str, values: dict[str, str]) -> tuple[bool, str]:
    """(matches, the actual as trycmd shows it) for a text-mode stream."""
    try:
        text = actual.decode("utf-8")
    except UnicodeDecodeError:
        return False, "(not UTF-8: trycmd cannot read it as text; set binary = true)"
    text = normalize_newlines(normalize_paths(text))
    shown = normalize_to_pattern(text, expected, values)
    return shown == expected, shown


def status_ok(status: Status, code: int) -> bool:
    if status == "success":
        return code == 0
    if status == "failed":
        return code > 0
    if status == "interrupted":
        return code < 0
    return code == status


# -- reading the two formats ---------------------------------------------------------------------


def _toml(path: Path, label: str) -> dict[str, Any]:
    try:
        return tomlread.loads(path.read_bytes().decode("utf-8"))
    except ImportError:  # pragma: no cover - Python < 3.11 without tomli
        raise UsageError(
            f"{label}: this Python cannot read TOML (no tomllib before 3.11, no tomli); "
            "`pip install charpin-runner` brings tomli, or run the import with Python >= 3.11"
        ) from None
    except (OSError, ValueError) as exc:
        raise IntegrityError(f"{label}: cannot read TOML ({exc})") from None


def _refuse(label: str, what: str) -> IntegrityError:
    return IntegrityError(f"{label}: {what}")


def _table(value: Any, allowed: set[str], label: str, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _refuse(label, f"`{where}` must be a table")
    for key in value:
        if key not in allowed:
            raise _refuse(
                label,
                f"unknown key `{where}.{key}` (trycmd ignores keys it does not know; charpin "
                "cannot carry what it does not understand: remove it)",
            )
    return value


def _str(value: Any, label: str, where: str) -> str:
    if not isinstance(value, str):
        raise _refuse(label, f"`{where}` must be a string")
    return value


def read_toml(path: Path, label: str) -> tuple[Step, dict[str, Any]]:
    """One `.toml` case and its fs table."""
    data = _toml(path, label)
    for key in data:
        if key not in _TOP:
            raise _refuse(
                label,
                f"unknown key `{key}` (trycmd ignores keys it does not know; charpin cannot "
                "carry what it does not understand: remove it)",
            )
    step = Step(where=label)
    binary = data.get("binary", False)
    if not isinstance(binary, bool):
        raise _refuse(label, "`binary` must be true or false")
    step.binary = binary
    _read_bin(step, data.get("bin"), label)
    args = data.get("args", [])
    if isinstance(args, str):
        step.args = shlex.split(args)
    elif isinstance(args, list) and all(isinstance(a, str) for a in args):
        step.args = list(args)
    else:
        raise _refuse(label, "`args` must be a list of strings or one string")
    env = _table(data.get("env", {}), {"add", "remove", "inherit"}, label, "env")
    add = env.get("add", {})
    if not isinstance(add, dict) or not all(isinstance(v, str) for v in add.values()):
        raise _refuse(label, "`env.add` must be a table of strings")
    step.env = dict(add)
    if env.get("remove"):
        step.notes.append(
            f"{label}: env.remove {env['remove']}: a pin never inherits variables, so there is "
            "nothing to remove (charpin's fixed base is PATH, LANG, TZ, HOME, TMPDIR, "
            "PYTHONHASHSEED, PYTHONDONTWRITEBYTECODE)"
        )
    if "inherit" in env:
        step.notes.append(f"{label}: env.inherit: a pin never inherits your environment")
    merge = data.get("stderr-to-stdout", False)
    if not isinstance(merge, bool):
        raise _refuse(label, "`stderr-to-stdout` must be true or false")
    step.merge = merge
    step.status = _status(data.get("status", "success"), label)
    if "timeout" in data:
        step.notes.append(
            f"{label}: timeout {data['timeout']!r} is not carried: every pin has "
            "[tool.charpin.pins] timeout"
        )
    step.stdin = _side(path, "stdin", data, label, binary, filters=False)
    step.stdout = _side(path, "stdout", data, label, binary, filters=True)
    step.stderr = _side(path, "stderr", data, label, binary, filters=True)
    fs = _table(data.get("fs", {}), {"cwd", "base", "sandbox"}, label, "fs")
    return step, fs


def _read_bin(step: Step, value: Any, label: str) -> None:
    if value is None:
        raise _refuse(label, "no `bin`: name the program with bin.name or bin.path")
    if value == "ignore":
        step.ignore = True
        return
    table = _table(value, {"name", "path"}, label, "bin")
    if len(table) != 1:
        raise _refuse(label, "`bin` takes one of name or path")
    if "name" in table:
        step.bin_name = _str(table["name"], label, "bin.name")
    else:
        step.bin_path = _str(table["path"], label, "bin.path")


def _status(value: Any, label: str) -> Status:
    if isinstance(value, str) and value in _STATUSES:
        return value
    if isinstance(value, dict) and set(value) == {"code"} and isinstance(value["code"], int):
        return int(value["code"])
    raise _refuse(
        label, f"`status` {value!r} is not success, failed, interrupted, skipped or {{code = N}}"
    )


def _side(
    path: Path, name: str, data: dict[str, Any], label: str, binary: bool, filters: bool
) -> Optional[bytes]:
    """The inline value of key name, else the side file X.<name> (as trycmd reads them)."""
    if name in data:
        return _str(data[name], label, name).encode("utf-8")
    side = path.with_suffix(f".{name}")
    if not side.is_file():
        return None
    raw = side.read_bytes()
    if binary or not filters:
        return raw
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _refuse(label, f"{side.name} is not UTF-8 text; set binary = true") from None
    return normalize_newlines(normalize_paths(text)).encode("utf-8")


def parse_trycmd(text: str, label: str) -> list[Step]:
    """trycmd's parse_trycmd, step for step."""
    steps: list[Step] = []
    lines = deque(enumerate(_lines(normalize_newlines(text)), start=1))
    while True:
        fence = "```"
        in_block = False
        while lines:
            _, line = lines.popleft()
            ticks = len(line) - len(line.lstrip("`"))
            if ticks < 3:
                continue
            fence = line[:ticks]
            raw = line[ticks:].strip()
            if not raw:
                in_block = True
                break
            info = raw.split(",")
            if info[0] in ("trycmd", "console") and "ignore" not in info[1:]:
                in_block = True
                break
            while lines:  # an irrelevant block: skip to its fence
                _, inner = lines.popleft()
                if inner.startswith(fence):
                    break
            fence = "```"
        if not in_block:
            return steps
        if _read_block(lines, fence, steps, label):
            return steps


def _read_block(lines: deque[tuple[int, str]], fence: str, steps: list[Step], label: str) -> bool:
    """Read one block's steps; True when the file ended inside it."""
    while True:
        if not lines:
            return True
        number, line = lines.popleft()
        if line.startswith(fence):
            return False
        if not line.startswith("$ "):
            raise _refuse(label, f"expected `$` on line {number}, got {line.rstrip()!r}")
        words = shlex.split(line[2:].strip())
        start = number
        while lines and lines[0][1].startswith("> "):
            words.extend(shlex.split(lines.popleft()[1][2:].strip()))
        status: Status = "success"
        if lines and lines[0][1].startswith("? "):
            status = _status_text(lines.popleft()[1][2:].strip(), label)
        stdout = ""
        done = False
        while lines:
            if lines[0][1].startswith("$ "):
                break
            _, out = lines.popleft()
            if out.startswith(fence):
                done = True
                break
            stdout += out
        if stdout.endswith("\n"):
            stdout = stdout[:-1]
        env: dict[str, str] = {}
        while words and "=" in words[0]:
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        if not words:
            raise _refuse(label, f"no program on line {start}")
        steps.append(
            Step(
                where=f"{label}:{start}",
                bin_name=words[0],
                args=words[1:],
                env=env,
                merge=True,
                status=status,
                stdout=stdout.encode("utf-8"),
            )
        )
        if done:
            return False


def _status_text(text: str, label: str) -> Status:
    if text in _STATUSES:
        return text
    try:
        return int(text)
    except ValueError:
        raise _refuse(label, f"expected an exit code, got {text!r}") from None


# -- planning ------------------------------------------------------------------------------------

KEPT = [
    "the program (bin.name through --bin, or charpin's own lookup), args, env.add, stdin, the "
    "working folder (X.in/ and fs.cwd), stderr-to-stdout and every .trycmd step as a merged "
    "stream (merge_stderr); stdout, stderr and the exit status as checked by trycmd's rules",
]
LOST = [
    "`...`, `[..]`, [ROOT], [CWD], [EXE] and --var tolerance: the pin holds the exact text the "
    "unchanged program prints there (the match is checked first), and newlines and "
    "backslashes are compared as printed",
    'status "failed" and "interrupted" (any non-zero, any signal): pinned to the exact code',
    "a stream trycmd does not check (no stdout/stderr given): the pin checks it as printed now",
    "env.inherit and env.remove: a pin never inherits your environment; timeout: charpin's own",
    "a case without X.in/ ran in the folder cargo test runs in; a pin runs in an empty work folder",
]


def plan(
    repo: Path,
    config: PinsConfig,
    files: Iterable[Path],
    bins: dict[str, str],
    variables: dict[str, str],
    prefix: str = "",
) -> Plan:
    """One pin per `.toml` case and per `.trycmd`/`.md` step."""
    result = Plan(FORMAT, [], kept=KEPT, lost=LOST)
    scripts = {s.name for s in find_scripts(repo)[0]}
    for path in files:
        rel = repo_relative(repo, path, "case file")
        stem = rel.rsplit(".", 1)[0]
        out_dir = path.with_suffix(".out")
        if path.suffix == ".toml":
            step, fs = read_toml(path, rel)
            steps = [step]
            base, cwd_rel, sandbox = _fs(repo, path, fs, rel)
        elif path.suffix in (".trycmd", ".md"):
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"cannot read {rel}: {exc}") from None
            steps = parse_trycmd(text, rel)
            in_dir = path.with_suffix(".in")
            base = repo_relative(repo, in_dir, "folder") if in_dir.is_dir() else None
            cwd_rel, sandbox = ".", out_dir.exists()
        else:
            raise UsageError(f"{rel}: not a trycmd case (.toml, .trycmd or .md)")
        if sandbox:
            raise IntegrityError(
                f"{rel}: a sandboxed case ({out_dir.name}/ or fs.sandbox) checks the files the "
                f"command writes in its folder; a pin keeps only files under its output folder "
                f"{config.output}/, so this cannot be carried: have the program write there and "
                "pin that instead"
            )
        if not steps:
            result.skipped.append(f"{rel}: no trycmd block")
        for step in steps:
            _add(result, step, rel, stem, base, cwd_rel, bins, scripts, variables, repo, prefix)
    return result


def _fs(repo: Path, path: Path, fs: dict[str, Any], label: str) -> tuple[Optional[str], str, bool]:
    """(repo-relative base folder or None, cwd inside it, sandbox) as TryCmd::load decides."""
    folder = path.parent
    base = folder / _str(fs["base"], label, "fs.base") if "base" in fs else None
    cwd = folder / _str(fs["cwd"], label, "fs.cwd") if "cwd" in fs else None
    if base is None:
        in_dir = path.with_suffix(".in")
        base = in_dir if in_dir.exists() else cwd
    if cwd is None:
        cwd = base
    sandbox = fs.get("sandbox")
    if sandbox is None:
        sandbox = path.with_suffix(".out").exists()
    if not isinstance(sandbox, bool):
        raise _refuse(label, "`fs.sandbox` must be true or false")
    if base is None or cwd is None:
        return None, ".", sandbox
    try:
        rel = cwd.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        raise _refuse(label, f"fs.cwd ({cwd}) must be within fs.base ({base})") from None
    return repo_relative(repo, base, "folder"), rel, sandbox


def _add(
    result: Plan,
    step: Step,
    rel: str,
    stem: str,
    base: Optional[str],
    cwd_rel: str,
    bins: dict[str, str],
    scripts: set[str],
    variables: dict[str, str],
    repo: Path,
    prefix: str,
) -> None:
    if step.ignore:
        result.skipped.append(f'{step.where}: bin = "ignore"')
        return
    if step.status == "skipped":
        result.skipped.append(f'{step.where}: status "skipped"')
        return
    program = step.bin_path
    if step.bin_name is not None:
        program = bins.get(step.bin_name)
        if program is None and _resolves(step.bin_name, scripts, repo):
            program = step.bin_name
    if program is None:
        result.skipped.append(
            f"{step.where}: trycmd skips a bin it does not know ({step.bin_name}); map it "
            f"with --bin {step.bin_name}=PROGRAM"
        )
        return
    suffix = "" if step.where == rel else "-" + step.where.rsplit(":", 1)[1]
    case = Case(
        id=pin_id(prefix, stem + suffix),
        argv=(program, *step.args),
        env=dict(step.env),
        stdin=step.stdin or b"",
        cwd_rel=cwd_rel,
        fixtures=base,
        origin=step.where,
        merge_stderr=step.merge,
    )
    values = {"[EXE]": ""}
    if base is not None:
        values["[ROOT]"] = "$WORK"
    values["[CWD]"] = "$WORK" if cwd_rel == "." else f"$WORK/{cwd_rel}"
    values.update(variables)
    result.lost.extend(n for n in step.notes if n not in result.lost)
    result.drafts.append(Draft(case, step.where, _settler(step, values)))


def _resolves(name: str, scripts: set[str], repo: Path) -> bool:
    """Whether charpin can run this bin name: a console script, a repository file, or PATH."""
    return name in scripts or (repo / name).is_file() or shutil.which(name) is not None


def _settler(step: Step, values: dict[str, str]) -> Callable[[Run], Settled]:
    def settle(run: Run) -> Settled:
        obs = run.observation
        problems: list[str] = []
        notes: list[str] = []
        if not status_ok(step.status, obs.exit_code):
            problems.append(
                f"{step.where}: the program exits {obs.exit_code}, trycmd expects {step.status}"
            )
        if step.status in ("failed", "interrupted") and not problems:
            notes.append(f"{step.where}: status {step.status!r} pinned as exit {obs.exit_code}")
        for name, got, want in (
            ("stdout", obs.stdout, step.stdout),
            ("stderr", obs.stderr, step.stderr),
        ):
            if want is None:
                if got:
                    notes.append(
                        f"{step.where}: {name} is not checked by trycmd; pinned as printed"
                    )
                continue
            if step.binary:
                if got != want:
                    problems.append(f"{step.where}: {name} differs (binary = true)")
                continue
            ok, shown = text_matches(got, want.decode("utf-8"), values)
            if not ok:
                problems.append(f"{step.where}: {name} does not match under trycmd's rules:")
                problems.extend(_diff(want.decode("utf-8"), shown, name))
            elif got.decode("utf-8") != want.decode("utf-8"):
                notes.append(
                    f"{step.where}: {name} matched through trycmd's elisions or redactions; "
                    "pinned to the exact text printed now"
                )
        if problems:
            return Settled(problems=problems)
        return Settled(golden=obs, notes=notes)

    return settle


def _diff(want: str, got: str, name: str) -> list[str]:
    lines = difflib.unified_diff(
        want.splitlines(keepends=True),
        got.splitlines(keepends=True),
        f"expected/{name}",
        f"actual/{name}",
    )
    return [f"  {line.rstrip(chr(10))}" for line in lines][:40]
