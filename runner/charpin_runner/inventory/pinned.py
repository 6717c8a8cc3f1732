"""Which entry points a pin targets, read from pins.jsonl and case folders. Stdlib only.

Reads only the `argv` of pins.jsonl lines and a case folder's `target.txt`/`argv.json`, so it
does not depend on the rest of the pin format. A missing pins file or cases folder means "no pins";
unreadable lines become notes.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from pathlib import Path

from charpin_runner.inventory.model import Entry


@dataclass
class PinTargets:
    """Every word a pin runs: argv items, `-m` module names and case targets."""

    paths: set[str] = field(default_factory=set)  # repo-relative, normalised
    modules: set[str] = field(default_factory=set)  # names after `-m`
    commands: set[str] = field(default_factory=set)  # basenames (console scripts on PATH)

    def add_argv(self, argv: list[str]) -> None:
        module_next = False
        for word in argv:
            if module_next:  # the module of `-m pkg` is neither a path nor a command
                self._add_module(word)
                module_next = False
                continue
            module_next = word == "-m"
            self.paths.add(_norm(word))
            self.commands.add(posixpath.basename(word))
            if word.startswith("-m") and len(word) > 2:
                self._add_module(word[2:])

    def _add_module(self, name: str) -> None:
        self.modules.add(name)
        if name.endswith(".__main__"):  # `-m pkg.__main__` runs what `-m pkg` runs
            self.modules.add(name[: -len(".__main__")])

    def targets(self, entry: Entry) -> bool:
        """True when some pin runs this entry."""
        if entry.kind == "console-script":
            return entry.name in self.commands
        if entry.kind == "main-module":
            return entry.name in self.modules
        dotted = entry.target
        return entry.file in self.paths or (bool(dotted) and dotted in self.modules)


def read_targets(repo: Path, pins_file: str, cases_dir: str) -> tuple[PinTargets, list[str]]:
    """Collect pin targets; returns notes for lines or folders that could not be read."""
    found = PinTargets()
    notes: list[str] = []
    _read_jsonl(repo / pins_file, pins_file, found, notes)
    cases = repo / cases_dir
    if cases.is_dir():
        for case in sorted(p for p in cases.iterdir() if p.is_dir()):
            _read_case(case, f"{cases_dir}/{case.name}", found, notes)
    return found, notes


def _read_jsonl(path: Path, label: str, found: PinTargets, notes: list[str]) -> None:
    if not path.is_file():
        return
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        notes.append(f"{label}: not read ({exc})")
        return
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            argv = json.loads(line).get("argv")
        except (ValueError, AttributeError):
            notes.append(f"{label}:{number}: not a JSON object; pin targets skipped")
            continue
        if isinstance(argv, list):
            found.add_argv([str(w) for w in argv])


def _read_case(case: Path, label: str, found: PinTargets, notes: list[str]) -> None:
    target = case / "target.txt"
    argv_file = case / "argv.json"
    try:
        if target.is_file():
            # argv[0] of the case: a script, a console script, or `-m package.module`.
            word = target.read_text(encoding="utf-8").strip()
            found.add_argv(word.split() if word.startswith("-m ") else [word])
        if argv_file.is_file():
            argv = json.loads(argv_file.read_text(encoding="utf-8"))
            if isinstance(argv, list):
                found.add_argv([str(w) for w in argv])
    except (OSError, ValueError) as exc:
        notes.append(f"{label}: not read ({exc})")


def _norm(word: str) -> str:
    """`./tools/x.py` and `tools//x.py` name the same repo-relative file."""
    return posixpath.normpath(word.replace("\\", "/")) if word else word
