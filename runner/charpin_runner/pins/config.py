"""`[tool.charpin.pins]` as dataclasses. Runs on boxes; stdlib only.

Only dataclasses, List, Dict, Optional, Literal and scalars appear here, because the same classes
are validated by charpin_runner.schema on boxes and by msgspec on the coordinator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

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
    """Where pins live and how they replay."""

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
