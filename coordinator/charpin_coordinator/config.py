"""Coordinator side; may import msgspec. Reads `[tool.charpin]` strictly, from a tree or a commit.

When a patch is being verified, the gating configuration comes from the commit under review (or
its base), never from the dirty working tree: pass `rev` and pyproject.toml is read from git.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from charpin_runner.config import CharpinConfig
from charpin_runner.errors import ConfigError, UsageError

from charpin_coordinator.gitcmd import git_run
from charpin_coordinator.schema import strict_struct

TABLE_PATH = "$.tool.charpin"


@dataclass(frozen=True)
class LoadedConfig:
    """A validated `[tool.charpin]`: typed, raw (to ship to boxes as JSON) and its host table."""

    charpin: CharpinConfig
    table: dict[str, Any]
    hosts: dict[str, Any]
    source: str


def load_config(repo: Path, rev: str | None = None) -> LoadedConfig:
    """Load `[tool.charpin]` from repo/pyproject.toml, or from `git show REV:pyproject.toml`."""
    source, text = _read_pyproject(repo, rev)
    if text is None:
        return LoadedConfig(CharpinConfig(), {}, {}, source)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: {exc}; fix the TOML syntax") from exc
    table = data.get("tool", {}).get("charpin", {}) if isinstance(data.get("tool"), dict) else {}
    return LoadedConfig(decode_table(table, source=source), table, table.get("hosts", {}), source)


def decode_table(table: Any, *, source: str = "pyproject.toml") -> CharpinConfig:
    """Validate a `[tool.charpin]` table with msgspec; one line with the `$.path` on error."""
    try:
        strict = msgspec.convert(table, strict_struct(CharpinConfig))
        del strict
        return msgspec.convert(table, CharpinConfig)
    except msgspec.ValidationError as exc:
        message = str(exc)
        if " - at `$" in message:
            message = message.replace("at `$", f"at `{TABLE_PATH}", 1)
        else:  # msgspec leaves the root path out
            message = f"{message} - at `{TABLE_PATH}`"
        raise ConfigError(f"{source}: {message}") from exc


def _read_pyproject(repo: Path, rev: str | None) -> tuple[str, str | None]:
    if rev is None:
        path = repo / "pyproject.toml"
        if not path.is_file():
            return str(path), None
        return str(path), path.read_text(encoding="utf-8")
    source = f"{rev}:pyproject.toml"
    check = git_run(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if check.returncode != 0:
        raise UsageError(f"{rev!r} is not a commit in {repo}; pass an existing --commit")
    # The blob's own bytes (cat-file), through the one git helper (no replace refs, rule 4).
    commit = check.stdout.decode("ascii", "replace").strip()
    proc = git_run(repo, "cat-file", "blob", f"{commit}:pyproject.toml")
    if proc.returncode != 0:
        return source, None
    return source, proc.stdout.decode("utf-8")
