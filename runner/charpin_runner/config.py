"""`[tool.charpin]` in pyproject.toml as dataclasses. Runs on boxes; stdlib only.

The same dataclasses are validated by msgspec on the coordinator (which then ships the resolved
configuration to boxes as JSON, so gating settings come from the base commit, never from the tree
under test) and by charpin_runner.schema here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from charpin_runner.errors import ConfigError
from charpin_runner.pins.config import PinsConfig
from charpin_runner.schema import convert

DEFAULT_LEDGER = "flake-ledger.json"
DEFAULT_WATCH = ["tests/fixtures"]
DEFAULT_INVENTORY = "charpin-inventory.json"

# Variables whose values are safe and useful to explain drift; everything else is only counted.
BASE_ENV_ALLOW = (
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_NUMERIC",
    "LC_TIME",
    "TZ",
    "PYTHONHASHSEED",
    "PYTHONIOENCODING",
    "PYTHONUTF8",
    "CI",
)


@dataclass(frozen=True)
class CharpinConfig:
    """The `[tool.charpin]` table; every key is optional."""

    test_command: Optional[list[str]] = None
    pytest_args: list[str] = field(default_factory=list)
    watch: list[str] = field(default_factory=lambda: list(DEFAULT_WATCH))
    outputs: list[str] = field(default_factory=list)
    ledger: str = DEFAULT_LEDGER
    env_allow: list[str] = field(default_factory=list)
    timeout: Optional[float] = None
    setup: list[str] = field(default_factory=list)
    inventory: str = DEFAULT_INVENTORY
    pins: PinsConfig = field(default_factory=PinsConfig)
    # Host extras are validated strictly by the coordinator; boxes never read them.
    hosts: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Values the type cannot express; msgspec and schema.convert both report the `$.path`.
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {self.timeout}")
        if self.test_command is not None and not self.test_command:
            raise ValueError("test_command must not be empty; leave it out for python -m pytest")
        for root in self.watch:
            if not root or root.startswith("/") or ".." in root.split("/"):
                raise ValueError(
                    f"watch root {root!r} must be a relative path inside the repository"
                )


def from_table(table: Any, path: str = "$.tool.charpin") -> CharpinConfig:
    """Validate a decoded `[tool.charpin]` table."""
    return convert(table, CharpinConfig, path)


def load(repo: Path) -> CharpinConfig:
    """Read `[tool.charpin]` from repo/pyproject.toml; defaults when the file or table is absent."""
    pyproject = repo / "pyproject.toml"
    if not pyproject.is_file():
        return CharpinConfig()
    data = _read_toml(pyproject)
    tool = data.get("tool", {})
    if not isinstance(tool, dict) or "charpin" not in tool:
        return CharpinConfig()
    try:
        return from_table(tool["charpin"])
    except ConfigError as exc:  # name the file, as the coordinator does
        raise ConfigError(f"{pyproject}: {exc}") from exc


def load_json(path: Path) -> CharpinConfig:
    """Read a resolved configuration shipped by the coordinator (the `[tool.charpin]` table)."""
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read configuration {path}: {exc}") from exc
    try:
        return from_table(table)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        import tomllib  # novermin - Python >= 3.11 only; boxes get JSON instead
    except ImportError:  # pragma: no cover - exercised on Python < 3.11 boxes
        raise ConfigError(
            f"this Python cannot read {path} (no tomllib before 3.11); "
            "pass --config-json FILE or run with Python >= 3.11"
        ) from None
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}; fix the TOML syntax") from exc
