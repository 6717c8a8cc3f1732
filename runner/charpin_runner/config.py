"""`[tool.charpin]` in pyproject.toml as dataclasses. Runs on boxes; stdlib only.

Imports only charpin_runner.errors and charpin_runner.schema: every feature package (pins,
inventory, guard) reads its settings from here, so this module depends on none of them.
The same dataclasses are validated by msgspec on the coordinator (which then ships the resolved
configuration to boxes as JSON, so gating settings come from the base commit, never from the tree
under test) and by charpin_runner.schema here; hence only dataclasses, list, dict, Optional,
Literal and scalars appear in them.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from charpin_runner import tomlread
from charpin_runner.errors import ConfigError
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

# What a normalisation rule rewrites. Path kinds become tokens ($WORK, $TMP, $HOME, $REPO) and are
# anchored at path boundaries; "timestamp" rewrites ISO-8601 stamps; "regex" is user supplied.
RuleKind = Literal["work", "tmp", "home", "repo", "timestamp", "regex"]


@dataclass(frozen=True)
class NormRule:
    """One normalisation rule. Rules apply in list order; each pin stores its hit count."""

    name: str
    kind: RuleKind
    pattern: Optional[str] = None
    replace: Optional[str] = None


def default_rules() -> list[NormRule]:
    """The path rules every pin gets unless [tool.charpin.pins] lists its own."""
    return [
        NormRule(name="work", kind="work"),
        NormRule(name="home", kind="home"),
        NormRule(name="repo", kind="repo"),
    ]


@dataclass(frozen=True)
class PinsConfig:
    """`[tool.charpin.pins]`: where pins live and how they replay."""

    file: str = "pins.jsonl"
    cases: str = "cases"
    goldens: str = "goldens"
    python: Optional[str] = None
    timeout: float = 30.0
    # The folder (relative to the work folder) whose full file set is part of each pin.
    output: str = "out"
    # 0 means one worker per CPU.
    jobs: int = 0
    # Extra fixed variables given to every pin on top of the built-in base.
    env_base: dict[str, str] = field(default_factory=dict)
    normalise: list[NormRule] = field(default_factory=default_rules)
    actual_dir: str = ".charpin/pins-actual"
    # Output files up to this size that decode as UTF-8 keep their text in the golden for diffs.
    text_limit: int = 65536
    diff_lines: int = 80
    # Repository folders put on PYTHONPATH for every pin, so a target imports the repository's
    # own packages the way the project runs them (pytest's `pythonpath`, for pins). None means
    # the repository root, plus src/ when that folder exists.
    pythonpath: Optional[list[str]] = None
    # The program a seed-000 pins.jsonl ran (its argv holds only the arguments after the script):
    # `charpin import pins-jsonl` reads it when --target is not given.
    target: Optional[str] = None

    def __post_init__(self) -> None:
        for folder in self.pythonpath or []:
            parts = folder.replace("\\", "/").split("/")
            if not folder or folder.startswith("/") or ".." in parts:
                raise ValueError(
                    f"pythonpath folder {folder!r} must be a relative path inside the repository"
                )


@dataclass(frozen=True)
class VerifyConfig:
    """`[tool.charpin.verify]`: the budget of verify's generated inputs (#19); the coordinator
    reads it from the base's configuration, boxes never do."""

    # Generated inputs per changed public function (0: none) and seconds per function.
    generate: int = 100
    generate_seconds: float = 2.0

    def __post_init__(self) -> None:
        if self.generate < 0:
            raise ValueError(f"generate must be 0 or more (0 turns them off), not {self.generate}")
        if not 0 < self.generate_seconds <= 3600:
            raise ValueError(
                f"generate_seconds must be more than 0 and at most 3600, not {self.generate_seconds}"
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
    # Installs dependencies into a venv cached by the dependency files (run when it misses).
    setup: list[str] = field(default_factory=list)
    # Makes each fresh checkout ready (`pip install -e . --no-deps`, generated files): run in
    # every run's checkout, in a per-run copy of the venv; what it writes is its own, not dirt.
    prepare: list[str] = field(default_factory=list)
    inventory: str = DEFAULT_INVENTORY
    pins: PinsConfig = field(default_factory=PinsConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    # Host extras are validated strictly by the coordinator; boxes never read them.
    hosts: dict[str, Any] = field(default_factory=dict)
    # The coordinator's run history (SQLite), relative to the repository; default
    # .charpin/history.sqlite. Boxes never read it.
    history: Optional[str] = None

    def __post_init__(self) -> None:
        # Values the type cannot express; msgspec and schema.convert both report the `$.path`.
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {self.timeout}")
        if self.test_command is not None and not self.test_command:
            raise ValueError("test_command must not be empty; leave it out for python -m pytest")
        if self.history is not None and not self.history.strip():
            raise ValueError(
                "history must be a file path; leave it out for .charpin/history.sqlite"
            )
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
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}; check its permissions") from None
    try:
        return tomlread.loads(data.decode("utf-8"))
    except ImportError:  # Python < 3.11 without tomli
        if not could_hold_charpin(data):
            return {}  # no [tool.charpin] is possible in it: the defaults, as with the table absent
        raise ConfigError(
            f"this Python ({sys.version.split()[0]}) cannot read the [tool.charpin] table in "
            f"{path}: it has no tomllib (3.11+) and tomli is not installed; install charpin with "
            "`pip install charpin-runner` (it brings tomli below 3.11), or pass --config-json FILE"
        ) from None
    except ValueError as exc:  # TOMLDecodeError, UnicodeDecodeError
        raise ConfigError(f"cannot read {path}: {exc}; fix the TOML syntax") from exc


def could_hold_charpin(data: bytes) -> bool:
    """False only when the file cannot hold a `charpin` key anywhere: the word is absent and no
    quoted key could spell it with an escape (`"\\u0063harpin"`). Anything else fails closed."""
    return b"charpin" in data or b"\\u" in data or b"\\U" in data
