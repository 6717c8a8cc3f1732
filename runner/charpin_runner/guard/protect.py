"""What the guard protects and what counts as production code. Runs anywhere; stdlib only; pure.

Protected: the pins file, the case and golden folders, the ledger, the inventory file (paths from
`[tool.charpin]`, defaults otherwise) and the `[tool.charpin]` table of pyproject.toml.
Production code: every other changed path except documentation (files under the top-level
`docs/` and `doc/` folders, and README, LICENSE, CHANGELOG, COPYING, NEWS and similar files at the
top level or in those folders, with no extension or .md, .rst or .txt). Tests are code: a test
edited in the same commit as a pin rewrite is the same "make the red go away" smell.
pyproject.toml outside `[tool.charpin]` is code too (dependencies and scripts change what runs).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any

from charpin_runner import tomlread
from charpin_runner.config import CharpinConfig, from_table
from charpin_runner.errors import ConfigError

PYPROJECT = "pyproject.toml"
TABLE_LABEL = "pyproject.toml [tool.charpin]"
_DOC_DIRS = ("docs/", "doc/")
# A name, not a prefix: `billing/license_fees.py`, `changelog_parser.py` and `LICENSE.py` are code.
# Variants (`LICENSE-MIT`, `README-zh.md`) only where they are a convention.
_DOC_NAME = re.compile(
    r"((readme|licen[cs]e|copying)(-[a-z0-9]+)?"
    r"|changelog|changes|news|history|authors|contributors|contributing|notice|security"
    r"|code_of_conduct)(\.(md|rst|txt))?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Protected:
    """Protected files and folders, repo-relative posix paths."""

    files: tuple[str, ...]
    folders: tuple[str, ...]

    def covers(self, path: str) -> bool:
        return self.entry_for(path) is not None

    def entry_for(self, path: str) -> str | None:
        """The protected file or folder that covers path, if any."""
        if path in self.files:
            return path
        return next((f for f in self.folders if path.startswith(f + "/")), None)

    def merged(self, other: Protected) -> Protected:
        """Both versions' paths: moving the pins file is a change to protected paths too."""
        return Protected(
            tuple(sorted(set(self.files) | set(other.files))),
            tuple(sorted(set(self.folders) | set(other.folders))),
        )


def protected_of(cfg: CharpinConfig) -> Protected:
    """The protected paths one configuration names."""
    return Protected(
        files=tuple(sorted({_norm(cfg.pins.file), _norm(cfg.ledger), _norm(cfg.inventory)})),
        folders=tuple(sorted({_norm(cfg.pins.cases), _norm(cfg.pins.goldens)})),
    )


def _norm(path: str) -> str:
    return posixpath.normpath(path.replace("\\", "/")).strip("/")


def is_doc(path: str) -> bool:
    """Documentation never counts as production code.

    Anchored to where documentation lives: a `*.md` next to code may be a template or a test's
    expected output, so only the top-level docs folders and well-known top-level files count.
    """
    if path.startswith(_DOC_DIRS):
        return True
    return "/" not in path and _DOC_NAME.fullmatch(path) is not None


@dataclass(frozen=True)
class Split:
    """One pyproject.toml version cut into the charpin table and everything else."""

    table: Any
    rest: Any
    cfg: CharpinConfig | None


def split_pyproject(data: bytes | None) -> Split:
    """Parse one version; without tomllib (or for broken TOML) compare raw section text instead."""
    if data is None:
        return Split(None, None, CharpinConfig())
    text = data.decode("utf-8", "replace")
    doc = _parse_toml(text)
    if doc is None:
        table_text, rest_text = _split_text(text)
        return Split(table_text, rest_text, None)
    tool = doc.get("tool")
    table = tool.pop("charpin", None) if isinstance(tool, dict) else None
    return Split(table, doc, _config_of(table))


def _parse_toml(text: str) -> dict[str, Any] | None:
    try:
        return tomlread.loads(text)
    except (ImportError, ValueError):  # no parser (3.9 without tomli) or broken TOML
        return None


def _config_of(table: Any) -> CharpinConfig | None:
    if table is None:
        return CharpinConfig()
    try:
        return from_table(table)
    except ConfigError:
        return None  # a broken table still protects the default paths (see paths_for)


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


def _split_text(text: str) -> tuple[str, str]:
    """Lines under `[tool.charpin...]` headers versus all other lines."""
    table: list[str] = []
    rest: list[str] = []
    inside = False
    for line in text.splitlines():
        match = _HEADER.match(line)
        if match:
            name = match.group(1).replace(" ", "").replace('"', "")
            inside = name == "tool.charpin" or name.startswith("tool.charpin.")
        (table if inside else rest).append(line)
    return "\n".join(table), "\n".join(rest)


def pyproject_changes(new: Split, olds: list[Split]) -> tuple[bool, bool]:
    """(table changed, rest changed) against every old version (a merge: against all parents)."""
    if not olds:
        olds = [split_pyproject(None)]
    table_changed = all(_differs(new.table, old.table) for old in olds)
    rest_changed = all(_differs(new.rest, old.rest) for old in olds)
    return table_changed, rest_changed


def _differs(a: Any, b: Any) -> bool:
    # A parsed version compared with a text version (one side broken) counts as changed.
    return type(a) is not type(b) or a != b


def paths_for(splits: list[Split]) -> Protected:
    """Union of the protected paths named by every version involved.

    A version whose table cannot be read contributes the default paths, so a broken table never
    unprotects the pins.
    """
    result = Protected((), ())
    for split in splits:
        result = result.merged(protected_of(split.cfg or CharpinConfig()))
    return result
