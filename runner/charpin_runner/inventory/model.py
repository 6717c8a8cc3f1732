"""Inventory data: entries, effects, the frozen JSON form and drift. Runs anywhere; stdlib only.

Pure: no file system access. `charpin-inventory.json` is `dump_inventory()` of an `Inventory`;
`compare()` is what `charpin inventory --check` gates on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from charpin_runner.errors import ConfigError

FORMAT = "charpin-inventory/1"
KINDS = ("main-block", "main-module", "console-script")


@dataclass(frozen=True)
class Effect:
    """One thing a module does while it is being imported (open, cwd or env read)."""

    file: str
    line: int
    kind: str  # "open", "cwd" or "env"
    detail: str


@dataclass(frozen=True)
class Entry:
    """One runnable surface of the repository."""

    kind: str
    name: str
    file: str
    line: int
    target: str = ""  # console script: "module:function"; main block: its module name
    source: str = ""  # the .py file the entry runs (may differ from `file` for console scripts)
    env: list[str] = field(default_factory=list)
    dynamic_env: int = 0
    effects: list[Effect] = field(default_factory=list)
    pinned: bool = False

    @property
    def key(self) -> tuple[str, str]:
        """Identity across versions: a moved line is not drift, a renamed script is."""
        return (self.kind, self.name)

    @property
    def label(self) -> str:
        """How the entry is invoked, for people."""
        if self.kind == "main-module":
            return f"python -m {self.name}"
        return self.name


@dataclass(frozen=True)
class Inventory:
    """Everything `charpin inventory` found, sorted; notes explain what could not be read."""

    entries: list[Entry]
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Drift:
    """Differences between the frozen inventory and the tree."""

    appeared: list[Entry]
    disappeared: list[Entry]
    env_changed: list[tuple[Entry, Entry]]  # (frozen, current)

    @property
    def clean(self) -> bool:
        return not (self.appeared or self.disappeared or self.env_changed)


def sort_entries(entries: list[Entry]) -> list[Entry]:
    """The one order used everywhere: by kind, then name."""
    return sorted(entries, key=lambda e: (KINDS.index(e.kind), e.name, e.file, e.line))


def compare(frozen: Inventory, current: Inventory) -> Drift:
    """Entries that appeared or disappeared, and entries whose env reads changed."""
    old = {e.key: e for e in frozen.entries}
    new = {e.key: e for e in current.entries}
    changed = [
        (old[k], new[k])
        for k in sorted(old.keys() & new.keys())
        if (old[k].env, old[k].dynamic_env) != (new[k].env, new[k].dynamic_env)
    ]
    return Drift(
        appeared=sort_entries([e for k, e in new.items() if k not in old]),
        disappeared=sort_entries([e for k, e in old.items() if k not in new]),
        env_changed=changed,
    )


def dump_inventory(inventory: Inventory) -> bytes:
    """Deterministic JSON: sorted entries and keys, two-space indent, trailing newline."""
    doc = {
        "format": FORMAT,
        "entries": [_entry_to_dict(e) for e in sort_entries(inventory.entries)],
        "notes": sorted(inventory.notes),
    }
    return (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def load_inventory(data: bytes, origin: str) -> Inventory:
    """Parse a frozen inventory; any damage is a ConfigError naming the file and the fix."""
    fix = f"{origin} is not a charpin inventory; rewrite it with `charpin inventory --write`"
    try:
        doc = json.loads(data.decode("utf-8"))
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError("wrong format marker")
        entries = [_entry_from_dict(raw) for raw in doc["entries"]]
        notes = [str(n) for n in doc.get("notes", [])]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{fix} ({exc})") from None
    return Inventory(entries=sort_entries(entries), notes=notes)


def _entry_to_dict(entry: Entry) -> dict[str, Any]:
    return {
        "kind": entry.kind,
        "name": entry.name,
        "file": entry.file,
        "line": entry.line,
        "target": entry.target,
        "source": entry.source,
        "env": list(entry.env),
        "dynamic_env": entry.dynamic_env,
        "import_effects": [
            {"file": f.file, "line": f.line, "kind": f.kind, "detail": f.detail}
            for f in entry.effects
        ],
        "pinned": entry.pinned,
    }


def _entry_from_dict(raw: Any) -> Entry:
    if not isinstance(raw, dict) or raw.get("kind") not in KINDS:
        raise ValueError(f"bad entry {raw!r:.80}")
    env = raw.get("env", [])
    if not isinstance(env, list) or not all(isinstance(k, str) for k in env):
        raise ValueError(f"bad env list in entry {raw.get('name')!r}")
    return Entry(
        kind=str(raw["kind"]),
        name=str(raw["name"]),
        file=str(raw.get("file", "")),
        line=int(raw.get("line", 0)),
        target=str(raw.get("target", "")),
        source=str(raw.get("source", "")),
        env=sorted(env),
        dynamic_env=int(raw.get("dynamic_env", 0)),
        effects=[_effect_from_dict(f) for f in raw.get("import_effects", [])],
        pinned=bool(raw.get("pinned", False)),
    )


def _effect_from_dict(raw: Any) -> Effect:
    if not isinstance(raw, dict):
        raise ValueError(f"bad import effect {raw!r:.80}")
    return Effect(str(raw["file"]), int(raw["line"]), str(raw["kind"]), str(raw["detail"]))


def find(inventory: Inventory, kind: str, name: str) -> Entry | None:
    """The entry with this identity, if any."""
    for entry in inventory.entries:
        if entry.key == (kind, name):
            return entry
    return None
